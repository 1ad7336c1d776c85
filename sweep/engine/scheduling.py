"""Rules 1-5 of docs/model.md ("One step"): the clock, then who takes part in the pass. Each
rule is a pure function of the parameters, the state and the earlier rules' results; ``x`` is
prefix caching and chunked prefill's view of the pass (``extensions.Held``, and ``b`` its
prefill budget), None when the engine is compiled without them."""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from sweep.engine.arith import ceil_div, exclusive_cumsum
from sweep.engine.extensions import Budget, Held, readmission_lookup, window_lookup
from sweep.engine.params import EngineParams
from sweep.engine.state import Aux, EngineState, Seats, arrived
from sweep.study.workload import Requests


def _next_arrival(r: Requests, s: EngineState, seats: Seats):
    """The arrival of the next request to admit (inf: none left), and whether the server is
    idle until then: nothing occupied and that request not yet arrived."""
    n = r.arrival.shape[0]
    next_arrival = jnp.where(s.head < n, r.arrival[jnp.minimum(s.head, n - 1)], jnp.inf)
    return next_arrival, (seats.occupied.sum() == 0) & (next_arrival > s.t)


def idle_jump(r: Requests, aux: Aux, s: EngineState, seats: Seats, live):
    """Rule 1: with no seat occupied and nobody waiting, the clock of a ``live`` simulation
    jumps to the next arrival. The clock, and the requests arrived by it."""
    next_arrival, idle = _next_arrival(r, s, seats)
    t = jnp.where(live & idle & jnp.isfinite(next_arrival), jnp.maximum(s.t, next_arrival), s.t)
    return t, arrived(aux, t, r.arrival.shape[0])


def stop(r: Requests, s: EngineState, seats: Seats, t):
    """Rule 2: done when nothing is occupied, waiting or left to arrive, or at the end time."""
    next_arrival, idle = _next_arrival(r, s, seats)
    return (idle & ~jnp.isfinite(next_arrival)) | (t >= r.end_time)


class Growth(NamedTuple):
    """Rule 3's outcome."""

    decoding: jax.Array  # bool[S] seats that decode if a pass runs
    preempt: jax.Array  # bool the step preempts instead of running a pass
    work: jax.Array  # bool a pass runs
    blocks: jax.Array  # i32[S] blocks held after the growth or the preemption
    seat_pre: jax.Array  # bool[S] preempted seats after it
    free: jax.Array  # i32 blocks free after it


def _free(p: EngineParams, blocks, x: Held | None):
    """Free KV blocks: all less the seats' own and the held prefixes'."""
    free = p.total_blocks - blocks.sum()
    return free if x is None else free - x.blocks


def growth(p: EngineParams, s: EngineState, seats: Seats, go, x: Held | None = None) -> Growth:
    """Rule 3: every decoding seat grows to cover the tokens it may emit; if the growth does not
    fit, the running seat of the latest arrival is preempted and no pass runs. ``go``: the step
    runs (neither stopped nor skipped). Under prefix caching a seat's own blocks are its
    context's less its prefix's, which are shared; mid-prefill seats do not decode."""
    look = jnp.minimum(p.draft_tokens + 1, s.seat_output - s.seat_gen)
    need = ceil_div(seats.ctx + look, p.block_tokens)
    decoding = seats.running
    if x is not None:
        decoding = seats.running & ~x.mid
        need = need - x.shared
    grow = jnp.where(decoding, jnp.maximum(need - s.seat_blocks, 0), 0)
    short = grow.sum() > _free(p, s.seat_blocks, x)
    preempt = go & short
    work = go & ~short
    victim = seats.index == jnp.argmax(jnp.where(seats.running, s.seat_req, -1))
    blocks = jnp.where(preempt & victim, 0, s.seat_blocks + jnp.where(work, grow, 0))
    return Growth(decoding, preempt, work, blocks, s.seat_pre | (preempt & victim),
                  _free(p, blocks, x))


class Readmission(NamedTuple):
    """Rule 4's outcome; the last four are chunked prefill's and prefix caching's."""

    ok: jax.Array  # bool a request is readmitted
    seat: jax.Array  # bool[S] its seat
    index: jax.Array  # i32 that seat: the earliest preempted request's
    length: jax.Array  # i32 its context p + g, recomputed
    own: jax.Array  # i32 blocks it holds
    free: jax.Array  # i32 blocks free after it
    hit: jax.Array | None = None  # bool its prefix was cached
    todo: jax.Array | None = None  # i32 tokens it has to prefill
    chunk: jax.Array | None = None  # i32 of which this pass prefills
    left: jax.Array | None = None  # i32 prefill budget left after it


