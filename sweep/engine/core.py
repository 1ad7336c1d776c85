"""The fixed-step serving engine: a pure ``step``, ``lax.scan`` over steps, ``vmap`` over a batch
of designs x workloads x seeds. The rules are docs/model.md's; sweep/engine/reference.py is the same
rules as a plain event loop, one pass at a time.

A step is one general pass (admission, readmission or preemption, prefill and decode: the rules
as written) followed by a *decode run*: up to ``lookahead`` further passes in which nothing but
decoding can happen, all taken at once. Within such a run no sequence joins the batch, so every
pass is a pure function of the seats' token counts: the draws of all its passes are taken
together (they are keyed by each request's decode-pass count), pass times are a vector, and the
run stops before the first pass at which an event could occur (an admission the rules could
make, a KV block that may not fit, the end time); a completion only shrinks the batch. Runs are
an execution strategy, not a rule: the per-request results equal pass-by-pass stepping.

Shapes are static: ``seats`` seats and ``N`` requests per simulation. Per-step work is
O(seats x lookahead): the running set is a seat array, the FIFO queue a window of ``seats``
requests starting at ``head`` over the arrival-sorted requests. Prefix caching and chunked
prefill, compiled in only for a batch that uses them, add O(seats^2 + seats x MAX_PREFIXES)
(who shares whose prefix, who prefills first) to the general pass.
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from sweep.engine.state import (Aux, EngineOutput, EngineState, Extensions, arrived, initial_state,
                                itl_bin, make_aux, needs_pass, output, unfinished)
from sweep.execution import executables
from sweep.physics.numerics import running_sum
from sweep.physics.rng import uniform_bits
from sweep.physics.timing import pass_time
from sweep.study.design import EngineParams
from sweep.study.workload import MAX_PREFIXES, Requests

#: Scan steps per block of the outer while loop: the loop stops within one block of the slowest
#: simulation finishing.
DEFAULT_BLOCK_STEPS = 64
#: Passes a decode run may cover in one step, and in a step of static batches only (a continuous
#: batch's runs end at the next arrival, about ten passes in the brief; a static batch's only at
#: its end). Measured on 2 CPU cores (benchmarks/README.md): for continuous batches 8-16 cost the
#: same and 32 was 30% slower; calls of static batches only ran 24% faster with 32 at 64 seats,
#: but the brief did not (its static designs mostly overflow into the wide tier) while a second
#: decode run made compilation 20% longer, so by default both are 16 (one decode run compiled).
DEFAULT_LOOKAHEAD = 16
DEFAULT_STATIC_LOOKAHEAD = 16


def _ceil_div(a, b):
    """ceil(a / b) for int32 a >= 0, b >= 1: floor(x / b) for x = a + b - 1, taken as
    floor((x + 1/2) x (1/b)) in float64. The product is within a relative 2**-52 of
    (x + 1/2) / b, which is at least 1/(2b) from any integer, so the floor is exact while
    x < 2**51. x86 has no vector integer division, and a vector float division costs several
    multiplies (the decode runs take two of these per seat and pass)."""
    b = jnp.asarray(b, jnp.float64)
    return jnp.floor((jnp.asarray(a, jnp.float64) + (b - 0.5)) * (1.0 / b)).astype(jnp.int32)


def _accepted(p: EngineParams, seed, req, npass, k_max: int):
    """Accepted draft tokens of a decode pass: one 24-bit draw against p**j thresholds."""
    if k_max == 0:
        return jnp.zeros(jnp.broadcast_shapes(req.shape, npass.shape), jnp.int32)
    u = uniform_bits(seed, req, npass, xp=jnp)
    # Thresholds past the design's k are 0; a sum of k_max compares fuses into one loop.
    return sum((u < p.accept_thresholds[j]).astype(jnp.int32) for j in range(k_max))


def _exclusive_cumsum(x):
    return jnp.cumsum(x) - x


def _onehot(pfx):
    """[S, MAX_PREFIXES]: seat s holds prefix c (pfx -1: none)."""
    return pfx[:, None] == jnp.arange(MAX_PREFIXES, dtype=jnp.int32)[None, :]


#: Prefill budget per pass when chunking is off: more than any pass can hold.
_NO_CHUNK = 2**30


def smallest_chunk(p: EngineParams):
    """The fewest prompt tokens a pass that prefills at all may prefill (0: no limit). Under a
    token budget a seat is free or holds a prefill whenever one is due, so at most
    ``max_batch - 1`` seats decode beside it."""
    left = p.token_budget - (p.max_batch - 1) * (p.draft_tokens + 1)
    return jnp.where(p.token_budget > 0,
                     jnp.where(p.prefill_chunk > 0, jnp.minimum(p.prefill_chunk, left), left),
                     p.prefill_chunk)


def _general_pass(p: EngineParams, r: Requests, aux: Aux, ext: bool, s: EngineState,
                  accepted) -> EngineState:
    """One engine pass (or one preemption) by the rules: docs/model.md, "One step", in which
    each seat's draft accepts ``accepted`` tokens if it decodes. ``ext`` compiles in prefix
    caching and chunked prefill (docs/model.md, "Prefix caching" and "Chunked prefill");
    without it the pass is exactly the plain rules'. A simulation that does not
    ``needs_pass`` is left as it is."""
    n = r.arrival.shape[0]
    nseat = s.seat_req.shape[0]
    seats = jnp.arange(nseat, dtype=jnp.int32)
    occupied = s.seat_req >= 0
    pre = s.seat_pre & occupied
    running = occupied & ~pre
    n_occ = occupied.sum()
    live = needs_pass(p, aux, s)

    # 1. Idle jump to the next arrival; 2. stop.
    next_arrival = jnp.where(s.head < n, r.arrival[jnp.minimum(s.head, n - 1)], jnp.inf)
    idle = (n_occ == 0) & (next_arrival > s.t)  # nothing running, nobody waiting
    t = jnp.where(live & idle & jnp.isfinite(next_arrival), jnp.maximum(s.t, next_arrival), s.t)
    tail = arrived(aux, t, n)
    queue = tail - s.head
    stop = (idle & ~jnp.isfinite(next_arrival)) | (t >= r.end_time)
    go = live & ~stop

    # 3. Growth of decoding sequences; preempt the latest arrival if it does not fit.
    prompt, output, gen = s.seat_prompt, s.seat_output, s.seat_gen
    ctx = prompt + gen
    look = jnp.minimum(p.draft_tokens + 1, output - gen)
    need = _ceil_div(ctx + look, p.block_tokens)
    if ext:
        # A seat's own blocks are its context's less its prefix's, which are shared.
        pfx = jnp.where(p.prefix_cache & occupied, r.prefix[jnp.maximum(s.seat_req, 0)], -1)
        pb = _ceil_div(r.prefix_tokens, p.block_tokens)
        shared = jnp.where(pfx >= 0, pb, 0)
        refs = (_onehot(pfx) & running[:, None]).any(axis=0)
        mid = running & (s.ext.todo > 0)  # mid-prefill: holds its blocks, does not decode
        decoding = running & ~mid
        need = need - shared
    else:
        decoding = running
    grow = jnp.where(decoding, jnp.maximum(need - s.seat_blocks, 0), 0)
    free = p.total_blocks - s.seat_blocks.sum()
    if ext:
        free = free - pb * refs.sum(dtype=jnp.int32)
    short = grow.sum() > free
    preempt = go & short
    work = go & ~short
    victim = seats == jnp.argmax(jnp.where(running, s.seat_req, -1))
    blocks = jnp.where(preempt & victim, 0, s.seat_blocks + jnp.where(work, grow, 0))
    seat_pre = s.seat_pre | (preempt & victim)
    free = p.total_blocks - blocks.sum()
    if ext:
        free = free - pb * refs.sum(dtype=jnp.int32)

    # 4. Readmission of the earliest preempted request (recompute its context).
    any_pre = pre.any()
    r_seat = jnp.argmin(jnp.where(pre, s.seat_req, jnp.iinfo(jnp.int32).max))
    r_len = ctx[r_seat]
    r_need = _ceil_div(r_len + 1, p.block_tokens)
    r_own = r_need
    if ext:
        # A token budget covers the decodes first; mid-prefill seats then take the pass's
        # prefill budget, in request order.
        budget = jnp.where(p.prefill_chunk > 0, p.prefill_chunk, jnp.int32(_NO_CHUNK))
        after_decodes = p.token_budget - decoding.sum(dtype=jnp.int32) * (p.draft_tokens + 1)
        budget = jnp.where(p.token_budget > 0, jnp.minimum(budget, after_decodes), budget)
        ahead = jnp.where(mid[None, :] & (s.seat_req[None, :] < s.seat_req[:, None]),
                          s.ext.todo[None, :], 0).sum(axis=1)
        mid_chunk = jnp.where(mid & work, jnp.clip(budget - ahead, 0, s.ext.todo), 0)
        left = budget - mid_chunk.sum()
        r_pfx = pfx[r_seat]
        r_slot = jnp.maximum(r_pfx, 0)
        r_hit = (r_pfx >= 0) & s.ext.cached[r_slot]
        r_own = r_need - shared[r_seat]
        r_need = jnp.where((r_pfx >= 0) & refs[r_slot], r_own, r_need)
        r_todo = r_len - jnp.where(r_hit, r.prefix_tokens, 0)
        readmit = work & any_pre & (r_need <= free) & (left > 0)
        r_chunk = jnp.minimum(r_todo, left)
        left = left - jnp.where(readmit, r_chunk, 0)
    else:
        readmit = work & any_pre & (r_need <= free)
    readmitted = readmit & (seats == r_seat)
    free = free - jnp.where(readmit, r_need, 0)

    # 5. FIFO admission into free seats while blocks last (no skipping).
    gate = work & ~any_pre & (~p.static | (n_occ == 0))
    free_seat = ~occupied & (seats < p.max_batch)
    window = s.head + seats
    w_prompt, w_output = lax.dynamic_slice_in_dim(aux.window, s.head, nseat, axis=1)
    w_need = _ceil_div(w_prompt + 1, p.block_tokens)
    w_ok = (window < tail) & (seats < free_seat.sum())
    w_own = w_cost = w_need
    if ext:
        # Blocks of a prefix already held (by a running seat or one admitted before it in this
        # pass) are shared; only a prefix cached before the pass saves its prefill.
        w_pfx = jnp.where(p.prefix_cache, r.prefix[jnp.minimum(window, n - 1)], -1)
        w_slot = jnp.maximum(w_pfx, 0)
        w_hit = (w_pfx >= 0) & s.ext.cached[w_slot]
        earlier = ((w_pfx[None, :] == w_pfx[:, None]) & (seats[None, :] < seats[:, None])).any(1)
        w_own = w_need - jnp.where(w_pfx >= 0, pb, 0)
        w_cost = jnp.where((w_pfx >= 0) & (refs[w_slot] | earlier), w_own, w_need)
        # A transferred admission (a decode pool's) has nothing to prefill.
        w_todo = jnp.where(p.transferred, 0, w_prompt - jnp.where(w_hit, r.prefix_tokens, 0))
        w_ahead = _exclusive_cumsum(w_todo)
        w_ok = w_ok & (w_ahead < left)  # a prefill starts only while budget is left
    admit = gate & w_ok & (jnp.cumsum(jnp.where(w_ok, w_cost, 0)) <= free)
    m = admit.sum(dtype=jnp.int32)
    # A seat array narrower than max_batch (a cheaper first try) is exact until it is what stops
    # an admission.
    overflow = gate & (m == free_seat.sum()) & (queue > m) & (n_occ + m < p.max_batch)
    if ext:
        overflow = overflow & (jnp.where(admit, w_todo, 0).sum() < left)
    rank = jnp.cumsum(free_seat, dtype=jnp.int32) - 1
    new = free_seat & (rank < m)
    slot = jnp.clip(rank, 0, nseat - 1)
    new_req = s.head + rank
    new_prompt = w_prompt[slot]
    new_output = w_output[slot]

    # 6. The pass.
    f64 = jnp.float64
    decode = decoding & work
    # A transferred request (a decode pool's) is not prefilled: its admission decodes one token
    # over its cached context (docs/model.md "Disaggregated prefill and decode").
    load = new & p.transferred
    if ext:
        # Each prefilling seat processes a chunk after the tokens already in its KV.
        new_todo = w_todo[slot]
        todo = jnp.where(new, new_todo, jnp.where(readmitted, r_todo, jnp.where(mid, s.ext.todo,
                                                                                  0)))
        pre_len = jnp.where(new, jnp.clip(left - w_ahead[slot], 0, new_todo),
                            jnp.where(readmitted, r_chunk, mid_chunk))
        cached_len = jnp.where(new, new_prompt, ctx) - todo
        c64 = pre_len.astype(jnp.int64)
        pairs = c64 * cached_len + c64 * (c64 + 1) // 2
    else:
        pre_len = jnp.where(new & ~load, new_prompt, 0) + jnp.where(readmitted, r_len, 0)
        pairs = pre_len.astype(jnp.int64) * (pre_len + 1) // 2
    dt = pass_time(p.timing, pre_len.sum(dtype=f64), pairs.sum(dtype=f64),
                   (decode | load).sum(dtype=f64),
                   (jnp.where(decode, ctx, 0) + jnp.where(load, new_prompt, 0)).sum(dtype=f64),
                   xp=jnp)
    dt = jnp.where(work, dt, 0.0)
    t_end = t + dt

    # 7. Tokens.
    dec_tokens = jnp.where(decode, jnp.minimum(accepted + 1, output - gen), 0)
    if ext:
        todo_after = todo - pre_len
        completes = (new | readmitted | mid) & work & (todo_after == 0)
    else:
        completes = new | readmitted
    emitted = dec_tokens + completes

    # Every decoding seat emitted its previous token at the end of the previous pass, i.e. at t,
    # so its gap is the pass time; only a seat completing a recompute has a gap of its own.
    if ext:
        stalls = completes & ~new & (gen > 0)
        hist = s.itl_hist.at[jnp.concatenate([itl_bin(dt)[None], itl_bin(t_end - s.seat_last)])
                             ].add(jnp.concatenate([decode.sum(dtype=jnp.int32)[None],
                                                    stalls.astype(jnp.int32)]))
    else:
        hist = s.itl_hist.at[jnp.stack([itl_bin(dt), itl_bin(t_end - s.seat_last[r_seat])])].add(
            jnp.stack([decode.sum(dtype=jnp.int32), readmit.astype(jnp.int32)]))

    # 8. Completion.
    seat_req = jnp.where(new, new_req, s.seat_req)
    gen_new = jnp.where(new, 0, gen) + emitted if ext else jnp.where(new, 1, gen + emitted)
    done_seat = (emitted > 0) & (gen_new >= jnp.where(new, new_output, output))
    blocks = jnp.where(new, w_own[slot], jnp.where(readmitted, r_own, blocks))
    if ext:
        first_tok = completes & (jnp.where(new, 0, gen) == 0)
        first = s.first.at[jnp.where(first_tok, seat_req, n + nseat)].set(t_end, mode="drop")
    else:
        # Admitted requests are the contiguous window head..head+m-1: a slice update, no scatter.
        window_first = lax.dynamic_slice(s.first, (s.head,), (nseat,))
        first = lax.dynamic_update_slice(s.first, jnp.where(seats < m, t_end, window_first),
                                         (s.head,))
    finish = s.finish.at[jnp.where(done_seat, seat_req, n)].set(t_end, mode="drop")
    seat_pre = seat_pre & ~readmitted & ~done_seat
    in_use = blocks.sum(dtype=jnp.int32)
    out_blocks = jnp.where(done_seat, 0, blocks)
    ext_state = s.ext
    if ext:
        # The prefix cache: a prefix is cached once a sequence has prefilled it; stamps record
        # the last prefill that referenced it; unreferenced prefixes live in free blocks and are
        # evicted (oldest stamp, then lowest id, first) while they do not fit.
        alive = (seat_req >= 0) & ~seat_pre
        a_pfx = jnp.where(p.prefix_cache & alive, r.prefix[jnp.maximum(seat_req, 0)], -1)
        a_hot = _onehot(a_pfx)
        in_use = in_use + pb * a_hot.any(axis=0).sum(dtype=jnp.int32)
        filled = jnp.where(new, new_prompt, ctx) - todo_after >= r.prefix_tokens
        cached = s.ext.cached | (a_hot & filled[:, None]).any(axis=0)
        starts = (new | readmitted) & (a_pfx >= 0)
        stamp = jnp.where((a_hot & starts[:, None]).any(axis=0), s.passes, s.ext.stamp)
        hits = (new & w_hit[slot]) | (readmitted & r_hit)
        e_refs = (a_hot & ~done_seat[:, None]).any(axis=0)
        e_free = p.total_blocks - out_blocks.sum() - pb * e_refs.sum(dtype=jnp.int32)
        evictable = cached & ~e_refs
        keep = jnp.where(pb > 0, e_free // jnp.maximum(pb, 1), MAX_PREFIXES)
        ids = jnp.arange(MAX_PREFIXES, dtype=jnp.int32)
        older = (stamp[None, :] < stamp[:, None]) | ((stamp[None, :] == stamp[:, None])
                                                     & (ids[None, :] < ids[:, None]))
        age_rank = (evictable[None, :] & older).sum(axis=1)
        evict = evictable & (age_rank < evictable.sum() - keep)
        ext_state = Extensions(
            todo=jnp.where(done_seat | ~alive, 0, todo_after).astype(jnp.int32),
            cached=cached & ~evict, stamp=stamp,
            lookups=s.ext.lookups + starts.sum(dtype=jnp.int32),
            hits=s.ext.hits + (hits & starts).sum(dtype=jnp.int32))

    return s._replace(
        t=jnp.where(live, t_end, s.t),
        head=s.head + m,
        tail=arrived(aux, t_end, n),
        seat_req=jnp.where(done_seat, -1, seat_req),
        seat_prompt=jnp.where(new, new_prompt, prompt),
        seat_output=jnp.where(new, new_output, output),
        seat_gen=jnp.where(done_seat, 0, gen_new),
        seat_npass=jnp.where(new | done_seat, 0, s.seat_npass + decode),
        seat_blocks=out_blocks,
        seat_pre=seat_pre,
        seat_last=jnp.where(emitted > 0, t_end, s.seat_last),
        first=first, finish=finish,
        finished=s.finished + done_seat.sum(dtype=jnp.int32),
        tokens=s.tokens + emitted.sum(dtype=jnp.int64),
        preemptions=s.preemptions + preempt.astype(jnp.int32),
        max_queue=jnp.maximum(s.max_queue, jnp.where(work, queue - m, 0)),
        peak_blocks=jnp.maximum(s.peak_blocks, jnp.where(work, in_use, 0)),
        busy=s.busy + dt, itl_hist=hist,
        itl_zero=s.itl_zero + jnp.where(decode, dec_tokens - 1, 0).sum(dtype=jnp.int32),
        steps=s.steps + go.astype(jnp.int32), passes=s.passes + work.astype(jnp.int32),
        overflow=s.overflow | overflow,
        # An overflowed result is discarded (rerun wider), so it need not run on.
        done=s.done | (live & stop) | overflow,
        ext=ext_state,
    )


def _run_start(p: EngineParams, r: Requests, aux: Aux, ext: bool, s: EngineState):
    """Whether the general pass before a decode run was skipped (``needs_pass``; it left
    run_full), whether a run may start at all, and the next arrival after ``s.tail`` (the
    general pass just before left it at s.t)."""
    n = r.arrival.shape[0]
    skipped = unfinished(aux, s) & ~needs_pass(p, aux, s)
    ok = unfinished(aux, s) & ~(s.seat_pre & (s.seat_req >= 0)).any()
    if ext:
        ok = ok & ~((s.ext.todo > 0) & (s.seat_req >= 0)).any()
    next_arrival = jnp.where(s.tail < n, r.arrival[jnp.minimum(s.tail, n - 1)], jnp.inf)
    return skipped, ok, next_arrival


class _Run(NamedTuple):
    """A decode run's passes: their times, the clock, and how many of them it takes."""

    n_run: jax.Array  # i32[L] sequences decoding at each pass
    dt: jax.Array  # f64[L] pass times
    ends: jax.Array  # f64[L] the clock at the end of each pass
    starts: jax.Array  # f64[L] and at its start
    m: jax.Array  # i32 passes taken
    took: jax.Array  # bool[L] pass j is taken
    last: jax.Array  # i32 the last pass taken (0 if none)


