"""Decode runs: after the general pass, up to ``lookahead`` further passes in which nothing but
decoding can happen, all taken at once (docs/model.md, "Multi-pass steps"). Within such a run
no sequence joins the batch, so every pass is a pure function of the seats' token counts: the
draws of all its passes are taken together (they are keyed by each request's decode-pass count),
pass times are a vector, and the run stops before the first pass at which an event could occur
(an admission the rules could make, a KV block that may not fit, the end time); a completion
only shrinks the batch. Runs are an execution strategy, not a rule: the per-request results
equal pass-by-pass stepping. Per step they cost O(seats x lookahead)."""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from sweep.engine.features import compose
from sweep.engine.params import EngineParams, context_blocks
from sweep.engine.passes import accepted
from sweep.engine.state import Aux, EngineState, itl_bin, needs_pass, unfinished
from sweep.physics.numerics import running_sum
from sweep.study.workload import Requests


def _run_start(p: EngineParams, r: Requests, aux: Aux, f: type, s: EngineState):
    """Whether the general pass before a decode run was skipped (``needs_pass``; it left
    run_full), whether a run may start at all, and the next arrival after ``s.tail`` (the
    general pass just before left it at s.t)."""
    skipped = unfinished(aux, s) & ~needs_pass(p, aux, s)
    ok = unfinished(aux, s) & ~(s.seat_pre & (s.seat_req >= 0)).any()
    # A run's gaps are its passes': not while a seat waited out a prefill's pass (an engine
    # that prefills alone), whose next gap is longer.
    ok = ok & ~(p.prefill_alone & ((s.seat_req >= 0) & (s.seat_last < s.t)).any())
    ok = f.run_ok(s, ok)
    return skipped, ok, f.arrival_of(r, s, s.tail)


class _Run(NamedTuple):
    """A decode run's passes: their times, the clock, and how many of them it takes."""

    n_run: jax.Array  # i32[L] sequences decoding at each pass
    dt: jax.Array  # f64[L] pass times
    ends: jax.Array  # f64[L] the clock at the end of each pass
    starts: jax.Array  # f64[L] and at its start
    m: jax.Array  # i32 passes taken
    took: jax.Array  # bool[L] pass j is taken
    last: jax.Array  # i32 the last pass taken (0 if none)


