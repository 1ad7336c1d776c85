"""Writes h100_llama3_8b_passes.csv: synthetic pass-time measurements for ``sweep calibrate``.

Times come from the roofline (``sweep.physics.timing.pass_time``) for Llama-3-8B on one H100-SXM at
16 bits with known factors, compute efficiency 0.55, bandwidth efficiency 0.75 and 0.35 ms per
pass, times 2% Gaussian measurement noise: the fit should recover them. 80 passes: prefills of
64-4096 tokens (compute-bound) with a few decoding sequences alongside, and decode passes of
1-256 sequences over 100-3000 cached tokens each (bandwidth-bound). Deterministic: run
``python configs/calibration/make_measurements.py`` from the repository root to rewrite it.
"""
from pathlib import Path

import numpy as np

from sweep.physics.hardware import get_gpu
from sweep.physics.models import get_model
from sweep.physics.timing import pass_time, timing_params

TRUE = dict(compute_efficiency=0.55, bandwidth_efficiency=0.75, overhead_ms=0.35)
ROWS = 80
rng = np.random.default_rng(5)
tp = timing_params(get_model("Llama-3-8B"), get_gpu("H100-SXM"), **TRUE)
prefill = np.where(np.arange(ROWS) % 2 == 0, rng.integers(64, 4097, ROWS), 0)
seqs = np.where(prefill == 0, rng.integers(1, 257, ROWS), rng.integers(0, 9, ROWS))
context = seqs * rng.integers(100, 3001, ROWS)
seconds = pass_time(tp, prefill.astype(float), prefill * (prefill + 1) / 2.0, seqs.astype(float),
                    context.astype(float)) * (1 + 0.02 * rng.standard_normal(ROWS))
lines = ["prefill_tokens,decode_seqs,context_tokens,seconds"]
lines += [f"{p},{s},{c},{t:.7g}" for p, s, c, t in zip(prefill, seqs, context, seconds)]
Path(__file__).with_name("h100_llama3_8b_passes.csv").write_text("\n".join(lines) + "\n")
