"""Sweep definitions: a TOML file -> a validated ``Study`` (a grid of design x workload points).

Every check happens here, before anything is simulated, and every refusal is one line:
``PATH:LINE: key: what is wrong; allowed: ...``. Any field of ``[hardware]``, ``[model]``,
``[workload]`` and ``[levers]`` given as a TOML array is a sweep axis; the grid is the Cartesian
product of the axes (the first axis in file order varies slowest), less the ``[[exclude]]``
matches, less the designs that do not fit in memory (listed in ``Study.skipped``).

``python -m sweep.study.config FILE...`` checks configs without running them.
"""
from __future__ import annotations

import datetime as _dt
import itertools
import math
import re
import sys
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from sweep.analysis.metrics import METRICS
from sweep.physics.hardware import CATALOG as GPU_CATALOG
from sweep.physics.models import CATALOG as MODEL_CATALOG
from sweep.physics.models import load_hf_config
from sweep.physics.profile import load_profile
from sweep.study.design import (ACTIVATION_BITS, BATCHING, GPUS, KV_BITS, KV_CACHE, WEIGHT_BITS,
                                Design)
from sweep.study.trace import load_trace
from sweep.study.uncertainty import FACTORS, USES, Uncertain
from sweep.study.workload import ARRIVALS, Lengths, Workload

#: Grid columns, in the order every ``Point.columns`` (and the results' Parquet) has them.
COLUMNS: list[str] = [
    "gpu", "price_per_gpu_hour", "compute_efficiency", "bandwidth_efficiency",
    "kv_bandwidth_efficiency", "decode_attention_efficiency", "overhead_ms", "seq_overhead_us",
    "request_overhead_ms", "request_lag_passes", "memory_overhead_fraction",
    "gpu_memory_utilization",
    "model",
    "arrival", "arrival_rate", "duration_s", "num_requests", "drain_s",
    "prompt_tokens_dist", "prompt_tokens_mean", "prompt_tokens_low", "prompt_tokens_high",
    "prompt_tokens_sigma",
    "output_tokens_dist", "output_tokens_mean", "output_tokens_low", "output_tokens_high",
    "output_tokens_sigma",
    "batching", "kv_cache", "gpus", "weight_bits", "activation_bits", "kv_bits", "draft_tokens",
    "acceptance",
    "draft_cost", "max_batch", "block_size", "max_seq_len",
    "arrival_cv", "trace", "trace_time_scale",
    "replicas", "router", "prefill_gpus", "decode_gpus", "kv_link_gbps",
    "prefix_count", "prefix_tokens", "prefix_share", "prefix_cache", "prefill_chunk_tokens",
    "max_num_batched_tokens", "kv_blocks",
]
#: Columns that hold strings (a brief limit on them makes no sense).
TEXT_COLUMNS = ("gpu", "model", "arrival", "prompt_tokens_dist", "output_tokens_dist",
                "batching", "kv_cache", "trace", "router")
NUMERIC_COLUMNS = [c for c in COLUMNS if c not in TEXT_COLUMNS]

DEFAULT_MAX_DESIGNS = 100_000
MAX_DESIGNS_CAP = 10_000_000  # a hard ceiling on [run] max_designs: beyond it the grid alone
#                               would not fit in memory
DEFAULT_SEEDS = 1  # like sweep.api.simulate
MAX_SEEDS = 100_000
MAX_SEED = 2**32 - 1  # seeds are uint32 in the workload sampler
MAX_MODEL_FILE = 16 * 2**20  # a config.json is a few kB
MAX_STEPS = 2**31 - 1  # the engine counts steps in int32
MAX_REQUESTS = 10_000_000  # Workload.validate's bound on num_requests, applied to rate x duration

# Value kinds: "num" (finite number -> float), "int" (integer, not bool), "bool", "str",
# "lengths".
HARDWARE_KEYS = {"gpu": "str", "price_per_gpu_hour": "num", "compute_efficiency": "num",
                 "bandwidth_efficiency": "num", "kv_bandwidth_efficiency": "num",
                 "decode_attention_efficiency": "num",
                 "overhead_ms": "num", "seq_overhead_us": "num",
                 "request_overhead_ms": "num", "request_lag_passes": "num",
                 "memory_overhead_fraction": "num", "gpu_memory_utilization": "num",
                 "profile": "str"}
MODEL_KEYS = {"name": "str", "config_json": "str"}
WORKLOAD_KEYS = {"arrival": "str", "arrival_rate": "num", "duration_s": "num",
                 "num_requests": "int", "drain_s": "num", "prompt_tokens": "lengths",
                 "output_tokens": "lengths", "arrival_cv": "num", "trace": "trace",
                 "trace_time_scale": "num", "prefix_count": "int", "prefix_tokens": "int",
                 "prefix_share": "num"}
#: Workload keys a trace replaces (it gives arrivals and lengths itself).
TRACE_REPLACES = ("arrival", "arrival_rate", "arrival_cv", "prompt_tokens", "output_tokens")
LEVER_KEYS = {"batching": "str", "kv_cache": "str", "gpus": "int", "weight_bits": "int",
              "activation_bits": "int", "kv_bits": "int", "draft_tokens": "int",
              "acceptance": "num", "draft_cost": "num",
              "max_batch": "int", "block_size": "int", "max_seq_len": "int",
              "replicas": "int", "router": "str", "prefill_gpus": "int", "decode_gpus": "int",
              "kv_link_gbps": "num", "prefix_cache": "bool", "prefill_chunk_tokens": "int",
              "max_num_batched_tokens": "int", "kv_blocks": "int"}
RUN_KEYS = ("seeds", "chunk_size", "per_request", "max_designs", "max_steps")
SECTIONS = {"hardware": HARDWARE_KEYS, "model": MODEL_KEYS, "workload": WORKLOAD_KEYS,
            "levers": LEVER_KEYS}
TOP_LEVEL = ("name", "hardware", "model", "workload", "levers", "run", "brief", "exclude",
             "measured", "capacity")
