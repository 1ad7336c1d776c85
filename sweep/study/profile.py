"""Hardware profiles: the ``[hardware]`` keys ``sweep calibrate`` writes and a config names with
``[hardware] profile``, read and checked."""
from __future__ import annotations

import tomllib
from pathlib import Path

from sweep.errors import clip, listed
from sweep.files import read_text
from sweep.physics.engines import ENGINES
from sweep.physics.hardware import CATALOG
from sweep.study.fields import ATTRS, ENGINE_FITTED, GPU_FITTED

PROFILE_KEYS = ("gpu", "compute_efficiency", "bandwidth_efficiency", "overhead_ms")
#: Keys a profile may add (a fit to serving runs writes them): the other fitted factors, and the
#: serving engine whose runs fitted them.
PROFILE_EXTRA = tuple(k for k in GPU_FITTED + ENGINE_FITTED if k not in PROFILE_KEYS) + (
    "engine",)


def load_profile(path: str | Path) -> dict:
    """A profile's ``[hardware]`` keys, checked; every refusal is one ``ValueError`` line."""
    return parse_profile(read_text(path, "a profile written by 'sweep calibrate'"), path)


def parse_profile(text: str, path: str | Path) -> dict:
    """``load_profile`` of a profile's text (``sweep calibrate`` checks what it would write)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: cannot read ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:120]}); allowed: a profile written by "
                         "'sweep calibrate'") from None
    hw = doc.get("hardware")
    if not isinstance(hw, dict) or not set(PROFILE_KEYS) <= set(hw) <= set(
            PROFILE_KEYS + PROFILE_EXTRA):
        raise ValueError(f"{path}: [hardware] must hold {', '.join(PROFILE_KEYS)} and at most "
                         f"{', '.join(PROFILE_EXTRA)}; allowed: a profile written by "
                         "'sweep calibrate'")
    if not isinstance(hw["gpu"], str) or hw["gpu"] not in CATALOG:
        raise ValueError(f"{path}: gpu {clip(repr(hw['gpu']))} is not in the catalog; allowed: "
                         f"{listed(CATALOG)}")
    if "engine" in hw and hw["engine"] not in ENGINES:
        raise ValueError(f"{path}: engine {clip(repr(hw['engine']))} is not known; allowed: "
                         f"{listed(ENGINES)}")
    for k in (k for k in hw if k not in ("gpu", "engine")):  # each against its declaration
        r = ATTRS[k].range
        if not r.holds(hw[k], ATTRS[k].kind):
            raise ValueError(f"{path}: {k} = {clip(repr(hw[k]))} is out of range; allowed: "
                             f"{'(' if r.lo_open else '['}{r.lo:g}, {r.hi:g}]")
    return {k: (v if k in ("gpu", "engine") else float(v)) for k, v in hw.items()}
