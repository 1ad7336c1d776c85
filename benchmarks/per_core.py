"""The brief's steady state with one process per CPU core against one process on all of them.

    python benchmarks/per_core.py              # 72 designs x 16 seeds, as many processes as cores
    python benchmarks/per_core.py --seeds 4

Each worker process is pinned to one core before JAX starts, so XLA's CPU runtime runs its kernels
on one thread (its thread pool is sized to the cores it may use), and simulates every n-th seed of
the brief. The workers compile on their own (not timed), wait for each other, then time one run
of their share; the figure is the slowest worker's time. The same process then runs the whole
brief alone on every core, as `benchmarks/throughput.py` does. Run by hand; never a timed test.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BRIEF = Path(__file__).resolve().parents[1] / "configs" / "serve_a_model.toml"


def worker(index: int, count: int, seeds: int, barrier: Path) -> None:
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[index]})  # before JAX starts
    from sweep.execution.runner import run_study
    from sweep.study.config import load_study

    study = load_study(BRIEF, seeds=seeds)
    study = dataclasses.replace(study, seeds=study.seeds[index::count])
    run_study(study)  # compiles
    (barrier / str(index)).touch()
    while len(list(barrier.iterdir())) < count:
        time.sleep(0.01)
    t0, c0 = time.perf_counter(), time.process_time()
    res = run_study(study)
    print(f"{index} {res.simulations} {time.perf_counter() - t0:.3f} "
          f"{time.process_time() - c0:.3f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--processes", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--barrier", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        worker(args.worker, args.processes, args.seeds, args.barrier)
        return

    with tempfile.TemporaryDirectory() as barrier:
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(i), "--seeds",
                                   str(args.seeds), "--processes", str(args.processes),
                                   "--barrier", barrier], stdout=subprocess.PIPE, text=True)
                 for i in range(args.processes)]
        rows = [p.communicate()[0].split() for p in procs]
    sims = sum(int(r[1]) for r in rows)
    wall = max(float(r[2]) for r in rows)
    print(f"one process per core ({args.processes}): {sims} simulations, steady state "
          f"{wall:.2f} s (slowest worker; workers {', '.join(r[2] for r in rows)} s, CPU "
          f"{sum(float(r[3]) for r in rows):.1f} s): {sims / wall:,.1f} simulations/s")

    from sweep.execution.runner import run_study
    from sweep.study.config import load_study

    study = load_study(BRIEF, seeds=args.seeds)
    run_study(study)
    t0, c0 = time.perf_counter(), time.process_time()
    res = run_study(study)
    wall1 = time.perf_counter() - t0
    print(f"one process on {len(os.sched_getaffinity(0))} cores: {res.simulations} simulations, "
          f"steady state {wall1:.2f} s (CPU {time.process_time() - c0:.1f} s): "
          f"{res.simulations / wall1:,.1f} simulations/s; per core / one process "
          f"{wall1 / wall:.2f}x")


if __name__ == "__main__":
    main()
