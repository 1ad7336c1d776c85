"""Several servers as one simulation: replicas behind a router, and disaggregated prefill and
decode pools (docs/model.md "Several servers").

Both are compositions of single-server engine runs, exact by the rules: replicas interact only
through the router (round robin: not at all; least outstanding: through its choices, found by
rounds, see ``run``) and through a closed loop's or sessions' sends (found by rounds too), and
the prefill pool never waits for the decode pool (no backpressure), so the prefill pool's
results fix the decode pool's arrivals. A simulation's servers are lanes of
the same compiled engine call (the decode pools a second call), and the per-server results merge
back into one ``EngineOutput`` in the original request order, which ``metrics.summarize`` reads
with the plan's ``system`` arrays. Everything here is host-side numpy on per-simulation arrays: a
simulation's result depends on nothing but its own inputs.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np

from sweep.engine import ITL_BINS, ITL_LO_S, ITL_LOG_WIDTH, EngineOutput
from sweep.engine.features.closed_loop import closed_arrival
from sweep.engine.fleet_sessions import (by_row, by_session, in_order, sent, session_slots,
                                         sessions_of, share, split_sessions)
from sweep.engine.params import EngineParams, engine_params
from sweep.engine.routers import BY_LOAD, load_cv, round_robin, route, session
from sweep.study.design import Design
from sweep.study.fleet import MixedFleet
from sweep.study.workload import Requests


class Plan(NamedTuple):
    """How a design's simulation runs: which servers, and how their results merge."""

    first: list  # EngineParams of the first call's servers: the replicas, or the prefill pool
    decode: EngineParams | None  # the decode pool (a second call, fed by the first), or None
    system: EngineParams  # the arrays the metrics read: every GPU's cost and utilisation
    gpus: list  # GPUs of each server: first call's, then the decode pool's
    kv_bytes_per_token: float  # KV bytes a transfer moves per prompt token
    link_bytes_per_s: float  # kv_link_gbps x 1e9 / 8 (bits to bytes)
    router: str = "round_robin"
    weights: tuple | None = None  # a mixed fleet's: each server's capacity (``by_capacity``)
    decoders: int = 1  # servers of the decode pool (each ``decode``), in turn as KV arrives


def _whole(params, design: Design):
    """A server's params as the whole system's metrics read them: every GPU of the design, at
    their mean price (pools may be on different GPUs)."""
    summary = params.summary._replace(gpus=np.float64(design.total_gpus))
    if design.disaggregated:
        summary = summary._replace(
            price_per_gpu_s=np.float64(design.usd_per_hour / design.total_gpus / 3600.0))
    return params._replace(summary=summary)


def plan(design: Design | MixedFleet) -> Plan:
    """The servers of ``design`` (validated)."""
    design.validate()
    if isinstance(design, MixedFleet):
        return _mixed(design)
    if design.disaggregated:
        (pre_d, p), (dec_d, d) = design.pools()
        pre = engine_params(pre_d)
        dec = engine_params(dec_d)._replace(transferred=np.bool_(True))
        return Plan([pre] * p, dec, _whole(dec, design),
                    [pre_d.server_gpus] * p + [dec_d.server_gpus] * d,
                    float(design.model_spec.kv_bytes_per_token(design.kv_bits)),
                    design.kv_link_gbps * 1e9 / 8, design.router, decoders=d)
    one = engine_params(design.pool(design.gpus))
    return Plan([one] * design.replicas, None, _whole(one, design),
                [design.server_gpus] * design.replicas, 0.0, math.inf, design.router)


def _mixed(fleet: MixedFleet) -> Plan:
    """A mixed fleet's servers, member by member. Its metrics read one set of summary arrays:
    every GPU at their mean price, and of the members' per-request overheads and KV block sizes
    the largest (so that a mix never looks better than its slowest member's requests)."""
    servers, weights, gpus = [], [], []
    for m, w in zip(fleet.members, fleet.weights):
        one = engine_params(m.pool(m.gpus))
        servers += [one] * m.replicas
        weights += [float(w)] * m.replicas
        gpus += [m.server_gpus] * m.replicas
    summaries = [s.summary for s in servers]
    summary = servers[0].summary._replace(
        gpus=np.float64(fleet.total_gpus),
        price_per_gpu_s=np.float64(fleet.usd_per_hour / fleet.total_gpus / 3600.0),
        **{k: np.float64(max(float(getattr(s, k)) for s in summaries))
           for k in ("block_bytes", "request_overhead_s", "request_lag_passes",
                     "prompt_overhead_s")})
    return Plan(servers, None, servers[0]._replace(summary=summary), gpus, 0.0, math.inf,
                "capacity", tuple(weights))


