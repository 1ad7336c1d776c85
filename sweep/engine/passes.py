"""Rules 6-9 of docs/model.md ("One step"): the pass, its tokens and completions, and the clock
after it; and the general pass, the composition of all nine. Each rule is one pure function of
the step (``scheduling.Step``) and the earlier rules' results; the features enter through the
step's hooks (``features``)."""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from sweep.engine.features import compose
from sweep.engine.params import EngineParams
from sweep.engine.scheduling import (Admission, Growth, Readmission, Step, admission, growth,
                                     idle_jump, readmission, stop)
from sweep.engine.state import Aux, EngineState, itl_bin, needs_pass, seats_of
from sweep.physics.rng import uniform_bits
from sweep.study.workload import Requests


def accepted(p: EngineParams, seed, req, npass, k_max: int):
    """Accepted draft tokens of a decode pass (docs/model.md, "Speculative decoding"): one
    24-bit draw against p**j thresholds."""
    if k_max == 0:
        return jnp.zeros(jnp.broadcast_shapes(req.shape, npass.shape), jnp.int32)
    u = uniform_bits(seed, req, npass, xp=jnp)
    # Thresholds past the design's k are 0; a sum of k_max compares fuses into one loop.
    return sum((u < p.accept_thresholds[j]).astype(jnp.int32) for j in range(k_max))


class Pass(NamedTuple):
    """Rule 6's outcome."""

    decode: jax.Array  # bool[S] seats that decode in it
    prefill: jax.Array  # i32[S] prompt tokens each seat prefills
    todo: jax.Array | None  # i32[S] chunked prefill: prompt tokens each seat had left before it
    dt: jax.Array  # f64 its duration (0: no pass)
    t_end: jax.Array  # f64 the clock at its end


def the_pass(c: Step, t, g: Growth, ra: Readmission, ad: Admission, b) -> Pass:
    """Rule 6: a pass from ``t`` prefills the admitted and readmitted requests (under chunked
    prefill, each prefilling seat's chunk) and decodes every seat that grew in rule 3; it takes
    ``timing.pass_time``, or the time of its loads from a second tier of the cache if longer
    (they overlap its compute). Under an engine that prefills alone, a pass with a prefill
    decodes nothing."""
    # A transferred request (a decode pool's) is not prefilled: its admission decodes one token
    # over its cached context (docs/model.md "Disaggregated prefill and decode").
    load = ad.new & c.p.transferred
    todo, prefill, pairs = c.f.prefills(c, b, ra, ad, load)
    decode = g.decoding & g.work & ~(c.p.prefill_alone & (prefill > 0).any())
    f64 = jnp.float64
    dt = c.f.staged(c.f.pass_time, c.p.timing, prefill.sum(dtype=f64), pairs.sum(dtype=f64),
                    (decode | load).sum(dtype=f64),
                    (jnp.where(decode, c.seats.ctx, 0) + jnp.where(load, ad.prompt, 0)).sum(
                        dtype=f64),
                    (decode | load | (prefill > 0)).sum(dtype=f64), prefill.max().astype(f64),
                    pairs.max().astype(f64), xp=jnp)
    dt = c.f.unscheduled(c.p, dt, c.sched)
    loads = c.f.load_time(c, ra, ad)
    if loads is not None:
        dt = jnp.maximum(dt, loads)
    dt = jnp.where(g.work, dt, 0.0)
    return Pass(decode, prefill, todo, dt, t + dt)


class Tokens(NamedTuple):
    """Rule 7's outcome."""

    decoded: jax.Array  # i32[S] tokens each decoding seat emits
    completes: jax.Array  # bool[S] its prefill completes: it emits a token
    emitted: jax.Array  # i32[S]
    itl_hist: jax.Array  # i32[ITL_BINS] the gap histogram with the pass's gaps
    todo: jax.Array | None  # i32[S] chunked prefill: prompt tokens left after the pass


def tokens(c: Step, g: Growth, ra: Readmission, ad: Admission, ps: Pass, drafts) -> Tokens:
    """Rule 7: at the end of the pass a completed prefill emits one token and a decoding seat
    min(A + 1, o - g) (A: its ``drafts`` accepted). Every decoding seat emitted its previous
    token at the pass's start, so its gap is the pass time; only a seat completing a recompute
    (or, under chunked prefill, a prefill after a stall) has a gap of its own."""
    s = c.s
    decoded = jnp.where(ps.decode, jnp.minimum(drafts + 1, s.seat_output - s.seat_gen), 0)
    # Under an engine that prefills alone a seat may have waited out a prefill's pass: its gap
    # runs from its last token (every other seat's last token came at the pass's start).
    late = ps.decode & c.p.prefill_alone & (s.seat_last < s.t)
    todo, done, gaps, counts = c.f.completes(c, g, ra, ad, ps,
                                             (ps.decode & ~late).sum(dtype=jnp.int32))
    hist = s.itl_hist.at[jnp.concatenate([gaps, itl_bin(ps.t_end - s.seat_last)])].add(
        jnp.concatenate([counts, late.astype(jnp.int32)]))  # one scatter for both
    return Tokens(decoded, done, decoded + done, hist, todo)


