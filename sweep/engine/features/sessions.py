"""Sessions (docs/model.md "Sessions"): each a sequence of turns, a turn sent once the last one's
answer is back (plus the loop's gap). The requests' rows are the sessions' turns
(``sweep.study.sessions``); a request's index, its place in the FIFO queue, is its place in the
order of arrival, which the finishes set as the simulation goes, so that arrivals stay sorted and
the queue is still ``head..tail``.

Two streams arrive, and their merge (in time order; a start before a finish's send at the same
time, each stream in its own order) is the order of the indices: the **starts**, sessions'
first turns at times given in advance (open: every session at its arrival; closed: the first
``clients`` sessions at time 0), and the **sends** of finishes, each the gap of the row it sends
after it (that row's pause), in the closed loop's ``spawn`` array, which keeps them in time order
(a session's next turn; closed, after a session's last turn, the next session's first, none
once every session has started). The feature's slot holds, by index, each
request's row, arrival, prompt and output lengths and path that the rules read (``requests``,
``window``): those admitted, and the next ``S`` of the merge as it stands (rewritten whenever a
finish sends, before the next admission reads them; a send is always later than every arrival
so far, so the requests arrived keep their places). The results go back to the rows' order at
the end (``in_table_order``).

It stands for the closed loop (its hooks are the closed loop's, for the lanes of a batch that
are no workload of sessions, and more). The twin's rule: ``sweep.twin.sessions``."""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from sweep.engine.features import closed_loop
from sweep.engine.params import EngineParams
from sweep.engine.state import Aux, EngineOutput, EngineState
from sweep.study.workload import Requests

NAME = "sessions"
#: Compiled in, it replaces the closed loop, whose hooks it extends.
REPLACES = (closed_loop.NAME,)


def uses(p, r: Requests) -> bool:
    """Whether any simulation of a (concrete) batch is a workload of sessions."""
    return bool(np.any(np.asarray(r.turn) > 0))


def init(n: int, seats: int, nodes: int) -> None:
    """None: the slot is made by ``begin``, from the requests (its path is as long as theirs)."""
    return None


class Sessions(NamedTuple):
    """The feature's slot of the state (by index: the admitted requests, then the next S)."""

    on: jax.Array  # bool the simulation is a workload of sessions
    row: jax.Array  # i32[N+S] the request's row (-1: none)
    arr: jax.Array  # f64[N+S] its arrival
    start: jax.Array  # bool[N+S] it is a session's start (not a finish's send)
    window: jax.Array  # i32[2, N+S] its prompt and output lengths (0-padded)
    path: jax.Array  # i32[N+S, L] its path of cache nodes
    starts: jax.Array  # f64[N] the m-th start's time (inf: none)
    opener: jax.Array  # i32[N] the m-th session's first row (N: none)
    sent_row: jax.Array  # i32[N+S] the row of the j-th finish's send (by the order sent)
    sessions: jax.Array  # i32 sessions in all
    opened: jax.Array  # i32 sessions started, as starts or sends
    head: jax.Array  # i32 requests admitted
    took: jax.Array  # i32 of which starts


def begin(r: Requests, seats: int) -> Sessions:
    """The slot at the start, with the first S of the merge (a simulation that is no workload
    of sessions: every request at its own index)."""
    n = r.turn.shape[0]
    i = jnp.arange(n, dtype=jnp.int32)
    first = r.turn == 1
    opener = jnp.full((n,), n, jnp.int32).at[jnp.where(first, jnp.cumsum(first) - 1, n)].set(
        i, mode="drop")
    on = first.any()
    sessions = first.sum(dtype=jnp.int32)
    closed = r.clients > 0
    c = jnp.where(closed, jnp.minimum(r.clients, sessions), sessions)
    starts = jnp.where(i < c, jnp.where(closed, 0.0, r.arrival[jnp.minimum(opener, n - 1)]),
                       jnp.inf)
    own = jnp.arange(n + seats, dtype=jnp.int32)
    path = jnp.pad(r.path, ((0, seats), (0, 0)), constant_values=-1)
    return Sessions(
        on, jnp.where(on, -1, jnp.where(own < n, own, -1)), jnp.full((n + seats,), jnp.inf),
        jnp.zeros((n + seats,), bool),
        jnp.where(on, 0, jnp.pad(jnp.stack([r.prompt, r.output]), ((0, 0), (0, seats)))),
        jnp.where(on, -1, path), starts, opener, jnp.full((n + seats,), n, jnp.int32), sessions,
        c, jnp.int32(0), jnp.int32(0))


