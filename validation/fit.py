"""Fit the H100's default factors on the fit cases, and the A100's from its measured ratio to
the H100 (docs/validation.md says how, and why).

    python validation/fit.py [--duration S] [--seeds N]

1. The H100's: ``sweep calibrate validation/fit`` does the same (``sweep.analysis.calibrate``'s serving
   fit): every fit case (``validation/fit/*.toml``: the ``general`` runs, both stages, of the
   three models) is simulated over ``SERVING_GRID`` (compute and bandwidth efficiency, the
   per-pass and the per-sequence overhead, decode attention's efficiency), one vectorised sweep per case on the first
   ``--duration`` seconds of its stage; the grid point with the least squared relative error
   of mean, p50 and p95 end-to-end latency is kept; then ``request_overhead_ms`` and
   ``request_lag_passes`` are solved from mean, p50 and p95 TTFT by least squares.
2. The A100's: the H100's scaled by the ratio of the A100's to the H100's measured pass times
   in the Splitwise data (``validation/data/splitwise/perf_model.csv``), against the ratio of
   their datasheet peaks: compute from prefills of 1,024 tokens or more, bandwidth from decode
   steps of batches up to 16 (compute capped at the H100 search's 90%; decode attention
   scaled like compute). Its host-side terms are the H100's.

It prints the fitted numbers; ``sweep/physics/hardware.py`` carries them. Nothing of the holdout cases
is read.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from sweep.analysis.calibrate import SERVING_GRID, SERVING_KEYS, fit_serving, serving_table
from sweep.analysis.validate import load_cases
from sweep.physics.hardware import get_gpu

HERE = Path(__file__).parent


def a100_ratios(path: Path) -> dict:
    """The A100's measured slowdown against the H100 and the datasheet's, per regime."""
    d = pd.read_csv(path)
    d = d[d.hardware.isin(["a100-80gb", "h100-80gb"])]
    keys = ["model", "tensor_parallel", "prompt_size", "batch_size"]
    g = d.groupby(keys + ["hardware"])[["prompt_time", "token_time"]].median().unstack()
    tokens = g.index.get_level_values("prompt_size") * g.index.get_level_values("batch_size")
    compute = g[tokens >= 1024]
    decode = g[g.index.get_level_values("batch_size") <= 16]
    a100, h100 = get_gpu("A100-80GB"), get_gpu("H100-SXM")
    return {
        "compute_slowdown": float(np.median(compute["prompt_time", "a100-80gb"]
                                            / compute["prompt_time", "h100-80gb"])),
        "compute_peak_ratio": h100.tflops_16bit / a100.tflops_16bit,
        "bandwidth_slowdown": float(np.median(decode["token_time", "a100-80gb"]
                                              / decode["token_time", "h100-80gb"])),
        "bandwidth_peak_ratio": h100.bandwidth_tbs / a100.bandwidth_tbs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=120.0,
                    help="seconds of each fit stage to simulate (default 120)")
    ap.add_argument("--seeds", type=int, default=1)
    args = ap.parse_args(argv)
    cases = load_cases([HERE / "fit"], args.seeds)
    f = fit_serving(serving_table([c.study for c in cases], args.duration))
    h100 = f.factors
    print("H100-SXM:", ", ".join(f"{k} = {h100[k]:.4g}" for k in SERVING_KEYS),
          f"(RMS error {100 * f.rms_e2e_error:.2f}% end to end, {100 * f.rms_ttft_error:.2f}% "
          "TTFT)")
    r = a100_ratios(HERE / "data" / "splitwise" / "perf_model.csv")
    print("A100 against H100:", ", ".join(f"{k} {v:.3f}" for k, v in r.items()))
    # Capped where the H100's search stops: no kernel sustains its dense datasheet peak.
    cap = max(SERVING_GRID["compute_efficiency"])
    ce = min(cap, h100["compute_efficiency"] * r["compute_peak_ratio"] / r["compute_slowdown"])
    be = min(1.0, h100["bandwidth_efficiency"] * r["bandwidth_peak_ratio"]
             / r["bandwidth_slowdown"])
    # Decode attention is a tensor-core kernel too: its efficiency scales like compute's.
    att = h100["decode_attention_efficiency"] * r["compute_peak_ratio"] / r["compute_slowdown"]
    print(f"A100-80GB: compute_efficiency = {ce:.3f}, bandwidth_efficiency = {be:.3f}, "
          f"decode_attention_efficiency = {att:.3f}, and the H100's host-side terms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
