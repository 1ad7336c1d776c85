"""The twin's entries: one server step by step, and several servers (replicas behind a router,
mixed fleets, disaggregated pools) as the engine's ``topology`` composes them.

It is written for clarity, not speed, and follows docs/model.md's "One step" literally, one
numbered rule at a time (``rules``, one function per rule), so that it can be compared
request by request against the vectorised ``lax.scan`` engine (``sweep/engine/``). Both call the
same ``timing.pass_time`` (here on Python floats: ``timing.scalar_time``) and the same
``rng.uniform_bits`` draws.

Work per step is proportional to the occupied seats (plus one ``pass_time`` call and, under
speculation, one vectorised ``uniform_bits`` call), never to the number of requests: the FIFO
queue is two indices ``head``/``tail`` into the arrival-sorted requests, and free seats are a heap.
"""
from __future__ import annotations

import math

import numpy as np

from sweep.engine.params import EngineParams
from sweep.engine.routers import PREFIX_LOAD_CAP, PREFIX_MATCH_SHARE
from sweep.study.workload import Requests
from sweep.twin import multi_step, sessions
from sweep.twin.closed_loop import closed_loop
from sweep.twin.metrics import summarize_reference
from sweep.twin.prefills import Pass, budget, continue_prefills, evict, used
from sweep.twin.rules import (admission, completion, growth, idle_jump, readmission, stop,
                              the_pass, tokens)
from sweep.twin.state import RefResult, columns, gap, load, result

__all__ = ["RefResult", "simulate_disaggregated_reference", "simulate_mixed_reference",
           "simulate_reference", "simulate_replicas_reference", "summarize_reference"]


def simulate_reference(params: EngineParams, req: Requests,
                       max_steps: int | None = None) -> RefResult:
    """Simulate one design on one set of requests, step by step (docs/model.md "One step")."""
    tw = load(params, req, max_steps)
    while True:
        idle_jump(tw)  # 1
        if stop(tw):  # 2
            return result(tw)
        tw.steps += 1
        decoding = growth(tw)  # 3
        if decoding is None:  # a preemption: no pass, the clock does not move
            evict(tw)
            continue
        ps = Pass(decoding, budget(tw, decoding))
        continue_prefills(tw, ps)
        # Admission waits while a seat is preempted, so never in a step that readmits; under
        # multi-step scheduling both wait for a block's first pass.
        barred = any(s.preempted for s in tw.occupied.values())
        ps.schedules = multi_step.schedules(tw)
        if ps.schedules:
            readmission(tw, ps)  # 4
            if not barred:
                admission(tw, ps)  # 5
        tw.max_queue = max(tw.max_queue, tw.tail - tw.head)
        tw.peak_blocks = max(tw.peak_blocks, used(tw))
        t_end = the_pass(tw, ps)  # 6
        multi_step.passed(tw, ps.schedules)
        tokens(tw, ps, t_end)  # 7
        completion(tw, t_end)  # 8
        evict(tw)
        tw.t = t_end  # 9
        tw.passes += 1