def plain(p: Plan) -> bool:
    return len(p.first) == 1 and p.decode is None


def nothing(like: Requests) -> Requests:
    """Padding requests shaped as ``like``'s: a server with nothing to do stops at once."""
    n, (length, nodes) = like.arrival.shape[0], np.shape(like.path)[-1:] + np.shape(
        like.node_end)[-1:]
    return Requests(np.full(n, np.inf), np.ones(n, np.int32), np.ones(n, np.int32),
                    np.float64(np.inf), np.uint32(0), np.full(n, -1, np.int32),
                    np.full((n, length), -1, np.int32), np.zeros(nodes, np.int32),
                    np.zeros(nodes, np.int32), think=np.zeros_like(np.asarray(like.think)),
                    turn=np.zeros_like(np.asarray(like.turn)))


def split(r: Requests, chosen, replicas: int) -> list[Requests]:
    """Replica j's requests: those sent to it, in arrival order, padded to the length (one
    replica's: the requests as they are, a closed loop's included)."""
    pad = nothing(r)
    subs = []
    for j in range(replicas):
        idx = np.flatnonzero(chosen == j)
        k = idx.size
        # A closed loop reaching its servers as it is (sessions) shares its clients among them.
        subs.append(r._replace(clients=np.int32(share(int(r.clients), j, replicas)),
                               arrival=np.concatenate([r.arrival[idx], pad.arrival[k:]]),
                               prompt=np.concatenate([r.prompt[idx], pad.prompt[k:]]),
                               output=np.concatenate([r.output[idx], pad.output[k:]]),
                               prefix=np.concatenate([r.prefix[idx], pad.prefix[k:]]),
                               path=np.concatenate([np.asarray(r.path)[idx], pad.path[k:]]),
                               think=_rows(r.think, idx, pad.think, k),
                               turn=_rows(r.turn, idx, pad.turn, k)))
    return subs


def _rows(x, idx, pad, k: int):
    """Rows ``idx`` of a per-request column, then padding's after the first ``k`` (a column
    given as one value for every request stays one)."""
    x = np.asarray(x)
    return x if x.ndim == 0 else np.concatenate([x[idx], pad[k:]])


def prefill_requests(r: Requests) -> Requests:
    """The prefill pool's requests: every request, producing its first token only."""
    return r._replace(output=np.ones_like(r.output))


def transfer_ready(r: Requests, first, p: Plan):
    """When each request's KV has reached the decode pool: its first token (from the prefill
    pool) plus the transfer of its prompt's KV; +inf for one-token requests (nothing to decode)
    and requests the prefill pool never served."""
    ready = first + r.prompt * p.kv_bytes_per_token / p.link_bytes_per_s
    return np.where((r.output > 1) & np.isfinite(first), ready, np.inf)


def decode_requests(r: Requests, ready) -> tuple[Requests, np.ndarray]:
    """The decode pool's requests in order of KV arrival (ties: request order), and that order.
    Each holds its prompt and first token (``p + 1`` cached) and generates the other ``o - 1``."""
    order = np.argsort(ready, kind="stable")
    real = np.isfinite(ready[order])
    pad = nothing(r)
    return pad._replace(arrival=ready[order],
                        prompt=np.where(real, r.prompt[order] + 1, 1).astype(np.int32),
                        output=np.where(real, r.output[order] - 1, 1).astype(np.int32),
                        end_time=r.end_time, seed=r.seed), order


def closed_arrivals(r: Requests, finish, gap) -> np.ndarray:
    """A closed loop's arrivals as the finish times ``finish`` (in any order; nan: none) send
    them, the j-th (in time order) ``gap[clients + j]`` after it (each row's gap), by the
    engine's rule (``features.closed_loop.closed_arrival``: the sends in time order); +inf for a
    request not yet sent."""
    n = r.arrival.shape[0]
    done = np.sort(finish[np.isfinite(finish)])
    due = np.sort(done + gap[np.minimum(int(r.clients) + np.arange(done.size), n - 1)])
    spawn = np.concatenate([due, np.full(n - done.size, np.inf)])
    return closed_arrival(r, spawn, np.arange(n), xp=np)


