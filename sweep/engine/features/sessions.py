"""Sessions (docs/model.md "Sessions"): a closed loop whose users each run one session after
another, sending a session's turns in order, each once the last one's answer is back (plus the
loop's gap). The requests' rows are the sessions' turns (``sweep.study.sessions``); the engine
gives a request its index when it is sent, so that arrivals stay sorted and the FIFO queue is
still ``head..tail``. The feature's slot maps that index to the row and holds, by it, the
prompt and output lengths and the path that the rules read (``requests``, ``window``); the
results go back to the rows' order at the end (``in_table_order``).

The first ``clients`` sessions' first turns are sent at time 0. Each later finish sends its
session's next turn or, after a session's last turn, the next session's first (none once every
session has started); the finishes of one pass send in request order, those of a decode run in
pass order, then request order. A lane of a batch compiled with it that is not a workload of
sessions keeps its own order. The twin's rule: ``sweep.twin.sessions``."""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sweep.engine.features.plain import Plain
from sweep.engine.state import Aux, EngineOutput, EngineState
from sweep.study.workload import Requests

NAME = "sessions"


def uses(p, r: Requests) -> bool:
    """Whether any simulation of a (concrete) batch is a workload of sessions."""
    return bool(np.any(np.asarray(r.turn) > 0))


def init(n: int, seats: int, nodes: int) -> None:
    """None: the slot is made by ``begin``, from the requests (its path is as long as theirs)."""
    return None


class Sessions(NamedTuple):
    """The feature's slot of the state."""

    on: jax.Array  # bool the simulation is a workload of sessions
    row: jax.Array  # i32[N+S] each sent request's row (-1: not sent)
    window: jax.Array  # i32[2, N+S] its prompt and output lengths (0-padded)
    path: jax.Array  # i32[N, L] its path of cache nodes
    opener: jax.Array  # i32[N] the m-th session's first row (N past the last session)
    sessions: jax.Array  # i32 sessions in all
    opened: jax.Array  # i32 sessions started
    sent: jax.Array  # i32 requests sent


def _record(slot: Sessions, r: Requests, index, rows, ok) -> Sessions:
    """The slot with the rows ``rows`` sent as the requests ``index`` where ``ok``."""
    n, width = r.turn.shape[0], slot.row.shape[0]
    at = jnp.where(ok, index, width)
    safe = jnp.clip(rows, 0, n - 1)
    return slot._replace(
        row=slot.row.at[at].set(rows, mode="drop"),
        window=slot.window.at[:, at].set(jnp.stack([r.prompt[safe], r.output[safe]]),
                                         mode="drop"),
        path=slot.path.at[jnp.where(ok, index, n)].set(r.path[safe], mode="drop"))


def begin(r: Requests, seats: int) -> Sessions:
    """The slot at the start: the first ``clients`` sessions' first turns sent (a simulation
    that is no workload of sessions: every request as its own row)."""
    n = r.turn.shape[0]
    i = jnp.arange(n, dtype=jnp.int32)
    first = r.turn == 1
    opener = jnp.full((n,), n, jnp.int32).at[jnp.where(first, jnp.cumsum(first) - 1, n)].set(
        i, mode="drop")
    on = first.any()
    sessions = first.sum(dtype=jnp.int32)
    started = jnp.minimum(r.clients, sessions)
    own = jnp.arange(n + seats, dtype=jnp.int32)
    empty = Sessions(on, jnp.where(on, -1, jnp.where(own < n, own, -1)),
                     jnp.where(on, 0, jnp.pad(jnp.stack([r.prompt, r.output]), ((0, 0),
                                                                                (0, seats)))),
                     jnp.where(on, -1, r.path), opener, sessions, started, started)
    return _record(empty, r, i, opener, on & (i < started))


def rank(mask, key):
    """i32[S] each seat's place among the ``mask`` seats in the order of ``key``."""
    big = jnp.iinfo(key.dtype).max
    order = jnp.argsort(jnp.where(mask, key, big), stable=True)
    return jnp.zeros(key.shape, jnp.int32).at[order].set(
        jnp.arange(key.shape[0], dtype=jnp.int32))


def sending(r: Requests, s: EngineState, done, key):
    """The seats ``done`` whose finish sends a request, and the slot after: a session's next
    turn, or after its last the next session's first, in the order of ``key``."""
    slot = s.features[NAME]
    n = r.turn.shape[0]
    rows = jnp.clip(slot.row[jnp.clip(s.seat_req, 0, slot.row.shape[0] - 1)], 0, n - 1)
    after = jnp.minimum(rows + 1, n - 1)
    goes_on = done & (rows + 1 < n) & (r.turn[after] == r.turn[rows] + 1)
    ends = done & ~goes_on
    m = slot.opened + rank(ends, key)
    opens = ends & (m < slot.sessions)
    send = goes_on | opens
    new = jnp.where(goes_on, rows + 1, slot.opener[jnp.clip(m, 0, n - 1)])
    slot = _record(slot, r, slot.sent + rank(send, key), new, slot.on & send)._replace(
        opened=slot.opened + opens.sum(dtype=jnp.int32),
        sent=slot.sent + send.sum(dtype=jnp.int32))
    return jnp.where(slot.on, send, done), {**s.features, NAME: slot}


def in_table_order(out: EngineOutput, slot: Sessions) -> EngineOutput:
    """The per-request results, by row."""
    n = out.finish.shape[0]
    at = jnp.where(slot.row[:n] >= 0, slot.row[:n], n)

    def by_row(x, fill):
        return jnp.full(x.shape, fill, x.dtype).at[at].set(x, mode="drop")

    return out._replace(arrival=by_row(out.arrival, jnp.inf), first=by_row(out.first, jnp.nan),
                        finish=by_row(out.finish, jnp.nan), generated=by_row(out.generated, 0),
                        cached_tokens=by_row(out.cached_tokens, 0))


class Hooks(Plain):
    """The requests in the order they are sent, for the lanes of sessions."""

    @staticmethod
    def sending(r: Requests, s: EngineState, done, key):
        return sending(r, s, done, key)

    @staticmethod
    def begin(r: Requests, features: dict, seats: int) -> dict:
        return {**features, NAME: begin(r, seats)}

    @staticmethod
    def requests(r: Requests, features: dict) -> Requests:
        slot = features[NAME]
        n = r.turn.shape[0]
        return r._replace(prompt=slot.window[0, :n], output=slot.window[1, :n], path=slot.path)

    @staticmethod
    def window(aux: Aux, features: dict):
        return features[NAME].window

    @staticmethod
    def in_table_order(out, features: dict):
        return in_table_order(out, features[NAME])