def simulate_replicas_reference(params: EngineParams, req: Requests, replicas: int,
                                router: str = "round_robin") -> RefResult:
    """Replicas behind a router (docs/model.md "Replicas"), each a server of its own: round
    robin sends request i (in arrival order) to replica i mod N; session a request of prefix
    group c to replica c mod N (one without a group round robin over such requests); least
    outstanding to the replica with the fewest requests sent there and unfinished at its
    arrival (ties: the lowest); prefix aware to the least loaded replica whose earlier requests
    share the longest start of its path, unless that start is under ``PREFIX_MATCH_SHARE`` of
    the path or that replica has more than ``PREFIX_LOAD_CAP`` outstanding beyond the least
    loaded, else to the least loaded (then the one whose earlier requests' paths hold the
    fewest tokens). The last two are found as the fixed point of choosing
    again from the finish times the choices so far lead to (rounds: see ``topology.run``). One
    replica is the plain server."""
    if replicas == 1:
        return simulate_reference(params, req)
    turn = np.broadcast_to(np.asarray(req.turn), np.shape(req.arrival)).reshape(-1)
    if router == "session" and (turn == 1).any():  # each session, and user, on one replica
        session = np.where(turn > 0, np.cumsum(turn == 1) - 1, -1)
        loose = np.cumsum(session < 0) - 1
        chosen = np.where(session >= 0, session, loose) % replicas
        return _replicas(req, _serve([params] * replicas, req, chosen.tolist())[0], chosen,
                         replicas)
    if (turn == 1).any():  # sessions, sent as they arrive
        return sessions.fleet(req, gap(req, params), lambda r: simulate_replicas_reference(
            params, r, replicas, router))
    if int(np.asarray(req.clients)) > 0:
        return closed_loop(req, gap(req, params), lambda r: simulate_replicas_reference(
            params, r, replicas, router))
    arrival, _, _, n = columns(req)
    prefix = [int(c) for c in np.asarray(req.prefix).reshape(-1)]
    paths = [tuple(int(k) for k in row if k >= 0) for row in _rows(req.path, n)]
    if router == "session":
        loose = [sum(1 for c in prefix[:i] if c < 0) for i in range(n)]
        chosen = [(prefix[i] if prefix[i] >= 0 else loose[i]) % replicas for i in range(n)]
    else:
        chosen = [i % replicas for i in range(n)]
    for _ in range(n + 1):
        parts, finish = _serve([params] * replicas, req, chosen)
        if router == "least_outstanding":
            again = _least_outstanding(arrival, finish, chosen, replicas)
        elif router == "prefix_aware":
            ends = np.asarray(req.node_end)
            again = _prefix_aware(arrival, paths, ends.tolist(),
                                  (ends - np.asarray(req.node_start)).tolist(), finish, chosen,
                                  replicas)
        else:
            again = chosen
        if again == chosen:
            break
        chosen = again
    merged = _replicas(req, parts, chosen, replicas)
    merged.truncated |= again != chosen
    return merged


def _replicas(req: Requests, parts: list, chosen, replicas: int) -> RefResult:
    merged = _merged_servers(req, parts)
    merged.replica = np.asarray(chosen, dtype=np.int64)
    merged.servers = replicas
    return merged


def simulate_mixed_reference(servers: list[EngineParams], weights, req: Requests) -> RefResult:
    """A mixed fleet (docs/model.md "Mixed fleets"): server j runs ``servers[j]``; request i,
    in arrival order, goes to the server furthest below its share of the requests so far, this
    one included: the largest ``(i + 1) weights[j] - sum(weights) sent_j``, ties to the lowest."""
    n = columns(req)[3]
    w = [float(x) for x in weights]
    total = float(np.sum(w))
    sent = [0] * len(servers)
    chosen = []
    for i in range(n):
        deficit = [(i + 1) * w[k] - total * sent[k] for k in range(len(servers))]
        j = deficit.index(max(deficit))
        chosen.append(j)
        sent[j] += 1
    merged = _merged_servers(req, _serve(servers, req, chosen)[0])
    merged.replica = np.asarray(chosen, dtype=np.int64)
    merged.servers = len(servers)
    return merged


def _rows(path, n: int) -> np.ndarray:
    """A simulation's paths as ``n`` rows (``n`` may be 0)."""
    path = np.asarray(path)
    return path.reshape(n, path.shape[-1])


