"""The twin's sessions (docs/model.md "Sessions"; the engine's: ``sweep.engine.features.sessions``):
a request gets its index when it is sent, the first ``clients`` sessions' first turns at time 0,
then at each finish (in a pass, in request order) its session's next turn or, after its last,
the next session's first; the results go back to the rows' order at the end."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sweep.study.workload import Requests


@dataclass
class Table:
    """A workload of sessions' rows, and which of them have been sent."""

    prompt: list[int]
    output: list[int]
    paths: list[tuple]
    turn: list[int]
    opener: list[int]  # each session's first row
    row: list[int]  # each sent request's row
    opened: int = 0  # sessions started


def table(req: Requests, prompt, output, paths) -> Table | None:
    """The rows of ``req`` if it is a workload of sessions (else None)."""
    turn = np.broadcast_to(np.asarray(req.turn), np.shape(req.arrival)).astype(int).tolist()
    if 1 not in turn:
        return None
    return Table(list(prompt), list(output), list(paths), turn,
                 [q for q, k in enumerate(turn) if k == 1], [])


def start(tw) -> None:
    """The first ``clients`` sessions' first turns, sent at time 0 (every other request unsent)."""
    n = len(tw.arrival)
    tw.arrival = [math.inf] * n
    tw.prompt, tw.output, tw.paths = [1] * n, [1] * n, [()] * n
    tw.clients = min(tw.clients, len(tw.table.opener))
    for m in range(tw.clients):
        _record(tw, tw.table.opener[m], 0.0)
    tw.table.opened = tw.clients


def _record(tw, row: int, t: float) -> None:
    i = len(tw.table.row)
    tw.table.row.append(row)
    tw.arrival[i] = t
    tw.prompt[i], tw.output[i] = tw.table.prompt[row], tw.table.output[row]
    tw.paths[i] = tw.table.paths[row]


def send(tw, i: int, t: float) -> None:
    """The finish of request ``i`` sends, at ``t``, its session's next turn, or the next
    session's first turn if one is left."""
    tab = tw.table
    row = tab.row[i]
    if row + 1 < len(tab.turn) and tab.turn[row + 1] == tab.turn[row] + 1:
        _record(tw, row + 1, t)
    elif tab.opened < len(tab.opener):
        _record(tw, tab.opener[tab.opened], t)
        tab.opened += 1


def in_table_order(tw, res) -> None:
    """The per-request results ``res`` (a ``RefResult``), by row."""
    n = len(tw.arrival)
    rows = np.asarray(tw.table.row, dtype=np.int64)
    sent = len(rows)

    def by_row(x, fill):
        x = np.asarray(x)
        y = np.full(n, fill, dtype=x.dtype)
        y[rows] = x[:sent]
        return y

    res.first_token = by_row(res.first_token, np.nan)
    res.finish = by_row(res.finish, np.nan)
    res.generated = by_row(res.generated, 0)
    res.cached_tokens = by_row(res.cached_tokens, 0)
    res.arrival = by_row(res.arrival, np.inf)
