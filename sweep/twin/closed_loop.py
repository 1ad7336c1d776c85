"""The twin's closed loop (docs/model.md "Closed loop"; the engine's:
``sweep.engine.features.closed_loop``): one server's finishes send the next requests as they
happen (``send``); a fleet's arrivals are the fixed point of serving and sending, found in
rounds (``closed_loop``)."""
from __future__ import annotations

import bisect
import math

import numpy as np

from sweep.study.workload import Requests
from sweep.twin import sessions
from sweep.twin.state import RefResult, Twin, columns


def send(tw: Twin, t: float, req: int) -> None:
    """A closed loop's finish (the ``tw.finished``-th, of request ``req``) at ``t``: its client
    sends again its gap later (request ``clients + finished``'s pause), and the requests not yet
    arrived go out at the sends in time order (``sent_by``), an earlier send first at the same
    time. Sessions send their own (``sessions.send``)."""
    if tw.table is not None:
        sessions.send(tw, req, t)
        return
    j = tw.finished
    at = t + tw.gaps[min(tw.clients + j, len(tw.gaps) - 1)]
    k = bisect.bisect_right(tw.sends, (at, j))
    tw.sends.insert(k, (at, j))
    for q in range(k, len(tw.sends)):
        for i in sent_by(q, tw.clients, tw.warmup):
            if i < tw.real:
                tw.arrival[i] = tw.sends[q][0]


def sent_by(j: int, c: int, w: int) -> range:
    """The requests a closed loop of ``c`` clients with a warm-up of ``w`` requests sends at
    its ``j``-th finish."""
    if w > 0 and j < w:
        return range(j + c, j + c + 1) if j + c < w else range(w, w + c) if j == w - 1 else range(0)
    return range(j + c, j + c + 1)


def _sent(req: Requests, finish, gap) -> list:
    """A closed loop's arrivals as the finish times ``finish`` send them, the j-th finish (in
    time order) ``gap[clients + j]`` later, the requests going out at the sends in time order
    as a single server's ``send`` does (+inf: not yet sent)."""
    own, _, _, n = columns(req)
    c, w = int(np.asarray(req.clients)), int(np.asarray(req.warmup))
    real = int(np.isfinite(own).sum())
    arrival = [float(own[i]) if i < (min(c, w) if w > 0 else c) else math.inf for i in range(n)]
    done = sorted(float(f) for f in finish if math.isfinite(f))
    sends = sorted(float(t + gap[min(c + j, n - 1)]) for j, t in enumerate(done))
    for j, t in enumerate(sends):
        for i in sent_by(j, c, w):
            if i < real:
                arrival[i] = t
    return arrival


def closed_loop(req: Requests, gap, serve) -> RefResult:
    """A closed loop over several servers (docs/model.md "Closed loop"): its arrivals are the
    fixed point of serving the requests open at the arrivals so far (``serve``; at first only
    the clients' first requests are sent) and sending the next ones from the finishes (each
    row's ``gap``), found in rounds as a router's choices are."""
    n = columns(req)[3]
    arrival = _sent(req, [], gap)
    for _ in range(n + 1):
        res = serve(req._replace(arrival=np.asarray(arrival, dtype=np.float64),
                                 clients=np.int32(0), warmup=np.int32(0)))
        again = _sent(req, res.finish, gap)
        if again == arrival:
            break
        arrival = again
    res.truncated |= again != arrival
    res.arrival = np.asarray(arrival, dtype=np.float64)
    return res
