"""Closed-loop arrivals (docs/model.md "Closed loop"): ``clients`` clients, each sending its
next request when its last one returns, instead of arrivals given in advance.

The requests are sent in index order: the first ``clients`` at time 0, then one at each send
(every finish sends, but a session's last turn when no session is left to start: ``sessions``).
The j-th sending finish's send is due its ``gap`` later: its client's pause (the pause drawn
for request ``clients + j``) and the request's time outside the passes (``request_overhead_s``:
the response's way back and the next request's way in). The sends are the feature's slot,
``spawn`` (+inf after the last), kept in time order (a send before a later one due at the same
time), so request ``clients + k`` arrives at the k-th one due and the FIFO queue is still
``head..tail`` over the request index. With one pause for every request the sends are due in
the order of their finishes and are appended; with pauses of their own a later finish's send
may be due before an earlier one's, and is merged into its place (``pauses``). A lane of a
batch compiled with it that has 0 clients is open. The twin's rule:
``sweep.twin.closed_loop``."""
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

    spawn: jax.Array  # f64[N+S] the sends' times in time order (inf after the last); S spare
    # slots keep a pass's finishes inside the array
    sends: jax.Array  # i32 finishes that sent a request
    order: jax.Array | None = None  # i32[N+S] which send (by the order sent) each time is, for
    # the sessions, whose sends carry a row; None where nothing reads it


def init(n: int, seats: int, nodes: int, ordered: bool = False) -> Loop:
    """The slot at the start (``ordered``: keeping each send's place in the order sent)."""
    return Loop(jnp.full((n + seats,), jnp.inf), jnp.int32(0),
                jnp.zeros((n + seats,), jnp.int32) if ordered else None)


def gap(p: EngineParams, r: Requests, rows):
    """Seconds from a finish to the arrival of the request it sends, by the pause of row(s)
    ``rows`` (clipped to the rows)."""
    think = jnp.broadcast_to(r.think, r.arrival.shape)
    return think[jnp.clip(rows, 0, think.shape[0] - 1)] + p.summary.request_overhead_s


def merged(loop: Loop, times, k) -> Loop:
    """``loop`` with ``k`` sends more, due at ``times`` (f64[S] in the order sent, inf after
    the k-th), each put in its place in time order after the ones due at the same time: a
    stable merge, which appends them where each is due after every send so far."""
    m, s = loop.spawn.shape[0], times.shape[0]
    by = jnp.argsort(times, stable=True)
    new = times[by]
    before = jnp.searchsorted(loop.spawn, new, side="right").astype(jnp.int32)
    dest = before + jnp.arange(s, dtype=jnp.int32)
    moved = jnp.arange(m) + jnp.cumsum(jnp.zeros((m,), jnp.int32).at[before].add(1, mode="drop"))

    def put(old, add):
        return jnp.zeros_like(old).at[moved].set(old, mode="drop").at[dest].set(add, mode="drop")

    order = None if loop.order is None else put(loop.order, loop.sends + by.astype(jnp.int32))
    return Loop(put(loop.spawn, new), loop.sends + k, order)


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


def _sent(features: dict, loop: Loop, times, k, merge: bool) -> dict:
    """The slots after ``k`` more sending finishes, due at ``times`` (inf after the k-th):
    ``merged``, or where every pause is alike (each send due after every one so far) written
    after them."""
    if merge:
        return {**features, NAME: merged(loop, times, k)}
    spawn = lax.dynamic_update_slice_in_dim(loop.spawn, times, loop.sends, 0)
    return {**features, NAME: loop._replace(spawn=spawn, sends=loop.sends + k)}


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

    @staticmethod
    def send_gap(p: EngineParams, r: Requests, features: dict, j):
        """The gap of send ``j`` (by the order sent): request ``clients + j``'s pause."""
        return gap(p, r, r.clients + j)

    @classmethod
    def least_gap(cls, p: EngineParams, r: Requests, s: EngineState):
        """A gap no send of the next S can be under (each seat finishes once in a run): where
        every request pauses alike, that one gap."""
        if not cls.merges_sends:
            return gap(p, r, r.clients)
        q = jnp.arange(s.seat_req.shape[0], dtype=jnp.int32)
        return gap(p, r, r.clients + s.features[NAME].sends + q).min()

    @classmethod
    def spawned(cls, p: EngineParams, r: Requests, s: EngineState, done, t_end) -> dict:
        """The pass's finishes, all at ``t_end``, send the next requests in turn."""
        send, features = cls.sending(r, s, done, s.seat_req)
        loop = s.features[NAME]
        k = send.sum(dtype=jnp.int32)
        q = jnp.arange(done.shape[0], dtype=jnp.int32)
        times = t_end + cls.send_gap(p, r, features, loop.sends + q)
        return _sent(features, loop, jnp.where(q < k, times, jnp.inf), k, cls.merges_sends)

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
        loop = s.features[NAME]
        times = (ends[jnp.minimum(pass_q, ends.shape[0] - 1)]
                 + cls.send_gap(p, r, features, loop.sends + q))
        return _sent(features, loop, jnp.where(q < by[-1], times, jnp.inf), by[-1],
                     cls.merges_sends)

    @classmethod
    def run_arrival(cls, p: EngineParams, r: Requests, s: EngineState, next_arrival, finishes,
                    ends):
        first = jnp.where(finishes, ends, jnp.inf).min() + cls.least_gap(p, r, s)
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
