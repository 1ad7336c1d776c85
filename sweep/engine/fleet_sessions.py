"""Sessions on several servers (docs/model.md "Sessions"). The session router keeps each
session, and each user, on one replica, so each replica runs its own sessions as one server
does, in rows of its own: its cache state is sized by its own turns, not the fleet's. Any other
router, and disaggregated pools, get the turns as open requests, in the order they arrive:
their arrivals are the finishes' sends (``sent``), found by rounds as a closed loop's are
(``topology.run``)."""
from __future__ import annotations

import heapq

import numpy as np

from sweep.engine.state import EngineOutput
from sweep.study.workload import Requests


def sessions_of(r: Requests) -> bool:
    """Whether the requests are a workload of sessions' turns."""
    return bool(np.any(np.asarray(r.turn) == 1))


def keeps_sessions(p) -> bool:
    """Whether a plan's (``topology.Plan``) replicas are behind the session router: each then
    holds its own sessions, and nothing of another's (one server holds the requests as they
    are)."""
    return p.router == "session" and p.weights is None and p.decode is None and len(p.first) > 1


def by_session(p, r: Requests) -> bool:
    """Whether a plan's replicas serve a workload of sessions by the session router."""
    return keeps_sessions(p) and sessions_of(r)


def share(clients: int, j: int, servers: int) -> int:
    """Server j's clients of a closed loop shared among ``servers``: as even as can be, the
    first servers taking one more."""
    return clients // servers + (j < clients % servers)


def session_slots(r: Requests, chosen, replicas: int) -> int:
    """The rows the busiest replica of a session router gets (real ones), as a power of two."""
    real = np.isfinite(np.asarray(r.arrival))
    most = int(np.bincount(np.asarray(chosen)[real], minlength=replicas).max(initial=1))
    return 1 << max(most - 1, 1).bit_length()


def _column(x, idx, slots: int, fill) -> np.ndarray:
    """Rows ``idx`` of a per-request (or per-node) column, then ``fill`` up to ``slots``."""
    x = np.asarray(x)
    out = np.full((slots,) + x.shape[1:], fill, x.dtype)
    out[:idx.size] = x[idx]
    return out


def split_sessions(r: Requests, chosen, replicas: int, slots: int) -> list[Requests]:
    """Replica j's sessions in ``slots`` rows: its rows in order, each its own cache node
    renumbered from 0 (a session's turns are its own nodes, so a replica's paths name only its
    own rows), and its share of the users."""
    real = np.isfinite(np.asarray(r.arrival))
    path = np.asarray(r.path)
    subs = []
    for j in range(replicas):
        idx = np.flatnonzero((np.asarray(chosen) == j) & real)
        local = np.full(np.shape(r.node_start)[0], -1, np.int32)
        local[idx] = np.arange(idx.size, dtype=np.int32)
        mine = np.where(path[idx] >= 0, local[np.maximum(path[idx], 0)], -1).astype(np.int32)
        subs.append(r._replace(
            arrival=_column(r.arrival, idx, slots, np.inf), prompt=_column(r.prompt, idx, slots, 1),
            output=_column(r.output, idx, slots, 1), prefix=_column(r.prefix, idx, slots, -1),
            path=_column(mine, np.arange(idx.size), slots, -1),
            node_start=_column(r.node_start, idx, slots, 0),
            node_end=_column(r.node_end, idx, slots, 0), turn=_column(r.turn, idx, slots, 0),
            think=_column(np.broadcast_to(r.think, real.shape), idx, slots, 0.0),
            clients=np.int32(share(int(r.clients), j, replicas))))
    return subs


def sent(r: Requests, finish, gap) -> tuple[np.ndarray, np.ndarray]:
    """The turns' arrivals, by row, as the finish times ``finish`` (by row; nan: none) send
    them, and the rows in the order they arrive (the rows not sent last). As one server's
    (``features.sessions``): the starts (open: each session at its arrival; closed: the first
    ``clients`` sessions at 0), and each finish, in time order (simultaneous ones in their
    requests' order of arrival), sending its session's next turn or, closed, after its last the
    next session's first, that row's ``gap`` later; a start before a send at the same time, an
    earlier send before a later one."""
    turn = np.asarray(r.turn)
    n, clients = turn.shape[0], int(r.clients)
    opener = np.flatnonzero(turn == 1).tolist()
    starts = ([0.0] * min(clients, len(opener)) if clients > 0 else
              np.asarray(r.arrival, np.float64)[opener].tolist())
    arrival, key, ends = np.full(n, np.inf), [None] * n, []

    def place(row: int, k: tuple) -> None:
        arrival[row], key[row] = k[0], k
        if np.isfinite(finish[row]):
            heapq.heappush(ends, (float(finish[row]), k, row))

    for m, t in enumerate(starts):
        place(opener[m], (t, 0, m))
    opened, sends = len(starts), 0
    while ends:
        t, _, row = heapq.heappop(ends)
        if row + 1 < n and turn[row + 1] == turn[row] + 1:
            new = row + 1
        elif clients > 0 and opened < len(opener):
            new, opened = opener[opened], opened + 1
        else:
            continue
        place(new, (t + gap[new], 1, sends))
        sends += 1
    order = sorted(range(n), key=lambda q: (key[q] is None, key[q] or (), q))
    return arrival, np.asarray(order, np.int64)


def in_order(r: Requests, arrival, order) -> Requests:
    """Requests as servers get them, open, at ``arrival`` (by row) and in the rows' ``order``:
    a closed loop's or sessions' sent as they are."""
    return r._replace(arrival=np.asarray(arrival, np.float64)[order],
                      prompt=np.asarray(r.prompt)[order], output=np.asarray(r.output)[order],
                      prefix=np.asarray(r.prefix)[order], path=np.asarray(r.path)[order],
                      turn=np.zeros_like(np.asarray(r.turn)), clients=np.int32(0),
                      warmup=np.int32(0))


def by_row(out: EngineOutput, order) -> EngineOutput:
    """The per-request results of ``in_order`` requests back in the rows' order."""
    def back(x):
        x = np.asarray(x)
        y = np.empty_like(x)
        y[order] = x
        return y

    return out._replace(arrival=back(out.arrival), first=back(out.first),
                        finish=back(out.finish), generated=back(out.generated),
                        cached_tokens=back(out.cached_tokens))