#: The brief's per-request limits (``{ max = x }``): what a request must meet to count in
#: ``slo_attainment`` and ``goodput_rps``; not limits on a column.
REQUEST_LIMITS = ("request_ttft_s", "request_tpot_ms")
#: ``[capacity]``: what ``sweep capacity`` searches (docs/capacity.md); defaults.
CAPACITY_DEFAULTS = {"confidence": 0.9, "tolerance": 0.02, "rate_min": None, "rate_max": None,
                     "target_rate": None, "fleets": 3}
LENGTH_KEYS = ("dist", "mean", "low", "high", "sigma")
#: The length-table keys each distribution uses (the others are refused, not ignored).
LENGTH_USES = {"fixed": ("mean",), "exponential": ("mean",), "uniform": ("low", "high"),
               "lognormal": ("mean", "sigma")}
#: Choices checked while parsing (the rest of the ranges are Design/Workload.validate's).
CHOICES = {("hardware", "gpu"): tuple(GPU_CATALOG), ("model", "name"): tuple(MODEL_CATALOG),
           ("workload", "arrival"): ARRIVALS, ("levers", "batching"): BATCHING,
           ("levers", "kv_cache"): KV_CACHE, ("levers", "gpus"): GPUS,
           ("levers", "weight_bits"): WEIGHT_BITS, ("levers", "activation_bits"): ACTIVATION_BITS,
           ("levers", "kv_bits"): KV_BITS}
NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,128}")

_DESIGN_DEFAULTS = {f.name: f.default for f in fields(Design)}
_WORKLOAD_DEFAULTS = {f.name: f.default for f in fields(Workload)}


class ConfigError(ValueError):
    """A refused config. ``str(err)`` is one line: ``PATH:LINE: key: what; allowed: ...``."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 key: str | None = None, reason: str | None = None):
        super().__init__(_one_line(message))
        self.path, self.line, self.key, self.reason = path, line, key, reason


@dataclass(frozen=True)
class Limit:
    """One requirement of the brief: ``min <= value <= max`` of a metric or a column."""

    key: str
    min: float | None = None
    max: float | None = None

    def ok(self, value) -> bool:
        try:
            v = float(value)
        except (TypeError, ValueError):
            return False
        if math.isnan(v):
            return False
        return (self.min is None or v >= self.min) and (self.max is None or v <= self.max)


@dataclass
class Point:
    design: Design  # validated
    workload: Workload  # validated
    columns: dict  # every column of COLUMNS, in that order


@dataclass
class Study:
    name: str
    path: str | None
    text: str  # the config file, verbatim
    points: list[Point]  # after [[exclude]] and the memory-fit skips, Cartesian order
    axes: list[str]  # columns swept (keys given as arrays), file order
    skipped: list[tuple[dict, str]]  # (columns, reason) of designs that do not fit in memory
    seeds: list[int]
    brief: list[Limit]
    chunk_size: int | None
    per_request: bool
    max_designs: int
    uncertain: dict[str, Uncertain] = field(default_factory=dict)  # factors drawn per seed
    max_steps: int | None = None  # engine steps per simulation (None: the engine's safe bound)
    # [measured]: metric -> what reality measured (float; bool for the bool metrics), for
    # ``sweep validate``; ``sweep run`` ignores it.
    measured: dict = field(default_factory=dict)
    # The brief's per-request limits: request_ttft_s (s), request_tpot_ms (ms); absent: none.
    slo: dict = field(default_factory=dict)
    # [capacity], CAPACITY_DEFAULTS filled in; read by ``sweep capacity`` only.
    capacity: dict = field(default_factory=lambda: dict(CAPACITY_DEFAULTS))


# --- one-line messages -------------------------------------------------------------------------

def _one_line(s: str) -> str:
    """Escape every character that could break a line (newlines, U+2028, controls)."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(s))


def _clip(s: str, n: int = 60) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


_BARE = re.compile(r"[A-Za-z0-9_-]+(?:\[\d+\])?")


def _key_text(parts) -> str:
    out = []
    for p in parts:
        p = str(p)
        out.append(p if _BARE.fullmatch(p) else '"' + _clip(_one_line(p), 40) + '"')
    return ".".join(out)


def _kind(v) -> str:
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a float"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, dict):
        return "a table"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, (_dt.datetime, _dt.date, _dt.time)):
        return "a date/time"
    return type(v).__name__


