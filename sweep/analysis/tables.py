"""Rows to tables: a call's rows, the (design, seed)-ordered runs from rows in any order, the
Parquet schema's types, and the means over seeds with their confidence intervals."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sweep.analysis.launch import launch_columns
from sweep.study.config import Study
from sweep.study.metric_names import METRICS

_DTYPES = {"f8": "float64", "i8": "int64", "b": "bool"}


def call_metrics(sims: list, mets: dict, rows, drawn: dict, uncertain) -> pd.DataFrame:
    """Design, seed, the factors drawn for its seed (``uncertain``) and every metric of each
    of ``sims`` (their ``point`` and ``seed``), found at rows ``rows`` of ``mets``."""
    return pd.DataFrame({
        "design": np.array([s.point for s in sims], dtype=np.int64),
        "seed": np.array([s.seed for s in sims], dtype=np.int64),
        **{c: np.array([drawn[s.seed][c] for s in sims], dtype=np.float64) for c in uncertain},
        **{k: mets[k][rows].astype(_DTYPES[kind]) for k, kind in METRICS.items()}})


def call_requests(sims: list, reqs, out, rows) -> pd.DataFrame:
    """Per-request rows of the simulations ``sims``, found at batch rows ``rows``."""
    rows = np.asarray(rows, dtype=np.int64)
    arrival = np.asarray(reqs.arrival)[rows]
    real = np.isfinite(arrival)
    n = arrival.shape[1]
    design = np.repeat([s.point for s in sims], n).reshape(len(sims), n)
    seed = np.repeat([s.seed for s in sims], n).reshape(len(sims), n)
    return pd.DataFrame({
        "design": design[real].astype(np.int64), "seed": seed[real].astype(np.int64),
        "request": np.tile(np.arange(n, dtype=np.int64), (len(sims), 1))[real],
        "arrival_s": np.asarray(out.arrival)[rows][real],  # a closed loop's as it set them
        "prompt_tokens": np.asarray(reqs.prompt)[rows][real].astype(np.int64),
        "output_tokens": np.asarray(reqs.output)[rows][real].astype(np.int64),
        "first_token_s": np.asarray(out.first)[rows][real],
        "finish_s": np.asarray(out.finish)[rows][real],
        "generated": np.asarray(out.generated)[rows][real].astype(np.int64),
        "cached_tokens": np.asarray(out.cached_tokens)[rows][real].astype(np.int64),
        "turn": np.asarray(reqs.turn)[rows][real].astype(np.int64),
    })


def grid_table(study: Study) -> pd.DataFrame:
    """One typed row per grid point: ``design`` and every column of the config."""
    return typed(pd.DataFrame([{"design": i, **p.columns} for i, p in enumerate(study.points)]))


def runs_table(grid: pd.DataFrame, metrics: pd.DataFrame, seeds: list[int]) -> pd.DataFrame:
    """The grid's columns, ``seed`` and the metrics, one row per design x seed in (design, seed)
    order, from metric rows in any order; refuses missing or repeated simulations."""
    key = pd.MultiIndex.from_frame(metrics[["design", "seed"]])
    if key.has_duplicates:
        d, s = key[key.duplicated()][0]
        raise ValueError(f"runs: design {d} seed {s} was simulated twice (two processes with "
                         "the same process id?); allowed: each simulation once")
    want = pd.MultiIndex.from_product([grid["design"], seeds], names=["design", "seed"])
    missing = want.difference(key, sort=False)
    if len(missing):
        raise ValueError(f"runs: {len(missing)} of {len(want)} simulations are missing (e.g. "
                         f"design {missing[0][0]} seed {missing[0][1]}); allowed: a complete "
                         "run (resume it with --resume)")
    values = metrics.set_index(["design", "seed"]).loc[want].reset_index(drop=True)
    rows = grid.iloc[np.repeat(np.arange(len(grid)), len(seeds))].reset_index(drop=True)
    rows["seed"] = np.tile(np.asarray(seeds, dtype=np.int64), len(grid))
    for col in values.columns.difference(list(METRICS)):  # factors drawn per seed
        rows[col] = values[col]
    return pd.concat([rows, values[list(METRICS)]], axis=1)


def requests_table(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Per-request rows from any chunks, ordered by design, seed and request."""
    return pd.concat(parts, ignore_index=True).sort_values(
        ["design", "seed", "request"], kind="stable", ignore_index=True)


