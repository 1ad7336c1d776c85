"""Fit the H100's and A100's compute efficiency on Splitwise's measured prefills
(docs/validation.md, "Prefill compute").

    python validation/fit_prefill.py

No vLLM run here times a long prefill of a dense model: the open-loop prompts are cached, and the
closed-loop rows run gpt-oss, whose expert kernels have their own share. Splitwise's pass times
(``validation/data/splitwise/perf_model.csv``: Llama-2-70B on DGX-A100 and DGX-H100, one prompt
at a time, timed as the catalog's Llama-3-70B, the same shape but for its vocabulary) do. Per
GPU, the prefills of 512-8,192 tokens at tensor parallel 2 fit ``compute_efficiency`` and a
fixed time per pass, every other factor as shipped, by least squares on log errors; the fixed
time is that software stack's (128-token prefills took 48 ms on H100), not shipped. Tensor
parallel 4 and 8 are held out: their errors at the fitted efficiency are printed.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sweep.physics import timing
from sweep.study.design import Design
from sweep.workflows.calibrate import SPLITWISE_GPUS

DATA = Path(__file__).parent / "data" / "splitwise" / "perf_model.csv"
FIT_TP = 2
MIN_PROMPT = 512  # shorter prefills are that stack's fixed time more than compute
GRID = np.round(np.arange(0.05, 1.0001, 0.001), 3)


def prefills(hardware: str) -> pd.DataFrame:
    """Median measured prefill (seconds) per tensor-parallel degree and prompt, one prompt."""
    df = pd.read_csv(DATA)
    df = df[(df.model == "llama2-70b") & (df.hardware == hardware) & (df.batch_size == 1)
            & (df.prompt_size >= MIN_PROMPT)]
    out = df.groupby(["tensor_parallel", "prompt_size"]).prompt_time.median().reset_index()
    return out.assign(seconds=out.prompt_time * 1e-3)


def predicted(gpu: str, tp: int, prompts: np.ndarray, efficiency: float) -> np.ndarray:
    """The model's prefill pass of each prompt alone, at ``efficiency``, the rest as shipped."""
    p = Design(gpu=gpu, model="Llama-3-70B", gpus=tp, compute_efficiency=efficiency).timing()
    tokens = prompts.astype(np.float64)
    return np.asarray(timing.pass_time(p, tokens, tokens * (tokens + 1) / 2, 0.0, 0.0))


def fit(gpu: str, rows: pd.DataFrame) -> tuple[float, float]:
    """(compute_efficiency, fixed seconds) with the least squared log error on ``rows``."""
    prompts, seconds = rows.prompt_size.to_numpy(), rows.seconds.to_numpy()
    best = (np.inf, 0.0, 0.0)
    for eff in GRID:
        model = predicted(gpu, FIT_TP, prompts, float(eff))
        # The fixed time that best closes the log errors at this efficiency (a few Newton steps).
        fixed = 0.0
        for _ in range(20):
            r = np.log((model + fixed) / seconds)
            fixed = max(0.0, fixed - np.sum(r) / np.sum(1.0 / (model + fixed)))
        sse = float(np.sum(np.log((model + fixed) / seconds) ** 2))
        if sse < best[0]:
            best = (sse, float(eff), fixed)
    return best[1], best[2]


def main() -> None:
    for gpu, hardware in SPLITWISE_GPUS.items():
        rows = prefills(hardware)
        eff, fixed = fit(gpu, rows[rows.tensor_parallel == FIT_TP])
        print(f"{gpu}: compute_efficiency {eff:.3f} (that stack's fixed time {fixed * 1e3:.1f} ms"
              f" a prefill, not shipped)")
        for tp, group in rows.groupby("tensor_parallel"):
            model = predicted(gpu, int(tp), group.prompt_size.to_numpy(), eff) + fixed
            err = 100 * (model / group.seconds.to_numpy() - 1)
            split = "fitted" if tp == FIT_TP else "held out"
            print(f"  TP {tp} ({split}): errors {', '.join(f'{e:+.0f}%' for e in err)} at "
                  f"{', '.join(map(str, group.prompt_size))} tokens")


if __name__ == "__main__":
    main()
