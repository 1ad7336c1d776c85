"""``sweep import aiperf``: the summary of one run that NVIDIA AIPerf writes
(``profile_export_aiperf.json``), and GenAI-Perf's of the same family
(``profile_export_genai_perf.json``): one case a file. Each metric is a table of its ``unit`` and
statistics over the requests (``avg``, ``p50``, ``p90``, ``p95``, ``p99``; null where not
computed); inter-token latency is a request's (latency - TTFT) / (output tokens - 1), our TPOT.
The load is the file's ``input_config``, whose shape the releases changed: AIPerf's ``phases``
(the one measured: ``concurrency`` clients, or ``constant``, ``poisson`` or ``gamma`` arrivals
at ``rate``, gamma's ``smoothness`` being vLLM's burstiness), its earlier ``loadgen``
(``concurrency``, or ``request_rate`` in ``arrival_pattern`` or ``request_rate_mode``, Poisson
by default), or GenAI-Perf's own ``concurrency`` or ``request_rate`` (perf_analyzer's constant
arrivals)."""
from __future__ import annotations

from pathlib import Path

from sweep.errors import got, show
from sweep.study.metric_names import METRICS
from sweep.workflows.import_fields import Found, Run, Workload, closed_loop, fixed_lengths, \
    load, measured, open_loop

ALLOWED = "AIPerf's profile_export_aiperf.json or GenAI-Perf's profile_export_genai_perf.json"
#: A time unit the files write -> that unit's count in a second.
TIME = {"ms": 1000.0, "s": 1.0, "sec": 1.0, "us": 1e6, "ns": 1e9}
#: Latencies: the file's metric -> ours (a metric in seconds ends ``_s``, else milliseconds).
LATENCIES = {"time_to_first_token": "ttft_s", "inter_token_latency": "tpot_ms",
             "request_latency": "e2e_s"}
_STATS = (("avg", "mean"), ("p50", "p50"), ("p90", "p90"), ("p95", "p95"), ("p99", "p99"))
#: Rates: the file's metric -> (ours, the unit it is written in).
RATES = {"output_token_throughput": ("tokens_per_s", "tokens/sec"),
         "request_throughput": ("requests_per_s", "requests/sec")}
PATTERNS = ("constant", "poisson", "gamma")


def found(path: Path) -> list[Found]:
    """The file's run: its workload, its measured values and the model it names."""
    run = Run(path, None, load(path, ALLOWED))
    for key in ("input_sequence_length", "output_sequence_length"):
        if not isinstance(run.get(key, None), dict):
            raise run.refuse(key, "missing" if run.get(key, None) is None else
                             got(run.get(key)), f"{ALLOWED}, which hold it")
    count = "request_count.avg" if run.get("request_count", None) is not None else \
        "input_config.request_count"
    wl = _workload(run, run.count(count))
    wl = fixed_lengths(run, wl, "the summary keeps no request's own", [
        (run.number(f"{k}.avg", inclusive=True), f"{k}.avg", f"{k} avg {run.get(f'{k}.avg')}")
        for k in ("input_sequence_length", "output_sequence_length")])
    values, names = measured(run, _stats(run))
    models = [(k, run.get(k, None)) for k in (
        "input_config.models.items.0.name", "input_config.endpoint.model_names.0",
        "input_config.model_names.0", "input_config.model.0", "input_config.model")]
    return [Found(run, wl, values, names, models)]


def _stats(run: Run) -> dict:
    """The file's statistics -> (our metric, their units in ours), by the units it states."""
    out = {}
    for src, ours in LATENCIES.items():
        if run.get(src, None) is None:
            continue
        unit = run.get(f"{src}.unit", None)
        if unit not in TIME:
            raise run.refuse(f"{src}.unit", "missing" if unit is None else got(unit),
                             ", ".join(TIME))
        per = TIME[unit] / (1.0 if ours.endswith("_s") else 1000.0)
        out.update({f"{src}.{stat}": (f"{name}_{ours}", per) for stat, name in _STATS
                    if f"{name}_{ours}" in METRICS})
    for src, (metric, unit) in RATES.items():
        if run.get(src, None) is not None:
            if run.get(f"{src}.unit", None) != unit:
                raise run.refuse(f"{src}.unit", got(run.get(f"{src}.unit", None)), unit)
            out[f"{src}.avg"] = (metric, 1.0)
    return out


def _workload(run: Run, n: int) -> Workload:
    """What the run sent (see the module's docstring), ``n`` requests."""
    if run.get("input_config.phases", None) is not None:
        return _phase(run, n)
    base = "input_config.loadgen" if run.get("input_config.loadgen", None) is not None else \
        "input_config"
    clients, rate = (run.get(f"{base}.{k}", None) for k in ("concurrency", "request_rate"))
    if rate is None and clients is None:
        raise run.refuse(base, "states no load (concurrency or request_rate)", ALLOWED)
    if rate is None:
        return closed_loop(run.count(f"{base}.concurrency"), n)
    _no_cap(run, f"{base}.concurrency", rate)
    mode = next((f"{base}.{k}" for k in ("arrival_pattern", "request_rate_mode")
                 if run.get(f"{base}.{k}", None) is not None), None)
    # GenAI-Perf's arrivals are perf_analyzer's default request distribution: constant.
    pattern = "constant" if base == "input_config" else run.get(mode) if mode else "poisson"
    if pattern not in PATTERNS:
        raise run.refuse(mode, got(pattern), ", ".join(PATTERNS))
    return _open(run, f"{base}.request_rate", pattern, f"{base}.arrival_smoothness", n)


def _phase(run: Run, n: int) -> Workload:
    """The load of AIPerf's one measured phase (warm-ups are ``exclude_from_results``)."""
    phases = run.get("input_config.phases")
    measured_ = [i for i, p in enumerate(phases if isinstance(phases, list) else [])
                 if isinstance(p, dict) and not p.get("exclude_from_results")]
    if len(measured_) != 1:
        raise run.refuse("input_config.phases", f"{len(measured_)} measured phases",
                         "one, besides warm-ups (exclude_from_results)")
    key = f"input_config.phases.{measured_[0]}"
    kind = run.get(f"{key}.type", None)
    if kind == "concurrency":
        return closed_loop(run.count(f"{key}.concurrency"), n)
    if kind not in PATTERNS:
        raise run.refuse(f"{key}.type", "missing" if kind is None else got(kind),
                         "concurrency, " + ", ".join(PATTERNS))
    _no_cap(run, f"{key}.concurrency", run.get(f"{key}.rate", None))
    return _open(run, f"{key}.rate", kind, f"{key}.smoothness", n)


def _no_cap(run: Run, key: str, rate) -> None:
    if run.get(key, None) is not None:
        raise run.refuse(key, f"{show(run.get(key))} clients held to a rate of {show(rate)} "
                         "besides, which no case replays", "clients or a rate, not both")


def _open(run: Run, rate_key: str, pattern: str, shape: str, n: int) -> Workload:
    rate = run.number(rate_key)
    lines, label = open_loop(run, rate, pattern, shape)
    return Workload(lines + [f"num_requests = {n}"],
                    f"open loop: {label} arrivals at {rate:g} requests/s, {n} requests")