def rank(mask, key):
    """i32[S] each seat's place among the ``mask`` seats in the order of ``key``."""
    big = jnp.iinfo(key.dtype).max
    order = jnp.argsort(jnp.where(mask, key, big), stable=True)
    return jnp.zeros(key.shape, jnp.int32).at[order].set(
        jnp.arange(key.shape[0], dtype=jnp.int32))


def ahead(slot: Sessions, r: Requests, loop: closed_loop.Loop) -> Sessions:
    """The slot with the next S of the merge of the starts and the sends (``loop``, in time
    order) written from index ``head`` on."""
    n = r.turn.shape[0]
    s = slot.row.shape[0] - n
    q = jnp.arange(s, dtype=jnp.int32)
    m = slot.took + q
    j = jnp.minimum(slot.head - slot.took + q, loop.spawn.shape[0] - 1)
    times = jnp.concatenate([slot.starts[jnp.minimum(m, n - 1)] + jnp.where(m < n, 0.0, jnp.inf),
                             loop.spawn[j]])
    sent = slot.sent_row[j if loop.order is None else loop.order[j]]
    rows = jnp.concatenate([slot.opener[jnp.minimum(m, n - 1)], sent])
    # A start before a send at the same time; each stream in its own order.
    pick = jnp.argsort(times, stable=True)[:s]
    t, row = times[pick], rows[pick]
    row = jnp.where(jnp.isfinite(t) & (row < n), row, -1)
    safe = jnp.clip(row, 0, n - 1)
    def put(x, v, axis=0):
        """``x`` with ``v`` from ``head`` on (a lane that is no workload of sessions keeps its
        own: the select is over the S entries, not the whole array, on every pass)."""
        old = lax.dynamic_slice_in_dim(x, slot.head, s, axis)
        return lax.dynamic_update_slice_in_dim(x, jnp.where(slot.on, v, old), slot.head, axis)

    return slot._replace(
        row=put(slot.row, row), arr=put(slot.arr, t), start=put(slot.start, pick < s),
        window=put(slot.window, jnp.where(row >= 0, jnp.stack([r.prompt[safe], r.output[safe]]),
                                          0), 1),
        path=put(slot.path, jnp.where(row[:, None] >= 0, r.path[safe], -1)))


def admitted(slot: Sessions, head) -> Sessions:
    """The slot once the requests up to ``head`` are admitted: they keep their places."""
    s = slot.row.shape[0] - slot.starts.shape[0]
    mine = lax.dynamic_slice_in_dim(slot.start, slot.head, s)
    took = (mine & (jnp.arange(s) < head - slot.head)).sum(dtype=jnp.int32)
    return slot._replace(head=head, took=slot.took + jnp.where(slot.on, took, 0))


def sending(r: Requests, s: EngineState, done, key):
    """The seats ``done`` whose finish sends a request, and the slots after: a session's next
    turn, or in a closed loop after its last the next session's first, in the order of
    ``key``."""
    slot = s.features[NAME]
    n = r.turn.shape[0]
    rows = jnp.clip(slot.row[jnp.clip(s.seat_req, 0, slot.row.shape[0] - 1)], 0, n - 1)
    after = jnp.minimum(rows + 1, n - 1)
    goes_on = done & (rows + 1 < n) & (r.turn[after] == r.turn[rows] + 1)
    ends = done & ~goes_on
    m = slot.opened + rank(ends, key)
    opens = ends & (m < slot.sessions) & (r.clients > 0)
    send = goes_on | opens
    new = jnp.where(goes_on, rows + 1, slot.opener[jnp.clip(m, 0, n - 1)])
    j = s.features[closed_loop.NAME].sends + rank(send, key)
    slot = slot._replace(
        sent_row=slot.sent_row.at[jnp.where(slot.on & send, j, slot.sent_row.shape[0])].set(
            new, mode="drop"),
        opened=slot.opened + opens.sum(dtype=jnp.int32))
    return jnp.where(slot.on, send, done), {**s.features, NAME: slot}


def in_table_order(out: EngineOutput, slot: Sessions) -> EngineOutput:
    """The per-request results, by row."""
    n = out.finish.shape[0]
    at = jnp.where(slot.row[:n] >= 0, slot.row[:n], n)

    def by_row(x, fill):
        return jnp.where(slot.on, jnp.full(x.shape, fill, x.dtype).at[at].set(x, mode="drop"),
                         x)

    return out._replace(arrival=by_row(out.arrival, jnp.inf), first=by_row(out.first, jnp.nan),
                        finish=by_row(out.finish, jnp.nan), generated=by_row(out.generated, 0),
                        cached_tokens=by_row(out.cached_tokens, 0))


