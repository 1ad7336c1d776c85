"""The engine's entry: ``simulate_batch`` runs a batch of simulations (designs x workloads x
seeds, stacked along a leading axis) as a pool of lanes, each a ``step`` after another: a
general pass (``passes.general_pass``) then a decode run (``decode``), ``lax.scan`` over steps and
``vmap`` over the lanes. The running set is a seat array and the FIFO queue a window of ``seats``
requests starting at ``head`` over the arrival-sorted requests, so shapes are static."""
from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from sweep.engine.decode import decode_run, plain_run
from sweep.engine.features import active, compose, covering, slots
from sweep.engine.params import EngineParams
from sweep.engine.passes import accepted, general_pass
from sweep.engine.state import (Aux, EngineOutput, EngineState, initial_state, make_aux, needs_pass,
                                output, unfinished)
from sweep.physics.numerics import float64
from sweep.runtime import executables
from sweep.study.workload import Requests

#: Scan steps per block of the outer while loop: the loop stops within one block of the slowest
#: simulation finishing.
DEFAULT_BLOCK_STEPS = 64
#: Passes a decode run may cover in one step, and in a step of static batches only (a continuous
#: batch's runs end at the next arrival, about ten passes in the Serve a Model study; a static
#: batch's only at its end). On 2 CPU cores, for continuous batches 8-16 cost the same and 32 was
#: slower; calls of static batches alone ran faster with 32 at 64 seats, but the Serve a Model
#: study did not (its static designs mostly overflow into the wide tier) while a second decode
#: run made compilation longer, so by default both are 16 (one decode run compiled).
DEFAULT_LOOKAHEAD = 16
DEFAULT_STATIC_LOOKAHEAD = 16


