"""Check the shipped compute efficiencies on Splitwise's measured prefills (docs/validation.md,
"Prefill compute"): another engine's runs, reported, never fitted on.

    python validation/check_prefill.py

Splitwise's pass times (``validation/data/splitwise/perf_model.csv``: Llama-2-70B on DGX-A100 and
DGX-H100, one prompt at a time, timed as the catalog's Llama-3-70B, the same shape but for its
vocabulary) time long prefills of a dense model, which no vLLM run here does. Per GPU, at its
shipped ``compute_efficiency`` (every other factor as shipped) and a fixed time per prefill that
is that software stack's (128-token prefills took 48 ms on H100), fitted on tensor parallel 2,
the errors at 512-8,192 tokens and tensor parallel 2, 4 and 8 are printed; and, for comparison,
the efficiency those prefills alone would give.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sweep.physics import timing
from sweep.physics.hardware import get_gpu
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


def fixed_time(model: np.ndarray, seconds: np.ndarray) -> tuple[float, float]:
    """The fixed time per prefill that best closes the log errors of ``model`` (a few Newton
    steps), and the squared log error left."""
    fixed = 0.0
    for _ in range(20):
        r = np.log((model + fixed) / seconds)
        fixed = max(0.0, fixed - np.sum(r) / np.sum(1.0 / (model + fixed)))
    return fixed, float(np.sum(np.log((model + fixed) / seconds) ** 2))


def fit(gpu: str, rows: pd.DataFrame) -> tuple[float, float]:
    """(compute_efficiency, fixed seconds) with the least squared log error on ``rows``."""
    prompts, seconds = rows.prompt_size.to_numpy(), rows.seconds.to_numpy()
    best = (np.inf, 0.0, 0.0)
    for eff in GRID:
        fixed, sse = fixed_time(predicted(gpu, FIT_TP, prompts, float(eff)), seconds)
        if sse < best[0]:
            best = (sse, float(eff), fixed)
    return best[1], best[2]


def main() -> None:
    for gpu, hardware in SPLITWISE_GPUS.items():
        rows = prefills(hardware)
        base = rows[rows.tensor_parallel == FIT_TP]
        eff = get_gpu(gpu).compute_efficiency
        fixed, _ = fixed_time(predicted(gpu, FIT_TP, base.prompt_size.to_numpy(), eff),
                              base.seconds.to_numpy())
        alone, _ = fit(gpu, base)
        print(f"{gpu}: shipped compute_efficiency {eff:.3f} (these prefills alone would give "
              f"{alone:.3f}; that stack's fixed time {fixed * 1e3:.1f} ms a prefill)")
        for tp, group in rows.groupby("tensor_parallel"):
            model = predicted(gpu, int(tp), group.prompt_size.to_numpy(), eff) + fixed
            err = 100 * (model / group.seconds.to_numpy() - 1)
            print(f"  TP {tp}: errors {', '.join(f'{e:+.0f}%' for e in err)} at "
                  f"{', '.join(map(str, group.prompt_size))} tokens")


if __name__ == "__main__":
    main()
