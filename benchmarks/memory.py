"""Peak memory against the chunk size (simulations in flight per call) on the Serve a Model study.

    python benchmarks/memory.py                   # chunks 36 to 2304, and the default
    python benchmarks/memory.py --chunks 64 256

Each size runs in a fresh process (a process's peak resident memory only grows), with enough
seeds that every call in flight is full (calls in flight x chunk simulations); a size beyond
the memory budget is refused before anything runs, as ``sweep run`` refuses it. Prints the peak
host memory (RSS), the peak device memory where the device reports it, the runner's own estimate
of what the calls hold (``memory.study_bytes``, which sizes the default chunk to the
budget), and the growth per simulation in flight fitted over the sizes. Run by hand; never a
timed test.
"""
from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np

from sweep.execution.budget import memory_budget_bytes, study_bytes
from sweep.execution.planning import SMALL_SEATS, calls_in_flight, plan_chunks
from sweep.execution.runner import run_study
from sweep.study.config import load_study

BRIEF = Path(__file__).resolve().parents[1] / "configs" / "serve_a_model.toml"


def one(chunk: int | None, seeds: int) -> dict:
    """Run the brief once in this process; the figures as a dict."""
    study = load_study(BRIEF, seeds=seeds)
    plan = plan_chunks(study, chunk)
    per_lane, per_sim = study_bytes(study)
    tiers = {t for p in study.points for t in (p.design.seats, min(p.design.seats, SMALL_SEATS))}
    lanes = plan.chunk if chunk else max(plan.lanes(t) for t in tiers)
    estimate = calls_in_flight() * (lanes * per_lane + plan.per_call() * per_sim)
    res = run_study(study, chunk_size=chunk)
    stats = getattr(jax.devices()[0], "memory_stats", lambda: None)() or {}
    return dict(lanes=lanes, simulations=res.simulations, requests=max(p.workload.capacity for p in study.points),
                rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
                device_gb=stats.get("peak_bytes_in_use", 0) / 1e9 or None,
                estimate_gb=estimate / 1e9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, nargs="+", default=[36, 144, 576, 1024, 2304])
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--seeds", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.seeds is not None:  # a child: one size, one JSON line
        print(json.dumps(one(args.one or None, args.seeds)), flush=True)
        return
    calls = calls_in_flight()
    designs = len(load_study(BRIEF, seeds=1).points)
    print(f"device: {jax.devices()[0].platform} ({jax.devices()[0].device_kind}), jax "
          f"{jax.__version__}; calls in flight: {calls}; memory budget "
          f"{memory_budget_bytes() / 1e9:.1f} GB")
    print(f"{'chunk':>6} {'lanes':>6} {'simulations':>11} {'requests':>8} {'peak RSS':>9} "
          f"{'device':>8} {'estimate':>9}")
    rows = []
    for chunk in [*args.chunks, 0]:
        seeds = max(1, math.ceil(calls * chunk / designs)) if chunk else 16
        cmd = [sys.executable, __file__, "--one", str(chunk), "--seeds", str(seeds)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:  # a chunk beyond the budget is refused before anything runs
            print(f"{chunk:>6} {proc.stderr.strip().splitlines()[-1]}")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        dev = f"{r['device_gb']:.2f} GB" if r["device_gb"] else "n/a"
        print(f"{chunk or 'default':>6} {r['lanes']:>6} {r['simulations']:>11} {r['requests']:>8} "
              f"{r['rss_gb']:>6.2f} GB {dev:>8} {r['estimate_gb']:>6.2f} GB", flush=True)
        if chunk:
            rows.append((chunk, r["rss_gb"], r["estimate_gb"]))
    if len(rows) < 2:
        return
    c, rss, est = (np.array(x, float) for x in zip(*rows))
    slope, base = np.polyfit(c, rss, 1)
    fit = np.polyval([slope, base], c)
    print(f"peak RSS ~ {base:.2f} GB + {slope * 1e6:.1f} kB x chunk (largest deviation from the "
          f"line {np.max(np.abs(rss - fit)) * 1e3:.0f} MB); the estimate grows "
          f"{np.polyfit(c, est, 1)[0] * 1e6:.1f} kB x chunk")


if __name__ == "__main__":
    main()
