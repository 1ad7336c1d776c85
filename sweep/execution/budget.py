"""Memory a sweep may use and what its simulations take: the budget that sizes the calls."""
from __future__ import annotations

import os

import jax

from sweep.engine import DEFAULT_LOOKAHEAD, DEFAULT_STATIC_LOOKAHEAD, ITL_BINS
from sweep.study.config import Study

#: Memory a CPU sweep may use for simulations in flight and queued, bytes.
MEMORY_BUDGET_CPU = 4e9


def memory_budget_bytes() -> float:
    """Half the accelerator's free memory (room for XLA's temporaries), or MEMORY_BUDGET_CPU on
    a CPU."""
    stats = getattr(jax.local_devices()[0], "memory_stats", lambda: None)() or {}
    limit = stats.get("bytes_limit")
    return 0.5 * (limit - stats.get("bytes_in_use", 0)) if limit else MEMORY_BUDGET_CPU


def machine_bytes() -> float:
    """Memory one simulation may take at most: the accelerator's, or the host's available
    physical memory on a CPU."""
    stats = getattr(jax.local_devices()[0], "memory_stats", lambda: None)() or {}
    if stats.get("bytes_limit"):
        return float(stats["bytes_limit"] - stats.get("bytes_in_use", 0))
    return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def widest(study: Study) -> int:
    """Servers of the study's widest simulation in one engine call (its replicas, or its
    prefill pool's)."""
    return max(p.design.servers for p in study.points)


def study_bytes(study: Study) -> tuple[int, int]:
    """``simulation_bytes`` at the study's largest shapes; a simulation's replicas are queued
    as simulations of their own."""
    per_lane, per_sim = simulation_bytes(max(p.workload.capacity for p in study.points),
                                         max(p.design.seats for p in study.points),
                                         max(p.design.draft_tokens for p in study.points))
    return per_lane, per_sim * widest(study)


def simulation_bytes(n_requests: int, seats: int, k_max: int) -> tuple[int, int]:
    """Estimated bytes of one simulation in flight (its lane: state and the decode run's
    seats x lookahead temporaries) and of one queued simulation (its requests and results)."""
    look = max(DEFAULT_LOOKAHEAD, DEFAULT_STATIC_LOOKAHEAD)
    # Per request: first and finish times (16 bytes), arrivals in blocks (8), the admission
    # window's two lengths (8), and the lane's copy of the requests (arrival, prompt, output,
    # prefix: 20).
    lane = 52 * (n_requests + seats) + 4 * ITL_BINS + 16 * seats * look * (8 + k_max)
    queued = n_requests * (16 + 20) + 4 * ITL_BINS + 256
    return 2 * lane, queued  # x2: XLA keeps the loop carry and its update
