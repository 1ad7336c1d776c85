"""Mixed fleets for a target load (docs/capacity.md "Mixed fleets"): the cheapest combinations
of replica counts over the designs that carry load, each simulated whole behind the
capacity-weighted router, written as ``mixed_fleet.parquet``."""
from __future__ import annotations

import bisect
import math

import pandas as pd

from sweep.analysis.launch import fleet_launch
from sweep.study.config import Limit, Point, Study
from sweep.study.fleet import MixedFleet
from sweep.workflows.capacity import Runner, Search
from sweep.workflows.capacity_tables import at_target

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
    found: list = []  # the k best so far, sorted: (cost, replicas, counts)
    counts = [0] * len(options)

    def minimal() -> bool:
        total = sum(n * options[j][0] for j, n in enumerate(counts))
        return all(total - options[j][0] < need0 for j, n in enumerate(counts) if n)

    def visit(i: int, need: float, cost: float) -> None:
        if need <= 0.0:
            if minimal():
                bisect.insort(found, (cost, sum(counts), tuple(counts)))
                del found[k:]
            return
        kth = found[-1][0] if len(found) == k else math.inf
        if i == len(order) or cost + need * ratio[i] > kth * (1 + 1e-12):
            return
        j = order[i]
        cap, usd = options[j]
        for n in range(math.ceil(need / cap), -1, -1):
            counts[j] = n
            visit(i + 1, need - n * cap, cost + n * usd)
        counts[j] = 0

    visit(0, need0, 0.0)
    return [(cost, c) for cost, _, c in found]


def _pools(rate: dict, found: list[Search]) -> dict:
    """The designs that carry load and may run as fleets, by what a mix must share (the
    workload, and the context it is clipped to): key -> design indices."""
    pools: dict = {}
    for i in (i for i in rate if rate[i] > 0):
        d = found[i].point.design
        try:
            d.replace(replicas=d.replicas * 2).validate()
        except ValueError:
            continue  # disaggregated pools (their own routers) are not mixed
        key = (repr(found[i].point.workload), d.context_limit)
        pools.setdefault(key, []).append(i)
    return pools


def undominated(ids: list[int], rate: dict, usd: dict) -> list[int]:
    """The designs no other one beats: none carries as much or more for as little or less
    (of equals, the first). A beaten design's replicas would be cheaper as the other's."""
    def beats(i, j):
        return rate[i] >= rate[j] and usd[i] <= usd[j] and (
            (rate[i], usd[i]) != (rate[j], usd[j]) or i < j)

    return [j for j in ids if not any(beats(i, j) for i in ids if i != j)]


def candidates(study: Study, found: list[Search], rate: dict, usd: dict,
               target: float) -> list[tuple[float, dict]]:
    """The ``[capacity] fleets`` cheapest mixes of two or more designs (cost, design ->
    count) no dearer than the cheapest single-design fleet, over every pool of designs that
    may share a fleet (``rate``, ``usd``: each design's capacity and dollars per hour)."""
    k = int(study.capacity["fleets"])
    single = min((math.ceil(target / rate[i] - COVER) * usd[i] for i in rate if rate[i] > 0),
                 default=math.inf)
    out = []
    for ids in _pools(rate, found).values():
        ids = undominated(ids, rate, usd)
        # Count the single-design ones too: they may be among a pool's cheapest.
        for cost, counts in cheapest_mixes([(rate[i], usd[i]) for i in ids], target,
                                           k + len(ids)):
            mix = {i: n for i, n in zip(ids, counts) if n}
            if len(mix) > 1 and cost <= single * (1 + 1e-12):
                out.append((cost, mix))
    out.sort(key=lambda c: (c[0], sorted(c[1].items())))
    return out[:k]


def fleet_of(found: list[Search], rate: dict, mix: dict) -> Point:
    """A mix as one simulation: each design with its count's replicas, weighted by its
    capacity per server."""
    members, weights = [], []
    for i, n in sorted(mix.items()):
        d = found[i].point.design
        members.append(d.replace(replicas=d.replicas * n))
        weights.append(rate[i] / d.replicas)
    return Point(MixedFleet(tuple(members), tuple(weights)), found[min(mix)].point.workload, {})


def mixed_fleets(study: Study, cap: pd.DataFrame, found: list[Search], runner: Runner,
                 target: float, limits: list[Limit]) -> pd.DataFrame:
    """``mixed_fleet.parquet``: each candidate mix (``candidates``) simulated whole at the
    target on every seed, and one that misses the brief tried once more with one more replica
    of its cheapest design; one row per (mix, design), confirmed mixes first, cheapest
    first, with the command lines of the design's servers. Their runs are the search's rows
    of design ``-1 - mix``."""
    rate = dict(zip(cap["design"].astype(int), cap["max_rate"].astype(float)))
    usd = dict(zip(cap["design"].astype(int), cap["usd_per_hour"].astype(float)))
    seeds = list(study.seeds)
    tries = [mix for _, mix in candidates(study, found, rate, usd, target)]
    recs, mix_id = [], 0
    for extra in (0, 1):
        jobs = []
        for mix in tries:
            jobs.append((-1 - mix_id, sum(mix.values()), mix))
            mix_id += 1
        runner([(key, n, fleet_of(found, rate, mix), float(target)) for key, n, mix in jobs],
               seeds)
        missed = []
        for key, replicas, mix in jobs:
            verdict = at_target(study, runner.rows_at(key, float(target), seeds, fleet=replicas),
                                sum(n * usd[i] for i, n in mix.items()), target, limits,
                                extra == 0)
            carried = sum(n * rate[i] for i, n in mix.items())
            recs += [dict(mix=-1 - key, design=i, replicas=n, share=n * rate[i] / carried,
                          **verdict) for i, n in sorted(mix.items())]
            if not verdict["confirmed"] and extra == 0:
                cheapest = min(mix, key=lambda i: (usd[i], i))
                missed.append({**mix, cheapest: mix[cheapest] + 1})
        tries = missed
        if not tries:
            break
    out = pd.DataFrame(recs, columns=MIXED_COLUMNS).astype(
        {"mix": "int64", "design": "int64", "replicas": "int64", "confirmed": bool,
         **{c: "float64" for c in ("share", "p_pass", "fleet_usd_per_hour", "cost_per_mtok",
                                   "p95_ttft_s")}})
    out = out.assign(**fleet_launch(cap, out["design"], out["replicas"],
                                    router="capacity-weighted"))
    out = out.sort_values(["confirmed", "fleet_usd_per_hour", "mix", "design"],
                          ascending=[False, True, True, True], kind="stable")
    return out.reset_index(drop=True)


#: ``mixed_fleet.parquet``'s columns, one row per (mix, design), before the launch commands.
MIXED_COLUMNS = ["mix", "design", "replicas", "share", "confirmed", "p_pass",
                 "fleet_usd_per_hour", "cost_per_mtok", "p95_ttft_s", "note"]
