"""A vLLM serving benchmark's result file (``vllm bench serve --save-result``, JSON) as measured
values of the results' metrics, for a validation case's ``[measured] vllm_bench = "FILE"``.

The file's latencies are milliseconds, means, medians and ``p<N>`` percentiles over the
completed requests (vLLM's ``benchmarks/serve.py``, ``calculate_metrics``): TTFT, TPOT (per
request, excluding the first token), ITL (every gap) and E2E latency (``e2el``, written when the
run asked for it); ``output_throughput`` is output tokens per second of the run. A figure no
real server could have measured (``plausible``) is refused, naming its field."""
from __future__ import annotations

import json
import math
from pathlib import Path

from sweep.errors import clip, one_line, show
from sweep.files import MAX_TEXT_BYTES, FileRefused, read_text
from sweep.study.metric_names import METRICS

_STATS = {"mean": "mean", "median": "p50", "p90": "p90", "p95": "p95", "p99": "p99"}


def fields(e2e: str) -> dict:
    """A serving benchmark's statistics and the metrics they measure: its name -> (our metric,
    its units in one of ours), its end-to-end latency named ``e2e`` (vLLM: ``e2el_ms``; SGLang's
    ``bench_serving``: ``e2e_latency_ms``)."""
    quantities = (("ttft_ms", "ttft_s", 1000.0), ("tpot_ms", "tpot_ms", 1.0),
                  ("itl_ms", "itl_ms", 1.0), (e2e, "e2e_s", 1000.0))
    named = {f"{stat}_{name}": (f"{ours}_{unit}", per)
             for stat, ours in _STATS.items() for name, unit, per in quantities
             if f"{ours}_{unit}" in METRICS}
    return {**named, "output_throughput": ("tokens_per_s", 1.0)}


#: The vLLM file's statistics and the metrics they measure.
FIELDS = fields("e2el_ms")
#: What every such file holds (vLLM writes them whatever the percentiles asked for).
REQUIRED = ("request_rate", "mean_ttft_ms", "mean_tpot_ms")


#: A latency a real server measured: above 0 (a served token takes time; a 0 is a figure left
#: unmeasured, and the relative error divides by it) and at most one day. Benchmarks run for
#: minutes to hours, so a request slower than a day is a unit mix-up or a corrupt file.
DAY_S = 86_400.0
#: Output tokens (or completed requests, each at least one token) per second: above 0 and at
#: most 1e9. Every output token costs at least 2 FLOPs per active parameter, so 1e9 tokens/s of
#: even a 1B-parameter model is 2e18 FLOP/s, about a thousand of today's fastest GPUs at their
#: 8-bit peak: beyond any one benchmarked server. (``validate`` bounds it by the case's GPUs.)
MAX_RATE = 1e9
RATES = ("tokens_per_s", "requests_per_s", "goodput_rps")
#: Shares of requests, prefills or time: in [0, 1].
SHARES = ("utilization", "slo_attainment", "prefix_hit_rate")
#: Anything else (counts, gigabytes, dollars, a spread): at least 0 and at most 1e15, more
#: requests, tokens or passes than any benchmark counts.
MAX_OTHER = 1e15


def plausible(metric: str, value: float) -> str | None:
    """Why ``value`` cannot be what a real server measured of the numeric ``metric`` (one
    short phrase), or None when it can."""
    if metric.split("_")[1:2] in (["ttft"], ["tpot"], ["itl"], ["e2e"]):
        unit = "ms" if metric.endswith("_ms") else "s"
        high = DAY_S * (1000.0 if unit == "ms" else 1.0)
        positive, allowed = True, f"a latency above 0 and at most one day ({high:g} {unit})"
    elif metric in RATES:
        positive, high, allowed = True, MAX_RATE, f"a rate above 0 and at most {MAX_RATE:g}/s"
    elif metric in SHARES:
        positive, high, allowed = False, 1.0, "a share in [0, 1]"
    else:
        positive, high, allowed = False, MAX_OTHER, f"a number in [0, {MAX_OTHER:g}]"
    ok = math.isfinite(value) and (value > 0 if positive else value >= 0) and value <= high
    return None if ok else f"not {allowed}"