def itl_bins(gaps) -> np.ndarray:
    """``engine.itl_bin`` in numpy, for the gaps merged in here."""
    b = 1 + np.floor(np.log(gaps / ITL_LO_S) / ITL_LOG_WIDTH)
    return np.clip(b, 1, ITL_BINS - 1).astype(np.int64)


def area_in_system(r: Requests, finish, t_stop) -> float:
    """Integral of the number in system up to ``t_stop`` from per-request times (the servers'
    own integrals stop at their own stop times and miss transfers)."""
    real = np.isfinite(r.arrival) & (r.arrival <= t_stop)
    end = np.where(np.isfinite(finish), np.minimum(finish, t_stop), t_stop)
    return float(np.sum(np.clip(end[real] - r.arrival[real], 0.0, None)))


def _combine(r: Requests, outs: list, gpus: list, first, finish, generated, hist, cached,
             cv: float = 0.0) -> EngineOutput:
    """Aggregates of several servers (docs/model.md "Outputs and metrics", several servers)."""
    t_stop = max(float(o.t_stop) for o in outs)
    busy = sum(g * float(o.busy) for g, o in zip(gpus, outs)) / sum(gpus)
    o0 = outs[0]

    def total(name):
        return np.asarray(sum(np.asarray(getattr(o, name)) for o in outs),
                          dtype=np.asarray(getattr(o0, name)).dtype)

    return EngineOutput(
        arrival=np.asarray(r.arrival, np.float64), first=first, finish=finish,
        generated=generated.astype(o0.generated.dtype),
        t_stop=np.float64(t_stop), tokens=total("tokens"), preemptions=total("preemptions"),
        max_queue=np.asarray(max(int(o.max_queue) for o in outs), o0.max_queue.dtype),
        peak_blocks=total("peak_blocks"),
        area=np.float64(area_in_system(r, finish, t_stop)), busy=np.float64(busy),
        itl_hist=hist.astype(o0.itl_hist.dtype), steps=total("steps"), passes=total("passes"),
        prefix_lookups=total("prefix_lookups"), prefix_hits=total("prefix_hits"),
        prefix_saved=total("prefix_saved"), cached_tokens=cached,
        overflow=np.bool_(any(bool(o.overflow) for o in outs)),
        truncated=np.bool_(any(bool(o.truncated) for o in outs)), load_cv=np.float64(cv))


def merge_replicas(r: Requests, outs: list, gpus: list, chosen) -> EngineOutput:
    """Replicas' results in the original request order; one replica is itself."""
    if len(outs) == 1:
        return outs[0]
    n = r.arrival.shape[0]
    first, finish = np.full(n, np.nan), np.full(n, np.nan)
    arrival = np.asarray(r.arrival, np.float64).copy()
    generated = np.zeros(n, np.int64)
    cached = np.zeros(n, np.asarray(outs[0].cached_tokens).dtype)
    for j, o in enumerate(outs):
        # (A replica's rows may be fewer than its padding's: ``split_sessions``.)
        idx = np.flatnonzero(chosen == j)[:o.finish.shape[0]]
        k = idx.size
        first[idx], finish[idx], generated[idx] = o.first[:k], o.finish[:k], o.generated[:k]
        cached[idx], arrival[idx] = o.cached_tokens[:k], o.arrival[:k]  # a closed loop's own
    hist = sum(np.asarray(o.itl_hist, np.int64) for o in outs)
    return _combine(r._replace(arrival=arrival), outs, gpus, first, finish, generated, hist,
                    cached, load_cv(chosen, r, len(outs)))


def merge_pools(r: Requests, pre: EngineOutput, dec: EngineOutput, order, gpus) -> EngineOutput:
    """Prefill and decode pools' results (each its servers' merged; ``gpus``: each pool's) as
    one: TTFT from the prefill pool, the rest from the decode pool, and the gap from the first
    token to the second (transfer and decode queue included) added to the inter-token
    histogram; the load spread is the prefill pool's, whose router chooses."""
    n = r.arrival.shape[0]
    back = np.empty(n, np.int64)
    back[order] = np.arange(n)
    second, dec_finish = dec.first[back], dec.finish[back]
    finish = np.where(r.output > 1, dec_finish, pre.finish)
    generated = pre.generated.astype(np.int64) + dec.generated[back]
    hist = np.asarray(pre.itl_hist, np.int64) + np.asarray(dec.itl_hist, np.int64)
    got = np.isfinite(second)
    np.add.at(hist, itl_bins(second[got] - pre.first[got]), 1)
    return _combine(r, [pre, dec], gpus, np.asarray(pre.first), finish, generated, hist,
                    np.asarray(pre.cached_tokens), float(pre.load_cv))