def _show(v) -> str:
    """A short, one-line rendering of a TOML value for messages."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        s = str(v) if abs(v) < 10**40 else f"an integer of {len(str(abs(v)))} digits"
        return s
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return _clip(_one_line(repr(v)))
    return _kind(v)


def _got(v) -> str:
    return f"{_kind(v)} {_show(v)}" if isinstance(v, (bool, int, float, str)) else _kind(v)


# --- where a key is in the text ----------------------------------------------------------------

_ARRAY_HEADER = re.compile(r"^\s*\[\[\s*([^\[\]]*?)\s*\]\]\s*(?:#.*)?$")
_TABLE_HEADER = re.compile(r"^\s*\[\s*([^\[\]]*?)\s*\]\s*(?:#.*)?$")


def _norm_header(s: str) -> str:
    return ".".join(p.strip().strip("\"'") for p in s.split("."))


class _Locator:
    """Finds the line of a dotted key: the first ``key =`` in the right table (good enough)."""

    def __init__(self, text: str):
        self.lines = text.split("\n")  # TOML counts lines by "\n", as TOMLDecodeError does
        self.scope: list[tuple[str, int | None]] = []
        self.headers: list[tuple[int, str, int | None]] = []
        header, occ, counts = "", None, {}
        for i, line in enumerate(self.lines, 1):
            m = _ARRAY_HEADER.match(line)
            if m:
                header = _norm_header(m[1])
                occ = counts[header] = counts.get(header, -1) + 1
                self.headers.append((i, header, occ))
            else:
                m = _TABLE_HEADER.match(line)
                if m:
                    header, occ = _norm_header(m[1]), None
                    self.headers.append((i, header, None))
            self.scope.append((header, occ))

    def find(self, parts, index: int | None = None) -> int | None:
        parts = [str(p) for p in parts]
        for k in range(len(parts) - 1, -1, -1):
            header, key = ".".join(parts[:k]), re.escape(parts[k])
            pat = re.compile(rf"""^\s*(?:{key}|"{key}"|'{key}')\s*[=.]""")
            for i, line in enumerate(self.lines):
                h, occ = self.scope[i]
                if h == header and (index is None or k == 0 or occ in (None, index)) \
                        and pat.match(line):
                    return i + 1
            whole = ".".join(parts[:k + 1])
            for i, h, occ in self.headers:
                if h == whole and (index is None or occ in (None, index)):
                    return i
        return None


# --- the parser --------------------------------------------------------------------------------

class _Parser:
    def __init__(self, text: str, path: str):
        self.text, self.path = text, path
        self.loc = _Locator(text)
        self.uncertain: dict[str, Uncertain] = {}
        self.traces: dict[str, object] = {}

    def err(self, parts, what: str, index: int | None = None) -> ConfigError:
        """A ConfigError for ``parts`` (a dotted key as a list; index: which [[exclude]])."""
        parts = [parts] if isinstance(parts, str) else list(parts)
        try:
            line = self.loc.find(parts, index)
        except Exception:  # never let the locator hide the real message
            line = None
        shown = list(parts)
        if index is not None and shown and shown[0] == "exclude":
            shown[0] = f"exclude[{index}]"
        key = _key_text(shown)
        where = f"{self.path}:{line}" if line else f"{self.path}"
        return ConfigError(f"{where}: {key}: {what}", path=self.path, line=line, key=key,
                           reason=what)

    # -- scalar checks --

    def number(self, parts, v) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.err(parts, f"must be a number, got {_got(v)}")
        if isinstance(v, float) and not math.isfinite(v):
            raise self.err(parts, f"must be a finite number, got {v}")
        try:
            return float(v)
        except OverflowError:
            raise self.err(parts, f"must be a finite number, got {_show(v)}") from None

    def integer(self, parts, v) -> int:
        if isinstance(v, float) and not math.isfinite(v):
            raise self.err(parts, f"must be an integer, got {v}")
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.err(parts, f"must be an integer, got {_got(v)}")
        return v

    def boolean(self, parts, v) -> bool:
        if not isinstance(v, bool):
            raise self.err(parts, f"must be true or false, got {_got(v)}")
        return v

    def string(self, parts, v) -> str:
        if not isinstance(v, str):
            raise self.err(parts, f"must be a string, got {_got(v)}")
        return v

    def table(self, parts, v, allowed) -> dict:
        if not isinstance(v, dict):
            raise self.err(parts, f"must be a table, got {_got(v)}")
        for k in v:
            if k not in allowed:
                raise self.err(list(parts) + [k], f"unknown key; allowed: {', '.join(allowed)}")
        return v

    def choice(self, parts, v, options, more=""):
        if isinstance(v, bool) or v not in options:  # (True == 1)
            raise self.err(parts, f"{_show(v)} is not allowed; allowed: "
                                  f"{', '.join(map(str, options))}{more}")
        return v

    # -- the whole file --

    def parse(self, seeds_override, max_designs_override) -> Study:
        try:
            doc = tomllib.loads(self.text.lstrip("\ufeff"))
        except tomllib.TOMLDecodeError as exc:
            raise self.syntax_error(exc) from None
        for k in doc:
            if k not in TOP_LEVEL:
                raise self.err([k], f"unknown top-level key; allowed: {', '.join(TOP_LEVEL)}")
        name = self.parse_name(doc)
        sections = {}
        for sec in ("hardware", "model", "workload", "levers", "run", "brief"):
            v = doc.get(sec, {})
            if not isinstance(v, dict):
                raise self.err([sec], f"must be a table ([{sec}]), got {_got(v)}")
            sections[sec] = v
        self.apply_profile(sections["hardware"])
        run = self.parse_run(sections["run"], seeds_override, max_designs_override)
        seeds, chunk_size, per_request, max_designs, max_steps = run
        slo = self.parse_request_limits(sections["brief"])
        brief = self.parse_brief({k: v for k, v in sections["brief"].items()
                                  if k not in REQUEST_LIMITS})
        measured = self.parse_measured(doc)
        capacity = self.parse_capacity(doc)
        keys = self.parse_keys(doc, sections)  # [(section, key, options, is_axis)]
        excludes = self.parse_excludes(doc.get("exclude", []))
        self.check_size(keys, max_designs)
        points, skipped, axes = self.build(keys, excludes)
        return Study(name=name, path=None if self.path.startswith("<") else self.path,
                     text=self.text, points=points, axes=axes, skipped=skipped, seeds=seeds,
                     brief=brief, chunk_size=chunk_size, per_request=per_request,
                     max_designs=max_designs, uncertain=dict(self.uncertain),
                     max_steps=max_steps, measured=measured, slo=slo, capacity=capacity)

    def syntax_error(self, exc: Exception) -> ConfigError:
        msg = str(exc)
        m = re.search(r"at line (\d+), column (\d+)", msg)
        line = int(m[1]) if m else getattr(exc, "lineno", None)
        key = "toml"
        if line and 1 <= line <= len(self.loc.lines):
            km = re.match(r"^\s*([A-Za-z0-9_-]+)\s*=", self.loc.lines[line - 1])
            if km:
                header = self.loc.scope[line - 1][0]
                key = f"{header}.{km[1]}" if header else km[1]
        where = f"{self.path}:{line}" if line else self.path
        return ConfigError(f"{where}: {_one_line(key)}: TOML syntax error: {msg}",
                           path=self.path, line=line, key=key, reason=msg)

    def parse_name(self, doc) -> str:
        if "name" not in doc:
            raise self.err(["name"], "missing; every config needs a name (it names the results "
                                     "folder); allowed: letters, digits, '_', '-', '.'")
        name = self.string(["name"], doc["name"])
        if not NAME_RE.fullmatch(name) or set(name) == {"."}:
            raise self.err(["name"], f"{_show(name)} is not a usable folder name; allowed: 1-128 "
                                     "letters, digits, '_', '-', '.' (not only dots)")
        return name

    def parse_run(self, run, seeds_override, max_designs_override):
        self.table(["run"], run, RUN_KEYS)
        if seeds_override is not None:
            seeds = self.parse_seeds(["run", "seeds"], seeds_override, " (the seeds override)")
        else:
            seeds = self.parse_seeds(["run", "seeds"], run.get("seeds", DEFAULT_SEEDS))
        chunk_size = None
        if "chunk_size" in run:
            chunk_size = self.integer(["run", "chunk_size"], run["chunk_size"])
            if chunk_size < 1:
                raise self.err(["run", "chunk_size"], f"must be positive, got {chunk_size}; "
                                                      "allowed: an integer >= 1")
        per_request = run.get("per_request", False)
        if not isinstance(per_request, bool):
            raise self.err(["run", "per_request"],
                           f"must be true or false, got {_got(per_request)}")
        md_key = ["run", "max_designs"]
        md = run.get("max_designs", DEFAULT_MAX_DESIGNS)
        suffix = ""
        if max_designs_override is not None:
            md, suffix = max_designs_override, " (the max_designs override)"
        md = self.integer(md_key, md) if not suffix else md
        if isinstance(md, bool) or not isinstance(md, int) or not 1 <= md <= MAX_DESIGNS_CAP:
            raise self.err(md_key, f"must be an integer in [1, {MAX_DESIGNS_CAP}]{suffix}, got "
                                   f"{_got(md)}")
        max_steps = None
        if "max_steps" in run:
            max_steps = self.integer(["run", "max_steps"], run["max_steps"])
            if not 1 <= max_steps <= MAX_STEPS:
                raise self.err(["run", "max_steps"], f"{_show(max_steps)} is out of range; "
                                                     f"allowed: an integer in [1, {MAX_STEPS}]")
        return seeds, chunk_size, per_request, md, max_steps

    def parse_seeds(self, parts, v, suffix="") -> list[int]:
        allowed = (f"allowed: a count in [1, {MAX_SEEDS}] or a non-empty list of distinct "
                   f"integers in [0, {MAX_SEED}]")
        if isinstance(v, list):
            if not v:
                raise self.err(parts, f"empty list{suffix}; {allowed}")
            if len(v) > MAX_SEEDS:
                raise self.err(parts, f"{len(v)} seeds{suffix}; {allowed}")
            seen = set()
            for s in v:
                if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= MAX_SEED:
                    raise self.err(parts, f"seed {_got(s)}{suffix}; {allowed}")
                if s in seen:
                    raise self.err(parts, f"seed {s} is listed twice{suffix}; {allowed}")
                seen.add(s)
            return list(v)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.err(parts, f"must be a count or a list of seeds, got {_got(v)}{suffix}; "
                                  f"{allowed}")
        if not 1 <= v <= MAX_SEEDS:
            raise self.err(parts, f"{_show(v)} seeds{suffix}; {allowed}")
        return list(range(v))

    def parse_request_limits(self, brief) -> dict:
        """``request_ttft_s = { max = s }``, ``request_tpot_ms = { max = ms }``."""
        out = {}
        for key in REQUEST_LIMITS:
            if key not in brief:
                continue
            parts = ["brief", key]
            lim = brief[key]
            if not isinstance(lim, dict) or set(lim) != {"max"}:
                raise self.err(parts, f"must be a table like {{ max = 0.5 }}, got {_got(lim)}; "
                                      "allowed: { max = positive number } (a per-request limit)")
            v = self.number(parts + ["max"], lim["max"])
            if not v > 0:
                raise self.err(parts + ["max"], f"{_show(v)} is out of range; allowed: a "
                                                "positive number")
            out[key] = v
        return out

    def parse_capacity(self, doc) -> dict:
        """``[capacity]``: the search's confidence, tolerance and rate range, and the target."""
        raw = doc.get("capacity", {})
        if not isinstance(raw, dict):
            raise self.err(["capacity"], f"must be a table ([capacity]), got {_got(raw)}")
        self.table(["capacity"], raw, tuple(CAPACITY_DEFAULTS))
        out = dict(CAPACITY_DEFAULTS)
        for key, v in raw.items():
            parts = ["capacity", key]
            if key == "fleets":
                v = self.integer(parts, v)
                if not 1 <= v <= 100:
                    raise self.err(parts, f"{_show(v)} is out of range; allowed: 1 to 100")
            else:
                v = self.number(parts, v)
                lo, hi = {"confidence": (0.0, 1.0), "tolerance": (0.0, 1.0)}.get(
                    key, (0.0, math.inf))
                if not (lo < v <= hi) or (key == "tolerance" and v >= 1.0):
                    raise self.err(parts, f"{_show(v)} is out of range; allowed: "
                                          + {"confidence": "0 < confidence <= 1",
                                             "tolerance": "0 < tolerance < 1"}.get(
                                              key, "a positive number of requests/s"))
            out[key] = v
        if (out["rate_min"] is not None and out["rate_max"] is not None
                and out["rate_min"] >= out["rate_max"]):
            raise self.err(["capacity", "rate_min"], f"{_show(out['rate_min'])} is not below "
                                                     f"rate_max {_show(out['rate_max'])}; "
                                                     "allowed: rate_min < rate_max")
        return out

    def parse_brief(self, brief) -> list[Limit]:
        allowed_keys = list(METRICS) + NUMERIC_COLUMNS + list(REQUEST_LIMITS)
        limits = []
        for key, lim in brief.items():
            parts = ["brief", key]
            if key not in METRICS and key not in COLUMNS:
                raise self.err(parts, "neither a metric nor a column; allowed: "
                                      f"{', '.join(allowed_keys)}")
            if key in TEXT_COLUMNS:
                raise self.err(parts, "a text column cannot take numeric limits; allowed: "
                                      f"{', '.join(allowed_keys)}")
            if not isinstance(lim, dict):
                raise self.err(parts, f"must be a table like {{ max = 1.0 }}, got {_got(lim)}; "
                                      "allowed: { min = number, max = number }")
            self.table(parts, lim, ("min", "max"))
            if not lim:
                raise self.err(parts, "a limit needs min and/or max; allowed: "
                                      "{ min = number, max = number }")
            lo = self.number(parts + ["min"], lim["min"]) if "min" in lim else None
            hi = self.number(parts + ["max"], lim["max"]) if "max" in lim else None
            if lo is not None and hi is not None and lo > hi:
                raise self.err(parts, f"min {lo:g} > max {hi:g}; allowed: min <= max")
            limits.append(Limit(key, lo, hi))
        return limits

    def parse_measured(self, doc) -> dict:
        """``[measured]``: what reality measured for this (single) design, metric -> value, for
        ``sweep validate``. Numbers for the numeric metrics; true or false for the bool ones
        (``unstable = true``: the real server was overloaded, the simulation must flag it)."""
        if "measured" not in doc:
            return {}
        raw = doc["measured"]
        if not isinstance(raw, dict):
            raise self.err(["measured"], f"must be a table ([measured]), got {_got(raw)}")
        if not raw:
            raise self.err(["measured"], "empty table; allowed: metric = measured value, "
                                         f"metrics: {', '.join(METRICS)}")
        out = {}
        for key, v in raw.items():
            parts = ["measured", key]
            if key not in METRICS:
                raise self.err(parts, f"not a metric; allowed: {', '.join(METRICS)}")
            if METRICS[key] == "b":
                out[key] = self.boolean(parts, v)
            else:
                out[key] = self.number(parts, v)
        return out

    # -- the swept sections --

    def parse_keys(self, doc, sections):
        """Every given key of the swept sections, in file order: (section, key, options, axis),
        each option a (columns, design kwargs, workload kwargs) triple."""
        order = [s for s in doc if s in SECTIONS]
        for sec in SECTIONS:
            self.table([sec], sections[sec], tuple(SECTIONS[sec]))
        model = sections["model"]
        if ("name" in model) == ("config_json" in model):
            what = "both name and config_json" if model else "neither name nor config_json"
            raise self.err(["model", "config_json" if model else "name"],
                           f"{what}; allowed: exactly one of name (a catalog model: "
                           f"{', '.join(MODEL_CATALOG)}) or config_json (a Hugging Face "
                           "config.json path)")
        hw = sections["hardware"]
        if "gpu_memory_utilization" in hw and "memory_overhead_fraction" in hw:
            raise self.err(["hardware", "memory_overhead_fraction"],
                           "not used with gpu_memory_utilization (vLLM's sizing of the KV cache "
                           "replaces the fixed reserve); allowed: one of them")
        levers = sections["levers"]
        if "gpus" in levers and ("prefill_gpus" in levers or "decode_gpus" in levers):
            raise self.err(["levers", "gpus"], "not used with prefill_gpus and decode_gpus (each "
                                               "pool's GPUs); allowed: leave gpus unset")
        wl = sections["workload"]
        if "trace" in wl:
            self.check_trace_keys(wl)
        elif ("duration_s" in wl) == ("num_requests" in wl):
            what = "both duration_s and num_requests" if "duration_s" in wl else \
                "neither duration_s nor num_requests"
            raise self.err(["workload", "num_requests" if "num_requests" in wl else "duration_s"],
                           f"{what}; allowed: exactly one of them")
        elif "trace_time_scale" in wl:
            raise self.err(["workload", "trace_time_scale"], "applies only with a trace; "
                                                             "allowed: workload.trace = \"FILE\"")
        arrivals = wl.get("arrival", Workload.arrival)
        if "arrival_cv" in wl and "gamma" not in (arrivals if isinstance(arrivals, list)
                                                  else [arrivals]):
            raise self.err(["workload", "arrival_cv"], "applies only to bursty arrivals; allowed: "
                                                       "arrival = \"gamma\" with arrival_cv > 0")
        keys = []
        for sec in order:
            for key, raw in sections[sec].items():
                parts = [sec, key]
                axis = isinstance(raw, list)
                values = raw if axis else [raw]
                if axis and not values:
                    raise self.err(parts, "empty array: an axis needs at least one value")
                if axis and key in FACTORS and any(isinstance(x, dict) for x in values):
                    raise self.err(parts, "a distribution cannot be an axis value; allowed: an "
                                          "axis of numbers, or one distribution table")
                options, seen = [], {}
                for v in values:
                    opt, ident = self.option(sec, key, v)
                    if ident in seen:
                        raise self.err(parts, f"duplicate axis value {_show(v)}; allowed: "
                                              "distinct values")
                    seen[ident] = True
                    options.append(opt)
                if sec == "model" and key == "config_json" and axis:
                    names = [o[0]["model"] for o in options]
                    dup = next((n for n in names if names.count(n) > 1), None)
                    if dup is not None:
                        raise self.err(parts, f"two configs are both named {_show(dup)}; allowed: "
                                              "configs whose models have distinct names")
                keys.append((sec, key, options, axis))
        return keys

    def option(self, sec, key, v):
        """One value of a key -> ((columns, design kwargs, workload kwargs), identity)."""
        parts = [sec, key]
        kind = SECTIONS[sec][key]
        if kind == "lengths":
            return self.lengths(parts, v)
        if isinstance(v, dict) and FACTORS.get(key, ("",))[0] == sec:
            return self.uncertain_factor(parts, v)
        if kind == "trace":
            trace = self.load_trace(parts, self.string(parts, v))
            return ({"trace": v, "arrival": "trace"}, {}, {"trace": trace, "arrival": "trace"}), v
        if isinstance(v, list):
            raise self.err(parts, "an array inside an axis; allowed: one value per axis entry")
        if kind == "num":
            v = self.number(parts, v)
        elif kind == "int":
            v = self.integer(parts, v)
        elif kind == "bool":
            v = self.boolean(parts, v)
        else:
            v = self.string(parts, v)
        if (sec, key) in CHOICES:
            self.choice(parts, v, CHOICES[(sec, key)],
                        " (or model.config_json)" if sec == "model" else "")
        if sec == "model":
            if key == "name":
                return ({"model": v}, {"model": v}, {}), v
            model = self.load_model(parts, v)
            return ({"model": model.name}, {"model": model}, {}), v
        if sec == "workload":
            return ({key: v}, {}, {key: v}), v
        return ({key: v}, {key: v}, {}), v

    def lengths(self, parts, v):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            t = {"dist": "fixed", "mean": v}
        elif isinstance(v, dict):
            t = self.table(parts, v, LENGTH_KEYS)
        else:
            raise self.err(parts, f"must be a number or a table like {{ dist = \"exponential\", "
                                  f"mean = 1024 }}, got {_got(v)}")
        dist, uses = self.distribution(parts, t, t.get("dist", Lengths.dist), LENGTH_USES)
        vals = {}
        for k in uses:
            if k in t:
                vals[k] = self.integer(parts + [k], t[k]) if k in ("low", "high") \
                    else self.number(parts + [k], t[k])
        lengths = Lengths(dist=dist, **vals)
        prefix = parts[1]
        cols = {f"{prefix}_{k}": (getattr(lengths, k) if k == "dist" or k in uses else None)
                for k in LENGTH_KEYS}
        if cols[f"{prefix}_mean"] is not None:
            cols[f"{prefix}_mean"] = float(cols[f"{prefix}_mean"])
        if cols[f"{prefix}_sigma"] is not None:
            cols[f"{prefix}_sigma"] = float(cols[f"{prefix}_sigma"])
        return (cols, {}, {prefix: lengths}), tuple(cols.values())

    def distribution(self, parts, t: dict, dist, uses_of: dict):
        """A distribution table's kind (one of ``uses_of``) and the keys it uses; any other key
        is refused."""
        if not isinstance(dist, str) or dist not in uses_of:
            raise self.err(parts + ["dist"], f"unknown distribution {_show(dist)}; allowed: "
                                             f"{', '.join(uses_of)}")
        uses = uses_of[dist]
        for k in t:
            if k != "dist" and k not in uses:
                raise self.err(parts + [k], f"does not apply to {dist}; allowed for {dist}: "
                                            f"dist, {', '.join(uses)}")
        return dist, uses

    def uncertain_factor(self, parts, v):
        """A factor given as a distribution: drawn per seed by the runner; the design holds its
        centre and its column is filled per run with the draw."""
        t = self.table(parts, v, ("dist", "mean", "sd", "low", "high"))
        dist, uses = self.distribution(parts, t, t.get("dist"), USES)
        for k in uses:
            if k not in t:
                raise self.err(parts, f"{dist} needs {k}; allowed: {{ dist = \"{dist}\", "
                                      + ", ".join(f"{u} = NUMBER" for u in uses) + " }")
        factor = Uncertain(dist, **{k: self.number(parts + [k], t[k]) for k in uses})
        try:
            factor.validate(".".join(parts))
        except ValueError as exc:
            key, _, what = str(exc).partition(": ")
            raise self.err(key.split("."), what) from None
        self.uncertain[parts[1]] = factor
        key = parts[1]
        return ({key: None}, {key: factor.nominal}, {}), (dist,) + tuple(t[k] for k in uses)

    def resolve(self, rel: str) -> Path:
        """A path relative to the config file (to the current folder for text configs)."""
        base = Path.cwd() if self.path.startswith("<") else Path(self.path).parent
        p = Path(rel)
        return p if p.is_absolute() else base / p

    def load_trace(self, parts, rel: str):
        if rel not in self.traces:
            try:
                self.traces[rel] = load_trace(self.resolve(rel), name=rel)
            except ValueError as exc:
                msg = re.sub(r"^workload\.trace:\s*", "", str(exc))
                raise self.err(parts, msg) from None
        return self.traces[rel]

    def check_trace_keys(self, wl):
        for k in TRACE_REPLACES:
            if k in wl:
                raise self.err(["workload", k], "does not apply with workload.trace (the trace "
                                                "gives arrivals and lengths); allowed: drop it, "
                                                "or drop the trace")
        if "duration_s" in wl and "num_requests" in wl:
            raise self.err(["workload", "num_requests"], "both duration_s and num_requests; "
                                                         "allowed: at most one of them with a "
                                                         "trace")

    def apply_profile(self, hw):
        """``[hardware] profile``: the keys of a ``sweep calibrate`` profile, as if written here."""
        if "profile" not in hw:
            return
        parts = ["hardware", "profile"]
        rel = self.string(parts, hw.pop("profile"))
        try:
            profile = load_profile(self.resolve(rel))
        except ValueError as exc:
            raise self.err(parts, str(exc)) from None
        for k in profile:
            if k in hw:
                raise self.err(["hardware", k], f"also set by hardware.profile {_show(rel)}; "
                                                "allowed: one of them")
        hw.update(profile)

    def load_model(self, parts, rel: str):
        if not rel:
            raise self.err(parts, "empty path; allowed: a path to a Hugging Face config.json")
        p = self.resolve(rel)
        if p.is_dir():
            p = p / "config.json"
        allowed = "allowed: a readable Hugging Face config.json"
        # A device or a pipe (/dev/zero, a FIFO) would be read forever.
        if p.exists() and not p.is_file():
            raise self.err(parts, f"{_show(str(p))} is not a regular file; {allowed}")
        if p.is_file() and p.stat().st_size > MAX_MODEL_FILE:
            raise self.err(parts, f"{_show(str(p))} is {p.stat().st_size} bytes; {allowed} of "
                                  f"at most {MAX_MODEL_FILE} bytes")
        try:
            model = load_hf_config(p)
        except ValueError as exc:
            msg = re.sub(r"^model\.config_json:\s*", "", str(exc))
            raise self.err(parts, f"{msg}; {allowed}") from None
        except RecursionError:
            raise self.err(parts, f"{_show(str(p))} is nested too deeply; {allowed}") from None
        if model.head_dim < 1 or model.kv_heads > model.heads:
            raise self.err(parts, f"{_show(str(p))}: {model.heads} attention heads, "
                                  f"{model.kv_heads} KV heads, head dim {model.head_dim}; "
                                  f"{allowed} with 1 <= KV heads <= heads and head dim >= 1")
        if p.name != "config.json" and model.name == p.parent.name:
            # load_hf_config names a model after its folder (HF layout: NAME/config.json); a
            # file named otherwise is named after itself.
            model = replace(model, name=p.stem)
        return model

    def parse_excludes(self, raw):
        if isinstance(raw, dict) or not isinstance(raw, list):
            raise self.err(["exclude"], f"must be an array of tables ([[exclude]]), got "
                                        f"{_got(raw)}")
        out = []
        for i, t in enumerate(raw):
            if not isinstance(t, dict):
                raise self.err(["exclude"], f"entry {i} must be a table, got {_got(t)}", index=i)
            if not t:
                raise self.err(["exclude"], "an empty [[exclude]] table would drop every point; "
                                            f"allowed: column = value(s), columns: "
                                            f"{', '.join(COLUMNS)}", index=i)
            entry = {}
            for col, v in t.items():
                parts = ["exclude", col]
                if col not in COLUMNS:
                    raise self.err(parts, f"not a column; allowed: {', '.join(COLUMNS)}", index=i)
                values = v if isinstance(v, list) else [v]
                if not values:
                    raise self.err(parts, "empty array; allowed: a value or a list of values",
                                   index=i)
                for x in values:
                    if isinstance(x, bool) or not isinstance(x, (str, int, float)):
                        raise self.err(parts, f"must be a value or a list of values, got "
                                              f"{_got(x)}", index=i)
                    if isinstance(x, float) and not math.isfinite(x):
                        raise self.err(parts, f"must be finite, got {x}", index=i)
                entry[col] = values
            out.append(entry)
        return out

    def check_size(self, keys, max_designs):
        dims = [(sec, key, len(opts)) for sec, key, opts, axis in keys if axis]
        total = math.prod(n for _, _, n in dims)
        if total > max_designs:
            shape = " x ".join(f"{key} {n}" for _, key, n in dims)
            raise self.err(["run", "max_designs"],
                           f"the grid asks for {total} points ({shape}), more than max_designs = "
                           f"{max_designs}; allowed: at most {max_designs} (shrink an axis, "
                           "[[exclude]] cannot help, or raise [run] max_designs or --max-designs)")

    # -- the grid --

    def build(self, keys, excludes):
        base_cols = {c: None for c in COLUMNS}
        for c in ("gpu", "memory_overhead_fraction", "batching", "kv_cache", "gpus",
                  "weight_bits", "activation_bits", "kv_bits", "draft_tokens", "acceptance",
                  "draft_cost", "max_batch", "block_size", "replicas", "router", "prefix_cache",
                  "prefill_chunk_tokens", "max_num_batched_tokens"):
            base_cols[c] = _DESIGN_DEFAULTS[c]
        for c in ("prefix_count", "prefix_tokens", "prefix_share"):
            base_cols[c] = _WORKLOAD_DEFAULTS[c]
        base_cols["arrival"] = _WORKLOAD_DEFAULTS["arrival"]
        base_cols["arrival_rate"] = float(_WORKLOAD_DEFAULTS["arrival_rate"])
        base_design = dict(_DESIGN_DEFAULTS)
        base_wl = dict(_WORKLOAD_DEFAULTS, duration_s=None, num_requests=None, drain_s=None)
        for prefix in ("prompt_tokens", "output_tokens"):
            (cols, _, wl), _ident = self.lengths(["workload", prefix], _length_table(
                _WORKLOAD_DEFAULTS[prefix]))
            base_cols.update(cols)
        axis_keys = []
        for sec, key, options, axis in keys:
            if axis:
                axis_keys.append((sec, key, options))
                continue
            cols, dkw, wkw = options[0]
            base_cols.update(cols)
            base_design.update(dkw)
            base_wl.update(wkw)

        axes: list[str] = []
        for sec, key, options in axis_keys:
            if key in ("prompt_tokens", "output_tokens"):
                varying = [c for c in options[0][0]
                           if len({_hashable(o[0][c]) for o in options}) > 1]
                axes.extend(c for c in varying if c not in axes)
            else:
                col = "model" if sec == "model" else key
                if col not in axes:
                    axes.append(col)

        seen_values = {col: set() for ex in excludes for col in ex}
        design_cache: dict = {}
        workload_cache: dict = {}
        points, skipped, n_excluded = [], [], 0
        design_fields = list(_DESIGN_DEFAULTS)
        workload_fields = list(_WORKLOAD_DEFAULTS)
        for combo in itertools.product(*(opts for _, _, opts in axis_keys)):
            cols = dict(base_cols)
            dkw = dict(base_design)
            wkw = dict(base_wl)
            for c, d, w in combo:
                cols.update(c)
                dkw.update(d)
                wkw.update(w)
            gpu = GPU_CATALOG[dkw["gpu"]]
            for c in ("price_per_gpu_hour", "compute_efficiency", "bandwidth_efficiency",
                      "overhead_ms", "seq_overhead_us", "request_overhead_ms",
                      "request_lag_passes", "decode_attention_efficiency"):
                if dkw[c] is None:  # the GPU's default
                    cols[c] = float(getattr(gpu, c))
            if wkw["arrival"] != "gamma":
                wkw["arrival_cv"] = _WORKLOAD_DEFAULTS["arrival_cv"]
            cols["arrival_cv"] = float(wkw["arrival_cv"]) if wkw["arrival"] == "gamma" else None
            if wkw["trace"] is not None:
                cols["trace_time_scale"] = float(wkw["trace_time_scale"])
            pools = dkw["prefill_gpus"] is not None or dkw["decode_gpus"] is not None
            cols["gpus"] = None if pools else dkw["gpus"]  # the pools have their own
            cols["kv_link_gbps"] = float(dkw["kv_link_gbps"]) if pools else None
            for col, s in seen_values.items():
                s.add(_hashable(cols[col]))
            if any(all(cols[col] in vals for col, vals in ex.items()) for ex in excludes):
                n_excluded += 1
                continue
            dkey = tuple(dkw[f] for f in design_fields)
            if dkey not in design_cache:
                design_cache[dkey] = self.check_design(Design(**dkw), cols, axes)
            design, reason = design_cache[dkey]
            if reason is not None:
                skipped.append((cols, reason))
                continue
            wkey = tuple(wkw[f] for f in workload_fields)
            if wkey not in workload_cache:
                workload_cache[wkey] = self.check_workload(Workload(**wkw), cols, axes)
            if wkw["trace"] is not None:
                cols.update(_trace_columns(workload_cache[wkey]))
            points.append(Point(design=design, workload=workload_cache[wkey], columns=cols))

        for i, ex in enumerate(excludes):
            for col, vals in ex.items():
                for v in vals:
                    if _hashable(v) not in seen_values[col]:
                        present = sorted(map(_show, seen_values[col]))
                        raise self.err(["exclude", col], f"{_show(v)} matches no grid point; "
                                       f"allowed: {', '.join(present)}", index=i)
        if not points:
            if skipped:
                raise self.err(["levers", "gpus"], f"nothing left to run: no design fits in "
                               f"memory (e.g. {skipped[0][1]}); allowed: at least one design "
                               "that fits")
            raise self.err(["exclude"], f"nothing left to run: [[exclude]] drops all "
                           f"{n_excluded} grid points; allowed: exclusions that leave a point",
                           index=0)
        return points, skipped, axes

    def check_design(self, design: Design, cols, axes):
        try:
            design.validate()
        except ValueError as exc:
            msg = str(exc)
            if "does not fit" in msg or ("less than one" in msg and "sequence" in msg):
                return design, _one_line(re.sub(r"^design:\s*", "", msg))
            raise self.revalidate(msg, cols, axes) from None
        return design, None

    def check_workload(self, wl: Workload, cols, axes):
        try:
            wl.validate()
        except ValueError as exc:
            raise self.revalidate(str(exc), cols, axes) from None
        if wl.trace is not None and wl.capacity < 1:
            raise self.err(["workload", "duration_s"], f"keeps no request of the trace"
                           f"{_at(cols, axes)}; allowed: a duration_s at or after its first "
                           "arrival (time 0)")
        if wl.duration_s is not None and wl.trace is None:
            mean = wl.arrival_rate * wl.duration_s
            if not math.isfinite(mean) or mean > MAX_REQUESTS:
                raise self.err(["workload", "duration_s"],
                               f"arrival_rate x duration_s asks for about {mean:.3g} requests"
                               f"{_at(cols, axes)}; allowed: at most {MAX_REQUESTS} per simulation")
        return wl

    def revalidate(self, msg: str, cols, axes) -> ConfigError:
        """A Design/Workload ValueError ('levers.x: ...') as a ConfigError with file and line."""
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_.]*): (.*)$", msg, re.S)
        key, what = (m[1], m[2]) if m else ("levers", msg)
        parts = key.split(".")
        if parts[0] == "levers" and len(parts) > 1 and parts[1] in HARDWARE_KEYS:
            parts[0] = "hardware"  # Design calls every field a lever
        at = _at(cols, axes)
        if at:
            head, sep, tail = what.partition("; allowed:")
            what = head + at + sep + tail
        return self.err(parts, what)


