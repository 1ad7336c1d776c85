"""Throughput of the sweep against the event-driven twin, on the Serve a Model study.

    python benchmarks/throughput.py                      # 72 designs x 16 seeds
    python benchmarks/throughput.py --seeds 4 --twin-sims 8
    python benchmarks/throughput.py --seeds 1024 --chunk-size 16384   # a GPU-sized study
    python benchmarks/throughput.py --scaling            # simulations x requests table
    python benchmarks/throughput.py --executables DIR    # twice: the second loads the first's

Prints compile time, steady-state simulations/s and simulated requests/s, peak memory, the same
workload through the twin, and the ratio of the two measured in this run. Run by hand; never a
timed test.
"""
from __future__ import annotations

import argparse
import dataclasses
import resource
import time
from pathlib import Path

import jax
import numpy as np

from sweep.engine.params import engine_params
from sweep.twin import simulate_reference
from sweep.execution.runner import run_study
from sweep.runtime import executables
from sweep.study.config import load_study
from sweep.study.workload import sample

BRIEF = Path(__file__).resolve().parents[1] / "configs" / "serve_a_model.toml"


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def device_memory_gb() -> str:
    stats = getattr(jax.devices()[0], "memory_stats", lambda: None)()
    if not stats:
        return "n/a"
    return f"{stats.get('peak_bytes_in_use', 0) / 1e9:.2f} GB"


def brief(seeds: int, chunk: int | None, twin_sims: int) -> None:
    study = load_study(BRIEF, seeds=seeds)
    t0 = time.perf_counter()
    first = run_study(study, chunk_size=chunk)
    first_s = time.perf_counter() - t0
    cpu0 = time.process_time()
    steady = run_study(study, chunk_size=chunk)
    cpu = time.process_time() - cpu0
    sims = steady.simulations
    requests = int(steady.runs["requests"].sum())
    print(f"device: {jax.devices()[0].platform} ({jax.devices()[0].device_kind}) "
          f"x{len(jax.devices())}, jax {jax.__version__}")
    print(f"brief: {len(study.points)} designs x {seeds} seeds = {sims} simulations, "
          f"{requests:,} requests, {int(steady.runs['passes'].sum()):,} passes")
    how = (f"executables in {executables.directory()}, loaded if an earlier run wrote them"
           if executables.directory() else "compilation included")
    print(f"  end to end ({how}): {first_s:.2f} s ({sims / first_s:,.1f} sims/s)")
    print(f"  steady state: {steady.seconds:.2f} s: {sims / steady.seconds:,.1f} simulations/s, "
          f"{requests / steady.seconds:,.0f} requests/s; compile ~ "
          f"{max(first.seconds - steady.seconds, 0):.1f} s")
    print(f"  steady state CPU time (all threads): {cpu:.2f} s ({sims / cpu:,.1f} sims per CPU-s)")
    print(f"  peak host RSS {peak_rss_gb():.2f} GB; peak device memory {device_memory_gb()}")

    if twin_sims < 1:
        return
    # The twin on a sample of the same simulations (it is far slower).
    pick = np.linspace(0, len(study.points) - 1, min(twin_sims, len(study.points))).astype(int)
    t0 = time.perf_counter()
    for i in pick:
        point = study.points[i]
        simulate_reference(engine_params(point.design),
                           sample(point.workload, study.seeds[0], point.design.context_limit))
    twin = (time.perf_counter() - t0) / len(pick)
    engine = steady.seconds / sims
    print(f"  twin: {twin:.3f} s per simulation ({len(pick)} sampled designs); engine "
          f"{engine * 1e3:.2f} ms per simulation in steady state: {twin / engine:,.1f}x")


def scaling(chunk: int | None) -> None:
    """Cost growth with simulations (1 to 16,384) and requests per simulation (100 to 10,000),
    cycling through the brief's 72 designs."""
    print("\nscaling (the brief's designs; steady state after compile):")
    print(f"{'sims':>7} {'requests/sim':>13} {'seconds':>9} {'sims/s':>10} {'requests/s':>12}")
    base = BRIEF.read_text()
    for n_requests, sims_list in [(100, [1, 72, 1152, 16384]), (1000, [1, 72, 1152]),
                                  (10000, [1, 72])]:
        path = Path("/tmp") / f"servesweep_scaling_{n_requests}.toml"
        path.write_text(base.replace("duration_s = 60.0", f"duration_s = {n_requests / 16.0}"))
        for sims in sims_list:
            study = load_study(path, seeds=max(1, sims // 72))
            if sims < len(study.points):
                study = dataclasses.replace(study, points=study.points[:sims])
            run_study(study, chunk_size=chunk)
            res = run_study(study, chunk_size=chunk)
            print(f"{res.simulations:>7} {res.runs['requests'].mean():>13,.0f} "
                  f"{res.seconds:>9.2f} {res.simulations / res.seconds:>10,.1f} "
                  f"{res.runs['requests'].sum() / res.seconds:>12,.0f}", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--chunk-size", type=int, default=None, help="simulations in flight")
    ap.add_argument("--twin-sims", type=int, default=8)
    ap.add_argument("--scaling", action="store_true")
    ap.add_argument("--executables", default=None, metavar="DIR",
                    help="keep compiled executables in DIR (as `sweep run` does): a second "
                         "invocation's end to end loads them instead of compiling")
    args = ap.parse_args()
    executables.use(args.executables)
    brief(args.seeds, args.chunk_size, args.twin_sims)
    if args.scaling:
        scaling(args.chunk_size)
