"""The capacity search's tables: ``capacity.parquet`` (each design's capacity, what binds
there, its cost at capacity) and ``fleet.parquet`` (the cheapest fleets for a target load,
confirmed by simulating each whole behind its router)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sweep.analysis.launch import LAUNCH_COLUMNS, fleet_launch, launch_columns
from sweep.study.config import Limit, Point, Study
from sweep.workflows.capacity import (AT_CAPACITY_RUNS, IMPROVES_WITH_LOAD, LOADS, QUEUEING,
                                     Runner, Search, failures, missed_lever)


def mean_over(rows: list[dict], key: str) -> float:
    return float(np.mean([float(r[key]) for r in rows]))


def _nearest_rows(runner: Runner, i: int, rate: float, seeds: list[int]) -> list[dict]:
    """Each seed's run at the rate nearest ``rate`` (on a log scale)."""
    mine = runner.runs_of(i)
    out = []
    for seed in seeds:
        ran = [r for r, s in mine if s == seed]
        if ran:
            out.append(runner.rows[(i, 0, min(ran, key=lambda r: abs(math.log(r / rate))),
                                    seed)])
    return out


def tokens_per_request(rows: list[dict]) -> float:
    """Tokens a request generates, on average over the runs."""
    return float(np.mean([float(r["tokens_per_s"]) * float(r["sim_time_s"])
                          / max(float(r["requests"]), 1.0) for r in rows]))


def _binding(rows: list[dict], limits: list[Limit]) -> str:
    """The limit most seeds miss (queueing read as memory when the cache preempted)."""
    counts: dict[str, int] = {}
    for r in rows:
        for key in failures(r, limits):
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return ""
    key = max(counts, key=lambda k: (counts[k], k == QUEUEING))
    if key == QUEUEING and np.mean([float(r["preemptions"]) for r in rows]) > 0:
        return "memory"
    return key


def _failed_above(runner: Runner, i: int, rate: float, seeds: list[int],
                  limits: list[Limit]) -> list[dict]:
    """The failed runs at the lowest rate above ``rate`` that has any: where the limits bind
    (a seed's failure just above capacity may have been implied, not run, at the bracket's
    end)."""
    for r in sorted({r for r, _ in runner.runs_of(i) if r > rate}):
        failed = [row for row in runner.rows_done(i, r, seeds) if failures(row, limits)]
        if failed:
            return failed
    return []


def table(study: Study, runner: Runner, found: list[Search], limits: list[Limit]) -> pd.DataFrame:
    """``capacity.parquet``: one row per design, with the command lines that serve it."""
    seeds = list(study.seeds)
    at_max = [lim for lim in study.brief if lim.key in IMPROVES_WITH_LOAD]
    recs = []
    for i, s in enumerate(found):
        d = s.point.design
        usd_per_hour = d.usd_per_hour
        closed = s.point.closed
        unit = "clients" if closed else "requests/s"
        rec = {k: v for k, v in s.point.columns.items() if k not in LOADS}
        rec.update(design=i, max_rate=s.low, max_rate_low=s.low, max_rate_high=s.high,
                   censored=False, binding="", why="", tokens_per_s_at_max=math.nan,
                   cost_per_mtok_at_max=math.nan, usd_per_hour=usd_per_hour)
        if closed:  # the load is clients; the rate, the requests/s they drive there
            rec.update(max_concurrency=int(s.low) if math.isfinite(s.low) else 0,
                       max_concurrency_high=s.high, max_rate=0.0, max_rate_low=math.nan,
                       max_rate_high=math.nan)
        if math.isnan(s.rate_min):  # a lever limit
            lim = missed_lever(study, s.point)
            rec.update(max_rate=0.0, max_rate_low=0.0, max_rate_high=0.0, binding=lim.key,
                       why=f"excluded by the brief: {_limit_text(lim)}")
            recs.append(rec)
            continue
        rec.update(rate_min=s.rate_min, rate_max=s.rate_max)
        if s.low > 0 and closed:
            rows = _nearest_rows(runner, i, s.low, seeds)
            rec["max_rate"] = mean_over(rows, "requests_per_s")
            tps = mean_over(rows, "tokens_per_s")
        elif s.low > 0:
            # Sustained: requests/s x the tokens each generates.
            tps = s.low * tokens_per_request(_nearest_rows(runner, i, s.low, seeds))
        if s.low > 0:
            cost = usd_per_hour / (tps * 3600.0) * 1e6 if tps > 0 else math.inf
            rec.update(tokens_per_s_at_max=tps, cost_per_mtok_at_max=cost)
            values = {"cost_per_mtok": cost, "tokens_per_s": tps}
            values.update({k: mean_over(runner.rows_done(i, s.low, seeds), k)
                           for k in AT_CAPACITY_RUNS if any(lim.key == k for lim in at_max)})
            missed = [lim for lim in at_max if not lim.ok(values[lim.key])]
            if missed:
                lim = missed[0]
                if closed:
                    rec["max_concurrency"] = 0
                rec.update(max_rate=0.0, binding=lim.key.replace("cost_per_mtok", "cost"),
                           why=f"at its load limit of {s.low:.3g} {unit}: "
                               f"{lim.key} = {values[lim.key]:.4g}, missing "
                               f"{_limit_text(lim)}")
                recs.append(rec)
                continue
        if math.isfinite(s.high):
            rec["binding"] = _binding(_failed_above(runner, i, s.low, seeds, limits), limits)
            if s.low == 0:
                rec.update(max_rate_high=s.high,
                           why=f"misses {rec['binding']} at {s.high:.3g} {unit}, the lowest "
                               "load searched ([capacity] rate_min)")
        else:
            rec.update(censored=True, binding="none",
                       why=f"meets the brief at {s.rate_max:.3g} {unit}, the highest load "
                           "searched: raise [capacity] rate_max")
        recs.append(rec)
    return pd.DataFrame(recs).assign(**launch_columns(recs))


