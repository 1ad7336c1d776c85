"""A Hugging Face ``config.json`` read safely, its fields within bounds: the one reader of every
model config (``[model] config_json``, ``sweep calibrate --model FILE.json``, the packaged ones)
and of a checkpoint's ``hf_quant_config.json``. Every refusal is a one-line ``FieldError``
naming the file and the field; a count is refused before anything is built from it."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sweep.errors import FieldError, clip, one_line, show
from sweep.files import FileRefused, read_text

#: The key every refusal names (the config key a model's config.json is given by).
KEY = "model.config_json"
#: What the loader sizes.
SUPPORTED = "full, windowed, latent, linear or Mamba attention; dense or expert MLPs"
#: What a file must be.
ALLOWED_FILE = "a Hugging Face config.json (a JSON object)"

#: The largest integer a config.json field may hold (sizes and counts are int32 in the engine).
MAX_FIELD = 2**31 - 1
#: Upper bounds on counts and sizes, far past the largest published models (their config.json:
#: Llama-3.1-405B's 126 layers, 128 heads and FFN 53248; Qwen3-Next's 512 routed experts;
#: Gemma's 262144-token vocabulary), so that a typo is refused before a list per layer or a
#: row per expert is built, and every size stays finite.
MAX_LAYERS = 1024  # 8x the deepest
MAX_HEADS = 4096  # 32x the most query heads
MAX_EXPERTS = 16384  # 32x the most routed experts
MAX_VOCAB = 2**24  # 64x the largest vocabulary
MAX_WIDTH = 2**20  # 19x the widest matrix: every other width and head size
#: A field's bound by the first word of its name found (a context or a window: int32 tokens).
BOUNDS = (("max_position", MAX_FIELD), ("window", MAX_FIELD), ("chunk", MAX_FIELD),
          ("layer", MAX_LAYERS), ("depth", MAX_LAYERS), ("heads", MAX_HEADS),
          ("groups", MAX_HEADS), ("experts", MAX_EXPERTS), ("vocab", MAX_VOCAB))
#: How deep a config.json may nest tables and lists: real ones nest at most 6 deep (Kimi-K2.5's
#: quantisation groups in its text_config); the bound keeps every reader off deep recursion.
MAX_DEPTH = 64


def positive(v, limit: int = MAX_FIELD) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v <= limit


def shown(path: Path, n: int = 60) -> str:
    """A path as a refusal names it: on one line, its end (the file's name) kept."""
    text = one_line(str(path))
    return text if len(text) <= n else "..." + text[3 - n:]


def bound(key: str) -> int:
    """The largest value field ``key`` may hold."""
    return next((n for word, n in BOUNDS if word in key), MAX_WIDTH)


@dataclass
class Reading:
    """One config's fields, read with the file named in every refusal."""

    cfg: dict
    where: str

    def refuse(self, key: str, reason: str, allowed: str | None = SUPPORTED):
        raise FieldError(KEY, one_line(f"{self.where}: {key} {reason}"), allowed)

    def first(self, *keys: str) -> str:
        """The first of ``keys`` the config gives (else the first)."""
        return next((k for k in keys if self.cfg.get(k) is not None), keys[0])

    def int(self, key: str, default=None, *alias: str) -> int:
        """An integer field within its bound, or its first alias given; ``default`` where none
        is (None: required)."""
        k = self.first(key, *alias)
        v, limit = self.cfg.get(k), bound(k)
        if v is None:
            if default is None:
                self.refuse(k, f"is missing (an integer in [1, {limit}])", None)
            return default
        if not positive(v, limit):
            self.refuse(k, f"= {show(v)} is not an integer in [1, {limit}]", None)
        return v


def _depth(doc) -> int:
    """How deep ``doc`` nests tables and lists (a flat table: 1), counted to one past
    ``MAX_DEPTH`` at most."""
    depth, level = 0, [doc]
    while depth <= MAX_DEPTH:
        level = [v for v in level if isinstance(v, (dict, list))]
        if not level:
            break
        depth += 1
        level = [x for v in level for x in (v.values() if isinstance(v, dict) else v)]
    return depth


def read_json(path: Path) -> dict:
    """A config file's table, read as every user file is (a regular file of at most 16 MiB of
    UTF-8: never a pipe or a device) and nested at most ``MAX_DEPTH`` deep."""
    where = shown(path)
    deep = FieldError(KEY, f"{where} nests tables and lists more than {MAX_DEPTH} deep",
                      ALLOWED_FILE)
    try:
        cfg = json.loads(read_text(path, ALLOWED_FILE))
    except FileRefused as exc:
        raise FieldError(KEY, f"{where}: {exc.reason}", exc.allowed) from None
    except RecursionError:  # deeper than the parser recurses
        raise deep from None
    except ValueError as exc:  # JSON and int-size errors are ValueErrors
        raise FieldError(KEY, f"cannot read {where}: {clip(one_line(exc), 100)}") from None
    if not isinstance(cfg, dict):
        raise FieldError(KEY, f"{where} is not a JSON object")
    if _depth(cfg) > MAX_DEPTH:
        raise deep
    return cfg
