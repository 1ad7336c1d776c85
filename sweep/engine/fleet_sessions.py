"""Sessions behind replicas (docs/model.md "Sessions"): the session router keeps each session,
and each user, on one replica, so each replica runs its own sessions as one server does, in
rows of its own: its cache state is sized by its own turns, not the fleet's."""
from __future__ import annotations

import numpy as np

from sweep.study.workload import Requests


def sessions_of(r: Requests) -> bool:
    """Whether the requests are a workload of sessions' turns."""
    return bool(np.any(np.asarray(r.turn) == 1))


def by_session(p, r: Requests) -> bool:
    """Whether a plan's (``topology.Plan``) replicas serve a workload of sessions by the
    session router: each then holds its own sessions, and nothing of another's (one server
    holds the requests as they are)."""
    return (p.router == "session" and p.weights is None and p.decode is None
            and len(p.first) > 1 and sessions_of(r))


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
            clients=np.int32(share(int(r.clients), j, replicas))))
    return subs
