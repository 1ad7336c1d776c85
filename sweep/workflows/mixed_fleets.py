"""Mixed fleets for a target load (docs/capacity.md "Mixed fleets"): the cheapest combinations
of replica counts over the designs that carry load, each simulated whole behind the
capacity-weighted router, written as ``mixed_fleet.parquet``."""
from __future__ import annotations

import heapq
import math

import numpy as np
import pandas as pd

from sweep.study.config import Limit, Point, Study
from sweep.study.fleet import MixedFleet
from sweep.workflows.capacity import Runner, Search, failures
from sweep.workflows.capacity_tables import mean_over, tokens_per_request

#: A combination covers the target when its capacities sum to within this share below it, as
#: a single-design fleet's ``ceil(target / max_rate)`` rounds.
COVER = 1e-9


def cheapest_mixes(options: list[tuple[float, float]], target: float,
                   k: int) -> list[tuple[float, tuple[int, ...]]]:
    """The ``k`` cheapest combinations (cost, counts) of counts ``n_j >= 0`` of the options
    ``(capacity_j, usd_j)`` whose capacities sum to at least ``target``, cheapest first (ties:
    fewer replicas, then the counts). Only minimal ones: one replica fewer of any option in
    use no longer covers the target. Exact: a branch and bound over the options in order of
    their cost per capacity, bounded below by the cheapest cost per capacity left times the
    capacity still needed."""
    order = sorted(range(len(options)), key=lambda j: (options[j][1] / options[j][0], j))
    ratio = [options[j][1] / options[j][0] for j in order]
    need0 = target * (1.0 - COVER)
    found: list = []  # a max-heap on cost of the k best so far: (-cost, -replicas, counts)
    counts = [0] * len(options)

    def kth() -> float:
        return -found[0][0] if len(found) == k else math.inf

    def minimal() -> bool:
        total = sum(n * options[j][0] for j, n in enumerate(counts))
        return all(total - options[j][0] < need0 for j, n in enumerate(counts) if n)

    def visit(i: int, need: float, cost: float) -> None:
        if need <= 0.0:
            if minimal():
                key = (-cost, -sum(counts), tuple(-n for n in counts))
                item = (key[0], key[1], key[2], tuple(counts))
                if len(found) < k:
                    heapq.heappush(found, item)
                elif item[:3] > found[0][:3]:
                    heapq.heapreplace(found, item)
            return
        if i == len(order) or cost + need * ratio[i] > kth() * (1 + 1e-12):
            return
        j = order[i]
        cap, usd = options[j]
        for n in range(math.ceil(need / cap), -1, -1):
            counts[j] = n
            visit(i + 1, need - n * cap, cost + n * usd)
        counts[j] = 0

    visit(0, need0, 0.0)
    best = sorted(found, key=lambda it: (-it[0], -it[1], tuple(-x for x in it[2])))
    return [(-cost, c) for cost, _, _, c in best]


def _pools(cap: pd.DataFrame, found: list[Search]) -> dict:
    """The designs that carry load and may run as fleets, by what a mix must share (the
    workload, and the context it is clipped to): key -> design indices."""
    pools: dict = {}
    for row in cap[cap["max_rate"] > 0].itertuples():
        d = found[int(row.design)].point.design
        try:
            d.replace(replicas=d.replicas * 2).validate()
        except ValueError:
            continue  # one server only (prefix caching, chunked prefill, pools)
        key = (repr(found[int(row.design)].point.workload), d.context_limit)
        pools.setdefault(key, []).append(int(row.design))
    return pools


def undominated(ids: list[int], rate: dict, usd: dict) -> list[int]:
    """The designs no other one beats: none carries as much or more for as little or less
    (of equals, the first). A beaten design's replicas would be cheaper as the other's."""
    def beats(i, j):
        return rate[i] >= rate[j] and usd[i] <= usd[j] and (
            (rate[i], usd[i]) != (rate[j], usd[j]) or i < j)

    return [j for j in ids if not any(beats(i, j) for i in ids if i != j)]