def _pick(tree, k):
    return type(tree)(*(np.asarray(x)[k] for x in tree))


def _stack(trees):
    return type(trees[0])(*(np.stack([np.asarray(x) for x in xs]) for xs in zip(*trees)))


def run(plans: list, reqs: Requests, call: Callable, width: int,
        real: int | None = None) -> EngineOutput:
    """Simulate ``plans[m]`` on requests ``reqs[m]`` for every m: ``call(params list,
    stacked Requests) -> EngineOutput`` runs one engine call; the first call is padded to
    ``width`` servers (fixed per study: one compiled shape), the decode pools' call to
    ``len(plans)``. Plain designs alone are one call on the requests as given; if the plans
    after the first ``real`` are padding, that call is told so (``call(params, reqs, real)``).

    The choices of a router that reads the replicas' load (``BY_LOAD``), and the arrivals of
    a closed loop or of sessions over several servers, are found by rounds: simulate the
    servers with the choices and arrivals so far, choose and send again from the finishes,
    repeat until nothing changes. Choices and arrivals right for the requests before i give
    the right finish times before ``a_i`` (a pass that ends by then began before), hence the
    right choice and arrival for i: each round settles at least one more request, and a round
    that changes nothing is the fixed point. A simulation still changing after ``n + 1``
    rounds (n requests; a step bound can break the argument) is flagged truncated."""
    m = len(plans)
    if all(plain(p) for p in plans):
        first = [p.first[0] for p in plans]
        return call(first, reqs) if real is None else call(first, reqs, real)
    rows = [_pick(reqs, k) for k in range(m)]
    n = rows[0].arrival.shape[0]
    chosen = [route(p, r) for p, r in zip(plans, rows)]
    sends = {k: _sends(r, np.broadcast_to(r.think, (n,)) + p.system.summary.request_overhead_s)
             for k, (p, r) in enumerate(zip(plans, rows)) if _looped(p, r)}
    # Each loop's arrivals by row as the finishes so far send them (+inf: not yet sent), and
    # the order of its rows as they arrive.
    sent_so_far = {k: s(np.full(n, np.nan)) for k, s in sends.items()}

    def given(k) -> Requests:
        """Plan k's requests as its servers get them (a loop's: open, as they arrive)."""
        return in_order(rows[k], *sent_so_far[k]) if k in sends else rows[k]

    def again(k, got: EngineOutput) -> bool:
        """Plan k's arrivals and choices from the finishes ``got``: whether either moved."""
        # The router's servers finish a request at its end, or a prefill pool's at its first
        # token.
        moved, served = False, got.finish if plans[k].decode is None else got.first
        if k in sends:
            was, order = sent_so_far[k]
            by_row, served_by_row = np.empty(n), np.empty(n)
            by_row[order], served_by_row[order] = got.finish, served
            now = sent_so_far[k] = sends[k](by_row)
            moved = not (np.array_equal(now[0], was) and np.array_equal(now[1], order))
            served = served_by_row[now[1]]
        if plans[k].router in BY_LOAD and len(plans[k].first) > 1:
            new = BY_LOAD[plans[k].router](given(k), served, chosen[k], len(plans[k].first))
            moved |= not np.array_equal(new, chosen[k])
            chosen[k] = new
        return moved

    def serve(ks) -> dict:
        return _serve(plans, {k: given(k) for k in ks}, chosen, call, width)

    merged = serve(range(m))
    todo = list(range(m))
    for _ in range(n + 1):
        todo = [k for k in todo if again(k, merged[k])]
        if not todo:
            break
        merged.update(serve(todo))
    for k in sends:
        merged[k] = by_row(merged[k], sent_so_far[k][1])
    return _stack([merged[k]._replace(truncated=np.bool_(True)) if k in todo else merged[k]
                   for k in range(m)])


