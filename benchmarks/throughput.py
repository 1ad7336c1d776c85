"""Throughput of the scan engine against the event-driven twin, on seed 001's brief.

    python benchmarks/throughput.py                 # the brief: 72 designs x 16 seeds
    python benchmarks/throughput.py --scaling       # also: simulations x requests scaling table
    python benchmarks/throughput.py --seeds 4 --twin-sims 8

Prints compile time, steady-state simulations/s and simulated requests/s, peak memory, the same
workload through the twin, and the ratio of the two measured in this run. Run by hand; never a
timed test.
"""
from __future__ import annotations

import argparse
import itertools
import resource
import time

import jax
import numpy as np

from sweep.api import run_batch, stack
from sweep.design import Design
from sweep.reference import simulate_reference
from sweep.workload import Lengths, Workload, sample_args, sample_batch

BRIEF = Workload()  # 16 req/s x 60 s, exponential 1024/256 tokens, 60 s drain


def brief_designs() -> list[Design]:
    return [Design(batching=b, kv_cache=k, gpus=g, weight_bits=w, draft_tokens=d)
            for b, k, g, w, d in itertools.product(["static", "continuous"],
                                                   ["contiguous", "paged"], [1, 2],
                                                   [16, 8, 4], [0, 2, 4])]


def batch(designs, workload, seeds, n_req=None):
    """Stacked engine inputs for every design x seed (seed-minor), and their requests."""
    pairs = [(d, s) for d in designs for s in seeds]
    n_req = n_req or workload.capacity
    reqs = sample_batch(n_req, stack([sample_args(workload, s, d.context_limit, n_req)
                                      for d, s in pairs]))
    params = stack([d.params() for d, _ in pairs])
    return params, reqs, max(d.seats for d in designs), max(d.draft_tokens for d in designs)


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    jax.block_until_ready(out)
    return out, time.perf_counter() - t0


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def engine_run(params, reqs, seats, k_max):
    return run_batch(params, reqs, seats, k_max)


def brief(seeds: int, twin_sims: int) -> None:
    designs = brief_designs()
    params, reqs, seats, k_max = batch(designs, BRIEF, list(range(seeds)))
    sims = len(designs) * seeds
    n_requests = int(np.isfinite(np.asarray(reqs.arrival)).sum())
    (out, _), first = timed(engine_run, params, reqs, seats, k_max)
    (out, _), steady = timed(engine_run, params, reqs, seats, k_max)
    print(f"device: {jax.devices()[0].platform} x{len(jax.devices())}, jax {jax.__version__}")
    print(f"brief: {len(designs)} designs x {seeds} seeds = {sims} simulations, "
          f"{n_requests:,} requests, {int(np.asarray(out.passes).sum()):,} passes, "
          f"{int(np.asarray(out.steps).sum()):,} steps")
    print(f"  first call (compile + run): {first:.2f} s;  steady state: {steady:.2f} s")
    print(f"  compile ~ {max(first - steady, 0):.2f} s;  {sims / steady:,.1f} simulations/s;  "
          f"{n_requests / steady:,.0f} requests/s;  peak RSS {peak_rss_gb():.2f} GB")

    # The twin on a sample of the same simulations (it is far slower).
    pick = np.linspace(0, sims - 1, min(twin_sims, sims)).astype(int)
    t0 = time.perf_counter()
    for i in pick:
        simulate_reference(jax.tree_util.tree_map(lambda x: np.asarray(x)[i], params),
                           jax.tree_util.tree_map(lambda x: np.asarray(x)[i], reqs))
    twin = (time.perf_counter() - t0) / len(pick)
    engine = steady / sims
    print(f"  twin: {twin:.3f} s per simulation ({len(pick)} sampled); engine "
          f"{engine * 1e3:.2f} ms per simulation: {twin / engine:,.1f}x faster")


def scaling() -> None:
    print("\nscaling (continuous, paged, 8-bit, k=2; steady state after compile):")
    print(f"{'sims':>7} {'requests':>9} {'seconds':>9} {'sims/s':>10} {'requests/s':>12}")
    design = Design(weight_bits=8, draft_tokens=2)
    for n_req, counts in [(100, [1, 16, 256, 4096, 16384]), (1000, [1, 16, 256, 2048]),
                          (10000, [1, 16, 128])]:
        wl = Workload(arrival_rate=16.0, duration_s=None, num_requests=n_req, drain_s=None,
                      prompt_tokens=Lengths("exponential", 1024.0),
                      output_tokens=Lengths("exponential", 256.0))
        for count in counts:
            params, reqs, seats, k_max = batch([design], wl, list(range(count)))
            timed(engine_run, params, reqs, seats, k_max)
            _, sec = timed(engine_run, params, reqs, seats, k_max)
            print(f"{count:>7} {n_req:>9} {sec:>9.2f} {count / sec:>10,.1f} "
                  f"{count * n_req / sec:>12,.0f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--twin-sims", type=int, default=12)
    ap.add_argument("--scaling", action="store_true")
    args = ap.parse_args()
    brief(args.seeds, args.twin_sims)
    if args.scaling:
        scaling()