def _limit_text(lim: Limit) -> str:
    parts = []
    if lim.min is not None:
        parts.append(f"{lim.key} >= {lim.min:g}")
    if lim.max is not None:
        parts.append(f"{lim.key} <= {lim.max:g}")
    return " and ".join(parts)


def at_target(study: Study, rows: list[dict], usd: float, target: float, limits: list[Limit],
              retry: bool) -> dict:
    """A fleet's verdict from its runs at the target: the share of seeds meeting the brief,
    its cost per million tokens there, confirmed when both hold, and why not (``retry``: one
    more replica is to be tried)."""
    share = float(np.mean([not failures(r, limits) for r in rows]))
    cost = usd / (target * tokens_per_request(rows) * 3600.0) * 1e6
    confirmed = bool(share >= study.capacity["confidence"] - 1e-9 and all(
        lim.ok(cost) for lim in study.brief if lim.key == "cost_per_mtok"))
    return dict(confirmed=confirmed, p_pass=share, fleet_usd_per_hour=usd, cost_per_mtok=cost,
                p95_ttft_s=mean_over(rows, "p95_ttft_s"),
                note="" if confirmed else "misses the brief at the target" + (
                    "; one more replica tried" if retry else ""))


#: A fleet's own columns (``fleet.parquet``), before its design's levers and capacity.
FLEET_DTYPES = {"design": "int64", "replicas": "int64", "confirmed": bool, "p_pass": "float64",
                "fleet_usd_per_hour": "float64", "cost_per_mtok": "float64",
                "p95_ttft_s": "float64", "note": object}


def fleets(study: Study, cap: pd.DataFrame, found: list[Search], runner: Runner,
           target: float, limits: list[Limit]) -> pd.DataFrame:
    """The cheapest fleets for ``target`` requests/s: ``ceil(target / max_rate)`` replicas of a
    design, the ``[capacity] fleets`` cheapest simulated whole behind the design's router at the
    target (one more replica where that misses the brief); confirmed ones first, cheapest first,
    each with the command lines that serve it."""
    ok = cap[cap["max_rate"] > 0].copy()
    ok["replicas_needed"] = np.ceil(target / ok["max_rate"] - 1e-9).astype(int)
    ok["fleet_usd_per_hour"] = ok["replicas_needed"] * ok["usd_per_hour"]
    ok = ok.sort_values(["fleet_usd_per_hour", "cost_per_mtok_at_max", "design"],
                        kind="stable").head(int(study.capacity["fleets"]))
    seeds = list(study.seeds)
    recs = []
    tries = [(int(r.design), int(r.replicas_needed)) for r in ok.itertuples()]
    for extra in (0, 1):
        jobs, meta = [], []
        for design, n in tries:
            d = found[design].point.design
            fleet = d.times(n + extra)
            try:
                fleet.validate()
            except ValueError as exc:
                if extra == 0:
                    recs.append(dict(design=design, replicas=n, confirmed=False,
                                     note=f"not simulated: {exc}"))
                continue
            p = found[design].point
            point = Point(fleet, p.workload, {**p.columns, **{
                k: getattr(fleet, k) for k in ("replicas", "prefill_workers", "decode_workers")
                if p.columns.get(k) is not None}})
            jobs.append((design, n + extra, point, float(target)))
            meta.append((design, n + extra))
        runner(jobs, seeds)
        missed = []
        for (design, n) in meta:
            usd = n * float(cap.loc[cap["design"] == design, "usd_per_hour"].iloc[0])
            rec = dict(design=design, replicas=n, **at_target(
                study, runner.rows_at(design, float(target), seeds, fleet=n), usd, target,
                limits, extra == 0))
            recs.append(rec)
            if not rec["confirmed"] and extra == 0:
                missed.append((design, n))
        tries = missed
        if not tries:
            break
    # Typed columns even without a row (no design carries load): read back as written.
    out = pd.DataFrame(recs, columns=list(FLEET_DTYPES)).astype(FLEET_DTYPES)
    levers = cap.drop(columns=[c for c in ("replicas", *LAUNCH_COLUMNS) if c in cap.columns])
    out = out.merge(levers[["design"] + [c for c in levers.columns if c not in (
        "design", "fleet_usd_per_hour")]], on="design", how="left")
    out["_rank"] = out["fleet_usd_per_hour"].fillna(np.inf)
    out = out.sort_values(["confirmed", "_rank", "design", "replicas"],
                          ascending=[False, True, True, True], kind="stable")
    out = out.drop(columns="_rank").reset_index(drop=True)
    return out.assign(**fleet_launch(cap, out["design"], out["replicas"]))
