"""Rules 1-5 of docs/model.md ("One step"): the clock, then who takes part in the pass. Each
rule is one pure function of the step (``Step``: the design, the requests, the state and its
seats, and the features' hooks with their view of the pass) and the earlier rules' results.
The features (prefix caching, chunked prefill, closed loops...) enter only through ``c.f``'s
hooks, whose plain form adds nothing (``features.plain.Plain``)."""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from sweep.engine.params import EngineParams, context_blocks
from sweep.engine.state import Aux, EngineState, Seats
from sweep.study.workload import Requests


class Step(NamedTuple):
    """What every rule of a pass reads."""

    p: EngineParams
    r: Requests
    aux: Aux
    s: EngineState  # the state at the step's start
    seats: Seats  # its seats
    f: type  # the compiled features' hooks (``features.compose``)
    x: object  # their view of the pass (``f.view``; None in the plain form)
    sched: object = True  # whether the pass may admit and readmit (``f.schedules``)


def _next_arrival(c: Step):
    """The arrival of the next request to admit (inf: none left), and whether the server is
    idle until then: nothing occupied and that request not yet arrived."""
    next_arrival = c.f.arrival_of(c.r, c.s, c.s.head)
    return next_arrival, (c.seats.occupied.sum() == 0) & (next_arrival > c.s.t)


def idle_jump(c: Step, live):
    """Rule 1: with no seat occupied and nobody waiting, the clock of a ``live`` simulation
    jumps to the next arrival. The clock, and the requests arrived by it."""
    next_arrival, idle = _next_arrival(c)
    t = jnp.where(live & idle & jnp.isfinite(next_arrival), jnp.maximum(c.s.t, next_arrival),
                  c.s.t)
    return t, c.f.arrived(c.r, c.aux, c.s.features, t)


def stop(c: Step, t):
    """Rule 2: done when nothing is occupied, waiting or left to arrive, or at the end time."""
    next_arrival, idle = _next_arrival(c)
    return (idle & ~jnp.isfinite(next_arrival)) | (t >= c.r.end_time)


class Growth(NamedTuple):
    """Rule 3's outcome."""

    decoding: jax.Array  # bool[S] seats that decode if a pass runs
    preempt: jax.Array  # bool the step preempts instead of running a pass
    work: jax.Array  # bool a pass runs
    blocks: jax.Array  # i32[S] blocks held after the growth or the preemption
    seat_pre: jax.Array  # bool[S] preempted seats after it
    free: jax.Array  # i32 blocks free after it


def _free(c: Step, blocks):
    """Free KV blocks: all less the seats' own and the held prefixes'."""
    return c.f.free(c.x, c.p.total_blocks - blocks.sum())


def growth(c: Step, go) -> Growth:
    """Rule 3: every decoding seat grows to cover the tokens it may emit; if the growth does not
    fit, the running seat of the latest arrival is preempted and no pass runs. ``go``: the step
    runs (neither stopped nor skipped). Under prefix caching a seat's own blocks are its
    context's less its prefix's, which are shared; mid-prefill seats do not decode."""
    p, s, seats = c.p, c.s, c.seats
    look = jnp.minimum(p.draft_tokens + 1, s.seat_output - s.seat_gen)
    decoding, need = c.f.growth(c.x, seats, context_blocks(p, seats.ctx + look))
    grow = jnp.where(decoding, jnp.maximum(need - s.seat_blocks, 0), 0)
    short = grow.sum() > _free(c, s.seat_blocks)
    preempt = go & short
    work = go & ~short
    victim = seats.index == jnp.argmax(jnp.where(seats.running, s.seat_req, -1))
    blocks = jnp.where(preempt & victim, 0, s.seat_blocks + jnp.where(work, grow, 0))
    return Growth(decoding, preempt, work, blocks, s.seat_pre | (preempt & victim),
                  _free(c, blocks))