def typed(df: pd.DataFrame) -> pd.DataFrame:
    """Levers as categoricals, counts int64, times float64, flags bool (the Parquet schema);
    built whole (a frame of a hundred columns set one by one is fragmented)."""
    return pd.DataFrame({col: _typed_column(col, df[col]) for col in df.columns}, index=df.index)


def _typed_column(col: str, x: pd.Series) -> pd.Series:
    if col in METRICS:
        return x.astype(_DTYPES[METRICS[col]])
    if col in ("design", "seed"):
        return x.astype("int64")
    if x.map(lambda v: isinstance(v, str)).any():
        # A key that applies to some designs only (a trace beside sampled workloads) stays
        # missing where it does not apply, rather than the text "None".
        text = x.astype(str).where(x.notna())
        return pd.Series(pd.Categorical(text, categories=list(dict.fromkeys(text.dropna()))),
                         index=x.index, name=x.name)
    if x.isna().all():
        return x.astype("float64")
    if all(isinstance(v, (bool, np.bool_)) for v in x):
        return x.astype("bool")
    if x.notna().all() and all(isinstance(v, (int, np.integer)) for v in x):
        return x.astype("int64")
    return x.astype("float64")


#: Two-sided 95% Student-t quantiles by degrees of freedom (1..30); beyond, the normal 1.96.
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t975(dof: int) -> float:
    if dof < 1:
        return math.nan
    return _T975[dof - 1] if dof <= len(_T975) else 1.96


def meets(df: pd.DataFrame, brief) -> pd.Series:
    """Row by row: does this run (or this design's means) meet every limit of the brief?"""
    ok = pd.Series(True, index=df.index)
    for lim in brief:
        ok &= df[lim.key].map(lambda v, lim=lim: bool(lim.ok(float(v))))
    return ok


#: The latency metrics, which get a 90% prediction interval over the seeds.
LATENCY = tuple(m for m in METRICS if m.split("_")[1:2] in (["ttft"], ["tpot"], ["itl"], ["e2e"]))
#: The prediction interval's quantiles over the seeds.
INTERVAL = (0.05, 0.95)


#: The standard normal's 95% quantile: a 90% interval's half-width in standard deviations.
Z90 = 1.6448536269514722


