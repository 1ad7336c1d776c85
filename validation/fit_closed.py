"""Fit the closed-loop factors on the closed-loop fit cases (docs/validation.md, "Closed loop").

    python validation/fit_closed.py [--share S] [--iterations N]

The cases of ``validation/closed-loop/fit/`` of gpt-oss-120b (its MXFP4 experts run in
weight-only kernels on both GPUs) fit, per GPU, the weight-only kernels' read share
(``dequant_bandwidth_efficiency``), their products' efficiency (``compute_efficiency x
dequant_compute_efficiency``, fitted as one product) and its NVLink all-reduce on such designs
(``allreduce_latency_us``, ``allreduce_growth``); for both GPUs the serving engine's time per
prompt token (``prompt_overhead_us``); and, on the H200's rows, the plain compute efficiency
(``compute_efficiency``), which the long prefills identify through the attention and dense
layers' share of them, the only runs of the serving engine that do (the B200's rows run with
it and leave it where it is). Everything else is as shipped (the engine's other host terms, the
bandwidth efficiencies transferred from the H100's fit). The objective is the squared log error
of the measured mean TPOT and mean TTFT, with the time outside the passes included as the
product predicts it. A damped Gauss-Newton search (Levenberg-Marquardt) with finite
differences, from the shipped values, runs every case at the current factors and one step of
each of its own, as one sweep per case; ``--share`` runs that share of each case's measured
requests (the warm-up in full), for speed. The Llama-3.1-8B-FP8 rows are not fitted: their
measured prefill throughput exceeds the GPU's FP8 peak under the stated client (prompts shared
or shorter than stated), so they are reported, not trusted.

It prints the factors; ``sweep/physics/hardware.py`` carries them (``FITS``, ``VLLM``).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

import numpy as np

from sweep.execution.runner import run_study
from sweep.physics.engines import VLLM
from sweep.physics.hardware import FITS, get_gpu
from sweep.workflows.validate import load_cases

HERE = Path(__file__).parent
GPUS = ("H200", "B200")
OWN = ("dequant_bandwidth_efficiency", "expert_compute_efficiency", "allreduce_latency_us",
       "allreduce_growth")
SHARED = "prompt_overhead_us"
#: The plain compute efficiency: the H200's rows fit it (their TTFTs' growth with the prompt has
#: a clear minimum); the B200's run with it, and do not move it (their errors change by under
#: 0.003 RMS between 0.53 and 0.95).
COMPUTE = ("H200", "compute_efficiency")
#: Each factor's bounds, and the least value its finite-difference step (4%) is taken of.
BOUNDS = {"compute_efficiency": (0.1, 1.0, 0.1), "dequant_bandwidth_efficiency": (0.05, 1.0, 0.05),
          "expert_compute_efficiency": (0.02, 1.0, 0.05),
          "allreduce_latency_us": (0.0, 100.0, 1.0), "allreduce_growth": (0.0, 2.0, 0.25),
          SHARED: (0.0, 100.0, 1.0)}
STEP = 0.04
DAMPING = 0.3
METRICS = ("mean_tpot_ms", "mean_ttft_s")
NAMES = [COMPUTE] + [(g, k) for g in GPUS for k in OWN] + [("*", SHARED)]


def shortened(folder: Path, share: float, keep) -> list:
    """The cases of ``folder`` that ``keep(case)``, one seed each, their measured requests cut
    to ``share`` (the warm-up in full)."""
    out = []
    for case in load_cases([folder], seeds=1):
        if not keep(case):
            continue
        (point,) = case.study.points
        wl = point.workload
        wl = dataclasses.replace(wl, num_requests=max(wl.concurrency,
                                                      int(wl.num_requests * share)))
        out.append(dataclasses.replace(case, study=dataclasses.replace(
            case.study, points=[dataclasses.replace(point, workload=wl)])))
    return out


def cases_of(share: float):
    """The fitted gpt-oss cases, their measured requests cut to ``share``."""
    return shortened(HERE / "closed-loop" / "fit", share, lambda case: (
        case.study.points[0].design.gpu_spec.name in GPUS and "llama" not in case.name))


def levers(setting: dict) -> dict:
    """A setting as the design's keys: the experts' products' efficiency is the compute
    efficiency times the weight-only share (``dequant_compute_efficiency``), fitted as their
    product so that the plain compute efficiency moves the attention and dense layers alone."""
    out = dict(setting)
    if "expert_compute_efficiency" in out:
        out["dequant_compute_efficiency"] = min(
            1.0, out.pop("expert_compute_efficiency") / out["compute_efficiency"])
    return out


def simulate(case, settings: list[dict]) -> np.ndarray:
    """[setting, metric] log(predicted / measured) of one case."""
    (point,) = case.study.points
    settings = [levers(s) for s in settings]
    points = [dataclasses.replace(point, design=point.design.replace(**s),
                                  columns={**point.columns, **s}) for s in settings]
    study = dataclasses.replace(case.study, points=points, axes=[], brief=[],
                                model_error=False, max_designs=len(points))
    runs = run_study(study).runs.groupby("design", sort=True)[list(METRICS)].mean()
    return np.stack([np.log(runs[m].to_numpy() / case.study.measured[m]) for m in METRICS], 1)


def shipped() -> np.ndarray:
    """The shipped factors: a GPU's own fit, else (its compute efficiency) what it takes."""
    def value(g: str, k: str) -> float:
        if g == "*":
            return VLLM.prompt_overhead_us
        if k == "expert_compute_efficiency":
            gpu = get_gpu(g)
            return gpu.compute_efficiency * gpu.dequant_compute_efficiency
        own = getattr(FITS[g], k)
        return own if own is not None else getattr(get_gpu(g), k)
    return np.array([value(g, k) for g, k in NAMES])


