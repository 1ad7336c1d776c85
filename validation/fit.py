"""Fit the serving engine's and every measured GPU's default factors on the fit cases, and the
model's error on the held-out ones (docs/validation.md says how, and why).

    python validation/fit.py [--seeds N] [--duration S]

1. The factors (``sweep.workflows.serving_fit``): every case of ``validation/fit/`` (vLLM runs on
   H100, A100 and L40S) is simulated, one vectorised sweep per case and iteration, and a bounded
   Levenberg-Marquardt search fits the serving engine's terms on every GPU's cases together (the
   host's time per pass and per decoding sequence, the all-reduce's latency and share of the link)
   and each GPU's bandwidth efficiencies on its own
   (the L40S's one load does not identify its KV-read efficiency: it keeps the A100's ratio to
   the weights', as the catalog gives it and ``timing.kv_efficiency`` keeps it for a stated
   weights' efficiency). A request's time outside the
   passes (``request_overhead_ms``, ``request_lag_passes``) is solved from TTFT.
2. The model's error: every numeric case of ``validation/holdout/`` is simulated at the fitted
   factors; per GPU, the RMS of the held-out log errors of the end-to-end metrics (mean, p50,
   p90, p95 where measured: the speed) and of the TTFT metrics beyond the mean's speed error
   (the lag, relative to the lag's share of TTFT), each shrunk toward the pooled RMS of every
   GPU with the weight of ``PRIOR_CASES`` errors; and, pooled over every GPU, the RMS of each
   tail metric's (p99) log error beyond its mean's: the engine's ``tail_sd``.

It prints the numbers; ``sweep/physics/hardware.py`` carries them (``VLLM`` and ``FITS``).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from sweep.physics.engines import VLLM
from sweep.physics.hardware import CATALOG, FITS
from sweep.workflows.serving_fit import Param, fit_serving, simulate_settings
from sweep.workflows.validate import load_cases

HERE = Path(__file__).parent
#: Shared by every GPU's cases: the serving engine's.
SHARED = ("overhead_ms", "seq_overhead_us", "allreduce_latency_us",
          "allreduce_bandwidth_efficiency")
#: Each GPU's own, and the GPUs that share one (a factor their runs do not identify).
OWN = [("bandwidth_efficiency", ("H100-SXM",)), ("kv_bandwidth_efficiency", ("H100-SXM",)),
       ("bandwidth_efficiency", ("A100-80GB",)), ("kv_bandwidth_efficiency", ("A100-80GB",)),
       ("bandwidth_efficiency", ("L40S",))]
#: How many errors' worth of weight the pooled error has in a GPU's own estimate.
PRIOR_CASES = 2.0
#: The headline metrics whose held-out errors make the model's error (the tails, p99, are
#: beyond what the factors set).
HEADLINE_E2E = ("mean_e2e_s", "p50_e2e_s", "p90_e2e_s", "p95_e2e_s")
HEADLINE_TTFT = ("mean_ttft_s", "p50_ttft_s", "p90_ttft_s", "p95_ttft_s")
#: The tails, each beside the mean of its kind: their own error beyond the mean's.
TAILS = (("p99_e2e_s", "mean_e2e_s"), ("p99_ttft_s", "mean_ttft_s"))


def params() -> tuple[list[Param], dict]:
    """The fitted factors and their starting values (the catalog's)."""
    ps = [Param(k) for k in SHARED] + [Param(k, gpus) for k, gpus in OWN]
    start = {p: (VLLM.nvlink_allreduce_us if p.key == "allreduce_latency_us"
                 else getattr(VLLM, p.key) if not p.gpus
                 else getattr(CATALOG[p.gpus[0]], p.key))
             for p in ps}
    return ps, start


def held_out_errors(fit, seeds: int | None) -> tuple[dict[str, list[tuple[float, float]]],
                                                      dict[str, list[float]]]:
    """Per GPU, each held-out case's errors at the fitted factors, one per measured headline
    metric (mean, p50, p90 and p95): (log error of an end-to-end metric, log error of a TTFT
    metric beyond the speed's, over the lag's share of TTFT); and per tail metric (``TAILS``),
    each case's log error beyond its mean's."""
    cases = [c for c in load_cases([HERE / "holdout"], seeds)
             if "mean_e2e_s" in c.study.measured]
    settings = [[{p.key: v for p, v in fit.values.items() if p.applies(c)}] for c in cases]
    out: dict[str, list[tuple[float, float]]] = {}
    tails: dict[str, list[float]] = {t: [] for t, _ in TAILS}
    metrics = HEADLINE_E2E + HEADLINE_TTFT + tuple(t for t, _ in TAILS)
    for case, table in zip(cases, simulate_settings(cases, settings, seeds=seeds,
                                                    metrics=metrics)):
        row = table.iloc[0]
        lag = fit.outside["request_lag_passes"] * row["mean_tpot_ms"] * 1e-3
        extra = fit.outside["request_overhead_ms"] * 1e-3 + lag
        m = case.study.measured
        speed = math.log(m["mean_e2e_s"] / (row["mean_e2e_s"] + extra))
        for e2e, ttft in zip(HEADLINE_E2E, HEADLINE_TTFT):
            if e2e in m and ttft in m:
                share = lag / (row[ttft] + extra)
                out.setdefault(case.study.points[0].design.gpu_spec.name, []).append(
                    (math.log(m[e2e] / (row[e2e] + extra)),
                     (math.log(m[ttft] / (row[ttft] + extra)) - speed) / share))
        for tail, mean in TAILS:
            if tail in m and mean in m:
                tails[tail].append(math.log(m[tail] / (row[tail] + extra))
                                   - math.log(m[mean] / (row[mean] + extra)))
    return out, tails


def shrunk(values: list[float], pooled: float) -> float:
    """RMS of ``values``, shrunk toward ``pooled`` with the weight of ``PRIOR_CASES``."""
    return math.sqrt((sum(v * v for v in values) + PRIOR_CASES * pooled ** 2)
                     / (len(values) + PRIOR_CASES))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--duration", type=float, default=None,
                    help="seconds of each stage to simulate (default: all of it)")
    args = ap.parse_args(argv)
    ps, start = params()
    fit = fit_serving(load_cases([HERE / "fit"], args.seeds), ps, start, args.duration,
                      args.seeds)
    print(f"fit: {fit.cases} cases, {fit.iterations} iterations, RMS error "
          f"{100 * fit.rms_e2e_error:.2f}% end to end, {100 * fit.rms_ttft_error:.2f}% TTFT")
    for p, v in fit.values.items():
        print(f"  {p} = {v:.4g}")
    for k, v in fit.outside.items():
        print(f"  {k} = {v:.4g}")
    errors, tails = held_out_errors(fit, args.seeds)
    pooled = [np.sqrt(np.mean([e[j] ** 2 for es in errors.values() for e in es]))
              for j in (0, 1)]
    print(f"model error, pooled over {sum(map(len, errors.values()))} held-out errors: speed "
          f"{100 * pooled[0]:.1f}%, lag {100 * pooled[1]:.1f}%")
    for gpu in FITS:
        es = errors.get(gpu, [])
        speed, lag = (shrunk([e[j] for e in es], pooled[j]) for j in (0, 1))
        bias = 100 * float(np.mean([e[0] for e in es])) if es else math.nan
        print(f"  {gpu}: {len(es)} errors, speed_sd = {speed:.3f}, lag_sd = {lag:.3f} "
              f"(mean log error of E2E {bias:+.1f}%)")
    for tail, es in tails.items():
        print(f"  tail {tail}: {len(es)} errors, sd = {math.sqrt(np.mean(np.square(es))):.3f} "
              f"(mean log error beyond the mean's {100 * float(np.mean(es)):+.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
