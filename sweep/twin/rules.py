"""The rules of one step (docs/model.md "One step"), one function each, in the twin's plain
Python: each reads and changes the ``Twin`` (and the ``Pass`` that rules 3 to 5 build up), so
that it reads as the rule it implements. The KV block accounting with prefix caching, and
chunked prefill, which several rules share, are in ``prefills``; a closed loop's sending in
``closed_loop``.

Where docs/model.md could be read two ways, the reading taken is marked ``SPEC:`` below.
"""
from __future__ import annotations

import heapq
import math
from functools import partial

import numpy as np

from sweep.physics import rng, timing
from sweep.twin import kv_offload, multi_step, reservation
from sweep.twin.closed_loop import send
from sweep.twin.prefills import Pass, cost, free, own_blocks, start_prefill
from sweep.twin.state import Seat, Twin


def _advance_tail(tw: Twin) -> None:
    while tw.tail < len(tw.arrival) and tw.arrival[tw.tail] <= tw.t:
        tw.tail += 1


def idle_jump(tw: Twin) -> None:
    """1. Idle jump: with no seat occupied and no request waiting, the clock jumps to the next
    arrival."""
    _advance_tail(tw)
    if not tw.occupied and tw.tail == tw.head:
        # SPEC: the jump is taken only when a request is left to arrive (a_head finite).
        # Read literally, `t = max(t, a_head)` with no request left (head == N, or padding
        # with a = +inf) would set t = +inf, and so t_stop = +inf, before rule 2 stops.
        if tw.head < len(tw.arrival) and math.isfinite(tw.arrival[tw.head]):
            tw.t = max(tw.t, tw.arrival[tw.head])
        _advance_tail(tw)


def stop(tw: Twin) -> bool:
    """2. Stop: nothing occupied, waiting or left to arrive, or the end time reached; or
    (truncated) the step bound reached."""
    left_to_arrive = tw.tail < len(tw.arrival) and math.isfinite(tw.arrival[tw.tail])
    if (not tw.occupied and tw.tail == tw.head and not left_to_arrive) or tw.t >= tw.end_time:
        return True
    # SPEC (bookkeeping): a step bound counts steps that ran (a pass or a preemption); the
    # bound truncates only if the run is not done by rule 2 at the next step.
    tw.truncated = tw.max_steps is not None and tw.steps >= tw.max_steps
    return tw.truncated


def growth(tw: Twin) -> list[Seat] | None:
    """3. Growth: every running seat past its prefill will decode and may emit
    ``look = min(k + 1, o - g)`` tokens, and takes the blocks that needs. If they do not all
    fit, the running seat whose request arrived last is preempted instead and None returned: a
    zero-time step, with no pass. A sequence mid-prefill holds its blocks and does not decode."""
    running = [s for s in tw.occupied.values() if not s.preempted]
    decoding = [s for s in running if s.todo == 0]
    look = tw.design.draft_tokens + 1
    grows = [max(0, own_blocks(tw, s.path, s.p + s.g + min(look, s.o - s.g)) - s.b)
             for s in decoding]
    if sum(grows) > free(tw):
        preempt(tw, max(running, key=lambda s: s.req))
        return None
    for s, grow in zip(decoding, grows):
        s.b += grow
    return decoding


def preempt(tw: Twin, s: Seat) -> None:
    """The seat frees its blocks but keeps its seat and its tokens; a prefill restarts."""
    s.b = 0
    s.todo = 0
    s.preempted = True
    tw.preemptions += 1
    tw.reserve_since = tw.passes  # SGLang's estimate starts again


def readmission(tw: Twin, ps: Pass) -> None:
    """4. Readmission of the earliest preempted request, at most one per step, when its blocks
    fit and prefill budget is left: it recomputes its whole context."""
    preempted = [s for s in tw.occupied.values() if s.preempted]
    if not preempted:
        return
    s = min(preempted, key=lambda s: s.req)
    own, need = cost(tw, s.path, s.p + s.g + 1)
    if need <= free(tw) and ps.left > 0:
        s.b = own
        s.preempted = False
        start_prefill(tw, ps, s)


def admission(tw: Twin, ps: Pass) -> None:
    """5. Admission, FIFO with no skipping, into the free seats in increasing order while the
    head request's blocks fit and prefill budget is left; under static batching only into an
    empty server. A transferred admission was prefilled in another pool and just decodes."""
    if tw.design.static and tw.occupied:
        return
    held = reservation.kept(tw)  # room for the running outputs to come, SGLang's
    reserving, wanted = reservation.reserving(tw), 0  # and for the admitted requests' outputs
    while tw.head < tw.tail and tw.free_seats and ps.left > 0:
        i = tw.head
        own, need = cost(tw, tw.paths[i], tw.prompt[i] + 1)
        more = reservation.extra(tw, tw.prompt[i], tw.output[i]) if reserving else 0
        if need + more + wanted > free(tw) - held:
            break  # admission stops at the first request that does not fit
        wanted += more
        s = Seat(req=i, p=tw.prompt[i], o=tw.output[i], b=own, path=tw.paths[i])
        tw.occupied[heapq.heappop(tw.free_seats)] = s
        tw.head += 1
        if tw.design.transferred:
            ps.prefills.append((s, 0, s.p))  # no chunk to prefill: it emits one token
            ps.loads.append(s)
        else:
            tw.cached_tokens[i] = start_prefill(tw, ps, s)


