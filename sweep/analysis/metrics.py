"""Summary metrics of one simulation, from the engine's per-request output (pure JAX, vmappable).

Names carry units; docs/model.md defines each. Censored requests (unserved at the stop) count
with ``t_stop - arrival`` in TTFT and end-to-end latency; TPOT uses completed requests only. A
closed loop's warm-up requests count in none, and its rates are over the measured window, from
the first measured request's arrival to the stop.
"""
from __future__ import annotations

import jax.numpy as jnp

from sweep.engine import ITL_LO_S, ITL_LOG_WIDTH, EngineOutput
from sweep.engine.params import EngineParams
from sweep.physics.numerics import fixed_sum
from sweep.study.workload import Requests



def hist_percentile(hist, q):
    """Nearest-rank percentile of the inter-token histogram, in seconds (bin centre)."""
    total = hist.sum()
    rank = jnp.maximum(jnp.ceil(q / 100.0 * total), 1)
    b = jnp.argmax(jnp.cumsum(hist) >= rank)
    centre = ITL_LO_S * jnp.exp((b - 0.5) * ITL_LOG_WIDTH)
    return jnp.where(total > 0, jnp.where(b == 0, 0.0, centre), jnp.nan)


def path_tokens(r: Requests):
    """Each request's prompt tokens its cacheable path covers (0: none)."""
    return jnp.where(r.path >= 0, r.node_end[jnp.maximum(r.path, 0)], 0).max(axis=1)


def admitted_share(out: EngineOutput, r: Requests, real):
    """The share of the prompt tokens of the measured requests with a first token that their
    admission found cached (0 when none has one)."""
    admitted = real & jnp.isfinite(out.first)
    prompt = jnp.where(admitted, r.prompt, 0).sum(dtype=jnp.int64)
    cached = jnp.where(admitted, out.cached_tokens, 0).sum(dtype=jnp.int64)
    return cached / jnp.maximum(prompt, 1)


def queue_grew(arrival, first, real, warmup, n):
    """Whether the queue of waiting requests (arrived, no first token yet) is still growing: at
    the arrivals of the measured requests ``n // 2``, three quarters in and last, each count
    exceeds the one before by 5% of the requests between them, and one more. Two steps, not
    one, so a burst in the last seconds of a short run is no trend."""
    got_first = jnp.where(jnp.isfinite(first), first, jnp.inf)

    def waiting(i):
        tau = arrival[jnp.clip(warmup + i, 0, arrival.shape[0] - 1)]
        return (real & (arrival <= tau) & (got_first > tau)).sum()
    half = n // 2
    three = half + (n - half) // 2
    q_half, q_three, q_last = waiting(half), waiting(three), waiting(n - 1)
    return ((q_three > q_half + 0.05 * (three - half) + 1)
            & (q_last > q_three + 0.05 * (n - 1 - three) + 1))


