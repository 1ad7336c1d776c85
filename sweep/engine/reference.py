"""Event-driven twin of the scan engine: a plain-Python simulator of docs/model.md.

It is written for clarity, not speed, and follows docs/model.md's "One step" literally, one
numbered rule at a time, so that it can be compared request by request against the vectorised
``lax.scan`` engine (``sweep/engine/``). Both call the same ``timing.pass_time`` (here with
``xp=np`` on float64 scalars) and the same ``rng.uniform_bits`` draws.

Work per step is proportional to the occupied seats (plus one ``pass_time`` call and, under
speculation, one vectorised ``uniform_bits`` call), never to the number of requests: the FIFO
queue is two indices ``head``/``tail`` into the arrival-sorted requests, and free seats are a heap.

Where docs/model.md could be read two ways, the reading taken is marked ``SPEC:`` below.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from sweep.engine.reference_metrics import summarize_reference
from sweep.engine.reference_state import RefResult
from sweep.physics import rng, timing
from sweep.study.design import EngineParams
from sweep.study.workload import Requests

__all__ = ["RefResult", "simulate_disaggregated_reference", "simulate_reference",
           "simulate_replicas_reference", "summarize_reference"]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class _Seat:
    """An occupied seat (docs/model.md "State")."""

    req: int  # request index i
    p: int  # prompt tokens
    o: int  # output tokens
    g: int = 0  # tokens generated so far
    b: int = 0  # KV blocks held
    last: float = math.nan  # time of its last token
    npass: int = 0  # decode passes taken (keys the speculative draws; kept across preemption)
    preempted: bool = False
    pfx: int = -1  # shared prefix it uses under prefix caching (-1: none)
    todo: int = 0  # context tokens still to prefill (chunked prefill); 0 once decoding


def simulate_reference(params: EngineParams, req: Requests,
                       max_steps: int | None = None) -> RefResult:
    """Simulate one design on one set of requests, step by step (docs/model.md)."""
    arrival_np = np.asarray(req.arrival, dtype=np.float64).reshape(-1)
    prompt_np = np.asarray(req.prompt).astype(np.int64).reshape(-1)
    output_np = np.asarray(req.output).astype(np.int64).reshape(-1)
    N = arrival_np.shape[0]
    if prompt_np.shape[0] != N or output_np.shape[0] != N:
        raise ValueError("requests: arrival, prompt and output must have the same length")
    if N > 1 and not np.all(arrival_np[1:] >= arrival_np[:-1]):
        raise ValueError("requests: arrivals must be sorted (padding +inf at the end)")
    if np.any(np.isnan(arrival_np)):
        raise ValueError("requests: arrival times must not be nan")
    if np.any(output_np[np.isfinite(arrival_np)] < 1):
        raise ValueError("requests: every real request needs output >= 1")

    # Python scalars for the per-step bookkeeping (exact integer arithmetic).
    arrival = arrival_np.tolist()
    prompt = prompt_np.tolist()
    output = output_np.tolist()
    prefix_cache = bool(params.prefix_cache)
    prefix = (np.asarray(req.prefix).astype(np.int64).reshape(-1).tolist() if prefix_cache
              else [-1] * N)
    P = int(np.asarray(req.prefix_tokens))
    chunk = int(params.prefill_chunk)
    budget = int(params.token_budget)
    end_time = float(np.asarray(req.end_time))
    seed = np.uint32(np.asarray(req.seed))

    seats_n = int(params.max_batch)
    static = bool(params.static)
    bt = int(params.block_tokens)
    total_blocks = int(params.total_blocks)
    pb = _ceil_div(P, bt)  # blocks of a shared prefix
    k = int(params.draft_tokens)
    thresholds = np.asarray(params.accept_thresholds)[:k]
    tparams = timing.TimingParams(*(np.float64(v) for v in params.timing))
    transferred = bool(params.transferred)  # a decode pool: admissions arrive prefilled

    # Real requests (finite arrival) form a prefix, since arrivals are sorted.

    first_token = np.full(N, np.nan)
    finish = np.full(N, np.nan)
    generated = np.zeros(N, dtype=np.int64)
    itl_gaps: list[float] = []

    t = 0.0
    head = 0  # requests ever admitted
    tail = 0  # requests with arrival <= t
    occupied: dict[int, _Seat] = {}  # seat index -> seat
    free_seats = list(range(seats_n))  # a sorted list is a valid min-heap
    cached: set[int] = set()  # prefixes whose KV is cached
    stamps: dict[int, int] = {}  # prefix -> pass of the last prefill that referenced it
    lookups = hits = 0
    preemptions = 0
    max_queue = 0
    peak_blocks = 0
    steps = 0
    passes = 0
    tokens = 0
    truncated = False

    def advance_tail(tail: int, t: float) -> int:
        while tail < N and arrival[tail] <= t:
            tail += 1
        return tail

    def refs() -> set[int]:
        """Prefixes held by running (not preempted) sequences."""
        return {s.pfx for s in occupied.values() if not s.preempted and s.pfx >= 0}

    def used() -> int:
        """Blocks in use: each sequence's own, and each held prefix's once."""
        return sum(s.b for s in occupied.values()) + pb * len(refs())

    def cost(pfx: int, full: int) -> tuple[int, int]:
        """(own blocks, blocks taken from the free ones) of a sequence whose context needs
        ``full`` blocks: a held prefix's blocks are shared."""
        own = full - (pb if pfx >= 0 else 0)
        return own, (own if pfx >= 0 and pfx in refs() else full)

    def evict() -> None:
        """Unreferenced cached prefixes live in free blocks: evict the oldest (stamp, then id)
        while they do not fit."""
        held = refs()
        idle = sorted((stamps[c], c) for c in cached if c not in held)
        if pb == 0 or not idle:
            return
        keep = (total_blocks - used()) // pb
        for _, c in idle[:max(0, len(idle) - keep)]:
            cached.discard(c)

    while True:
        # 1. Idle jump.
        tail = advance_tail(tail, t)
        if not occupied and tail == head:
            # SPEC: the jump is taken only when a request is left to arrive (a_head finite).
            # Read literally, `t = max(t, a_head)` with no request left (head == N, or padding
            # with a = +inf) would set t = +inf, and so t_stop = +inf, before rule 2 stops.
            if head < N and math.isfinite(arrival[head]):
                t = max(t, arrival[head])
            tail = advance_tail(tail, t)

        # 2. Stop.
        left_to_arrive = tail < N and math.isfinite(arrival[tail])
        if (not occupied and tail == head and not left_to_arrive) or t >= end_time:
            break
        # SPEC (bookkeeping): a step bound counts steps that ran (a pass or a preemption); the
        # bound truncates only if the run is not done by rule 2 at the next step.
        if max_steps is not None and steps >= max_steps:
            truncated = True
            break
        steps += 1

        # 3. Growth. Every running seat will decode and may emit look = min(k + 1, o - g).
        # A sequence mid-prefill (chunked) holds its blocks and does not decode.
        running = [s for s in occupied.values() if not s.preempted]
        decoding = [s for s in running if s.todo == 0]
        grows = []
        total_grow = 0
        for s in decoding:
            look = min(k + 1, s.o - s.g)
            own = _ceil_div(s.p + s.g + look, bt) - (pb if s.pfx >= 0 else 0)
            grow = max(0, own - s.b)
            grows.append(grow)
            total_grow += grow
        if total_grow > total_blocks - used():
            victim = max(running, key=lambda s: s.req)  # the request that arrived last
            victim.b = 0
            victim.todo = 0
            victim.preempted = True
            preemptions += 1
            evict()
            continue  # a zero-time step: no pass, the clock does not move
        for s, grow in zip(decoding, grows):
            s.b += grow

        # Chunked prefill: the pass prefills `left` tokens at most, sequences mid-prefill first
        # (in request order), then a readmitted or admitted one while budget is left.
        left = chunk if chunk > 0 else math.inf
        if budget > 0:  # a token budget covers the decodes first
            left = min(left, budget - len(decoding) * (k + 1))
        prefills: list[tuple[_Seat, int, int]] = []  # (seat, chunk, tokens already in its KV)
        for s in sorted((s for s in running if s.todo > 0), key=lambda s: s.req):
            c = min(s.todo, left)
            prefills.append((s, c, s.p + s.g - s.todo))
            left -= c

        def start(s: _Seat, length: int) -> None:
            """A prefill of ``length`` context tokens starts; a cached prefix is not redone."""
            nonlocal left, lookups, hits
            hit = s.pfx >= 0 and s.pfx in cached
            if s.pfx >= 0:
                lookups += 1
                hits += hit
                stamps[s.pfx] = passes
            s.todo = length - (P if hit else 0)
            c = min(s.todo, left)
            prefills.append((s, c, length - s.todo))
            left -= c

        # 4. Readmission of the earliest preempted request, at most one per step.
        loads: list[_Seat] = []  # transferred admissions: one decode over the cached context
        preempted = [s for s in occupied.values() if s.preempted]
        if preempted:
            s = min(preempted, key=lambda s: s.req)
            own, need = cost(s.pfx, _ceil_div(s.p + s.g + 1, bt))
            if need <= total_blocks - used() and left > 0:
                s.b = own
                s.preempted = False
                start(s, s.p + s.g)  # recomputes its whole context

        # 5. Admission, FIFO with no skipping, into the free seats in increasing order; not in a
        # step that began with a preempted seat.
        any_preempted = bool(preempted)
        if not any_preempted and not (static and occupied):
            while head < tail and free_seats and left > 0:
                i = head
                own, need = cost(prefix[i], _ceil_div(prompt[i] + 1, bt))
                if need > total_blocks - used():
                    break  # admission stops at the first request that does not fit
                seat_index = heapq.heappop(free_seats)
                s = _Seat(req=i, p=prompt[i], o=output[i], b=own, pfx=prefix[i])
                occupied[seat_index] = s
                head += 1
                if transferred:  # prefilled in another pool: emits one token
                    s.todo = 0
                    prefills.append((s, 0, s.p))
                    loads.append(s)
                else:
                    start(s, s.p)

        max_queue = max(max_queue, tail - head)
        peak_blocks = max(peak_blocks, used())

        # 6. The pass. Integer sums are exact Python ints, then float64. A chunk of c tokens
        # after L already in the KV attends to L + 1 .. L + c keys; a transferred admission
        # decodes once over its cached context.
        p_tokens = sum(c for _, c, _ in prefills)
        p_pairs = sum(c * L + c * (c + 1) // 2 for _, c, L in prefills)
        d_seqs = len(decoding) + len(loads)
        d_context = sum(s.p + s.g for s in decoding) + sum(s.p for s in loads)
        if not prefills and not running and max_steps is None and math.isinf(end_time):
            # SPEC: an empty pass (nothing to prefill or decode) is run literally (its time is
            # the pass time of no work), but it means nothing can ever change: the head request
            # or the earliest preempted one needs more blocks than the whole cache.
            raise RuntimeError("simulate_reference: no progress possible (a request needs more "
                               "KV blocks than the cache holds) and no step or time bound")
        duration = timing.pass_time(tparams, np.float64(p_tokens), np.float64(p_pairs),
                                    np.float64(d_seqs), np.float64(d_context), xp=np)
        t_end = float(np.float64(t) + np.float64(duration))

        # 7. Tokens.
        emitted: list[tuple[_Seat, int]] = []
        for s, c, L in prefills:
            s.todo -= c
            if s.pfx >= 0 and L + c >= P:
                cached.add(s.pfx)  # its prefix is in the KV now
            if s.todo == 0:
                emitted.append((s, 1))  # the prompt is done: the first (or next) token
        if decoding:
            if k > 0:
                idx = np.array([s.req for s in decoding], dtype=np.int64)
                npass = np.array([s.npass for s in decoding], dtype=np.int64)
                draws = rng.uniform_bits(seed, idx, npass, xp=np)
                # A = #{j <= k : u < T_j}: the leading run of accepted drafts, from one draw.
                leading = (draws[:, None] < thresholds[None, :]).sum(axis=1).tolist()
            else:
                leading = [0] * len(decoding)
            for s, A in zip(decoding, leading):
                emitted.append((s, min(int(A) + 1, s.o - s.g)))
                s.npass += 1
        for s, m in emitted:
            if s.g == 0:
                first_token[s.req] = t_end  # the first token has no gap
            else:
                itl_gaps.append(t_end - s.last)
            if m > 1:
                itl_gaps.extend([0.0] * (m - 1))
            s.g += m
            s.last = t_end
            generated[s.req] = s.g
            tokens += m

        # 8. Completion.
        for seat_index in [j for j, s in occupied.items() if s.g >= s.o]:
            s = occupied.pop(seat_index)
            finish[s.req] = t_end
            heapq.heappush(free_seats, seat_index)
        evict()

        # 9. The clock.
        t = t_end
        passes += 1

    t_stop = t
    real = np.isfinite(arrival_np) & (arrival_np <= t_stop)
    ends = np.where(np.isfinite(finish), np.minimum(finish, t_stop), t_stop)
    area = float(np.sum(np.clip(ends[real] - arrival_np[real], 0.0, None)))

    return RefResult(
        first_token=first_token, finish=finish, generated=generated, t_stop=float(t_stop),
        itl_gaps=np.asarray(itl_gaps, dtype=np.float64), preemptions=preemptions,
        max_queue=max_queue, peak_blocks=peak_blocks, area_in_system=area, steps=steps,
        passes=passes, tokens=tokens, truncated=truncated, prefix_lookups=lookups, prefix_hits=hits)


def simulate_replicas_reference(params: EngineParams, req: Requests, replicas: int,
                                router: str = "round_robin") -> RefResult:
    """Replicas behind a router (docs/model.md "Replicas"), each a server of its own: round
    robin sends request i (in arrival order) to replica i mod N; least outstanding to the
    replica with the fewest requests sent there and unfinished at its arrival (ties: the
    lowest), found as the fixed point of choosing again from the finish times the choices so
    far lead to (rounds: see ``topology.run``). One replica is the plain server."""
    arrival, prompt, output, n = _columns(req)
    chosen = [i % replicas for i in range(n)]
    for _ in range(n + 1):
        parts = []
        for j in range(replicas):
            idx = [i for i in range(n) if chosen[i] == j]
            sub = Requests(arrival[idx], prompt[idx], output[idx], req.end_time, req.seed,
                           np.asarray(req.prefix).reshape(-1)[idx], req.prefix_tokens)
            parts.append((idx, simulate_reference(params, sub)))
        if replicas == 1:
            return parts[0][1]
        first, finish = np.full(n, np.nan), np.full(n, np.nan)
        generated = np.zeros(n, dtype=np.int64)
        for idx, res in parts:
            first[idx], finish[idx], generated[idx] = res.first_token, res.finish, res.generated
        again = chosen if router == "round_robin" else _least_outstanding(arrival, finish, chosen,
                                                                          replicas)
        if again == chosen:
            break
        chosen = again
    gaps = np.concatenate([res.itl_gaps for _, res in parts])
    merged = _merged(arrival, [res for _, res in parts], first, finish, generated, gaps)
    merged.truncated |= again != chosen
    merged.replica = np.asarray(chosen, dtype=np.int64)
    return merged


def _least_outstanding(arrival, finish, chosen: list, replicas: int) -> list:
    """The router's choices again (docs/model.md "Replicas"): in arrival order, each request to
    the replica with the fewest requests sent there by the new choices and not finished at its
    arrival by the finish times ``chosen`` led to, ties to the lowest."""
    again = list(chosen)
    for i in range(len(arrival)):
        if not math.isfinite(arrival[i]):
            continue
        outstanding = [0] * replicas
        for j in range(i):
            if not finish[j] <= arrival[i]:  # nan (never finished) is outstanding
                outstanding[again[j]] += 1
        again[i] = min(range(replicas), key=lambda k: (outstanding[k], k))
    return again


def simulate_disaggregated_reference(prefill: EngineParams, decode: EngineParams,
                                     req: Requests, kv_bytes_per_token: float,
                                     link_bytes_per_s: float) -> RefResult:
    """A prefill pool and a decode pool in tandem (docs/model.md "Disaggregated prefill and
    decode"): the prefill pool serves every request's first token; a request with more to
    generate then moves its prompt's KV over the link and joins the decode pool's queue in
    order of arrival there (``decode.transferred`` must be set)."""
    arrival, prompt, output, n = _columns(req)
    pre = simulate_reference(prefill, Requests(arrival, prompt, np.ones(n, np.int64),
                                               req.end_time, req.seed, req.prefix,
                                               req.prefix_tokens))
    ready = []
    for i in range(n):
        t1 = float(pre.first_token[i])
        ready.append(t1 + int(prompt[i]) * kv_bytes_per_token / link_bytes_per_s
                     if output[i] > 1 and math.isfinite(t1) else math.inf)
    order = [i for i in sorted(range(n), key=lambda i: (ready[i], i)) if math.isfinite(ready[i])]
    dec = simulate_reference(decode, Requests(
        np.array([ready[i] for i in order], dtype=np.float64),
        np.array([prompt[i] + 1 for i in order], dtype=np.int64),
        np.array([output[i] - 1 for i in order], dtype=np.int64), req.end_time, req.seed,
        np.full(len(order), -1, np.int32), req.prefix_tokens))
    finish = pre.finish.copy()
    generated = pre.generated.copy()
    gaps = list(dec.itl_gaps)
    for k, i in enumerate(order):
        finish[i] = dec.finish[k]
        generated[i] += dec.generated[k]
        if math.isfinite(dec.first_token[k]):  # the second token: transfer and queue included
            gaps.append(float(dec.first_token[k]) - float(pre.first_token[i]))
    return _merged(arrival, [pre, dec], pre.first_token, finish, generated,
                   np.asarray(gaps, dtype=np.float64))


def _columns(req: Requests):
    arrival = np.asarray(req.arrival, dtype=np.float64).reshape(-1)
    return (arrival, np.asarray(req.prompt).astype(np.int64).reshape(-1),
            np.asarray(req.output).astype(np.int64).reshape(-1), arrival.shape[0])


def _merged(arrival, parts: list[RefResult], first, finish, generated, gaps) -> RefResult:
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
        truncated=any(res.truncated for res in parts))