class Readmission(NamedTuple):
    """Rule 4's outcome; the last five are the features' (None in the plain form)."""

    ok: jax.Array  # bool a request is readmitted
    seat: jax.Array  # bool[S] its seat
    index: jax.Array  # i32 that seat: the earliest preempted request's
    length: jax.Array  # i32 its context p + g, recomputed
    own: jax.Array  # i32 blocks it holds
    free: jax.Array  # i32 blocks free after it
    hit: jax.Array | None = None  # i32 tokens of its path found cached
    todo: jax.Array | None = None  # i32 tokens it has to prefill
    chunk: jax.Array | None = None  # i32 of which this pass prefills
    left: jax.Array | None = None  # i32 prefill budget left after it
    loaded: jax.Array | None = None  # i32 of its cached tokens, those loaded from another tier


def readmission(c: Step, g: Growth, b) -> Readmission:
    """Rule 4: the earliest preempted request is readmitted if its blocks are free, to
    recompute its context in this pass. Under chunked prefill it starts only while prefill
    budget is left, and recomputes as much as the budget allows."""
    s, seats = c.s, c.seats
    index = jnp.argmin(jnp.where(seats.pre, s.seat_req, jnp.iinfo(jnp.int32).max))
    length = seats.ctx[index]
    look = c.f.readmission_lookup(c, index, length, context_blocks(c.p, length + 1))
    ok = c.f.within_budget(b, g.work & c.sched & seats.pre.any() & (look.need <= g.free))
    chunk, left = c.f.take(b, ok, look.todo)
    return Readmission(ok, ok & (seats.index == index), index, length, look.own,
                       g.free - jnp.where(ok, look.need, 0), look.hit, look.todo, chunk, left,
                       look.loaded)


class Admission(NamedTuple):
    """Rule 5's outcome, by seat; the last four are the features' (None in the plain form)."""

    count: jax.Array  # i32 requests admitted (the window head..head+count-1)
    overflow: jax.Array  # bool the seat array, not max_batch, held back an admission
    new: jax.Array  # bool[S] seats that take an admitted request
    req: jax.Array  # i32[S] its index
    prompt: jax.Array  # i32[S] its prompt
    output: jax.Array  # i32[S] and output lengths
    own: jax.Array  # i32[S] blocks it holds
    hit: jax.Array | None = None  # i32[S] tokens of its path found cached
    todo: jax.Array | None = None  # i32[S] tokens it has to prefill
    chunk: jax.Array | None = None  # i32[S] of which this pass prefills
    loaded: jax.Array | None = None  # i32[S] of its cached tokens, those loaded from another tier


def admission(c: Step, tail, g: Growth, ra: Readmission) -> Admission:
    """Rule 5: unless a seat was preempted (or, for a static batch, any seat is occupied), the
    waiting requests (head..``tail``-1) take the free seats in FIFO order while their blocks
    fit; the first that does not fit stops admission. Under chunked prefill a prefill starts
    only while budget is left."""
    p, s, seats = c.p, c.s, c.seats
    nseat = seats.index.shape[0]
    n_occ = seats.occupied.sum()
    gate = g.work & c.sched & ~seats.pre.any() & (~p.static | (n_occ == 0))
    free_seat = ~seats.occupied & (seats.index < p.max_batch)
    w_prompt, w_output = lax.dynamic_slice_in_dim(c.f.window(c.aux, s.features), s.head, nseat,
                                                  axis=1)
    ok = (s.head + seats.index < tail) & (seats.index < free_seat.sum())
    look, ok, ahead = c.f.window_lookup(c, ra, context_blocks(p, w_prompt + 1),
                                        w_prompt, ok)
    need, free = look.need, ra.free
    kept = c.f.reserved(c, w_prompt, w_output)
    if kept is not None:  # room kept for outputs to come (SGLang's admission)
        need, free = need + kept[0], free - kept[1]
    admit = gate & ok & (jnp.cumsum(jnp.where(ok, need, 0)) <= free)
    m = admit.sum(dtype=jnp.int32)
    # A seat array narrower than max_batch (a cheaper first try) is exact until it is what stops
    # an admission.
    overflow = gate & (m == free_seat.sum()) & (tail - s.head > m) & (n_occ + m < p.max_batch)
    rank = jnp.cumsum(free_seat, dtype=jnp.int32) - 1
    slot = jnp.clip(rank, 0, nseat - 1)
    return c.f.admitted(ra, admit, look, ahead, slot, Admission(
        m, overflow, free_seat & (rank < m), s.head + rank, w_prompt[slot], w_output[slot],
        look.own[slot]))