class BenchRefused(ValueError):
    """The file cannot give measured values: ``reason`` says why, in one line."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _shown(v) -> str:
    """A field's value as a refusal shows it: short, an integer of many digits by its length."""
    return show(v) if isinstance(v, int) and not isinstance(v, bool) else clip(repr(v), 30)


def _number(doc: dict, key: str) -> float:
    """The field ``key``, a finite number above 0 (a 400-digit integer is beyond float)."""
    v = doc[key]
    try:
        x = math.nan if isinstance(v, bool) or not isinstance(v, (int, float)) else float(v)
    except OverflowError:
        x = math.inf
    if not (math.isfinite(x) and x > 0):
        raise BenchRefused(f"field {key} is {_shown(v)}, not a finite number > 0")
    return x


def _measured(doc: dict, key: str, metric: str, per: float) -> float:
    """The field ``key`` as a measured value of ``metric`` (``per`` of its units in one of
    ``metric``'s), refused where no real server could have measured it."""
    value = _number(doc, key) / per
    why = plausible(metric, value)
    if why:
        raise BenchRefused(f"field {key} is {_shown(doc[key])}: {why}")
    return value


def read(path: Path, arrival_rate: float | None, closed: bool = False,
         concurrency: int | None = None) -> dict:
    """Metric -> measured value from the file at ``path``, for a case of ``arrival_rate`` (an
    open loop) or, ``closed``, of ``concurrency`` clients (``arrival = "closed"``). The file
    must be the same kind of run: ``max_concurrency`` with ``request_rate = inf`` is a closed
    loop of that many clients; no ``max_concurrency`` and a finite rate, an open loop at that
    rate. Anything else (every request at once, a closed loop held to a rate besides) no case
    replays, and is refused."""
    try:
        doc = json.loads(read_text(path, "a vLLM benchmark result (JSON)", MAX_TEXT_BYTES))
    except FileRefused as exc:
        raise BenchRefused(exc.reason) from None
    except ValueError as exc:
        raise BenchRefused(f"not JSON: {clip(one_line(exc), 80)}") from None
    except RecursionError:
        raise BenchRefused("arrays or objects nested too deeply (vLLM writes a flat object)") \
            from None
    if not isinstance(doc, dict):
        raise BenchRefused("not a JSON object")
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise BenchRefused(f"field {missing[0]} is missing (--save-result writes "
                           f"{', '.join(REQUIRED)})")
    clients, rate = doc.get("max_concurrency"), doc.get("request_rate")
    at_once = isinstance(rate, str) and rate.lower() == "inf" or rate == math.inf
    if clients is not None:
        _closed(doc, at_once, closed, concurrency)
    elif closed:
        raise BenchRefused("no max_concurrency: an open-loop run, which a closed-loop case "
                           "(arrival = \"closed\") cannot replay")
    elif at_once:
        raise BenchRefused("request_rate = inf: every request at once, which an open-loop case "
                           "cannot replay")
    elif rate is not None:  # null: a rate the file does not say
        rate = _number(doc, "request_rate")
        if arrival_rate is not None and abs(rate - arrival_rate) > 0.01 * arrival_rate:
            raise BenchRefused(f"request_rate = {rate:g}, but workload.arrival_rate = "
                               f"{arrival_rate:g}")
    return {metric: _measured(doc, key, metric, per) for key, (metric, per) in FIELDS.items()
            if key in doc}


def _closed(doc: dict, at_once: bool, closed: bool, concurrency: int | None) -> None:
    """Refuse a closed-loop file (``max_concurrency`` set) that the case does not replay (a
    case's ``concurrency`` of None: not stated, which its own key refuses)."""
    clients = _number(doc, "max_concurrency")
    if not closed:
        raise BenchRefused(f"max_concurrency = {clients:g}: a closed loop, which an open-loop "
                           f"case cannot replay (a case with arrival = \"closed\" and "
                           f"concurrency = {clients:g} can)")
    if not at_once:
        raise BenchRefused(f"request_rate = {clip(repr(doc['request_rate']), 20)} with "
                           "max_concurrency: clients held to a rate besides, which no case "
                           "replays (closed loops send at request_rate = inf)")
    if concurrency is not None and clients != concurrency:
        raise BenchRefused(f"max_concurrency = {clients:g}, but workload.concurrency = "
                           f"{concurrency}")
