"""The twin's sessions (docs/model.md "Sessions"; the engine's: ``sweep.engine.features.sessions``):
the requests are indexed in the order they arrive, the sessions' starts (open: every session at
its arrival; closed: the first ``clients`` at time 0) merged with the sends of finishes (in a
pass, in request order: a session's next turn, or in a closed loop after its last the next
session's first, each its own row's gap after the finish), a start before a send at the same
time, an earlier send before a later one. The requests not yet arrived are
placed again whenever a finish sends; the results go back to the rows' order at the end. On
several servers (other than replicas behind the session router) the turns reach them as open
requests in the order they arrive, found in rounds (``fleet``)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sweep.study.workload import Requests


@dataclass
class Table:
    """A workload of sessions' rows, and the requests placed so far."""

    prompt: list[int]
    output: list[int]
    paths: list[tuple]
    turn: list[int]
    opener: list[int]  # each session's first row
    starts: list[float]  # each session's own arrival (open arrivals)
    row: list[int] = field(default_factory=list)  # each placed request's row
    key: list[tuple] = field(default_factory=list)  # and its (time, start 0 / send 1, order)
    opened: int = 0  # sessions started
    sends: int = 0  # finishes that sent a request


def table(req: Requests, prompt, output, paths) -> Table | None:
    """The rows of ``req`` if it is a workload of sessions (else None)."""
    turn = np.broadcast_to(np.asarray(req.turn), np.shape(req.arrival)).astype(int).tolist()
    if 1 not in turn:
        return None
    opener = [q for q, k in enumerate(turn) if k == 1]
    arrival = np.asarray(req.arrival, dtype=np.float64).reshape(-1)
    return Table(list(prompt), list(output), list(paths), turn, opener,
                 [float(arrival[q]) for q in opener])


def start(tw) -> None:
    """The sessions' starts placed: a closed loop's first ``clients`` at time 0, else every
    session at its own arrival."""
    tab = tw.table
    n = len(tw.arrival)
    tw.arrival = [math.inf] * n
    tw.prompt, tw.output, tw.paths = [1] * n, [1] * n, [()] * n
    if tw.clients > 0:
        tw.clients = min(tw.clients, len(tab.opener))
        tab.opened = tw.clients
        times = [0.0] * tw.clients
    else:
        tab.opened = len(tab.opener)
        times = tab.starts
    for m, t in enumerate(times):
        _place(tw, len(tab.row), tab.opener[m], (t, 0, m))


def _place(tw, i: int, row: int, key: tuple) -> None:
    tab = tw.table
    if i == len(tab.row):
        tab.row.append(row)
        tab.key.append(key)
    tab.row[i], tab.key[i] = row, key
    tw.arrival[i] = key[0]
    tw.prompt[i], tw.output[i], tw.paths[i] = tab.prompt[row], tab.output[row], tab.paths[row]


def send(tw, i: int, t: float) -> None:
    """The finish of request ``i`` at ``t`` sends its session's next turn, or in a closed loop
    the next session's first if one is left, that row's gap later; the requests not yet
    arrived are placed again in order."""
    tab = tw.table
    row = tab.row[i]
    if row + 1 < len(tab.turn) and tab.turn[row + 1] == tab.turn[row] + 1:
        new = row + 1
    elif tw.clients > 0 and tab.opened < len(tab.opener):
        new = tab.opener[tab.opened]
        tab.opened += 1
    else:
        return
    waiting = sorted([(tab.key[j], tab.row[j]) for j in range(tw.tail, len(tab.row))]
                     + [((t + tw.gaps[new], 1, tab.sends), new)])
    tab.sends += 1
    for j, (key, r) in enumerate(waiting):
        _place(tw, tw.tail + j, r, key)


def in_table_order(tw, res) -> None:
    """The per-request results ``res`` (a ``RefResult``), by row."""
    n = len(tw.arrival)
    rows = np.asarray(tw.table.row, dtype=np.int64)
    placed = len(rows)

    def by_row(x, fill):
        x = np.asarray(x)
        y = np.full(n, fill, dtype=x.dtype)
        y[rows] = x[:placed]
        return y

    res.first_token = by_row(res.first_token, np.nan)
    res.finish = by_row(res.finish, np.nan)
    res.generated = by_row(res.generated, 0)
    res.cached_tokens = by_row(res.cached_tokens, 0)
    res.arrival = by_row(tw.arrival, np.inf)


def _sent(req: Requests, finish: list, gap) -> tuple[list, list]:
    """The turns' arrivals by row, as the finish times ``finish`` (by row) send them, each row
    its ``gap`` later, and the rows in the order they arrive (the rows never sent after, in row
    order): finish by finish in time order (simultaneous ones in their requests' order of
    arrival), as one server's ``send``."""
    own = np.asarray(req.arrival, dtype=np.float64).reshape(-1)
    turn = np.broadcast_to(np.asarray(req.turn), own.shape).astype(int).tolist()
    n, clients = len(turn), int(np.asarray(req.clients))
    opener = [q for q in range(n) if turn[q] == 1]
    first = opener[:clients] if clients > 0 else opener
    placed = {q: (0.0 if clients > 0 else float(own[q]), 0, m) for m, q in enumerate(first)}
    opened, sends, done = len(first), 0, set()
    while True:
        ready = [(finish[q], placed[q], q) for q in placed
                 if q not in done and math.isfinite(finish[q])]
        if not ready:
            break
        t, _, q = min(ready)
        done.add(q)
        if q + 1 < n and turn[q + 1] == turn[q] + 1:
            placed[q + 1] = (t + gap[q + 1], 1, sends)
        elif clients > 0 and opened < len(opener):
            placed[opener[opened]] = (t + gap[opener[opened]], 1, sends)
            opened += 1
        else:
            continue
        sends += 1
    order = sorted(placed, key=placed.get) + [q for q in range(n) if q not in placed]
    return [placed[q][0] if q in placed else math.inf for q in range(n)], order


def fleet(req: Requests, gap, serve):
    """Sessions over several servers: the fixed point of serving the turns open, as they
    arrive (``serve``), and sending the next ones from the finishes, each row its ``gap``
    later, in rounds (as a closed loop's, ``closed_loop.closed_loop``); the results by row."""
    n = np.shape(req.arrival)[-1]
    path = np.asarray(req.path).reshape(n, -1)
    arrival, order = _sent(req, [math.nan] * n, gap)
    for _ in range(n + 1):
        res = serve(req._replace(
            arrival=np.asarray(arrival, dtype=np.float64)[order],
            prompt=np.asarray(req.prompt).reshape(-1)[order],
            output=np.asarray(req.output).reshape(-1)[order],
            prefix=np.asarray(req.prefix).reshape(-1)[order], path=path[order],
            turn=np.zeros(n, np.int32), clients=np.int32(0)))
        finish = [math.nan] * n
        for k, q in enumerate(order):
            finish[q] = float(res.finish[k])
        again = _sent(req, finish, gap)
        if again == (arrival, order):
            break
        arrival, order = again
    res.truncated |= again != (arrival, order)
    rows = np.asarray(order, dtype=np.int64)
    for name in ("first_token", "finish", "generated", "cached_tokens", "replica"):
        x = getattr(res, name)
        if x is not None:
            y = np.empty_like(np.asarray(x))
            y[rows] = x
            setattr(res, name, y)
    res.arrival = np.asarray(arrival, dtype=np.float64)
    return res
