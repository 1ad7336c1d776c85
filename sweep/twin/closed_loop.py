"""The twin's closed loop (docs/model.md "Closed loop"; the engine's:
``sweep.engine.features.closed_loop``): one server's finishes send the next requests as they
happen (``send``); a fleet's arrivals are the fixed point of serving and sending, found in
rounds (``closed_loop``)."""
from __future__ import annotations

import math

import numpy as np

from sweep.engine.params import EngineParams
from sweep.study.workload import Requests
from sweep.twin import sessions
from sweep.twin.state import RefResult, Twin, columns


def send(tw: Twin, t: float, req: int) -> None:
    """A closed loop's finish (the ``tw.finished``-th, of request ``req``) sends the next
    request at ``t``; with a warm-up of W requests, the finishes of the warm-up send only its
    own, and its last one sends the first ``clients`` measured requests together. Sessions
    send their own (``sessions.send``)."""
    if tw.table is not None:
        sessions.send(tw, req, t)
        return
    for i in sent_by(tw.finished, tw.clients, tw.warmup):
        if i < tw.real:
            tw.arrival[i] = t


def sent_by(j: int, c: int, w: int) -> range:
    """The requests a closed loop of ``c`` clients with a warm-up of ``w`` requests sends at
    its ``j``-th finish."""
    if w > 0 and j < w:
        return range(j + c, j + c + 1) if j + c < w else range(w, w + c) if j == w - 1 else range(0)
    return range(j + c, j + c + 1)


def gap(req: Requests, params: EngineParams) -> float:
    """A closed loop's time from a finish to the next request's arrival."""
    return float(np.asarray(req.think) + np.asarray(params.summary.request_overhead_s))


def _sent(req: Requests, finish, gap: float) -> list:
    """A closed loop's arrivals as the finish times ``finish`` send them, finish by finish in
    time order, as a single server's ``send`` does (+inf: not yet sent)."""
    own, _, _, n = columns(req)
    c, w = int(np.asarray(req.clients)), int(np.asarray(req.warmup))
    real = int(np.isfinite(own).sum())
    arrival = [float(own[i]) if i < (min(c, w) if w > 0 else c) else math.inf for i in range(n)]
    for j, t in enumerate(sorted(float(f) for f in finish if math.isfinite(f))):
        for i in sent_by(j, c, w):
            if i < real:
                arrival[i] = t + gap
    return arrival


def closed_loop(req: Requests, gap: float, serve) -> RefResult:
    """A closed loop over several servers (docs/model.md "Closed loop"): its arrivals are the
    fixed point of serving the requests open at the arrivals so far (``serve``; at first only
    the clients' first requests are sent) and sending the next ones from the finishes, found
    in rounds as a router's choices are."""
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