def _run_length(p: EngineParams, r: Requests, aux: Aux, s: EngineState, f: type, skipped, ok,
                next_arrival, fits, n_run, context, finishes, unit: int) -> _Run:
    """A run's pass times and clock, and the passes it takes: all of them up to the first at
    which an event could occur (``finishes``: a sequence finishes at pass j, which in a closed
    loop sends the next request)."""
    j = jnp.arange(n_run.shape[0], dtype=jnp.int32)
    seqs = n_run.astype(jnp.float64)
    sched = f.run_schedules(p, s, j)
    dt = f.unscheduled(p, f.staged(f.pass_time, p.timing, 0.0, 0.0, seqs, context, seqs, 0.0,
                                   0.0, xp=jnp), sched)
    # The clock and the busy time add pass after pass, as pass-by-pass stepping does, so a
    # result does not depend on where runs are cut.
    ends = running_sum(dt, s.t, unroll=True)
    starts = jnp.concatenate([s.t[None], ends[:-1]])
    next_arrival = f.run_arrival(p, r, s, next_arrival, finishes, ends)
    # Running seats are the occupied ones here, so a free seat exists while n_run < max_batch.
    can_admit = ~p.static & (n_run < p.max_batch)
    # A unit after the first is a step of its own, within the step bound.
    units_left = aux.max_steps - s.steps + (~skipped).astype(jnp.int32)
    allowed = (fits & (n_run > 0) & (starts < r.end_time) & (j // unit < units_left)
               & ~(can_admit & sched & ((s.tail > s.head) | (starts >= next_arrival))))
    # The first pass not allowed (a minimum, not a cumulative product of int64s).
    m = jnp.where(ok, jnp.where(allowed, j.shape[0], j).min(), 0)
    return _Run(n_run, dt, ends, starts, m, j < m, jnp.maximum(m - 1, 0))


def _run_end(p: EngineParams, r: Requests, aux: Aux, s: EngineState, f: type, skipped,
             unit: int, run: _Run, in_use, output, seat_passes, gen_new, blocks) -> EngineState:
    """The state after ``run``, in which each seat decoded ``seat_passes`` of its passes,
    reaching ``gen_new`` of its ``output`` tokens and holding ``blocks``."""
    n = r.arrival.shape[0]
    m, took, last, ends = run.m, run.took, run.last, run.ends
    t_end = jnp.where(m > 0, ends[last], s.t)
    seat_end = ends[jnp.maximum(seat_passes - 1, 0)]  # the seat's last token in the run
    done_seat = (seat_passes > 0) & (gen_new >= output)
    emitted = gen_new - s.seat_gen
    passes_run = jnp.where(took, run.n_run, 0)
    hist = s.itl_hist.at[itl_bin(run.dt)].add(passes_run)
    features = f.ran(p, f.spawned_run(p, r, s, done_seat, seat_passes - 1, ends), m)
    tail_last = f.arrived(r, aux, features, run.starts[last])
    return s._replace(
        t=t_end, tail=f.arrived(r, aux, features, t_end), features=features,
        seat_req=jnp.where(done_seat, -1, s.seat_req),
        seat_gen=jnp.where(done_seat, 0, gen_new),
        seat_npass=jnp.where(done_seat, 0, s.seat_npass + seat_passes),
        seat_blocks=jnp.where(done_seat, 0, blocks),
        seat_last=jnp.where(seat_passes > 0, seat_end, s.seat_last),
        finish=s.finish.at[jnp.where(done_seat, s.seat_req, n)].set(seat_end, mode="drop"),
        finished=s.finished + done_seat.sum(dtype=jnp.int32),
        tokens=s.tokens + emitted.sum(dtype=jnp.int64),
        max_queue=jnp.maximum(s.max_queue, jnp.where(m > 0, tail_last - s.head, 0)),
        peak_blocks=jnp.maximum(s.peak_blocks, jnp.where(took, in_use, 0).max()),
        busy=running_sum(jnp.where(took, run.dt, 0.0), s.busy, unroll=True)[-1],
        itl_hist=hist, passes=s.passes + m, run_full=m == took.shape[0],
        itl_zero=s.itl_zero + emitted.sum(dtype=jnp.int32) - passes_run.sum(dtype=jnp.int32),
        # Every unit of the run is a step, less the first if a general pass began the step.
        steps=s.steps + jnp.where(m > 0, (m + unit - 1) // unit - (~skipped).astype(jnp.int32),
                                  0),
    )


def decode_run(p: EngineParams, r: Requests, aux: Aux, k_max: int, lookahead: int, unit: int,
               features: tuple[str, ...], s: EngineState) -> EngineState:
    """Up to ``lookahead`` decode-only passes at once (none if an event could intervene), taken
    exactly as consecutive runs of ``unit`` passes would be (``lookahead`` is a multiple of it),
    down to the step count: how runs are cut changes no result.

    Completions do not end a run: a finished sequence just leaves the batch (its blocks are not
    counted as freed, which can only end a run early). What ends it is a pass at which the
    rules could admit (a free seat of a continuous batch and someone waiting or arriving), a
    KV block that may not fit, the end time, or an empty batch; in a closed loop a completion
    sends a request, which ends the run like any arrival. Under prefix caching and chunked
    prefill (the ``features``' hooks), no run starts while a seat is mid-prefill, and growth
    must fit beside every cached prefix (so the run never evicts one)."""
    f = compose(features)
    skipped, ok, next_arrival = _run_start(p, r, aux, f, s)
    running = (s.seat_req >= 0) & ~s.seat_pre
    prompt, output, gen, npass = s.seat_prompt, s.seat_output, s.seat_gen, s.seat_npass
    j = jnp.arange(lookahead, dtype=jnp.int32)
    # The barrier keeps XLA from fusing (recomputing) the draws into every consumer.
    steps_tokens = lax.optimization_barrier(
        accepted(p, r.seed, s.seat_req[:, None], npass[:, None] + j, k_max) + 1)
    out_col = output[:, None]
    # Tokens by each pass: the unrolled sum is one elementwise kernel; a triangular float32
    # matmul (a library call on a CPU) made calls of speculating designs slower.
    gen_after = jnp.minimum(gen[:, None] + running_sum(steps_tokens, 0, unroll=True), out_col)
    gen_before = jnp.concatenate([gen[:, None], gen_after[:, :-1]], axis=1)
    alive = running[:, None] & (gen_before < out_col)  # decodes at pass j
    ctx = prompt[:, None] + gen_before
    need = context_blocks(p, ctx + jnp.minimum(p.draft_tokens + 1, out_col - gen_before))
    view = f.run_view(p, f.requests(r, s.features), s, running)
    need = f.run_need(view, need)
    held = jnp.maximum(need, s.seat_blocks[:, None])
    # Each ``unit`` of passes counts growth from the blocks held when it starts (the sequences
    # finished before it have freed theirs), as a run of its own would.
    unit_blocks = jnp.stack([s.seat_blocks] + [jnp.where(alive[:, q], held[:, q - 1], 0)
                                                for q in range(unit, lookahead, unit)], axis=1)
    base = jnp.repeat(unit_blocks, unit, axis=1)
    free = jnp.repeat(p.total_blocks - unit_blocks.sum(axis=0, dtype=jnp.int32), unit)
    free = f.run_free(view, s, free)
    # Growth as a difference of two sums: XLA recomputes ``held`` in each reduction that reads it.
    in_use = jnp.where(alive, held, 0).sum(axis=0, dtype=jnp.int32)
    growth = in_use - jnp.where(alive, base, 0).sum(axis=0, dtype=jnp.int32)
    fits = growth <= free
    n_run = alive.sum(axis=0, dtype=jnp.int32)
    context = jnp.where(alive, ctx, 0).sum(axis=0).astype(jnp.float64)
    in_use = f.run_in_use(view, alive, in_use)
    finishes = (alive & (gen_after >= out_col)).any(axis=0)
    run = _run_length(p, r, aux, s, f, skipped, ok, next_arrival, fits, n_run, context,
                      finishes, unit)
    seat_passes = (alive & run.took).sum(axis=1, dtype=jnp.int32)
    return _run_end(p, r, aux, s, f, skipped, unit, run, in_use, output, seat_passes,
                    gen_new=jnp.where(seat_passes > 0, gen_after[:, run.last], gen),
                    blocks=jnp.where(seat_passes > 0, held[:, run.last], s.seat_blocks))


def plain_run(p: EngineParams, r: Requests, aux: Aux, lookahead: int, unit: int,
              features: tuple[str, ...], s: EngineState) -> EngineState:
    """``decode_run`` when no lane speculates and the ``features`` allow it (their hooks'
    ``closed_form_runs``): the same passes and results, to the bit, at a fraction of the
    cost. Every running seat then emits one token per pass, so seat i decodes exactly the
    passes j < rem_i of the run and every per-pass figure (batch, context, KV blocks) is a sum
    over seats of a closed form in (i, j): a few fused reductions instead of a [seats, passes]
    state of tokens."""
    f = compose(features)
    skipped, ok, next_arrival = _run_start(p, r, aux, f, s)
    running = (s.seat_req >= 0) & ~s.seat_pre
    output, gen = s.seat_output, s.seat_gen
    rem = jnp.where(running, output - gen, 0)[:, None]  # passes left to each seat
    ctx0 = (s.seat_prompt + gen)[:, None]
    j = jnp.arange(lookahead, dtype=jnp.int32)
    alive = rem > j  # decodes at pass j

    def held(jj):
        """Blocks seat i holds once it has decoded pass jj (growing to cover the next token)."""
        return jnp.maximum(context_blocks(p, ctx0 + jj + 1), s.seat_blocks[:, None])

    # Each ``unit`` of passes counts growth from the blocks held when it starts, as a run of its
    # own would: u is the unit's first pass; before it the seat held held(u - 1), or its blocks.
    if unit == lookahead:  # one unit (the usual run), from the blocks held now
        base = s.seat_blocks[:, None]
        free = p.total_blocks - s.seat_blocks.sum(dtype=jnp.int32)
    else:
        u = j - j % unit
        base = jnp.where(u > 0, held(u - 1), s.seat_blocks[:, None])
        free = p.total_blocks - jnp.where((rem > u) | (u == 0), base, 0).sum(axis=0,
                                                                           dtype=jnp.int32)
    in_use = jnp.where(alive, held(j), 0).sum(axis=0, dtype=jnp.int32)
    growth = in_use - jnp.where(alive, base, 0).sum(axis=0, dtype=jnp.int32)
    fits = growth <= free
    n_run = alive.sum(axis=0, dtype=jnp.int32)
    context = (jnp.where(alive, ctx0, 0).sum(axis=0, dtype=jnp.int32) + j * n_run
               ).astype(jnp.float64)
    run = _run_length(p, r, aux, s, f, skipped, ok, next_arrival, fits, n_run, context,
                      (rem == j + 1).any(axis=0), unit)
    seat_passes = jnp.minimum(rem[:, 0], run.m)
    return _run_end(p, r, aux, s, f, skipped, unit, run, in_use, output, seat_passes,
                    gen_new=gen + seat_passes,
                    blocks=jnp.where(seat_passes > 0, held(seat_passes[:, None] - 1)[:, 0],
                                     s.seat_blocks))