def residuals(cases, x: np.ndarray, steps: np.ndarray):
    """Every case's log errors at ``x``, and their finite-difference Jacobian."""
    rows, jac = [], []
    for case in cases:
        gpu = case.study.points[0].design.gpu_spec.name
        mine = [i for i, (g, _) in enumerate(NAMES) if g in (gpu, "*")]
        base = {"compute_efficiency": x[NAMES.index(COMPUTE)],
                **{NAMES[i][1]: x[i] for i in mine}}
        r = simulate(case, [base] + [{**base, NAMES[i][1]: x[i] + steps[i]} for i in mine])
        j = np.zeros((len(METRICS), len(NAMES)))
        for n, i in enumerate(mine):
            j[:, i] = (r[n + 1] - r[0]) / steps[i]
        rows.append(r[0])
        jac.append(j)
    return np.concatenate(rows), np.concatenate(jac)


def search(x: np.ndarray, lo: np.ndarray, hi: np.ndarray, floor: np.ndarray, evaluate,
           iterations: int, label: str = "") -> np.ndarray:
    """Levenberg-Marquardt from ``x`` within [``lo``, ``hi``]: ``evaluate(x, steps)`` gives the
    log errors at ``x`` and their Jacobian by finite steps of ``STEP`` of each value (at least
    of its ``floor``); a step that raises the error is halved back toward the best point (the
    all-reduce's latency and growth trade along a flat valley). The best point found."""
    best = (math.inf, x)
    for it in range(iterations):
        steps = STEP * np.maximum(x, floor)
        steps = np.where(x + steps > hi, -steps, steps)  # a step stays within the bounds
        r0, jac = evaluate(x, steps)
        rms = math.sqrt(np.mean(r0**2))
        print(f"{label}it {it}: x = {np.round(x, 4)}, rms log error {rms:.4f}", flush=True)
        if rms > best[0]:
            x = (best[1] + x) / 2
            continue
        best = (rms, x)
        # Damped where a factor barely moves the errors.
        jtj = jac.T @ jac
        step = np.linalg.solve(jtj + DAMPING * np.diag(np.diag(jtj) + 1e-12), -jac.T @ r0)
        new = np.clip(x + step, lo, hi)
        if np.max(np.abs(new - x) / np.maximum(np.abs(x), np.abs(steps) / STEP)) < 0.01:
            break
        x = new
    return best[1]


def fit(share: float, iterations: int) -> dict:
    """The search from the shipped values."""
    cases = cases_of(share)
    lo, hi, floor = (np.array([BOUNDS[k][b] for _, k in NAMES]) for b in (0, 1, 2))
    best = search(shipped(), lo, hi, floor, lambda x, steps: residuals(cases, x, steps),
                  iterations)
    found = {f"{g}.{k}": float(v) for (g, k), v in zip(NAMES, best)}
    for g in GPUS:
        found[f"{g}.dequant_compute_efficiency"] = (found[f"{g}.expert_compute_efficiency"]
                                                    / found["H200.compute_efficiency"])
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--share", type=float, default=1.0)
    ap.add_argument("--iterations", type=int, default=8)
    args = ap.parse_args()
    found = fit(args.share, args.iterations)
    print({k: round(v, 3) for k, v in found.items()}, flush=True)


if __name__ == "__main__":
    main()