def widened(centre, lo, hi, half):
    """The interval [lo, hi] around ``centre`` widened by an independent error of ``half`` (its
    half-width in log units), each end added in quadrature on a log scale; where the centre
    is not positive, the interval as it is."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = centre > 0
        c = np.where(ok, centre, 1.0)
        down = np.log(c / np.clip(np.minimum(lo, c), 1e-300, None))
        up = np.log(np.maximum(hi, c) / c)
        return (np.where(ok, c * np.exp(-np.hypot(down, half)), lo),
                np.where(ok, c * np.exp(np.hypot(up, half)), hi))


def aggregate(runs: pd.DataFrame, brief, drawn=(), tail_sd=None) -> pd.DataFrame:
    """One row per design: lever columns, ``seeds``, and for every metric m: m (mean), m_std,
    m_ci_low, m_ci_high (95% CI of the mean, Student t), and for a latency metric m_lo and m_hi
    (its 5% and 95% quantiles over the seeds: a 90% prediction interval that holds the model's
    error where the seeds draw it; a tail metric's ends widened by its own error, ``tail_sd``:
    metric -> relative sd, in quadrature on a log scale around the mean); ``p_pass`` (share of
    seeds whose run meets the brief), ``meets_brief`` (the means meet every limit), the
    command lines that serve it (``launch_vllm``, ``launch_sglang``), and ``per_gpu_and_user``'s
    two columns. The columns ``drawn`` (factors drawn per seed) hold their mean over the
    seeds."""
    lever_cols = [c for c in runs.columns if c not in METRICS and c != "seed"]
    runs = runs.assign(_pass=meets(runs, brief).astype("float64"))
    g = runs.groupby("design", sort=True, observed=True)
    first = g[lever_cols].first().reset_index(drop=True)
    for c in drawn:
        first[c] = g[c].mean().to_numpy()
    n = g.size().to_numpy()
    out = {"seeds": n}
    half = np.array([t975(k - 1) for k in n]) / np.sqrt(n)
    for m in METRICS:
        x = runs[m].astype("float64")
        mean = x.groupby(runs["design"]).mean().to_numpy()
        std = x.groupby(runs["design"]).std(ddof=1).to_numpy()
        out[m] = mean
        out[f"{m}_std"] = std
        out[f"{m}_ci_low"] = mean - half * std
        out[f"{m}_ci_high"] = mean + half * std
        if m in LATENCY:
            q = x.groupby(runs["design"]).quantile(list(INTERVAL)).unstack()
            lo, hi = (q[k].to_numpy() for k in INTERVAL)
            tail = Z90 * (tail_sd or {}).get(m, 0.0)
            if tail:
                lo, hi = widened(mean, lo, hi, tail)
            out[f"{m}_lo"], out[f"{m}_hi"] = lo, hi
    out["p_pass"] = g["_pass"].mean().to_numpy()
    agg = pd.concat([first, pd.DataFrame(out)], axis=1)
    agg["meets_brief"] = meets(agg, brief).to_numpy()
    agg = agg.assign(**launch_columns(first.to_dict("records")))
    return agg.assign(**per_gpu_and_user(agg))


def _lever(designs: pd.DataFrame, key: str, default: float) -> np.ndarray:
    """The designs' ``key`` as floats (NaN where unset), ``default`` where no such column."""
    if key not in designs:
        return np.full(len(designs), default)
    return pd.to_numeric(designs[key], errors="coerce").to_numpy(dtype="float64")


def total_gpus(designs: pd.DataFrame) -> np.ndarray:
    """Every GPU each design pays for, as ``Design.total_gpus`` counts them: every server of
    both pools of a disaggregated design, else every replica's; each server's every
    data-parallel rank's and pipeline stage's."""
    stages, dp = _lever(designs, "pipeline_parallel", 1), _lever(designs, "data_parallel", 1)
    served = _lever(designs, "replicas", 1) * _lever(designs, "gpus", 1) * dp

    def pool(side: str) -> np.ndarray:
        ranks = _lever(designs, f"{side}_data_parallel", np.nan)
        workers = _lever(designs, f"{side}_workers", np.nan)
        return (_lever(designs, f"{side}_gpus", np.nan) * np.where(np.isnan(ranks), dp, ranks)
                * np.where(np.isnan(workers), 1, workers))

    prefill, decode = pool("prefill"), pool("decode")
    pools = ~(np.isnan(prefill) & np.isnan(decode))
    return np.where(pools, prefill + decode, served) * stages


def per_gpu_and_user(designs: pd.DataFrame) -> dict:
    """The throughput in the terms buyers compare: ``tokens_per_s_per_gpu`` (generated tokens
    per second over every GPU of the design) and ``tokens_per_s_per_user`` (the output speed
    one request sees, 1000 / mean TPOT in ms; NaN where TPOT is NaN or 0)."""
    tpot = designs["mean_tpot_ms"].to_numpy(dtype="float64")
    with np.errstate(divide="ignore", invalid="ignore"):
        per_user = np.where(tpot > 0, 1000.0 / tpot, np.nan)
    return {"tokens_per_s_per_gpu": designs["tokens_per_s"].to_numpy(dtype="float64")
            / total_gpus(designs),
            "tokens_per_s_per_user": per_user}