def _at(cols, axes) -> str:
    if not axes:
        return ""
    return " (at " + ", ".join(f"{a}={_show(cols[a])}" for a in axes) + ")"


def _trace_columns(wl: Workload) -> dict:
    """What a replayed trace amounts to: its mean rate and lengths (before context clipping)."""
    n = wl.capacity
    t = wl.trace
    return {"arrival_rate": t.mean_rate(wl.trace_time_scale, n),
            "prompt_tokens_dist": "trace", "output_tokens_dist": "trace",
            "prompt_tokens_mean": float(t.prompt[:n].mean()),
            "output_tokens_mean": float(t.output[:n].mean()),
            **{f"{x}_tokens_{k}": None for x in ("prompt", "output")
               for k in ("low", "high", "sigma")}}


def _hashable(v):
    return v if not isinstance(v, list) else tuple(v)


def _length_table(x: Lengths) -> dict:
    return {"dist": x.dist, **{k: getattr(x, k) for k in LENGTH_USES[x.dist]}}


# --- entry points ------------------------------------------------------------------------------

def parse_study(text: str, path: str = "<config>", seeds: int | None = None,
                max_designs: int | None = None) -> Study:
    """A Study from TOML text. ``path`` names the file in messages and anchors relative
    ``config_json`` paths (the current folder when it is ``<config>``). ``seeds`` (a count)
    overrides [run] seeds; ``max_designs`` overrides [run] max_designs."""
    path = str(path)
    try:
        if not isinstance(text, str):
            raise ConfigError(f"{path}: file: not text ({type(text).__name__})", path=path)
        return _Parser(text, path).parse(seeds, max_designs)
    except ConfigError:
        raise
    except RecursionError:
        raise ConfigError(f"{path}: toml: arrays or tables nested too deeply; allowed: the "
                          "documented keys, nested at most a few levels", path=path) from None
    except Exception as exc:  # a hostile file must never produce a traceback
        raise ConfigError(f"{path}: config: cannot be read ({type(exc).__name__}: "
                          f"{_clip(_one_line(exc), 200)})", path=path) from None


def load_study(path, seeds: int | None = None, max_designs: int | None = None) -> Study:
    """Read and parse a config file (see ``parse_study``)."""
    shown = str(path)
    try:
        data = Path(path).read_bytes()
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ConfigError(f"{shown}: file: cannot read: {_one_line(reason)}",
                          path=shown) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{shown}: file: not UTF-8 text (byte {exc.start}); allowed: a UTF-8 "
                          "TOML file", path=shown) from None
    return parse_study(text, shown, seeds=seeds, max_designs=max_designs)


def main(argv: list[str] | None = None) -> int:
    """``python -m sweep.study.config FILE...``: check configs; one line each; exit 2 on any error."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m sweep.study.config CONFIG.toml...", file=sys.stderr)
        return 2
    status = 0
    for p in argv:
        try:
            s = load_study(p)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 2
            continue
        print(f"{p}: ok: {s.name}: {len(s.points)} points ({len(s.skipped)} skipped), axes "
              f"{', '.join(s.axes) or '-'}, {len(s.seeds)} seeds, {len(s.brief)} limits")
    return status


if __name__ == "__main__":
    sys.exit(main())