class Completion(NamedTuple):
    """Rule 8's outcome."""

    seat_req: jax.Array  # i32[S] each seat's request (the finished ones' too)
    gen: jax.Array  # i32[S] its tokens generated
    done: jax.Array  # bool[S] it finishes
    blocks: jax.Array  # i32[S] blocks held, the finished seats' freed
    seat_pre: jax.Array  # bool[S] preempted
    in_use: jax.Array  # i32 blocks in use after the pass's allocations, before finished seats free
    first: jax.Array  # f64[N+S] first-token times
    finish: jax.Array  # f64[N] finish times
    features: dict  # the features' slots after the pass


def completion(c: Step, g: Growth, ra: Readmission, ad: Admission, ps: Pass,
               tk: Tokens) -> Completion:
    """Rule 8: a seat whose g reaches o finishes at the end of the pass and frees its seat and
    blocks. Under prefix caching the cache is then updated (the hooks' ``cache_after``)."""
    s, n = c.s, c.r.arrival.shape[0]
    seat_req = jnp.where(ad.new, ad.req, s.seat_req)
    gen, first = c.f.first_tokens(c, ad, ps, tk, seat_req)
    done = (tk.emitted > 0) & (gen >= jnp.where(ad.new, ad.output, s.seat_output))
    blocks = jnp.where(ad.new, ad.own, jnp.where(ra.seat, ra.own, g.blocks))
    return c.f.cache_after(c, ra, ad, tk, Completion(
        seat_req, gen, done, jnp.where(done, 0, blocks), g.seat_pre & ~ra.seat & ~done,
        blocks.sum(dtype=jnp.int32), first,
        s.finish.at[jnp.where(done, seat_req, n)].set(ps.t_end, mode="drop"), s.features))


def advance(st: Step, r: Requests, live, halt, tail, g: Growth, ad: Admission, ps: Pass,
            tk: Tokens, c: Completion) -> EngineState:
    """Rule 9, t = t_end (for a ``live`` simulation; ``halt``: rule 2 stopped it), and the rest
    of the state after the pass: its seats, and the counts it adds to. In a closed loop the
    pass's finishes send the next requests (of ``r``, in their own order)."""
    s = st.s
    features = st.f.spawned(st.p, r, s._replace(features=c.features, seat_req=c.seat_req,
                                                head=s.head + ad.count), c.done, ps.t_end)
    features = st.f.preempted(st.p, st.f.scheduled(st.p, features, st.sched, g.work), s,
                              g.preempt)
    return s._replace(
        t=jnp.where(live, ps.t_end, s.t),
        head=s.head + ad.count,
        tail=st.f.arrived(st.r, st.aux, features, ps.t_end),
        features=features,
        seat_req=jnp.where(c.done, -1, c.seat_req),
        seat_prompt=jnp.where(ad.new, ad.prompt, s.seat_prompt),
        seat_output=jnp.where(ad.new, ad.output, s.seat_output),
        seat_gen=jnp.where(c.done, 0, c.gen),
        seat_npass=jnp.where(ad.new | c.done, 0, s.seat_npass + ps.decode),
        seat_blocks=c.blocks,
        seat_pre=c.seat_pre,
        seat_last=jnp.where(tk.emitted > 0, ps.t_end, s.seat_last),
        first=c.first, finish=c.finish,
        finished=s.finished + c.done.sum(dtype=jnp.int32),
        tokens=s.tokens + tk.emitted.sum(dtype=jnp.int64),
        preemptions=s.preemptions + g.preempt.astype(jnp.int32),
        max_queue=jnp.maximum(s.max_queue, jnp.where(g.work, tail - s.head - ad.count, 0)),
        peak_blocks=jnp.maximum(s.peak_blocks, jnp.where(g.work, c.in_use, 0)),
        busy=s.busy + ps.dt, itl_hist=tk.itl_hist,
        itl_zero=s.itl_zero + jnp.where(ps.decode, tk.decoded - 1, 0).sum(dtype=jnp.int32),
        steps=s.steps + (live & ~halt).astype(jnp.int32),
        passes=s.passes + g.work.astype(jnp.int32),
        overflow=s.overflow | ad.overflow,
        # An overflowed result is discarded (rerun wider), so it need not run on.
        done=s.done | (live & halt) | ad.overflow,
    )


def general_pass(p: EngineParams, r: Requests, aux: Aux, features: tuple[str, ...],
                 s: EngineState, drafts) -> EngineState:
    """One engine pass (or one preemption) by the rules: docs/model.md, "One step", in which
    each seat's draft accepts ``drafts`` tokens if it decodes, with the hooks of the compiled
    ``features`` (``features.compose``; with none, the pass is exactly the plain rules'). A
    simulation that does not ``needs_pass`` is left as it is."""
    live = needs_pass(p, aux, s)
    f = compose(features)
    seats = seats_of(s)
    sent = f.requests(r, s.features)  # by the index the engine gives them
    c = Step(p, sent, aux, s, seats, f, f.view(p, sent, s, seats), f.schedules(p, s, seats))
    t, tail = idle_jump(c, live)
    halt = stop(c, t)
    g = growth(c, live & ~halt)
    b = f.budget(c, g.decoding, g.work)
    ra = readmission(c, g, b)
    ad = admission(c, tail, g, ra)
    ps = the_pass(c, t, g, ra, ad, b)
    tk = tokens(c, g, ra, ad, ps, drafts)
    done = completion(c, g, ra, ad, ps, tk)
    return advance(c, r, live, halt, tail, g, ad, ps, tk, done)
