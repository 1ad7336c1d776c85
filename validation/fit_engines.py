"""Fit SGLang's and TensorRT-LLM's host terms on their closed-loop fit cases (docs/validation.md,
"Other serving engines").

    python validation/fit_engines.py [--engine sglang|trtllm] [--share S] [--iterations N]

Each engine's cases of ``validation/engines/fit/`` (of every version) fit, apart for models of
latent attention (DeepSeek-R1) and the others (gpt-oss-120b), its own time per pass (``overhead_ms``), per decoding sequence per pass (``seq_overhead_us``), per prompt token
outside the passes (``prompt_overhead_us``) and its lag in TPOTs (``request_lag_passes``); its
scheduling is the engine's rule (``engines.ServingEngine.prefill_alone``) and everything
GPU-side is as shipped (the GPUs' factors, fitted on vLLM's runs alone). The objective is the
squared log error of the measured mean TPOT and mean TTFT; the search is
``fit_closed.py``'s (Levenberg-Marquardt with finite differences, from vLLM's values, every
case at the current terms and one step of each, as one sweep per case). ``--share`` runs that
share of each case's measured requests (the warm-up in full), for speed.

It prints the terms; ``sweep/physics/engines.py`` carries them (``SGLANG``, ``TRTLLM``).

    python validation/fit_engines.py --pools [--engine ...] [--share S] [--iterations N]

fits the same terms, from the engine's own, on its disaggregated cases of
``validation/disagg/fit/`` (every server of both pools runs with them): the engine's terms for
pools (``engines.ServingEngine.pooled``).

    python validation/fit_engines.py --errors RESULTS/validation.parquet

prints each engine's model error beyond the GPU's (``engines.EngineError``) from the held-out
cases of a ``sweep validate validation/engines/...`` table: the speed's, the log RMS of the mean
TPOTs' errors less the GPU's own speed error in quadrature; the lag's, the mean TTFTs' log RMS
beyond the speed's, over the lag's median share of the predicted TTFT (``request_lag_passes``
mean TPOTs of it).
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from fit_closed import search, shortened, simulate
from sweep.physics.engines import ENGINES, VLLM, latent_attention

HERE = Path(__file__).parent
TERMS = ("overhead_ms", "seq_overhead_us", "prompt_overhead_us", "request_lag_passes")
#: Each term's bounds, and the least value its finite-difference step (4%) is taken of.
BOUNDS = {"overhead_ms": (0.0, 50.0, 0.5), "seq_overhead_us": (0.0, 500.0, 10.0),
          "prompt_overhead_us": (0.0, 5000.0, 5.0), "request_lag_passes": (0.0, 100.0, 1.0)}


def cases_of(engine: str, latent: bool, share: float, pools: bool = False):
    """The engine's fit cases (of disaggregated pools: ``pools``) of models of latent attention
    (``latent``) or of the others, their measured requests cut to ``share``."""
    def keep(case) -> bool:
        design = case.study.points[0].design
        return design.engine == engine and latent_attention(design.model_spec) == latent
    return shortened(HERE / ("disagg" if pools else "engines") / "fit", share, keep)


def residuals(cases, x: np.ndarray, steps: np.ndarray):
    """Every case's log errors at ``x``, and their finite-difference Jacobian."""
    rows, jac = [], []
    for case in cases:
        base = dict(zip(TERMS, map(float, x)))
        r = simulate(case, [base] + [{**base, k: float(x[i] + steps[i])}
                                     for i, k in enumerate(TERMS)])
        rows.append(r[0])
        jac.append(((r[1:] - r[0]) / steps[:, None]).T)
    return np.concatenate(rows), np.concatenate(jac)


def fit(engine: str, latent: bool, share: float, iterations: int,
        pools: bool = False) -> dict | None:
    """``fit_closed.search`` from vLLM's terms (``pools``: from the engine's own, on its
    disaggregated cases). None: no such cases."""
    cases = cases_of(engine, latent, share, pools)
    if not cases:
        return None
    lo, hi, floor = (np.array([BOUNDS[k][b] for k in TERMS]) for b in (0, 1, 2))
    start = ENGINES[engine].family(cases[0].study.points[0].design.model_spec) if pools else VLLM
    best = search(np.array([getattr(start, k) for k in TERMS]), lo, hi, floor,
                  lambda x, steps: residuals(cases, x, steps), iterations,
                  f"{engine} {'latent' if latent else 'other'} ")
    return dict(zip(TERMS, map(float, best)))


def errors(table: Path) -> dict:
    """(engine, family) -> (speed_sd, lag_sd) on a held-out validation table (the module's
    doc); a case's family by its name (DeepSeek's: latent attention)."""
    import pandas as pd

    from sweep.physics.hardware import CATALOG

    t = pd.read_parquet(table)
    t = t[t["file"].str.contains("/holdout/")]
    wide = t.pivot_table(index=["case", "gpu"], columns="metric",
                         values=["measured", "predicted"]).reset_index()
    out = {}
    for (engine, latent) in ((e, f) for e in ("sglang", "trtllm") for f in (True, False)):
        rows = wide[wide["case"].str.startswith(engine + "-")
                    & (wide["case"].str.contains("deepseek") == latent)]
        if rows.empty:
            continue
        terms = ENGINES[engine].latent if latent else ENGINES[engine]
        tpot = np.log(rows["predicted"]["mean_tpot_ms"] / rows["measured"]["mean_tpot_ms"])
        ttft = np.log(rows["predicted"]["mean_ttft_s"] / rows["measured"]["mean_ttft_s"])
        own = np.sqrt(np.mean([CATALOG[g].model_error.speed_sd ** 2 for g in rows["gpu"]]))
        speed = math.sqrt(max(np.mean(tpot ** 2) - own ** 2, 0.0))
        lag = terms.request_lag_passes
        share = np.median(lag * rows["predicted"]["mean_tpot_ms"] * 1e-3
                          / rows["predicted"]["mean_ttft_s"])
        beyond = math.sqrt(max(np.mean(ttft ** 2) - np.mean(tpot ** 2), 0.0))
        out[(engine, "latent" if latent else "other")] = (round(speed, 3),
                                                           round(float(beyond / share), 3))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=("sglang", "trtllm"), action="append")
    ap.add_argument("--share", type=float, default=1.0)
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--errors", type=Path)
    ap.add_argument("--pools", action="store_true")
    args = ap.parse_args()
    if args.errors:
        print(errors(args.errors))
        return
    for engine in args.engine or ("sglang", "trtllm"):
        for latent in (True, False):
            found = fit(engine, latent, args.share, args.iterations, args.pools)
            if found is not None:
                print(engine, "latent" if latent else "other",
                      {k: round(v, 3) for k, v in found.items()}, flush=True)


if __name__ == "__main__":
    main()