def _run_length(p: EngineParams, r: Requests, aux: Aux, s: EngineState, skipped, ok,
                next_arrival, fits, n_run, context, unit: int) -> _Run:
    """A run's pass times and clock, and the passes it takes: all of them up to the first at
    which an event could occur."""
    j = jnp.arange(n_run.shape[0], dtype=jnp.int32)
    dt = pass_time(p.timing, 0.0, 0.0, n_run.astype(jnp.float64), context, xp=jnp)
    # The clock and the busy time add pass after pass, as pass-by-pass stepping does, so a
    # result does not depend on where runs are cut.
    ends = running_sum(dt, s.t, unroll=True)
    starts = jnp.concatenate([s.t[None], ends[:-1]])
    # Running seats are the occupied ones here, so a free seat exists while n_run < max_batch.
    can_admit = ~p.static & (n_run < p.max_batch)
    # A unit after the first is a step of its own, within the step bound.
    units_left = aux.max_steps - s.steps + (~skipped).astype(jnp.int32)
    allowed = (fits & (n_run > 0) & (starts < r.end_time) & (j // unit < units_left)
               & ~(can_admit & ((s.tail > s.head) | (starts >= next_arrival))))
    # The first pass not allowed (a minimum, not a cumulative product of int64s).
    m = jnp.where(ok, jnp.where(allowed, j.shape[0], j).min(), 0)
    return _Run(n_run, dt, ends, starts, m, j < m, jnp.maximum(m - 1, 0))


def _run_end(r: Requests, aux: Aux, s: EngineState, skipped, unit: int, run: _Run, in_use,
             output, seat_passes, gen_new, blocks) -> EngineState:
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
    tail_last = arrived(aux, run.starts[last], n)
    return s._replace(
        t=t_end, tail=arrived(aux, t_end, n),
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


def _decode_run(p: EngineParams, r: Requests, aux: Aux, k_max: int, lookahead: int, unit: int,
                ext: bool, s: EngineState) -> EngineState:
    """Up to ``lookahead`` decode-only passes at once (none if an event could intervene), taken
    exactly as consecutive runs of ``unit`` passes would be (``lookahead`` is a multiple of it),
    down to the step count: how runs are cut changes no result.

    Completions do not end a run: a finished sequence just leaves the batch (its blocks are not
    counted as freed, which can only end a run early). What ends it is a pass at which the
    rules could admit (a free seat of a continuous batch and someone waiting or arriving), a
    KV block that may not fit, the end time, or an empty batch. With ``ext``, no run starts
    while a seat is mid-prefill, and growth must fit beside every cached prefix (so the run
    never evicts one)."""
    skipped, ok, next_arrival = _run_start(p, r, aux, ext, s)
    running = (s.seat_req >= 0) & ~s.seat_pre
    prompt, output, gen, npass = s.seat_prompt, s.seat_output, s.seat_gen, s.seat_npass
    j = jnp.arange(lookahead, dtype=jnp.int32)
    # The barrier keeps XLA from fusing (recomputing) the draws into every consumer.
    steps_tokens = lax.optimization_barrier(
        _accepted(p, r.seed, s.seat_req[:, None], npass[:, None] + j, k_max) + 1)
    out_col = output[:, None]
    # Tokens by each pass: the unrolled sum is one elementwise kernel; a triangular float32
    # matmul (a library call on a CPU) made calls of speculating designs 10-35% slower.
    gen_after = jnp.minimum(gen[:, None] + running_sum(steps_tokens, 0, unroll=True), out_col)
    gen_before = jnp.concatenate([gen[:, None], gen_after[:, :-1]], axis=1)
    alive = running[:, None] & (gen_before < out_col)  # decodes at pass j
    ctx = prompt[:, None] + gen_before
    need = _ceil_div(ctx + jnp.minimum(p.draft_tokens + 1, out_col - gen_before), p.block_tokens)
    if ext:
        pfx = jnp.where(p.prefix_cache & running, r.prefix[jnp.maximum(s.seat_req, 0)], -1)
        pb = _ceil_div(r.prefix_tokens, p.block_tokens)
        need = need - jnp.where(pfx >= 0, pb, 0)[:, None]
    held = jnp.maximum(need, s.seat_blocks[:, None])
    # Each ``unit`` of passes counts growth from the blocks held when it starts (the sequences
    # finished before it have freed theirs), as a run of its own would.
    unit_blocks = jnp.stack([s.seat_blocks] + [jnp.where(alive[:, q], held[:, q - 1], 0)
                                                for q in range(unit, lookahead, unit)], axis=1)
    base = jnp.repeat(unit_blocks, unit, axis=1)
    free = jnp.repeat(p.total_blocks - unit_blocks.sum(axis=0, dtype=jnp.int32), unit)
    if ext:
        free = free - pb * s.ext.cached.sum(dtype=jnp.int32)
    # Growth as a difference of two sums: XLA recomputes ``held`` in each reduction that reads it.
    in_use = jnp.where(alive, held, 0).sum(axis=0, dtype=jnp.int32)
    growth = in_use - jnp.where(alive, base, 0).sum(axis=0, dtype=jnp.int32)
    fits = growth <= free
    n_run = alive.sum(axis=0, dtype=jnp.int32)
    context = jnp.where(alive, ctx, 0).sum(axis=0).astype(jnp.float64)
    if ext:
        # Each prefix held by a sequence alive at the pass counts once.
        refs = jnp.einsum("sc,sj->cj", _onehot(pfx).astype(jnp.float32),
                          alive.astype(jnp.float32)) > 0
        in_use = in_use + pb * refs.sum(axis=0, dtype=jnp.int32)
    run = _run_length(p, r, aux, s, skipped, ok, next_arrival, fits, n_run, context, unit)
    seat_passes = (alive & run.took).sum(axis=1, dtype=jnp.int32)
    return _run_end(r, aux, s, skipped, unit, run, in_use, output, seat_passes,
                    gen_new=jnp.where(seat_passes > 0, gen_after[:, run.last], gen),
                    blocks=jnp.where(seat_passes > 0, held[:, run.last], s.seat_blocks))


def _plain_run(p: EngineParams, r: Requests, aux: Aux, lookahead: int, unit: int,
               s: EngineState) -> EngineState:
    """``_decode_run`` when no lane speculates and none caches prefixes or chunks prefills:
    the same passes and results, to the bit, at a fraction of the cost. Every running seat
    then emits one token per pass, so seat i decodes exactly the passes j < rem_i of the run
    and every per-pass figure (batch, context, KV blocks) is a sum over seats of a closed form
    in (i, j): a few fused reductions instead of a [seats, passes] state of tokens."""
    skipped, ok, next_arrival = _run_start(p, r, aux, False, s)
    running = (s.seat_req >= 0) & ~s.seat_pre
    output, gen = s.seat_output, s.seat_gen
    rem = jnp.where(running, output - gen, 0)[:, None]  # passes left to each seat
    ctx0 = (s.seat_prompt + gen)[:, None]
    j = jnp.arange(lookahead, dtype=jnp.int32)
    alive = rem > j  # decodes at pass j

    def held(jj):
        """Blocks seat i holds once it has decoded pass jj (growing to cover the next token)."""
        return jnp.maximum(_ceil_div(ctx0 + jj + 1, p.block_tokens), s.seat_blocks[:, None])

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
    run = _run_length(p, r, aux, s, skipped, ok, next_arrival, fits, n_run, context, unit)
    seat_passes = jnp.minimum(rem[:, 0], run.m)
    return _run_end(r, aux, s, skipped, unit, run, in_use, output, seat_passes,
                    gen_new=gen + seat_passes,
                    blocks=jnp.where(seat_passes > 0, held(seat_passes[:, None] - 1)[:, 0],
                                     s.seat_blocks))


def step(p: EngineParams, r: Requests, aux: Aux, s: EngineState, k_max: int, lookahead: int,
         static_lookahead: int, ext: bool = False) -> EngineState:
    """One step of a batch of simulations (leading axis: lanes): a general pass for those that
    ``needs_pass``, then a decode run of up to ``lookahead`` passes, or ``static_lookahead``
    when every running lane is a static batch (whose runs no arrival cuts short); the run is
    ``_plain_run`` when no lane running at the step's start speculates (then the general
    pass takes no draws either). The general pass is skipped altogether
    when no lane needs it (it would leave each of them unchanged). None of these choices
    changes a result."""
    general = jax.vmap(partial(_general_pass, ext=ext))
    draws = jax.vmap(partial(_accepted, k_max=k_max))
    speculates = ((p.draft_tokens > 0) & unfinished(aux, s)).any()

    def accepted(c):
        """The general pass's draws, taken once (behind a barrier: XLA would fuse the hash into
        each of their consumers) and only if some lane speculates."""
        none = jnp.zeros_like(c.seat_req)
        if k_max == 0:
            return none
        return lax.cond(speculates, lambda: lax.optimization_barrier(
            draws(p, r.seed, c.seat_req, c.seat_npass)), lambda: none)

    need = jax.vmap(needs_pass)(p, aux, s)
    s = lax.cond(need.any(), lambda c: general(p, r, aux, s=c, accepted=accepted(c)),
                 lambda c: c, s)
    if lookahead == 0:
        return s

    def decode(run):
        def of(look):
            return lambda c: jax.vmap(partial(run, lookahead=look, unit=lookahead))(
                p, r, aux, s=c)
        if static_lookahead <= lookahead:
            return of(lookahead)
        return lambda c: lax.cond((p.static | ~unfinished(aux, c)).all(), of(static_lookahead),
                                  of(lookahead), c)

    general_run = decode(partial(_decode_run, k_max=k_max, ext=ext))
    if ext:  # prefix caching and chunked prefill are the general run's alone
        return general_run(s)
    if k_max == 0:
        return decode(_plain_run)(s)
    return lax.cond(speculates, general_run, decode(_plain_run), s)


class _Pool(NamedTuple):
    """``lanes`` simulations in flight; a lane whose simulation ends takes the next one."""

    s: EngineState  # [L]
    p: EngineParams  # [L]
    r: Requests  # [L]
    aux: Aux  # [L]
    sim: jax.Array  # i32[L] the lane's simulation, -1 once the queue is empty
    next: jax.Array  # i32 the next simulation to start
    out: EngineOutput  # [M] results by simulation


def _where(mask, a, b):
    """Per-lane select between two batched pytrees."""
    return jax.tree_util.tree_map(
        lambda x, y: jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - 1)), x, y), a, b)