def summarize(out: EngineOutput, r: Requests, p: EngineParams) -> dict:
    m = p.summary
    arrival = out.arrival
    index = jnp.arange(arrival.shape[0])
    real = jnp.isfinite(arrival) & (index >= r.warmup)
    n_real = real.sum()
    t_stop = out.t_stop
    # The measured window: from the first measured arrival (0 without a warm-up).
    warm = r.warmup > 0
    t0 = jnp.where(warm, arrival[jnp.minimum(r.warmup, arrival.shape[0] - 1)], 0.0)
    done = jnp.isfinite(out.finish) & real
    tpot_ok = done & (r.output > 1)
    tpot = jnp.where(tpot_ok, (out.finish - out.first) / jnp.maximum(r.output - 1, 1) * 1e3,
                     jnp.nan)
    mean_tpot_ms = fixed_sum(jnp.where(tpot_ok, tpot, 0.0)) / tpot_ok.sum()
    # Outside the passes: the request overhead, its prompt tokens' (those outside its
    # cacheable path), and the lag of so many mean TPOTs.
    own = r.prompt - jnp.where(p.prefix_cache, path_tokens(r), 0)
    outside = (m.request_overhead_s + m.prompt_overhead_s * own + m.request_lag_passes
               * jnp.where(tpot_ok.any(), mean_tpot_ms, 0.0) * 1e-3)
    ttft = jnp.where(jnp.isfinite(out.first), out.first, t_stop) - arrival
    ttft = jnp.where(real, jnp.maximum(ttft, 0.0) + outside, jnp.nan)
    e2e = jnp.where(real, jnp.maximum(jnp.where(done, out.finish, t_stop) - arrival, 0.0)
                    + outside, jnp.nan)
    # Per-request goodput (vLLM's benchmark): completed, within both of the brief's
    # per-request limits (a one-token answer has no TPOT to miss).
    attained = (real & done & (ttft <= m.slo_ttft_s)
                & (jnp.where(tpot_ok, tpot, 0.0) <= m.slo_tpot_s * 1e3)).sum()
    ttft_q = jnp.nanpercentile(ttft, jnp.array([50.0, 90.0, 95.0, 99.0]))
    tpot_q = jnp.nanpercentile(tpot, jnp.array([50.0, 95.0, 99.0]))
    e2e_q = jnp.nanpercentile(e2e, jnp.array([50.0, 90.0, 95.0, 99.0]))
    tokens = jnp.where(warm, fixed_sum(jnp.where(real, out.generated, 0).astype(jnp.float64)),
                       out.tokens.astype(jnp.float64))
    completed = done.sum()
    # A closed loop's queue holds at most its clients: it cannot grow without bound.
    unstable = (r.clients == 0) & (n_real > 0) & queue_grew(arrival, out.first, real,
                                                            r.warmup, n_real)
    safe_t = jnp.where(t_stop > 0, t_stop, jnp.nan)
    span = jnp.where(t_stop - t0 > 0, t_stop - t0, jnp.nan)
    return {
        "mean_ttft_s": fixed_sum(jnp.where(real, ttft, 0.0)) / n_real,
        "p50_ttft_s": ttft_q[0], "p90_ttft_s": ttft_q[1], "p95_ttft_s": ttft_q[2],
        "p99_ttft_s": ttft_q[3],
        "mean_tpot_ms": mean_tpot_ms,
        "p50_tpot_ms": tpot_q[0], "p95_tpot_ms": tpot_q[1], "p99_tpot_ms": tpot_q[2],
        "p95_itl_ms": hist_percentile(out.itl_hist, 95.0) * 1e3,
        "p99_itl_ms": hist_percentile(out.itl_hist, 99.0) * 1e3,
        "mean_e2e_s": fixed_sum(jnp.where(real, e2e, 0.0)) / n_real,
        "p50_e2e_s": e2e_q[0], "p90_e2e_s": e2e_q[1], "p95_e2e_s": e2e_q[2],
        "p99_e2e_s": e2e_q[3],
        "tokens_per_s": tokens / span,
        "requests": n_real, "completed": completed, "unfinished": n_real - completed,
        "preemptions": out.preemptions,
        "peak_kv_gb": out.peak_blocks * m.block_bytes / 1e9,
        "max_queue": out.max_queue,
        "cost_per_mtok": jnp.where(tokens > 0, m.gpus * m.price_per_gpu_s * (t_stop - t0)
                                   / tokens * 1e6, jnp.inf),
        "mean_in_system": out.area / safe_t,
        "utilization": out.busy / safe_t,
        "sim_time_s": t_stop,
        "passes": out.passes, "unstable": unstable, "truncated": out.truncated,
        # Prefills (admissions and recomputes) of sequences with a prefix that found it cached.
        "prefix_hit_rate": out.prefix_hits / jnp.where(out.prefix_lookups > 0, out.prefix_lookups,
                                                       jnp.nan),
        "prefill_tokens_saved": out.prefix_saved.astype(jnp.int64),
        "prefix_token_hit_rate": admitted_share(out, r, real),
        "slo_attainment": attained / n_real,
        "goodput_rps": attained / span,
        "requests_per_s": completed / span,
        "replica_load_cv": out.load_cv,
    }