def candidates(study: Study, cap: pd.DataFrame, found: list[Search],
               target: float) -> list[tuple[float, dict]]:
    """The ``[capacity] fleets`` cheapest mixes of two or more designs (cost, design ->
    count) no dearer than the cheapest single-design fleet, over every pool of designs that
    may share a fleet."""
    k = int(study.capacity["fleets"])
    rate = dict(zip(cap["design"].astype(int), cap["max_rate"].astype(float)))
    usd = dict(zip(cap["design"].astype(int), cap["usd_per_hour"].astype(float)))
    single = min((math.ceil(target / rate[i] - COVER) * usd[i] for i in rate if rate[i] > 0),
                 default=math.inf)
    out = []
    for ids in _pools(cap, found).values():
        ids = undominated(ids, rate, usd)
        # Count the single-design ones too: they may be among a pool's cheapest.
        for cost, counts in cheapest_mixes([(rate[i], usd[i]) for i in ids], target,
                                           k + len(ids)):
            mix = {i: n for i, n in zip(ids, counts) if n}
            if len(mix) > 1 and cost <= single * (1 + 1e-12):
                out.append((cost, mix))
    out.sort(key=lambda c: (c[0], sorted(c[1].items())))
    return out[:k]


def fleet_of(found: list[Search], cap: pd.DataFrame, mix: dict) -> Point:
    """A mix as one simulation: each design with its count's replicas, weighted by its
    capacity per server."""
    rate = dict(zip(cap["design"].astype(int), cap["max_rate"].astype(float)))
    members, weights = [], []
    for i, n in sorted(mix.items()):
        d = found[i].point.design
        members.append(d.replace(replicas=d.replicas * n))
        weights.append(rate[i] / d.replicas)
    first = found[min(mix)].point
    return Point(MixedFleet(tuple(members), tuple(weights)), first.workload, {})


def mixed_fleets(study: Study, cap: pd.DataFrame, found: list[Search], runner: Runner,
                 target: float, limits: list[Limit]) -> pd.DataFrame:
    """``mixed_fleet.parquet``: each candidate mix (``candidates``) simulated whole at the
    target on every seed, and one that misses the brief tried once more with one more replica
    of its cheapest design; one row per (mix, design), confirmed mixes first, cheapest
    first. Their runs are the search's rows of design ``-1 - mix``."""
    usd = dict(zip(cap["design"].astype(int), cap["usd_per_hour"].astype(float)))
    cost_lim = [lim for lim in study.brief if lim.key == "cost_per_mtok"]
    seeds = list(study.seeds)
    tries = [mix for _, mix in candidates(study, cap, found, target)]
    recs, mix_id = [], 0
    for extra in (0, 1):
        jobs = []
        for mix in tries:
            jobs.append((-1 - mix_id, sum(mix.values()), fleet_of(found, cap, mix),
                         float(target), mix))
            mix_id += 1
        runner([j[:4] for j in jobs], seeds)
        missed = []
        for key, replicas, point, _, mix in jobs:
            rows = runner.rows_at(key, float(target), seeds, fleet=replicas)
            share = float(np.mean([not failures(r, limits) for r in rows]))
            fleet_usd = sum(n * usd[i] for i, n in mix.items())
            cost = fleet_usd / (target * tokens_per_request(rows) * 3600.0) * 1e6
            ok = bool(share >= study.capacity["confidence"] - 1e-9
                      and all(lim.ok(cost) for lim in cost_lim))
            note = "" if ok else "misses the brief at the target" + (
                "; one more replica tried" if extra == 0 else "")
            weights = dict(zip(sorted(mix), point.design.weights))
            total = sum(weights[i] * n * found[i].point.design.replicas for i, n in mix.items())
            for i, n in sorted(mix.items()):
                recs.append(dict(mix=-1 - key, design=i, replicas=n,
                                 share=weights[i] * n * found[i].point.design.replicas / total,
                                 confirmed=ok, p_pass=share, fleet_usd_per_hour=fleet_usd,
                                 cost_per_mtok=cost, p95_ttft_s=mean_over(rows, "p95_ttft_s"),
                                 note=note))
            if not ok and extra == 0:
                cheapest = min(mix, key=lambda i: (usd[i], i))
                missed.append({**mix, cheapest: mix[cheapest] + 1})
        tries = missed
        if not tries:
            break
    out = pd.DataFrame(recs, columns=MIXED_COLUMNS).astype(
        {"mix": "int64", "design": "int64", "replicas": "int64", "confirmed": bool})
    out["_rank"] = out["fleet_usd_per_hour"]
    out = out.sort_values(["confirmed", "_rank", "mix", "design"],
                          ascending=[False, True, True, True], kind="stable")
    return out.drop(columns="_rank").reset_index(drop=True)


#: ``mixed_fleet.parquet``'s columns, one row per (mix, design).
MIXED_COLUMNS = ["mix", "design", "replicas", "share", "confirmed", "p_pass",
                 "fleet_usd_per_hour", "cost_per_mtok", "p95_ttft_s", "note"]
