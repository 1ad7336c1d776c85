"""Fit the H100's default roofline factors on the fit cases, and the A100's from its measured
ratio to the H100 (docs/validation.md says how, and why).

    python validation/fit.py [--duration S] [--seeds N]

1. Every fit case (``validation/fit/*.toml``: the ``general`` runs, both stages, of the three
   models) is simulated over a grid of ``compute_efficiency`` x ``bandwidth_efficiency`` x
   ``overhead_ms`` x ``seq_overhead_us``: one vectorised sweep per case, on the first
   ``--duration`` seconds of its stage (its latencies settle within seconds), with no request
   overhead or lag.
2. The grid point with the least mean squared relative error of mean, p50 and p95 end-to-end
   latency over the fit cases is kept.
3. ``request_overhead_ms`` and ``request_lag_passes``, which add ``overhead + lag x mean
   TPOT`` to every request's TTFT and end-to-end latency alike, are the non-negative values
   that minimise the squared relative error of mean, p50 and p95 TTFT at that point (linear
   least squares).
4. The A100's factors are the H100's scaled by the ratio of the A100's to the H100's measured
   pass times in the Splitwise data (``validation/data/splitwise/perf_model.csv``), against the
   ratio of their datasheet peaks: compute from prefills of 1,024 tokens or more, bandwidth from
   decode steps of batches up to 16. Its overheads are the H100's (they are host-side).

It prints the fitted numbers; ``sweep/hardware.py`` carries them. Nothing of the holdout cases
is read.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd

from sweep.config import load_study
from sweep.hardware import get_gpu
from sweep.runner import run_study

HERE = Path(__file__).parent
GRID = {"compute_efficiency": [0.8, 0.9, 1.0],
        "bandwidth_efficiency": [0.8, 0.85, 0.9, 0.95],
        "overhead_ms": [1.0, 1.5, 2.0],
        "seq_overhead_us": [0.0, 20.0]}
E2E = ("mean_e2e_s", "p50_e2e_s", "p95_e2e_s")
TTFT = ("mean_ttft_s", "p50_ttft_s", "p95_ttft_s")


def grid_study(path: Path, duration: float, seeds: int):
    """The case as a sweep over GRID, shortened to ``duration`` seconds of arrivals."""
    study = load_study(path, seeds=seeds)
    (point,) = study.points
    workload = dataclasses.replace(point.workload, duration_s=min(duration,
                                                                  point.workload.duration_s))
    points = []
    for values in itertools.product(*GRID.values()):
        factors = dict(zip(GRID, values), request_overhead_ms=0.0, request_lag_passes=0.0)
        design = point.design.replace(**factors)
        points.append(dataclasses.replace(point, design=design, workload=workload,
                                          columns={**point.columns, **factors}))
    return dataclasses.replace(study, points=points)


def simulate(duration: float, seeds: int) -> pd.DataFrame:
    rows = []
    for path in sorted((HERE / "fit").glob("*.toml")):
        measured = tomllib.loads(path.read_text())["measured"]
        runs = run_study(grid_study(path, duration, seeds)).runs
        mean = runs.groupby(list(GRID), sort=False)[list(E2E + TTFT) + ["mean_tpot_ms"]].mean(
        ).reset_index()
        for m in E2E + TTFT:
            mean[m + "_measured"] = measured[m]
        mean["case"] = path.stem
        rows.append(mean)
        print(f"{path.stem}: {len(runs)} simulations", file=sys.stderr)
    return pd.concat(rows, ignore_index=True)


def fit_h100(df: pd.DataFrame) -> dict:
    err = np.mean([(df[m] / df[m + "_measured"] - 1) ** 2 for m in E2E], axis=0)
    loss = df.assign(err=err).groupby(list(GRID))["err"].mean()
    best = dict(zip(GRID, loss.idxmin()))
    at = df[(df[list(GRID)] == pd.Series(best)).all(axis=1)]
    # TTFT + overhead + lag x TPOT = measured, in relative terms: rows (1, TPOT) / measured.
    meas = np.concatenate([at[m + "_measured"] for m in TTFT])
    gap = np.concatenate([at[m + "_measured"] - at[m] for m in TTFT])
    tpot = np.tile(at["mean_tpot_ms"].to_numpy() * 1e-3, len(TTFT))
    a = np.stack([np.ones_like(tpot), tpot], axis=1) / meas[:, None]
    x, *_ = np.linalg.lstsq(a, gap / meas, rcond=None)
    if (x < 0).any():  # one term alone, the better of the two
        fits = [np.where(np.arange(2) == j, np.linalg.lstsq(a[:, [j]], gap / meas, rcond=None)[0]
                         .clip(min=0)[0], 0.0) for j in range(2)]
        x = min(fits, key=lambda f: np.sum((a @ f - gap / meas) ** 2))
    best["request_overhead_ms"] = round(float(x[0]) * 1e3, 1)
    best["request_lag_passes"] = round(float(x[1]), 2)
    best["rms_e2e_error"] = float(np.sqrt(loss.min()))
    best["rms_ttft_error"] = float(np.sqrt(np.mean((a @ x - gap / meas) ** 2)))
    return best


def a100_ratios(path: Path) -> dict:
    """The A100's measured slowdown against the H100 and the datasheet's, per regime."""
    d = pd.read_csv(path)
    d = d[d.hardware.isin(["a100-80gb", "h100-80gb"])]
    keys = ["model", "tensor_parallel", "prompt_size", "batch_size"]
    g = d.groupby(keys + ["hardware"])[["prompt_time", "token_time"]].median().unstack()
    compute = g[g.index.get_level_values("prompt_size") * g.index.get_level_values(
        "batch_size") >= 1024]
    decode = g[g.index.get_level_values("batch_size") <= 16]
    a100, h100 = get_gpu("A100-80GB"), get_gpu("H100-SXM")
    measured_c = float(np.median(compute["prompt_time", "a100-80gb"]
                                 / compute["prompt_time", "h100-80gb"]))
    measured_b = float(np.median(decode["token_time", "a100-80gb"]
                                 / decode["token_time", "h100-80gb"]))
    return {"compute_slowdown": measured_c, "compute_peak_ratio": h100.tflops_16bit / a100.tflops_16bit,
            "bandwidth_slowdown": measured_b,
            "bandwidth_peak_ratio": h100.bandwidth_tbs / a100.bandwidth_tbs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=120.0,
                    help="seconds of each fit stage to simulate (default 120)")
    ap.add_argument("--seeds", type=int, default=1)
    args = ap.parse_args(argv)
    h100 = fit_h100(simulate(args.duration, args.seeds))
    print("H100-SXM:", ", ".join(f"{k} = {v:.4g}" for k, v in h100.items()))
    r = a100_ratios(HERE / "data" / "splitwise" / "perf_model.csv")
    print("A100 against H100:", ", ".join(f"{k} {v:.3f}" for k, v in r.items()))
    ce = min(1.0, h100["compute_efficiency"] * r["compute_peak_ratio"] / r["compute_slowdown"])
    be = min(1.0, h100["bandwidth_efficiency"] * r["bandwidth_peak_ratio"]
             / r["bandwidth_slowdown"])
    print(f"A100-80GB: compute_efficiency = {ce:.3f}, bandwidth_efficiency = {be:.3f}, "
          f"overhead_ms = {h100['overhead_ms']:.4g}, seq_overhead_us = "
          f"{h100['seq_overhead_us']:.4g}, request_overhead_ms = "
          f"{h100['request_overhead_ms']:.4g}, request_lag_passes = "
          f"{h100['request_lag_passes']:.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
