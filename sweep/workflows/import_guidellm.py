"""``sweep import guidellm``: GuideLLM's report (``guidellm benchmark --output-path FILE.json``),
one case per benchmark in it. Releases 0.2 and 0.3 keep a benchmark's strategy in
``args.strategy`` and its request counts in ``request_totals``; 0.4 on in ``config.strategy``
and ``metrics.request_totals``. A statistic is a distribution over the successful requests
(``successful``: ``mean``, ``median``, ``percentiles.p90`` ...; zeros with ``count`` 0 where no
request had it): TTFT in ms, request latency in s, and inter-token latency, a request's
(last token - first) / (output tokens - 1), which is our TPOT, in ms (GuideLLM counts a request
once a gap, so long answers weigh more in its mean than in ours). The strategy is the load:
``synchronous`` one client, ``concurrent`` ``streams`` clients, ``throughput`` at most
``max_concurrency`` at once (null: GuideLLM's default cap, 512) (closed loops), ``constant`` or
``poisson`` arrivals at ``rate`` (open loops; their ``max_concurrency``, a cap on workers, is
not the load)."""
from __future__ import annotations

from pathlib import Path

from sweep.errors import got
from sweep.study.metric_names import METRICS
from sweep.workflows.import_fields import Found, Run, Workload, closed_loop, fixed_lengths, \
    load, measured, open_loop, trace_rows

ALLOWED = "GuideLLM's JSON report (guidellm benchmark --output-path FILE.json), 0.2 or later"
STRATEGIES = "synchronous, concurrent, throughput, constant or poisson"
#: GuideLLM's cap on requests in flight (``settings.max_concurrency``) where a strategy has none.
DEFAULT_CAP = 512
_QUANTITIES = (("time_to_first_token_ms", "ttft_s", 1000.0), ("inter_token_latency_ms",
               "tpot_ms", 1.0), ("request_latency", "e2e_s", 1.0))
_STATS = (("mean", "mean"), ("median", "p50"), ("percentiles.p90", "p90"),
          ("percentiles.p95", "p95"), ("percentiles.p99", "p99"))
#: A benchmark's statistics (dotted, under ``metrics``) -> (our metric, its units in ours).
STATS = {**{f"metrics.{src}.successful.{stat}": (f"{ours}_{unit}", per)
            for src, unit, per in _QUANTITIES for stat, ours in _STATS
            if f"{ours}_{unit}" in METRICS},
         "metrics.output_tokens_per_second.successful.mean": ("tokens_per_s", 1.0)}


def found(path: Path) -> list[Found]:
    """Every benchmark of the report at ``path``; its fields are named from the report's top
    (``benchmarks.0.metrics...``)."""
    report = load(path, ALLOWED)
    run = Run(path, None, report)
    benchmarks = report.get("benchmarks")
    if not (isinstance(benchmarks, list) and benchmarks):
        raise run.refuse("benchmarks", "missing" if benchmarks is None else
                         f"{got(benchmarks)}, not a list of benchmarks", ALLOWED)
    return [_benchmark(run, i, len(benchmarks) > 1) for i in range(len(benchmarks))]


def _benchmark(report: Run, i: int, several: bool) -> Found:
    b = f"benchmarks.{i}"
    if not isinstance(report.get(f"{b}.metrics", None), dict):
        raise report.refuse(f"{b}.metrics", "missing (a GuideLLM 0.1 report keeps none)",
                            ALLOWED)
    run = Run(report.path, None, report.get(b), f"{b}.")
    totals = "metrics.request_totals" if run.get("metrics.request_totals", None) else \
        "request_totals"
    n = run.count(f"{totals}.successful")
    wl = _workload(run, n)
    kind = run.get("config.strategy.type_", None) or run.get("args.strategy.type_", None)
    wl.what += f" ({b}: GuideLLM's {kind} strategy)"
    stats = {k: v for k, v in STATS.items()
             if run.get(k.split(".successful.")[0] + ".successful.count", None) != 0}
    values, names = measured(run, stats)
    models = [(f"{b}.config.backend.model", run.get("config.backend.model", None)),
              (f"{b}.worker.backend_model", run.get("worker.backend_model", None)),
              ("args.model", report.get("args.model", None))]
    return Found(report, wl, values, {m: f"{b}.{k}" for m, k in names.items()}, models,
                 i + 1 if several else None)


def _workload(run: Run, n: int) -> Workload:
    """What the benchmark's strategy sent (see the module's docstring)."""
    key = "config.strategy" if run.get("config", None) is not None else "args.strategy"
    kind = run.get(f"{key}.type_", None)
    if run.get(f"{key}.rampup_duration", None) is not None and \
            run.number(f"{key}.rampup_duration", inclusive=True) > 0:
        raise run.refuse(f"{key}.rampup_duration", f"{run.get(f'{key}.rampup_duration')} s: "
                         "clients started during the run, which no case replays", "0")
    if kind in ("synchronous", "concurrent", "throughput"):
        cap = f"{key}.max_concurrency"
        if kind == "synchronous":
            clients = 1
        elif kind == "concurrent":
            clients = run.count(f"{key}.streams")
        else:
            clients = DEFAULT_CAP if run.get(cap, None) is None else run.count(cap)
        wl = closed_loop(min(clients, n), n)
        why = "a closed loop replays no trace"
    elif kind in ("constant", "poisson"):
        rate = run.number(f"{key}.rate")
        first = run.get("requests.successful.0", {})
        start = next((f for f in ("request_start_time", "start_time") if f in first),
                     "start_time")
        rows = trace_rows(run, "requests.successful", (start, "prompt_tokens", "output_tokens"),
                          n)
        if rows is not None:
            return Workload([], f"{n} requests at their recorded send times (a trace)", rows)
        lines, label = open_loop(run, rate, kind)
        wl = Workload(lines + [f"num_requests = {n}"],
                      f"open loop: {label} arrivals at {rate:g} requests/s, {n} requests")
        why = "the report keeps not every request's send time and lengths"
    else:
        raise run.refuse(f"{key}.type_", "missing" if kind is None else got(kind), STRATEGIES)
    return fixed_lengths(run, wl, why, [
        (run.number(f"metrics.{k}.successful.mean", inclusive=True),
         f"metrics.{k}.successful.mean", f"{k} mean {run.get(f'metrics.{k}.successful.mean')}")
        for k in ("prompt_token_count", "output_token_count")])
