"""Fit H200's and B200's own factors on the closed-loop fit cases (docs/validation.md, "Closed
loop").

    python validation/fit_closed.py [--share S] [--iterations N]

The cases of ``validation/closed-loop/fit/`` of gpt-oss-120b (its MXFP4 experts run in
weight-only kernels on both GPUs) fit, per GPU, the weight-only kernels' two shares:
``dequant_bandwidth_efficiency`` and ``dequant_compute_efficiency``; everything else is as
shipped (the serving engine's host terms, the plain efficiencies transferred from the H100's
fit, so that a model without weight-only kernels runs as it did). The objective is the squared
log error of the measured mean TPOT and mean TTFT, with the time outside the passes included as
the product predicts it. A Gauss-Newton search with finite differences runs every case at the
current factors and one step of each, as one sweep per case; ``--share`` runs that share of
each case's measured requests (the warm-up in full), for speed. The Llama-3.1-8B-FP8 rows are
not fitted: their measured prefill throughput exceeds the GPU's FP8 peak under the stated
client (prompts shared or shorter than stated), so they are reported, not trusted.

It prints the factors; ``sweep/physics/hardware.py`` carries them (``FITS``).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

import numpy as np

from sweep.execution.runner import run_study
from sweep.workflows.validate import load_cases

HERE = Path(__file__).parent
GPUS = ("H200", "B200")
PARAMS = ("dequant_bandwidth_efficiency", "dequant_compute_efficiency")
STEP = 0.04  # a finite-difference step of each factor (relative)
BOUNDS = (0.05, 1.0)
METRICS = ("mean_tpot_ms", "mean_ttft_s")


def cases_of(gpu: str, share: float):
    """The fitted gpt-oss cases of ``gpu``, their measured requests cut to ``share``."""
    out = []
    for case in load_cases([HERE / "closed-loop" / "fit"], seeds=1):
        (point,) = case.study.points
        if point.design.gpu_spec.name != gpu or "llama" in case.name:
            continue
        wl = point.workload
        wl = dataclasses.replace(wl, num_requests=max(wl.concurrency,
                                                      int(wl.num_requests * share)))
        out.append(dataclasses.replace(case, study=dataclasses.replace(
            case.study, points=[dataclasses.replace(point, workload=wl)])))
    return out


def simulate(cases, settings: list[dict]) -> np.ndarray:
    """[case, setting, metric] log(predicted / measured)."""
    out = np.zeros((len(cases), len(settings), len(METRICS)))
    for i, case in enumerate(cases):
        (point,) = case.study.points
        points = [dataclasses.replace(point, design=point.design.replace(**s),
                                      columns={**point.columns, **s}) for s in settings]
        study = dataclasses.replace(case.study, points=points, axes=[], brief=[],
                                    model_error=False, max_designs=len(points))
        runs = run_study(study).runs.groupby("design", sort=True)[list(METRICS)].mean()
        for j, m in enumerate(METRICS):
            out[i, :, j] = np.log(runs[m].to_numpy() / case.study.measured[m])
    return out


def fit(gpu: str, share: float, iterations: int) -> dict:
    cases = cases_of(gpu, share)
    x = np.array([1.0, 1.0])
    for it in range(iterations):
        settings = [dict(zip(PARAMS, x))]
        for k in range(len(PARAMS)):
            y = x.copy()
            y[k] = x[k] * (1 - STEP)
            settings.append(dict(zip(PARAMS, y)))
        r = simulate(cases, settings)
        r0 = r[:, 0, :].ravel()
        jac = np.stack([(r[:, k + 1, :].ravel() - r0) / (-STEP * x[k])
                        for k in range(len(PARAMS))], axis=1)
        step = np.linalg.lstsq(jac, -r0, rcond=None)[0]
        print(f"{gpu} it {it}: x = {np.round(x, 4)}, rms log error {math.sqrt(np.mean(r0**2)):.4f}"
              f" (TPOT median {np.median(np.exp(r[:, 0, 0]) - 1):+.3f}, TTFT median "
              f"{np.median(np.exp(r[:, 0, 1]) - 1):+.3f}), step {np.round(step, 4)}", flush=True)
        new = np.clip(x + step, *BOUNDS)
        if np.max(np.abs(new - x) / x) < 0.01:
            x = new
            break
        x = new
    return dict(zip(PARAMS, x))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--share", type=float, default=1.0)
    ap.add_argument("--iterations", type=int, default=8)
    args = ap.parse_args()
    for gpu in GPUS:
        found = fit(gpu, args.share, args.iterations)
        print(gpu, {k: round(v, 3) for k, v in found.items()}, flush=True)


if __name__ == "__main__":
    main()