def readmission(p: EngineParams, r: Requests, s: EngineState, seats: Seats, g: Growth,
                x: Held | None = None, b: Budget | None = None) -> Readmission:
    """Rule 4: the earliest preempted request is readmitted if its blocks are free, to
    recompute its context in this pass. Under chunked prefill it starts only while prefill
    budget is left, and recomputes as much as the budget allows."""
    index = jnp.argmin(jnp.where(seats.pre, s.seat_req, jnp.iinfo(jnp.int32).max))
    length = seats.ctx[index]
    need = ceil_div(length + 1, p.block_tokens)
    ok = g.work & seats.pre.any()
    if x is None:
        ok = ok & (need <= g.free)
        return Readmission(ok, ok & (seats.index == index), index, length, need,
                           g.free - jnp.where(ok, need, 0))
    look = readmission_lookup(r, s, x, index, length, need)
    ok = ok & (look.need <= g.free) & (b.left > 0)
    chunk = jnp.minimum(look.todo, b.left)
    return Readmission(ok, ok & (seats.index == index), index, length, look.own,
                       g.free - jnp.where(ok, look.need, 0), look.hit, look.todo, chunk,
                       b.left - jnp.where(ok, chunk, 0))


class Admission(NamedTuple):
    """Rule 5's outcome, by seat; the last three are chunked prefill's and prefix caching's."""

    count: jax.Array  # i32 requests admitted (the window head..head+count-1)
    overflow: jax.Array  # bool the seat array, not max_batch, held back an admission
    new: jax.Array  # bool[S] seats that take an admitted request
    req: jax.Array  # i32[S] its index
    prompt: jax.Array  # i32[S] its prompt
    output: jax.Array  # i32[S] and output lengths
    own: jax.Array  # i32[S] blocks it holds
    hit: jax.Array | None = None  # bool[S] its prefix was cached
    todo: jax.Array | None = None  # i32[S] tokens it has to prefill
    chunk: jax.Array | None = None  # i32[S] of which this pass prefills


def admission(p: EngineParams, r: Requests, aux: Aux, s: EngineState, seats: Seats, tail,
              g: Growth, ra: Readmission, x: Held | None = None) -> Admission:
    """Rule 5: unless a seat was preempted (or, for a static batch, any seat is occupied), the
    waiting requests (head..``tail``-1) take the free seats in FIFO order while their blocks
    fit; the first that does not fit stops admission. Under chunked prefill a prefill starts
    only while budget is left."""
    nseat = seats.index.shape[0]
    n_occ = seats.occupied.sum()
    gate = g.work & ~seats.pre.any() & (~p.static | (n_occ == 0))
    free_seat = ~seats.occupied & (seats.index < p.max_batch)
    w_prompt, w_output = lax.dynamic_slice_in_dim(aux.window, s.head, nseat, axis=1)
    own = cost = ceil_div(w_prompt + 1, p.block_tokens)
    ok = (s.head + seats.index < tail) & (seats.index < free_seat.sum())
    if x is not None:
        look = window_lookup(p, r, s, x, seats.index, own, w_prompt)
        ahead = exclusive_cumsum(look.todo)
        own, cost = look.own, look.need
        ok = ok & (ahead < ra.left)
    admit = gate & ok & (jnp.cumsum(jnp.where(ok, cost, 0)) <= ra.free)
    m = admit.sum(dtype=jnp.int32)
    # A seat array narrower than max_batch (a cheaper first try) is exact until it is what stops
    # an admission.
    overflow = gate & (m == free_seat.sum()) & (tail - s.head > m) & (n_occ + m < p.max_batch)
    rank = jnp.cumsum(free_seat, dtype=jnp.int32) - 1
    slot = jnp.clip(rank, 0, nseat - 1)
    out = Admission(m, overflow, free_seat & (rank < m), s.head + rank, w_prompt[slot],
                    w_output[slot], own[slot])
    if x is None:
        return out
    return out._replace(overflow=overflow & (jnp.where(admit, look.todo, 0).sum() < ra.left),
                        hit=look.hit[slot], todo=look.todo[slot],
                        chunk=jnp.clip(ra.left - ahead[slot], 0, look.todo[slot]))