def uses_extensions(p: EngineParams) -> bool:
    """Whether any design of a (concrete) batch caches prefixes or chunks prefills: only then
    is the engine compiled with them, so a batch without either runs the plain rules' code."""
    return bool(np.any(np.asarray(p.prefix_cache)) or np.any(np.asarray(p.prefill_chunk) > 0)
                or np.any(np.asarray(p.token_budget) > 0))


def simulate_batch(p: EngineParams, r: Requests, *, seats: int, k_max: int,
                   lanes: int | None = None, lookahead: int = DEFAULT_LOOKAHEAD,
                   static_lookahead: int = DEFAULT_STATIC_LOOKAHEAD,
                   block_steps: int = DEFAULT_BLOCK_STEPS, max_steps=None, count=None,
                   compile_only: bool = False) -> EngineOutput:
    """``_simulate_batch``, compiled with prefix caching and chunked prefill only if the
    batch uses them. Only the first ``count`` simulations (default all) are simulated: the
    rest are padding, whose results are left zero. ``compile_only`` compiles it for these
    arguments (into the cache a call uses) and returns the compiled executable without
    simulating."""
    if lookahead and static_lookahead % lookahead:
        raise ValueError(f"static_lookahead: {static_lookahead} passes; allowed: a multiple of "
                         f"lookahead ({lookahead})")
    static = dict(seats=seats, k_max=k_max, lanes=lanes, lookahead=lookahead,
                  static_lookahead=static_lookahead, block_steps=block_steps,
                  ext=uses_extensions(p))
    cpu = jax.default_backend() == "cpu"
    count = jnp.int32(p.max_batch.shape[0] if count is None else count)
    exe = executables.get("engine-cpu" if cpu else "engine", _SIMULATE_BATCH[cpu],
                          (p, r, count), dict(max_steps=max_steps), static)
    return exe if compile_only else exe(p, r, count, max_steps=max_steps)


