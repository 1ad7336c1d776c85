"""Closed-loop arrivals (docs/model.md "Closed loop"): ``clients`` clients, each sending its
next request when its last one returns, instead of arrivals given in advance.

The requests are sent in index order: the first ``clients`` at time 0, and request
``clients + j`` reaches the engine at the j-th finish that sends one (every finish, but a
session's last turn when no session is left to start: ``sessions``) plus the client's ``gap``:
its think time and the request's time outside the passes (``request_overhead_s``: the response's
way back and the next request's way in). Finishes come in time order and the gap is one per
simulation, so arrivals stay sorted and the FIFO queue is still ``head..tail`` over the request
index. The j-th such finish plus the gap is the feature's slot, ``spawn[j]`` (+inf until it
happens), written in the pass (or decode run) of the finish. A lane of a batch compiled with it
that has 0 clients is open. The twin's rule: ``sweep.twin.closed_loop``."""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from sweep.engine.features.plain import Plain
from sweep.engine.params import EngineParams
from sweep.engine.state import Aux, EngineState, arrived
from sweep.study.workload import Requests

NAME = "closed_loop"


def uses(p, r: Requests) -> bool:
    """Whether any simulation of a (concrete) batch is a closed loop."""
    return bool(np.any(np.asarray(r.clients) > 0))


class Loop(NamedTuple):
    """The feature's slot of the state."""

    spawn: jax.Array  # f64[N+S] the j-th sending finish plus the gap (inf until then); S spare
    # slots keep a pass's finishes inside the array
    sends: jax.Array  # i32 finishes that sent a request


def init(n: int, seats: int, nodes: int) -> Loop:
    return Loop(jnp.full((n + seats,), jnp.inf), jnp.int32(0))


def gap(p: EngineParams, r: Requests):
    """Seconds from a finish to the next request's arrival at the engine."""
    return r.think + p.summary.request_overhead_s


def closed_arrival(r: Requests, spawn, i, xp=jnp):
    """Arrival of request ``i`` of a closed loop (+inf: not yet sent, or padding). The first
    ``clients`` are sent at once (their own arrival: 0, or +inf for padding); with a warm-up
    of W requests the measured ones start together too, once every warm-up request has
    returned (the W-th finish); every other request follows a finish: ``clients`` before it.
    ``xp``: the array module (numpy for the servers of a fleet, ``topology``)."""
    n = r.arrival.shape[0]
    c, w = r.clients, r.warmup
    own = r.arrival[xp.minimum(i, n - 1)]
    at_once = (i < c) & ((i < w) | (w == 0))
    j = xp.where((w > 0) & (i >= w) & (i < w + c), w - 1, i - c)
    return xp.where(at_once, own, xp.maximum(own, spawn[xp.clip(j, 0, spawn.shape[0] - 1)]))


def sent(r: Requests, spawn, t):
    """Requests of a closed loop sent by ``t`` (before padding is excluded): as ``k`` finishes
    (plus the gap) have passed, ``clients + k``, but during a warm-up no more than it."""
    k = (spawn <= t).sum(dtype=jnp.int32)
    return jnp.where(k >= r.warmup, r.clients + k, jnp.minimum(r.clients + k, r.warmup))


def _sent(features: dict, loop: Loop, spawn, k) -> dict:
    """The slots after ``k`` more sending finishes, whose times ``spawn`` are written from the
    next free entry of ``loop``."""
    return {**features, NAME: Loop(lax.dynamic_update_slice_in_dim(loop.spawn, spawn, loop.sends,
                                                                   0), loop.sends + k)}


class Hooks(Plain):
    """Arrivals set by finishes, for the lanes with clients (the others are open)."""

    @staticmethod
    def arrival_of(r: Requests, s: EngineState, i):
        n = r.arrival.shape[0]
        closed = jnp.where(i < n, closed_arrival(r, s.features[NAME].spawn, i), jnp.inf)
        return jnp.where(r.clients > 0, closed, Plain.arrival_of(r, s, i))

    @staticmethod
    def arrived(r: Requests, aux: Aux, features: dict, t):
        # Never past the real requests (their lower bound 0 has passed; padding's is +inf).
        given = arrived(aux, t, r.arrival.shape[0])
        closed = jnp.minimum(sent(r, features[NAME].spawn, t), given)
        return jnp.where(r.clients > 0, closed, given)

    @classmethod
    def spawned(cls, p: EngineParams, r: Requests, s: EngineState, done, t_end) -> dict:
        """The pass's finishes, all at ``t_end``, send the next requests in turn."""
        send, features = cls.sending(r, s, done, s.seat_req)
        loop = s.features[NAME]
        k = send.sum(dtype=jnp.int32)
        nseat = done.shape[0]
        window = lax.dynamic_slice_in_dim(loop.spawn, loop.sends, nseat)
        return _sent(features, loop, jnp.where(jnp.arange(nseat) < k, t_end + gap(p, r), window),
                     k)

    @classmethod
    def spawned_run(cls, p: EngineParams, r: Requests, s: EngineState, done, at, ends) -> dict:
        """The sending finish q of the run (in time order, then request order) is at the end of
        the first pass by which more than q seats have sent."""
        nseat = s.seat_req.shape[0]
        send, features = cls.sending(r, s, done, at * (r.arrival.shape[0] + nseat) + s.seat_req)
        passes = jnp.arange(ends.shape[0], dtype=jnp.int32)
        by = jnp.cumsum((send[:, None] & (at[:, None] == passes)).sum(axis=0, dtype=jnp.int32),
                        dtype=jnp.int32)
        q = jnp.arange(nseat, dtype=jnp.int32)
        pass_q = (by[None, :] <= q[:, None]).sum(axis=1)
        times = ends[jnp.minimum(pass_q, ends.shape[0] - 1)] + gap(p, r)
        loop = s.features[NAME]
        window = lax.dynamic_slice_in_dim(loop.spawn, loop.sends, nseat)
        return _sent(features, loop, jnp.where(q < by[-1], times, window), by[-1])

    @staticmethod
    def run_arrival(p: EngineParams, r: Requests, s: EngineState, next_arrival, finishes,
                    ends):
        first = jnp.where(finishes, ends, jnp.inf).min() + gap(p, r)
        # A finish that sends nothing (a warm-up's, before the last) ends a run too: cutting a
        # run early changes no result.
        n = r.arrival.shape[0]
        nxt = r.clients + s.features[NAME].sends
        sends = (r.clients > 0) & (nxt < n) & jnp.isfinite(r.arrival[jnp.clip(nxt, 0, n - 1)])
        return jnp.where(sends, jnp.minimum(next_arrival, first), next_arrival)

    @staticmethod
    def arrivals(r: Requests, features: dict):
        i = jnp.arange(r.arrival.shape[0], dtype=jnp.int32)
        return jnp.where(r.clients > 0, closed_arrival(r, features[NAME].spawn, i), r.arrival)