def _looped(p: Plan, r: Requests) -> bool:
    """Whether a plan's arrivals are its finishes' sends over several servers: a closed loop's,
    or sessions' but behind the session router (each replica then sends its own)."""
    return not plain(p) and (int(r.clients) > 0 or sessions_of(r)) and not by_session(p, r)


def _sends(r: Requests, gap) -> Callable:
    """A loop's rule from finishes (by row) to arrivals (by row) and the rows' order (``gap``:
    each row's)."""
    if sessions_of(r):
        return lambda finish: sent(r, finish, gap)
    order = np.arange(r.arrival.shape[0])
    return lambda finish: (closed_arrivals(r, finish, gap), order)


def _serve(plans: list, given: dict, chosen: list, call: Callable, width: int) -> dict:
    """The merged outputs of the plans ``given`` (index -> the requests its servers get): the
    first call (``width`` servers: the replicas, or the prefill pools), then the decode
    pools' (``_decode``)."""
    params, subs, owner = [], [], {}
    # Replicas each holding their own sessions run in as few rows as the busiest needs.
    compact = all(by_session(plans[k], r) for k, r in given.items())
    slots = max((session_slots(r, chosen[k], len(plans[k].first)) for k, r in given.items()),
                default=0) if compact else 0
    # A prefill pool's requests (each producing its first token) and their servers.
    prefill = {k: (prefill_requests(r), _prefill_choices(plans[k], r, chosen[k]))
               for k, r in given.items() if plans[k].decode is not None}
    for k, r in given.items():
        p = plans[k]
        parts = (split(*prefill[k], len(p.first)) if k in prefill else
                 split_sessions(r, chosen[k], len(p.first), slots) if compact else
                 split(r, chosen[k], len(p.first)))
        owner[k] = range(len(subs), len(subs) + len(parts))
        params += p.first
        subs += parts
    if len(subs) > width:
        raise ValueError(f"topology.run: {len(subs)} servers in a call of width {width}")
    params += [plans[0].first[0]] * (width - len(subs))
    pad = nothing(subs[0])
    subs += [pad] * (width - len(subs))
    out = call(params, _stack(subs))
    firsts = {k: [_pick(out, j) for j in owner[k]] for k in given}
    merged = {k: merge_replicas(r, firsts[k], plans[k].gpus, chosen[k])
              for k, r in given.items() if plans[k].decode is None}
    pooled = {k: merge_replicas(pre_r, firsts[k], plans[k].gpus[:len(firsts[k])], to)
              for k, (pre_r, to) in prefill.items()}
    return {**merged, **_decode(plans, given, pooled, call, pad)} if pooled else merged


def _decode(plans: list, given: dict, pooled: dict, call: Callable, pad: Requests) -> dict:
    """Of the plans ``pooled`` (index -> its prefill pool's merged output), the decode pools'
    call (plan k's servers in lanes from k times the most servers a plan's decode pool has:
    one compiled shape per study), and both pools' results as one."""
    most = max(p.decoders for p in plans if p.decode is not None)
    params, reqs = [plans[0].first[0]] * (len(plans) * most), [pad] * (len(plans) * most)
    queued = {}
    for k, pre in pooled.items():
        p, lanes = plans[k], slice(k * most, k * most + plans[k].decoders)
        dec_r, order = decode_requests(given[k], transfer_ready(given[k], pre.first, p))
        to = round_robin(dec_r.arrival.shape[0], p.decoders)  # in order of KV arrival
        reqs[lanes], params[lanes] = split(dec_r, to, p.decoders), [p.decode] * p.decoders
        queued[k] = dec_r, order, to, lanes
    out = call(params, _stack(reqs))
    merged = {}
    for k, (dec_r, order, to, lanes) in queued.items():
        p, cut = plans[k], len(plans[k].first)
        dec = merge_replicas(dec_r, [_pick(out, j) for j in range(lanes.start, lanes.stop)],
                             p.gpus[cut:], to)
        merged[k] = merge_pools(given[k], pooled[k], dec, order,
                                [sum(p.gpus[:cut]), sum(p.gpus[cut:])])
    return merged


def _prefill_choices(p: Plan, r: Requests, chosen):
    """The prefill pool's servers of the requests ``r`` as the pool gets them: the session
    router's from those requests (sessions' turns reach a pool open, in the order they
    arrive), else ``chosen``."""
    return session(r, len(p.first)) if p.router == "session" else chosen