def _serve(servers: list[EngineParams], req: Requests, chosen: list):
    """Each server's requests (``chosen[i]``: request i's server) simulated on its own: the
    (request indices, result) of each, and the finish times in request order."""
    arrival, prompt, output, n = columns(req)
    turn = np.broadcast_to(np.asarray(req.turn), (n,))
    think = np.broadcast_to(np.asarray(req.think), (n,))
    c = int(np.asarray(req.clients))  # a closed loop's that reaches its servers as it is
    parts = []
    for j, params in enumerate(servers):
        idx = [i for i in range(n) if chosen[i] == j]
        sub = req._replace(arrival=arrival[idx], prompt=prompt[idx], output=output[idx],
                           prefix=np.asarray(req.prefix).reshape(-1)[idx],
                           path=_rows(req.path, n)[idx], turn=turn[idx], think=think[idx],
                           clients=np.int32(c // len(servers) + (j < c % len(servers))))
        parts.append((idx, simulate_reference(params, sub)))
    finish = np.full(n, np.nan)
    for idx, res in parts:
        finish[idx] = res.finish
    return parts, finish


def _merged_servers(req: Requests, parts: list) -> RefResult:
    """Several servers' results (``_serve``) in request order, as one."""
    arrival, _, _, n = columns(req)
    first, finish = np.full(n, np.nan), np.full(n, np.nan)
    generated, cached = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    arrival = arrival.copy()
    for idx, res in parts:
        first[idx], finish[idx], generated[idx] = res.first_token, res.finish, res.generated
        cached[idx] = res.cached_tokens
        if res.arrival is not None:  # a closed loop's, as it set them
            arrival[idx] = res.arrival
    gaps = np.concatenate([res.itl_gaps for _, res in parts])
    merged = _merged(arrival, [res for _, res in parts], first, finish, generated, gaps, cached)
    if any(res.arrival is not None for _, res in parts):
        merged.arrival = arrival
    return merged


def _least_outstanding(arrival, finish, chosen: list, replicas: int) -> list:
    """The router's choices again (docs/model.md "Replicas"): in arrival order, each request to
    the replica with the fewest requests sent there by the new choices and not finished at its
    arrival by the finish times ``chosen`` led to, ties to the lowest."""
    again = list(chosen)
    for i in range(len(arrival)):
        if not math.isfinite(arrival[i]):
            continue
        outstanding = _outstanding(arrival, finish, again, i, replicas)
        again[i] = min(range(replicas), key=lambda k: (outstanding[k], k))
    return again


def _outstanding(arrival, finish, again: list, i: int, replicas: int) -> list:
    """Each replica's requests sent there (by ``again``) before request i and not finished at
    its arrival (nan, never finished, is outstanding)."""
    outstanding = [0] * replicas
    for j in range(i):
        if not finish[j] <= arrival[i]:
            outstanding[again[j]] += 1
    return outstanding


def _common(a: tuple, b: tuple) -> int:
    """The length of two paths' common start."""
    h = 0
    while h < min(len(a), len(b)) and a[h] == b[h]:
        h += 1
    return h


def _prefix_aware(arrival, paths: list, ends: list, tokens: list, finish, chosen: list,
                  replicas: int) -> list:
    """The prefix-aware router's choices again (docs/model.md "Replicas"), by brute force: a
    replica's score is the longest common start of the request's path with the path of a
    request sent there before."""
    again = list(chosen)
    for i in range(len(arrival)):
        if not math.isfinite(arrival[i]):
            continue
        out = _outstanding(arrival, finish, again, i, replicas)
        score, held = [0] * replicas, [set() for _ in range(replicas)]
        for j in range(i):
            if math.isfinite(arrival[j]):
                score[again[j]] = max(score[again[j]], _common(paths[i], paths[j]))
                held[again[j]].update(paths[j])
        size = [sum(tokens[k] for k in nodes) for nodes in held]
        least = min(range(replicas), key=lambda k: (out[k], size[k], k))
        top = max(score)
        best = min((k for k in range(replicas) if score[k] == top), key=lambda k: (out[k], k))
        enough = top > 0 and ends[paths[i][top - 1]] >= PREFIX_MATCH_SHARE * ends[paths[i][-1]]
        fits = enough and out[best] <= out[least] + PREFIX_LOAD_CAP
        again[i] = best if fits else least
    return again


def simulate_disaggregated_reference(prefill: EngineParams, decode: EngineParams,
                                     req: Requests, kv_bytes_per_token: float,
                                     link_bytes_per_s: float, prefill_workers: int = 1,
                                     decode_workers: int = 1,
                                     router: str = "round_robin") -> RefResult:
    """A prefill pool and a decode pool in tandem (docs/model.md "Disaggregated prefill and
    decode"): the prefill pool (``prefill_workers`` servers behind ``router``, as replicas)
    serves every request's first token; a request with more to generate then moves its
    prompt's KV over the link and joins the decode pool in order of arrival there, the k-th to
    arrive on decode server k mod ``decode_workers`` (``decode.transferred`` must be set)."""
    def again(r):
        return simulate_disaggregated_reference(prefill, decode, r, kv_bytes_per_token,
                                                link_bytes_per_s, prefill_workers,
                                                decode_workers, router)

    if (np.asarray(req.turn) == 1).any():  # sessions, sent as they arrive
        return sessions.fleet(req, gap(req, decode), again)
    if int(np.asarray(req.clients)) > 0:
        return closed_loop(req, gap(req, decode), again)
    arrival, prompt, output, n = columns(req)
    pre = simulate_replicas_reference(prefill, req._replace(
        output=np.ones(n, np.int64), clients=0, think=0.0, warmup=0), prefill_workers, router)
    ready = []
    for i in range(n):
        t1 = float(pre.first_token[i])
        ready.append(t1 + int(prompt[i]) * kv_bytes_per_token / link_bytes_per_s
                     if output[i] > 1 and math.isfinite(t1) else math.inf)
    order = [i for i in sorted(range(n), key=lambda i: (ready[i], i)) if math.isfinite(ready[i])]
    dec = simulate_replicas_reference(decode, req._replace(
        arrival=np.array([ready[i] for i in order], dtype=np.float64),
        prompt=np.array([prompt[i] + 1 for i in order], dtype=np.int64),
        output=np.array([output[i] - 1 for i in order], dtype=np.int64),
        prefix=np.full(len(order), -1, np.int32),
        path=np.full((len(order), _rows(req.path, n).shape[1]), -1, np.int32),
        clients=0, think=0.0, warmup=0, turn=np.zeros(len(order), np.int32)), decode_workers)
    finish = pre.finish.copy()
    generated = pre.generated.copy()
    gaps = list(dec.itl_gaps)
    for k, i in enumerate(order):
        finish[i] = dec.finish[k]
        generated[i] += dec.generated[k]
        if math.isfinite(dec.first_token[k]):  # the second token: transfer and queue included
            gaps.append(float(dec.first_token[k]) - float(pre.first_token[i]))
    merged = _merged(arrival, [pre, dec], pre.first_token, finish, generated,
                     np.asarray(gaps, dtype=np.float64), pre.cached_tokens)
    merged.replica, merged.servers = pre.replica, pre.servers
    return merged


def _merged(arrival, parts: list[RefResult], first, finish, generated, gaps,
            cached) -> RefResult:
    """Several servers' results as one (docs/model.md "Several servers")."""
    t_stop = max(res.t_stop for res in parts)
    real = np.isfinite(arrival) & (arrival <= t_stop)
    ends = np.where(np.isfinite(finish), np.minimum(finish, t_stop), t_stop)
    return RefResult(
        first_token=first, finish=finish, generated=generated, t_stop=t_stop, itl_gaps=gaps,
        preemptions=sum(res.preemptions for res in parts),
        max_queue=max(res.max_queue for res in parts),
        peak_blocks=sum(res.peak_blocks for res in parts),
        area_in_system=float(np.sum(np.clip(ends[real] - arrival[real], 0.0, None))),
        steps=sum(res.steps for res in parts), passes=sum(res.passes for res in parts),
        tokens=sum(res.tokens for res in parts),
        truncated=any(res.truncated for res in parts),
        prefix_lookups=sum(res.prefix_lookups for res in parts),
        prefix_hits=sum(res.prefix_hits for res in parts),
        prefix_saved=sum(res.prefix_saved for res in parts), cached_tokens=cached)