#: A pass through the design's pipeline stages (``timing.staged`` of ``timing.pass_time``).
_STAGED = partial(timing.staged, timing.pass_time)


def the_pass(tw: Twin, ps: Pass) -> float:
    """6. The pass: its prefills and decodes, timed by ``timing.pass_time`` through the design's
    pipeline stages (``timing.staged``; or its loads from a CPU KV tier, if longer:
    ``kv_offload.pass_time``); returns its end.
    Integer sums are exact Python ints, then float64. A chunk of c tokens after L already in
    the KV attends to L + 1 .. L + c keys; a transferred admission decodes once over its
    cached context. Under an engine that prefills alone, a pass with a prefill decodes
    nothing."""
    if tw.design.prefill_alone and any(c > 0 for _, c, _ in ps.prefills):
        ps.decoding = []
    if not ps.prefills and not ps.decoding and tw.max_steps is None and math.isinf(tw.end_time):
        # SPEC: an empty pass (nothing to prefill or decode) is run literally (its time is
        # the pass time of no work), but it means nothing can ever change: the head request
        # or the earliest preempted one needs more blocks than the whole cache.
        raise RuntimeError("simulate_reference: no progress possible (a request needs more "
                           "KV blocks than the cache holds) and no step or time bound")
    p_tokens = sum(c for _, c, _ in ps.prefills)
    p_pairs = sum(c * L + c * (c + 1) // 2 for _, c, L in ps.prefills)
    d_seqs = len(ps.decoding) + len(ps.loads)
    d_context = sum(s.p + s.g for s in ps.decoding) + sum(s.p for s in ps.loads)
    chunks = [c for _, c, _ in ps.prefills if c > 0]
    longest = max(chunks, default=0)
    longest_pairs = max((c * L + c * (c + 1) // 2 for _, c, L in ps.prefills), default=0)
    duration = kv_offload.pass_time(tw, multi_step.pass_time(tw, timing.scalar_time(
        _STAGED, tw.design.timing, p_tokens, p_pairs, d_seqs, d_context, d_seqs + len(chunks),
        longest, longest_pairs), ps.schedules), ps.loaded)
    return float(np.float64(tw.t) + np.float64(duration))


def _chunks_done(tw: Twin, ps: Pass) -> list[tuple[Seat, int]]:
    """Each prefill's chunk is in the KV now (and with it each node of its path whose end it
    has reached); a seat whose prompt is done emits one token: the first, or the next after a
    recompute."""
    emitted = []
    for s, c, L in ps.prefills:
        s.todo -= c
        tw.cached.update(k for k in s.path if L + c >= tw.node_end[k])
        if s.todo == 0:
            emitted.append((s, 1))
    return emitted


def _accepted_drafts(tw: Twin, decoding: list[Seat]) -> list[int]:
    """Speculative decoding: A = #{j <= k : u < T_j}, the leading run of accepted drafts, from
    one draw per seat keyed by its request and the decode passes it has taken."""
    if tw.design.draft_tokens == 0 or not decoding:
        return [0] * len(decoding)
    idx = np.array([s.req for s in decoding], dtype=np.int64)
    npass = np.array([s.npass for s in decoding], dtype=np.int64)
    draws = rng.uniform_bits(tw.seed, idx, npass, xp=np)
    return (draws[:, None] < tw.design.accept_thresholds[None, :]).sum(axis=1).tolist()


def tokens(tw: Twin, ps: Pass, t_end: float) -> None:
    """7. Tokens, all at the pass's end: one for each prefill done, and ``min(A + 1, o - g)``
    for each decoding seat, the ones after the first in a pass 0 s after it."""
    emitted = _chunks_done(tw, ps)
    for s, A in zip(ps.decoding, _accepted_drafts(tw, ps.decoding)):
        emitted.append((s, min(int(A) + 1, s.o - s.g)))
        s.npass += 1
    for s, m in emitted:
        if s.g == 0:
            tw.first_token[s.req] = t_end  # the first token has no gap
        else:
            tw.itl_gaps.append(t_end - s.last)
        if m > 1:
            tw.itl_gaps.extend([0.0] * (m - 1))
        s.g += m
        s.last = t_end
        tw.generated[s.req] = s.g
        tw.tokens += m


def completion(tw: Twin, t_end: float) -> None:
    """8. Completion: a seat whose ``g`` reaches ``o`` finishes and frees its seat and blocks.
    In a closed loop the next request reaches the engine a gap later: the client's pause and
    the request's overhead outside the passes."""
    done = sorted((s.req, j) for j, s in tw.occupied.items() if s.g >= s.o)
    for _, seat_index in done:  # in request order (a session's next turn is sent in it)
        s = tw.occupied.pop(seat_index)
        tw.finish[s.req] = t_end
        heapq.heappush(tw.free_seats, seat_index)
        if tw.clients > 0 or tw.table is not None:
            send(tw, t_end, s.req)
        tw.finished += 1
