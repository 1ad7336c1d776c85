"""The config sections that are not swept: ``[run]`` (how a study runs), ``[brief]`` (what a
design must meet), ``[capacity]`` (what ``sweep capacity`` searches) and ``[measured]`` (what
``sweep validate`` compares with)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from sweep.errors import clip, got, listed, show
from sweep.files import FileRefused
from sweep.study import silicon, vllm_bench
from sweep.study.fields import COLUMNS, MAX_REQUESTS, NUMERIC_COLUMNS, TEXT_COLUMNS
from sweep.study.metric_names import METRICS
from sweep.study.reader import Reader

DEFAULT_MAX_DESIGNS = 100_000
MAX_DESIGNS_CAP = 10_000_000  # a hard ceiling on [run] max_designs: beyond it the grid alone
#                               would not fit in memory
DEFAULT_SEEDS = 1  # like sweep.api.simulate
MAX_SEEDS = 100_000
MAX_SEED = 2**32 - 1  # seeds are uint32 in the workload sampler
MAX_STEPS = 2**31 - 1  # the engine counts steps in int32
RUN_KEYS = ("seeds", "chunk_size", "per_request", "max_designs", "max_steps", "model_error",
            "max_requests")
#: Requests per simulation at most, unless [run] max_requests raises it (up to the engine's
#: MAX_REQUESTS): a million requests is minutes of one simulation on a CPU.
DEFAULT_MAX_REQUESTS = 1_000_000
#: The brief's per-request limits (``{ max = x }``): what a request must meet to count in
#: ``slo_attainment`` and ``goodput_rps``; not limits on a column.
REQUEST_LIMITS = ("request_ttft_s", "request_tpot_ms")
#: ``[capacity]``: what ``sweep capacity`` searches (docs/capacity.md); defaults.
CAPACITY_DEFAULTS = {"confidence": 0.9, "tolerance": 0.02, "rate_min": None, "rate_max": None,
                     "target_rate": None, "fleets": 3, "mixed_fleets": False}
#: ``[capacity]`` numbers other than fleets: what a value must be (an open lower bound of 0).
_CAPACITY_RANGES = {"confidence": (1.0, "0 < confidence <= 1"),
                    "tolerance": (1.0, "0 < tolerance < 1")}


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


def parse_run(r: Reader, run, seeds_override, max_designs_override):
    """``[run]``: (seeds, chunk_size, per_request, max_designs, max_steps, model_error,
    max_requests), the overrides (the command line's) taking the place of the file's values."""
    r.table(["run"], run, RUN_KEYS)
    if seeds_override is not None:
        seeds = parse_seeds(r, ["run", "seeds"], seeds_override, " (the seeds override)")
    else:
        seeds = parse_seeds(r, ["run", "seeds"], run.get("seeds", DEFAULT_SEEDS))
    chunk_size = None
    if "chunk_size" in run:
        chunk_size = r.integer(["run", "chunk_size"], run["chunk_size"])
        if chunk_size < 1:
            raise r.err(["run", "chunk_size"], f"must be positive, got {chunk_size}; "
                                               "allowed: an integer >= 1")
    per_request, model_error = (run.get(k, default) for k, default in (("per_request", False),
                                                                       ("model_error", True)))
    for key, v in (("per_request", per_request), ("model_error", model_error)):
        if not isinstance(v, bool):
            raise r.err(["run", key], f"must be true or false, got {got(v)}")
    md_key = ["run", "max_designs"]
    md = run.get("max_designs", DEFAULT_MAX_DESIGNS)
    suffix = ""
    if max_designs_override is not None:
        md, suffix = max_designs_override, " (the max_designs override)"
    md = r.integer(md_key, md) if not suffix else md
    if isinstance(md, bool) or not isinstance(md, int) or not 1 <= md <= MAX_DESIGNS_CAP:
        raise r.err(md_key, f"must be an integer in [1, {MAX_DESIGNS_CAP}]{suffix}, got "
                            f"{got(md)}")
    max_steps = _bounded(r, run, "max_steps", None, MAX_STEPS)
    max_requests = _bounded(r, run, "max_requests", DEFAULT_MAX_REQUESTS, MAX_REQUESTS)
    return seeds, chunk_size, per_request, md, max_steps, model_error, max_requests


def _bounded(r: Reader, run, key: str, default, most: int):
    """``[run] key``: an integer in [1, most], or ``default`` when the config leaves it out."""
    if key not in run:
        return default
    v = r.integer(["run", key], run[key])
    if not 1 <= v <= most:
        raise r.err(["run", key], f"{show(v)} is out of range; allowed: an integer in "
                                  f"[1, {most}]")
    return v


def parse_seeds(r: Reader, parts, v, suffix="") -> list[int]:
    """A count (seeds 0..n-1) or a list of distinct seeds."""
    allowed = (f"allowed: a count in [1, {MAX_SEEDS}] or a non-empty list of distinct "
               f"integers in [0, {MAX_SEED}]")
    if isinstance(v, list):
        if not v:
            raise r.err(parts, f"empty list{suffix}; {allowed}")
        if len(v) > MAX_SEEDS:
            raise r.err(parts, f"{len(v)} seeds{suffix}; {allowed}")
        seen = set()
        for s in v:
            if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= MAX_SEED:
                raise r.err(parts, f"seed {got(s)}{suffix}; {allowed}")
            if s in seen:
                raise r.err(parts, f"seed {s} is listed twice{suffix}; {allowed}")
            seen.add(s)
        return list(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise r.err(parts, f"must be a count or a list of seeds, got {got(v)}{suffix}; "
                           f"{allowed}")
    if not 1 <= v <= MAX_SEEDS:
        raise r.err(parts, f"{show(v)} seeds{suffix}; {allowed}")
    return list(range(v))


def parse_request_limits(r: Reader, brief) -> dict:
    """``request_ttft_s = { max = s }``, ``request_tpot_ms = { max = ms }``."""
    out = {}
    for key in REQUEST_LIMITS:
        if key not in brief:
            continue
        parts = ["brief", key]
        lim = brief[key]
        if not isinstance(lim, dict) or set(lim) != {"max"}:
            raise r.err(parts, f"must be a table like {{ max = 0.5 }}, got {got(lim)}; "
                               "allowed: { max = positive number } (a per-request limit)")
        v = r.number(parts + ["max"], lim["max"])
        if not v > 0:
            raise r.err(parts + ["max"], f"{show(v)} is out of range; allowed: a "
                                         "positive number")
        out[key] = v
    return out


def parse_brief(r: Reader, brief) -> list[Limit]:
    """Limits on metrics and numeric columns (the per-request limits left out)."""
    allowed_keys = list(METRICS) + NUMERIC_COLUMNS + list(REQUEST_LIMITS)
    limits = []
    for key, lim in brief.items():
        if key in REQUEST_LIMITS:
            continue
        parts = ["brief", key]
        if key not in METRICS and key not in COLUMNS:
            raise r.err(parts, "neither a metric nor a column; allowed: "
                               f"{listed(allowed_keys)}")
        if key in TEXT_COLUMNS:
            raise r.err(parts, "a text column cannot take numeric limits; allowed: "
                               f"{listed(allowed_keys)}")
        if not isinstance(lim, dict):
            raise r.err(parts, f"must be a table like {{ max = 1.0 }}, got {got(lim)}; "
                               "allowed: { min = number, max = number }")
        r.table(parts, lim, ("min", "max"))
        if not lim:
            raise r.err(parts, "a limit needs min and/or max; allowed: "
                               "{ min = number, max = number }")
        lo = r.number(parts + ["min"], lim["min"]) if "min" in lim else None
        hi = r.number(parts + ["max"], lim["max"]) if "max" in lim else None
        if lo is not None and hi is not None and lo > hi:
            raise r.err(parts, f"min {lo:g} > max {hi:g}; allowed: min <= max")
        limits.append(Limit(key, lo, hi))
    return limits


def parse_capacity(r: Reader, doc) -> dict:
    """``[capacity]``: the search's confidence, tolerance and rate range, and the target."""
    raw = doc.get("capacity", {})
    if not isinstance(raw, dict):
        raise r.err(["capacity"], f"must be a table ([capacity]), got {got(raw)}")
    r.table(["capacity"], raw, tuple(CAPACITY_DEFAULTS))
    out = dict(CAPACITY_DEFAULTS)
    for key, v in raw.items():
        parts = ["capacity", key]
        if key == "fleets":
            v = r.integer(parts, v)
            if not 1 <= v <= 100:
                raise r.err(parts, f"{show(v)} is out of range; allowed: 1 to 100")
        elif key == "mixed_fleets":
            v = r.boolean(parts, v)
        else:
            v = r.number(parts, v)
            hi, allowed = _CAPACITY_RANGES.get(key, (math.inf, "a positive number of requests/s"))
            if not (0.0 < v <= hi) or (key == "tolerance" and v >= 1.0):
                raise r.err(parts, f"{show(v)} is out of range; allowed: {allowed}")
        out[key] = v
    if (out["rate_min"] is not None and out["rate_max"] is not None
            and out["rate_min"] >= out["rate_max"]):
        raise r.err(["capacity", "rate_min"], f"{show(out['rate_min'])} is not below "
                                              f"rate_max {show(out['rate_max'])}; "
                                              "allowed: rate_min < rate_max")
    return out


def parse_measured(r: Reader, doc) -> dict:
    """``[measured]``: what reality measured for this (single) design, metric -> value, for
    ``sweep validate``. Numbers for the numeric metrics; true or false for the bool ones
    (``unstable = true``: the real server was overloaded, the simulation must flag it)."""
    if "measured" not in doc:
        return {}
    raw = doc["measured"]
    if not isinstance(raw, dict):
        raise r.err(["measured"], f"must be a table ([measured]), got {got(raw)}")
    if not raw:
        raise r.err(["measured"], "empty table; allowed: metric = measured value, "
                                  f"metrics: {', '.join(METRICS)}")
    out = {}
    for key, v in raw.items():
        parts = ["measured", key]
        if key in FILES:
            continue
        if key not in METRICS:
            raise r.err(parts, f"not a metric; allowed: {listed(METRICS)} (or vllm_bench, "
                               "silicon)")
        out[key] = r.boolean(parts, v) if METRICS[key] == "b" else r.number(parts, v)
    for key in (k for k in FILES if k in raw):
        read = FILES[key](r, raw[key], doc)
        clash = sorted(k for k in set(read) & set(out) if read[k] != out[k])
        if clash:
            raise r.err(["measured", clash[0]], f"{out[clash[0]]:g} here, {read[clash[0]]:g} in "
                                                f"{key}; allowed: one value")
        out = {**read, **out}
    return out


def _closed_keys(doc) -> tuple[bool, int | None, int | None]:
    """A case's closed loop, its clients and its GPUs as its raw TOML states them (None: not an
    integer, which the keys' own checks refuse)."""
    wl = doc.get("workload") if isinstance(doc.get("workload"), dict) else {}
    levers = doc.get("levers") if isinstance(doc.get("levers"), dict) else {}

    def whole(v):
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    return wl.get("arrival") == "closed", whole(wl.get("concurrency")), whole(
        levers.get("gpus", 1))


def _silicon(r: Reader, spec, doc) -> dict:
    """The measured values of a silicon sample's row (``sweep.study.silicon``)."""
    parts, allowed = ["measured", "silicon"], silicon.ALLOWED
    if not isinstance(spec, dict) or set(spec) != {"csv", "id"} or not all(
            isinstance(v, str) and v for v in spec.values()):
        raise r.err(parts, f"must be a table of csv and id, got {got(spec)}; allowed: {allowed}")
    try:
        return silicon.read(r.resolve(spec["csv"]), spec["id"], *_closed_keys(doc))
    except FileRefused as exc:
        raise r.err(parts, f"{clip(spec['csv'])}: {exc.reason}; allowed: {allowed}") from None


def _vllm_bench(r: Reader, rel, doc) -> dict:
    """The measured values of a vLLM benchmark result file (``sweep.study.vllm_bench``)."""
    parts = ["measured", "vllm_bench"]
    allowed = "a vLLM benchmark result (vllm bench serve --save-result JSON)"
    if not isinstance(rel, str) or not rel:
        raise r.err(parts, f"must be a path, got {got(rel)}; allowed: {allowed}")
    wl = doc.get("workload") if isinstance(doc.get("workload"), dict) else {}
    rate = wl.get("arrival_rate")
    closed, clients, _ = _closed_keys(doc)
    try:
        values = vllm_bench.read(r.resolve(rel), rate if isinstance(rate, (int, float))
                                 and not isinstance(rate, bool) else None, closed, clients)
    except vllm_bench.BenchRefused as exc:
        raise r.err(parts, f"{clip(rel)}: {exc.reason}; allowed: {allowed}") from None
    if not values:
        raise r.err(parts, f"{clip(rel)}: no measured metric in it; allowed: {allowed}")
    return values


#: ``[measured]`` keys that take measured values from a file: key -> its reader.
FILES = {"vllm_bench": _vllm_bench, "silicon": _silicon}