def step(p: EngineParams, r: Requests, aux: Aux, s: EngineState, k_max: int, lookahead: int,
         static_lookahead: int, features: tuple[str, ...] = ()) -> EngineState:
    """One step of a batch of simulations (leading axis: lanes): a general pass for those that
    ``needs_pass``, then a decode run of up to ``lookahead`` passes, or ``static_lookahead``
    when every running lane is a static batch (whose runs no arrival cuts short); the run is
    ``decode.plain_run`` when no lane running at the step's start speculates (then the general
    pass takes no draws either). The general pass is skipped altogether when no lane needs it
    (it would leave each of them unchanged). None of these choices changes a result.
    ``features``: the compiled features (``features.active``)."""
    general = jax.vmap(partial(general_pass, features=features))
    draws = jax.vmap(partial(accepted, k_max=k_max))
    speculates = ((p.draft_tokens > 0) & unfinished(aux, s)).any()

    def drafts(c):
        """The general pass's draws, taken once (behind a barrier: XLA would fuse the hash into
        each of their consumers) and only if some lane speculates."""
        none = jnp.zeros_like(c.seat_req)
        if k_max == 0:
            return none
        return lax.cond(speculates, lambda: lax.optimization_barrier(
            draws(p, r.seed, c.seat_req, c.seat_npass)), lambda: none)

    need = jax.vmap(needs_pass)(p, aux, s)
    s = lax.cond(need.any(), lambda c: general(p, r, aux, s=c, drafts=drafts(c)),
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

    general_run = decode(partial(decode_run, k_max=k_max, features=features))
    if not compose(features).closed_form_runs:
        return general_run(s)
    plain = decode(partial(plain_run, features=features))
    if k_max == 0:
        return plain(s)
    return lax.cond(speculates, general_run, plain, s)


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


def simulate_batch(p: EngineParams, r: Requests, *, seats: int, k_max: int,
                   lanes: int | None = None, lookahead: int = DEFAULT_LOOKAHEAD,
                   static_lookahead: int = DEFAULT_STATIC_LOOKAHEAD,
                   block_steps: int = DEFAULT_BLOCK_STEPS, max_steps=None, count=None,
                   compile_only: bool = False,
                   features: tuple[str, ...] | None = None) -> EngineOutput:
    """``_simulate_batch``, compiled with the features the batch uses (``features.active``)
    and no other, or with ``features`` (``features.covering``: a program shared by batches
    that use different ones). Only the first ``count`` simulations (default all) are simulated: the
    rest are padding, whose results are left zero. ``compile_only`` compiles it for these
    arguments (into the cache a call uses) and returns the compiled executable without
    simulating."""
    if lookahead and static_lookahead % lookahead:
        raise ValueError(f"static_lookahead: {static_lookahead} passes; allowed: a multiple of "
                         f"lookahead ({lookahead})")
    static = dict(seats=seats, k_max=k_max, lanes=lanes, lookahead=lookahead,
                  static_lookahead=static_lookahead, block_steps=block_steps,
                  features=active(p, r) if features is None else covering(features, p, r))
    cpu = jax.default_backend() == "cpu"
    with float64():
        count = jnp.int32(p.max_batch.shape[0] if count is None else count)
        exe = executables.get("engine-cpu" if cpu else "engine", _SIMULATE_BATCH[cpu],
                              (p, r, count), dict(max_steps=max_steps), static)
        return exe if compile_only else exe(p, r, count, max_steps=max_steps)


def _simulate_batch(p: EngineParams, r: Requests, count, *, seats: int, k_max: int,
                    lanes: int | None, lookahead: int, static_lookahead: int,
                    block_steps: int, max_steps,
                    features: tuple[str, ...]) -> EngineOutput:
    """Simulate the first ``count`` of the M simulations stacked along the leading axis of
    ``p`` and ``r``, ``lanes`` (default all) at a time: steps are vmapped over the lanes, and
    every ``block_steps`` steps the lanes whose simulation ended take the next ones, so a short
    simulation does not wait for the longest of its batch. A simulation's result depends on
    nothing but its own inputs. Padding (after ``count``) is never loaded: a padded simulation
    would hold its lane for a whole block."""
    m = p.max_batch.shape[0]
    lanes = min(lanes or m, m)
    n = r.arrival.shape[1]
    f = compose(features)
    aux_of = jax.vmap(lambda rr, pp: make_aux(rr, seats, max_steps, f.prefill_chunk(pp)))
    fresh = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (lanes,) + x.shape),
                                   initial_state(n, seats, slots(features, n, seats,
                                                                r.node_end.shape[1])))
    step_lanes = partial(step, k_max=k_max, lookahead=lookahead,
                         static_lookahead=static_lookahead, features=features)

    def output_of(s, r):
        sent = f.requests(r, s.features)
        return f.in_table_order(output(s, sent, f.arrivals(sent, s.features),
                                       f.prefix_counts(s)), s.features)

    def load(ids):
        pp = jax.tree_util.tree_map(lambda x: x[ids], p)
        rr = jax.tree_util.tree_map(lambda x: x[ids], r)
        return pp, rr, aux_of(rr, pp)

    def begun(rr):
        """A fresh state for each of the requests ``rr``."""
        return jax.vmap(lambda s, r: s._replace(features=f.begin(r, s.features, seats)))(
            fresh, rr)

    def block(pool: _Pool) -> _Pool:
        s = lax.scan(lambda c, _: (step_lanes(pool.p, pool.r, pool.aux, s=c), None), pool.s,
                     None, length=block_steps)[0]
        ended = (pool.sim >= 0) & ~unfinished(pool.aux, s)
        results = jax.vmap(output_of)(s, pool.r)
        out = jax.tree_util.tree_map(
            lambda o, x: o.at[jnp.where(ended, pool.sim, m)].set(x, mode="drop"),
            pool.out, results)
        new_id = pool.next + jnp.cumsum(ended, dtype=jnp.int32) - 1
        start = ended & (new_id < count)
        pp, rr, aux = load(jnp.where(start, new_id, 0))
        return _Pool(
            s=_where(start, begun(rr), s), p=_where(start, pp, pool.p), r=_where(start, rr, pool.r),
            aux=_where(start, aux, pool.aux),
            sim=jnp.where(ended, jnp.where(start, new_id, -1), pool.sim),
            next=pool.next + ended.sum(dtype=jnp.int32), out=out)

    ids = jnp.arange(lanes, dtype=jnp.int32)
    pp, rr, aux = load(ids)
    first = begun(rr)
    empty = jax.eval_shape(jax.vmap(output_of), first, rr)
    out = jax.tree_util.tree_map(lambda x: jnp.zeros((m,) + x.shape[1:], x.dtype), empty)
    # A lane with nothing to simulate starts done, so it never asks for a pass.
    idle = ids >= count
    s0 = _where(idle, first._replace(done=jnp.ones(lanes, bool)), first)
    pool = _Pool(s0, pp, rr, aux, jnp.where(idle, -1, ids), jnp.minimum(count, lanes), out)
    return lax.while_loop(lambda q: (q.sim >= 0).any(), block, pool).out


_STATIC = ("seats", "k_max", "lanes", "lookahead", "static_lookahead", "block_steps",
           "features")
#: ``_simulate_batch`` compiled for a CPU (True) or an accelerator. XLA's CPU pipeline splits
#: every reduction over more than 32 elements into a reduce-window and a reduce (for float
#: accuracy): two kernels where one would do. The engine's float sums that reach results are
#: fixed-order (``numerics``) and the rest are exact integer counts, so without the split the
#: bits are the same, and a step is under half the kernels (benchmarks/README.md, "Why it is
#: fast").
_SIMULATE_BATCH = {
    True: jax.jit(_simulate_batch, static_argnames=_STATIC,
                  compiler_options={"xla_disable_hlo_passes": "tree_reduction_rewriter"}),
    False: jax.jit(_simulate_batch, static_argnames=_STATIC),
}
