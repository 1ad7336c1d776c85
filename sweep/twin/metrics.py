"""The twin's metrics (docs/model.md "Outputs and metrics"), with exact percentiles where the
engine reads them from histograms."""
from __future__ import annotations

import math

import numpy as np

from sweep.engine.params import EngineParams
from sweep.twin.state import RefResult
from sweep.study.workload import Requests


def _percentile(x: np.ndarray, q: float, method: str = "linear") -> float:
    return float(np.percentile(x, q, method=method)) if x.size else math.nan


def _safe_div(a: float, b: float) -> float:
    if b == 0:
        return math.nan if a == 0 else math.copysign(math.inf, a)
    return a / b


def _spread(name: str, x: np.ndarray, qs: tuple[int, ...]) -> dict:
    """The mean and the percentiles ``qs`` of ``x``, keyed as the engine's metrics are."""
    return {f"mean_{name}": float(np.mean(x)) if x.size else math.nan,
            **{f"p{q}_{name}": _percentile(x, q) for q in qs}}


def _unstable(arrival: np.ndarray, first_token: np.ndarray, real: np.ndarray, n: int,
              skip: int) -> bool:
    """Whether the queue is still growing: the requests waiting (arrived, no first token yet)
    at the arrivals of the measured requests ``n // 2``, three quarters in and last (of ``n``,
    after ``skip`` warm-up ones) each exceed the count before by 5% of the requests between
    them, and one more."""
    if n == 0:
        return False
    got_first = np.where(np.isfinite(first_token), first_token, np.inf)

    def waiting(i):
        tau = arrival[skip + i]
        return int(np.count_nonzero(real & (arrival <= tau) & (got_first > tau)))
    half = n // 2
    three = half + (n - half) // 2
    q_half, q_three, q_last = waiting(half), waiting(three), waiting(n - 1)
    return bool(q_three > q_half + 0.05 * (three - half) + 1
                and q_last > q_three + 0.05 * (n - 1 - three) + 1)


def summarize_reference(res: RefResult, req: Requests, params: EngineParams) -> dict:
    """The metrics of docs/model.md "Outputs and metrics", with exact percentiles: over the
    measured requests (a closed loop's warm-up ones excluded), rates over the measured window."""
    m = params.summary
    arrival = np.asarray(req.arrival if res.arrival is None else res.arrival,
                         dtype=np.float64).reshape(-1)
    output = np.asarray(req.output).astype(np.int64).reshape(-1)
    warm = int(np.asarray(req.warmup))
    real = np.isfinite(arrival) & (np.arange(arrival.size) >= warm)
    n = int(np.count_nonzero(real))
    t_stop = res.t_stop
    span = t_stop - (float(arrival[warm]) if warm > 0 else 0.0)
    done = np.isfinite(res.finish) & real

    # Censored at t_stop: TTFT and end-to-end latency count t_stop - a_i (literally; not clipped).
    long = done & (output > 1)
    # Every request's TPOT (0 where it has none to miss: the per-request limit's view).
    tpot_all_ms = np.where(long, (res.finish - res.first_token) / (output - 1).clip(min=1) * 1e3,
                           0.0)
    tpot_ms = tpot_all_ms[long]
    mean_tpot_ms = float(np.mean(tpot_ms)) if tpot_ms.size else math.nan
    # Outside the passes: the request overhead, its prompt tokens' (those outside its
    # cacheable path), and the lag of so many mean TPOTs.
    prompt = np.asarray(req.prompt).astype(np.int64).reshape(-1)
    path = np.asarray(req.path).reshape(prompt.shape[0], -1)
    ends = np.asarray(req.node_end).astype(np.int64).reshape(-1)
    path_end = np.where(path >= 0, ends[np.maximum(path, 0)], 0).max(axis=1)
    own = prompt - (path_end if bool(params.prefix_cache) else 0)
    admitted = real & np.isfinite(res.first_token)
    outside = (float(m.request_overhead_s) + float(m.prompt_overhead_s) * own
               + float(m.request_lag_passes) * (mean_tpot_ms * 1e-3 if tpot_ms.size else 0.0))
    first = np.where(np.isfinite(res.first_token), res.first_token, t_stop)
    ttft = (first - arrival + outside)[real]
    end = np.where(np.isfinite(res.finish), res.finish, t_stop)
    e2e = (end - arrival + outside)[real]
    itl_ms = res.itl_gaps * 1e3
    attained = int(np.count_nonzero(
        done[real] & (ttft <= float(m.slo_ttft_s))
        & (tpot_all_ms[real] <= float(m.slo_tpot_s) * 1e3)))

    tokens = int(res.generated[real].sum()) if warm > 0 else int(res.tokens)
    cost = (float(m.gpus) * float(m.price_per_gpu_s) * span / tokens * 1e6
            if tokens > 0 else math.inf)
    return {
        **_spread("ttft_s", ttft, (50, 90, 95, 99)),
        **_spread("tpot_ms", tpot_ms, (50, 95, 99)),
        "p95_itl_ms": _percentile(itl_ms, 95, "inverted_cdf"),  # nearest rank, as the engine
        "p99_itl_ms": _percentile(itl_ms, 99, "inverted_cdf"),
        **_spread("e2e_s", e2e, (50, 90, 95, 99)),
        "tokens_per_s": _safe_div(float(tokens), span),
        "completed": int(np.count_nonzero(done)),
        "unfinished": int(n - np.count_nonzero(done)),
        "preemptions": int(res.preemptions),
        "peak_kv_gb": float(res.peak_blocks * float(m.block_bytes) / 1e9),
        "max_queue": int(res.max_queue),
        "cost_per_mtok": cost,
        # A closed loop's queue holds at most its clients: it cannot grow without bound.
        "unstable": (int(np.asarray(req.clients)) == 0
                     and _unstable(arrival, res.first_token, real, n, warm)),
        "truncated": bool(res.truncated),
        "mean_in_system": _safe_div(res.area_in_system, t_stop),
        "prefix_hit_rate": (res.prefix_hits / res.prefix_lookups if res.prefix_lookups
                            else math.nan),
        "prefill_tokens_saved": int(res.prefix_saved),
        "prefix_token_hit_rate": (int(res.cached_tokens[admitted].sum())
                                  / max(int(prompt[admitted].sum()), 1)),
        "slo_attainment": attained / n if n else math.nan,
        "goodput_rps": _safe_div(float(attained), span),
        "requests_per_s": _safe_div(float(np.count_nonzero(done)), span),
        "replica_load_cv": _load_cv(res, arrival),
    }


def _load_cv(res: RefResult, arrival: np.ndarray) -> float:
    """The coefficient of variation (population) of the requests each server behind the
    router was sent (of those that arrived); 0 for one server."""
    if res.replica is None or res.servers < 2:
        return 0.0
    real = np.isfinite(arrival)
    counts = [sum(1 for i in np.flatnonzero(real) if res.replica[i] == j)
              for j in range(res.servers)]
    mean = sum(counts) / len(counts)
    return math.sqrt(sum((c - mean) ** 2 for c in counts) / len(counts)) / mean if mean else 0.0
