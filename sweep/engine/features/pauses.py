"""Pauses of their own (docs/model.md "Closed loop", "Sessions"): where the requests of a closed
loop or of sessions pause for different times (``think_time_s`` as a table), a later finish's
send may be due before an earlier one's still pending, so the closed loop's sends are merged
into their places in time order (``closed_loop.merged``) rather than appended. Only a batch
with such pauses compiles the merge in: with one pause for every request the sends are due in
the order of their finishes. The twin places each send in its order as it is made."""
from __future__ import annotations

import numpy as np

from sweep.engine.features.plain import Plain

NAME = "pauses"


def uses(p, r) -> bool:
    """Whether some closed loop or sessions of a (concrete) batch pause for different times
    (a workload of sessions: after its turns; rows that hold none, padding, are never sent)."""
    clients = np.asarray(r.clients).reshape(-1)
    turn = np.asarray(r.turn).reshape(clients.size, -1)
    think = np.broadcast_to(np.asarray(r.think).reshape(clients.size, -1), turn.shape)
    sessions = (turn > 0).any(axis=1)
    counted = ~sessions[:, None] | (turn > 0)
    hi = np.where(counted, think, -np.inf).max(axis=1)
    lo = np.where(counted, think, np.inf).min(axis=1)
    return bool(np.any(((clients > 0) | sessions) & (hi > lo)))


def init(n: int, seats: int, nodes: int) -> None:
    return None


class Hooks(Plain):
    """Sends merged in time order."""

    merges_sends = True