def _simulate_batch(p: EngineParams, r: Requests, count, *, seats: int, k_max: int,
                    lanes: int | None, lookahead: int, static_lookahead: int,
                    block_steps: int, max_steps,
                    ext: bool) -> EngineOutput:
    """Simulate the first ``count`` of the M simulations stacked along the leading axis of
    ``p`` and ``r``, ``lanes`` (default all) at a time: steps are vmapped over the lanes, and
    every ``block_steps`` steps the lanes whose simulation ended take the next ones, so a short
    simulation does not wait for the longest of its batch. A simulation's result depends on
    nothing but its own inputs. Padding (after ``count``) is never loaded: a padded simulation
    would hold its lane for a whole block."""
    m = p.max_batch.shape[0]
    lanes = min(lanes or m, m)
    n = r.arrival.shape[1]
    aux_of = jax.vmap(lambda rr, pp: make_aux(rr, seats, max_steps,
                                          smallest_chunk(pp) if ext else None))
    fresh = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (lanes,) + x.shape),
                                   initial_state(n, seats))
    step_lanes = partial(step, k_max=k_max, lookahead=lookahead,
                         static_lookahead=static_lookahead, ext=ext)

    def load(ids):
        pp = jax.tree_util.tree_map(lambda x: x[ids], p)
        rr = jax.tree_util.tree_map(lambda x: x[ids], r)
        return pp, rr, aux_of(rr, pp)

    def block(pool: _Pool) -> _Pool:
        s = lax.scan(lambda c, _: (step_lanes(pool.p, pool.r, pool.aux, s=c), None), pool.s,
                     None, length=block_steps)[0]
        ended = (pool.sim >= 0) & ~unfinished(pool.aux, s)
        results = jax.vmap(output)(s, pool.r)
        out = jax.tree_util.tree_map(
            lambda o, x: o.at[jnp.where(ended, pool.sim, m)].set(x, mode="drop"),
            pool.out, results)
        new_id = pool.next + jnp.cumsum(ended, dtype=jnp.int32) - 1
        start = ended & (new_id < count)
        pp, rr, aux = load(jnp.where(start, new_id, 0))
        return _Pool(
            s=_where(start, fresh, s), p=_where(start, pp, pool.p), r=_where(start, rr, pool.r),
            aux=_where(start, aux, pool.aux),
            sim=jnp.where(ended, jnp.where(start, new_id, -1), pool.sim),
            next=pool.next + ended.sum(dtype=jnp.int32), out=out)

    ids = jnp.arange(lanes, dtype=jnp.int32)
    pp, rr, aux = load(ids)
    empty = jax.eval_shape(jax.vmap(output), fresh, rr)
    out = jax.tree_util.tree_map(lambda x: jnp.zeros((m,) + x.shape[1:], x.dtype), empty)
    # A lane with nothing to simulate starts done, so it never asks for a pass.
    idle = ids >= count
    s0 = _where(idle, fresh._replace(done=jnp.ones(lanes, bool)), fresh)
    pool = _Pool(s0, pp, rr, aux, jnp.where(idle, -1, ids), jnp.minimum(count, lanes), out)
    return lax.while_loop(lambda q: (q.sim >= 0).any(), block, pool).out


_STATIC = ("seats", "k_max", "lanes", "lookahead", "static_lookahead", "block_steps", "ext")
#: ``_simulate_batch`` compiled for a CPU (True) or an accelerator. XLA's CPU pipeline splits
#: every reduction over more than 32 elements into a reduce-window and a reduce (for float
#: accuracy): two kernels where one would do. The engine's float sums that reach results are
#: fixed-order (``numerics``) and the rest are exact integer counts, so without the split the
#: bits are the same, a step is ~170 kernels instead of ~380 and runs ~15% faster on 2 cores.
_SIMULATE_BATCH = {
    True: jax.jit(_simulate_batch, static_argnames=_STATIC,
                  compiler_options={"xla_disable_hlo_passes": "tree_reduction_rewriter"}),
    False: jax.jit(_simulate_batch, static_argnames=_STATIC),
}