def _ahead(features: dict, r: Requests) -> dict:
    return {**features, NAME: ahead(features[NAME], r, features[closed_loop.NAME])}


def least_gap(p: EngineParams, r: Requests, s: EngineState):
    """A gap no send of a decode run can be under: the pause of a running turn's next row, or
    of one of the next S sessions' first."""
    slot = s.features[NAME]
    n = r.turn.shape[0]
    rows = slot.row[jnp.clip(s.seat_req, 0, slot.row.shape[0] - 1)]
    firsts = slot.opener[jnp.clip(slot.opened + jnp.arange(s.seat_req.shape[0]), 0, n - 1)]
    return jnp.minimum(closed_loop.gap(p, r, jnp.where(s.seat_req >= 0, rows + 1, n)).min(),
                       closed_loop.gap(p, r, firsts).min())


class Hooks(closed_loop.Hooks):
    """The requests in the order they arrive, for the lanes of sessions; the closed loop's
    hooks for the others."""

    @classmethod
    def begin(cls, r: Requests, features: dict, seats: int) -> dict:
        n = r.turn.shape[0]
        loop = closed_loop.init(n, seats, 0, ordered=cls.merges_sends)
        features = {**features, closed_loop.NAME: loop, NAME: begin(r, seats)}
        return _ahead(features, r)

    @staticmethod
    def sending(r: Requests, s: EngineState, done, key):
        return sending(r, s, done, key)

    @staticmethod
    def send_gap(p: EngineParams, r: Requests, features: dict, j):
        """The pause of the row send ``j`` sends."""
        slot = features[NAME]
        row = slot.sent_row[jnp.clip(j, 0, slot.sent_row.shape[0] - 1)]
        return jnp.where(slot.on, closed_loop.gap(p, r, row),
                         closed_loop.Hooks.send_gap(p, r, features, j))

    @classmethod
    def least_gap(cls, p: EngineParams, r: Requests, s: EngineState):
        if not cls.merges_sends:  # every request pauses alike: no rows to look up
            return closed_loop.gap(p, r, r.clients)
        return jnp.where(s.features[NAME].on, least_gap(p, r, s),
                         super().least_gap(p, r, s))

    @classmethod
    def spawned(cls, p: EngineParams, r: Requests, s: EngineState, done, t_end) -> dict:
        """The pass's admissions keep their places; its finishes send; the next S again."""
        s = s._replace(features={**s.features, NAME: admitted(s.features[NAME], s.head)})
        return _ahead(super().spawned(p, r, s, done, t_end), r)

    @classmethod
    def spawned_run(cls, p: EngineParams, r: Requests, s: EngineState, done, at, ends) -> dict:
        return _ahead(super().spawned_run(p, r, s, done, at, ends), r)

    @staticmethod
    def arrival_of(r: Requests, s: EngineState, i):
        slot = s.features[NAME]
        # Past the next S (never asked while some are waiting), the S-th: a bound from below.
        at = jnp.clip(i, 0, slot.head + slot.row.shape[0] - r.turn.shape[0] - 1)
        return jnp.where(slot.on, slot.arr[at], closed_loop.Hooks.arrival_of(r, s, i))

    @staticmethod
    def arrived(r: Requests, aux: Aux, features: dict, t):
        slot = features[NAME]
        mine = ((slot.starts <= t).sum(dtype=jnp.int32)
                + (features[closed_loop.NAME].spawn <= t).sum(dtype=jnp.int32))
        return jnp.where(slot.on, mine, closed_loop.Hooks.arrived(r, aux, features, t))

    @classmethod
    def run_arrival(cls, p: EngineParams, r: Requests, s: EngineState, next_arrival, finishes,
                    ends):
        # A finish that sends nothing (a session's last) ends a run too: no result changes.
        first = jnp.where(finishes, ends, jnp.inf).min() + cls.least_gap(p, r, s)
        return jnp.where(s.features[NAME].on, jnp.minimum(next_arrival, first),
                         super().run_arrival(p, r, s, next_arrival, finishes, ends))

    @staticmethod
    def arrivals(r: Requests, features: dict):
        slot = features[NAME]
        return jnp.where(slot.on, slot.arr[:r.turn.shape[0]],
                         closed_loop.Hooks.arrivals(r, features))

    @staticmethod
    def requests(r: Requests, features: dict) -> Requests:
        slot = features[NAME]
        n = r.turn.shape[0]
        return r._replace(prompt=slot.window[0, :n], output=slot.window[1, :n],
                          path=slot.path[:n])

    @staticmethod
    def window(aux: Aux, features: dict):
        return features[NAME].window

    @staticmethod
    def in_table_order(out, features: dict):
        return in_table_order(out, features[NAME])
