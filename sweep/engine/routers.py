"""The routers of replicas (docs/model.md "Replicas"): each request's server, from the
requests alone (round robin, capacity-weighted, session) or from the replicas' load as well
(least outstanding, prefix aware), whose choices ``topology.run`` finds by rounds."""
from __future__ import annotations

import numpy as np

from sweep.engine.fleet_sessions import sessions_of
from sweep.study.workload import Requests

def round_robin(n: int, replicas: int) -> np.ndarray:
    """The round-robin router's choice for each request: i mod N."""
    return np.arange(n) % replicas


def by_capacity(n: int, weights) -> np.ndarray:
    """The capacity-weighted router's choice for each request, in arrival order: the server
    furthest below its share of the requests so far, this one included (request i: the
    largest ``(i + 1) w_j - W sent_j``, W the weights' sum; ties: the lowest), as nginx's smooth
    weighted round robin. Every server's count stays within one request of its share; equal
    weights are round robin."""
    w = [float(x) for x in weights]
    total = float(np.sum(w))
    sent = [0.0] * len(w)
    servers = range(len(w))
    chosen = np.empty(n, np.int64)
    for i in range(n):  # Python floats: a few servers, where numpy's per-call cost dominates
        j = max(servers, key=lambda j: ((i + 1) * w[j] - total * sent[j], -j))
        chosen[i] = j
        sent[j] += 1.0
    return chosen


#: A replica holding a request's prefix takes it under ``prefix_aware`` unless it has more
#: than this many outstanding requests beyond the least loaded replica's (SGLang's
#: cache-aware router, ``--balance-abs-threshold``, default 32).
PREFIX_LOAD_CAP = 32
#: ... and only if that replica holds at least this share of the request's cacheable path, in
#: tokens (SGLang's cache-aware router, ``cache_threshold``, default 0.5; on a shared prefix,
#: a path of one node, a holder holds all of it).
PREFIX_MATCH_SHARE = 0.5


def matched(ends, path: tuple, h: int) -> bool:
    """Whether ``h`` leading nodes of ``path`` (nodes ending at ``ends``) are enough of it for
    the prefix-aware router."""
    return h > 0 and ends[path[h - 1]] >= PREFIX_MATCH_SHARE * ends[path[-1]]


def session(r: Requests, replicas: int) -> np.ndarray:
    """The session router's choice for each request: a request of prefix group c to replica
    c mod N (a consistent hash of its group: the group's requests stay together), one without
    a group round robin over such requests; a workload of sessions' turns by their session
    instead, session m (in order) to replica m mod N."""
    key = np.asarray(r.prefix)
    if sessions_of(r):
        turn = np.asarray(r.turn)
        key = np.where(turn > 0, np.cumsum(turn == 1) - 1, -1)
    loose = np.cumsum(key < 0) - 1
    return np.where(key >= 0, key, loose) % replicas


def route(p, r: Requests) -> np.ndarray:
    """The first choices of ``p``'s (a ``topology.Plan``) router for the requests ``r`` (the
    routers that read the replicas' load start from round robin and are found by rounds,
    ``topology.run``)."""
    n = r.arrival.shape[0]
    if p.weights is not None:
        return by_capacity(n, p.weights)
    if p.router == "session":
        return session(r, len(p.first))
    return round_robin(n, len(p.first))


def _by_load(r: Requests, finish, chosen, replicas: int, pick) -> np.ndarray:
    """The router's choices again, request by request in arrival order: ``pick(i, outstanding)``
    chooses request i's replica from each replica's outstanding requests at its arrival (sent
    there by these new choices, not finished at its arrival by the finish times ``finish``
    that ``chosen`` led to). Choices right before i give the right choice for i (see
    ``topology.run``), and counting the new choices makes the later ones follow the requests
    that moved, so rounds settle many requests at once."""
    real = np.isfinite(r.arrival)
    again = np.array(chosen)
    ends = sorted((float(f), j) for j, f in enumerate(finish) if real[j] and np.isfinite(f))
    outstanding = [0] * replicas
    e = 0
    for i in np.flatnonzero(real):
        a = float(r.arrival[i])
        while e < len(ends) and ends[e][0] <= a:  # finishes after arrival: only of j < i
            outstanding[again[ends[e][1]]] -= 1
            e += 1
        again[i] = pick(int(i), outstanding)
        outstanding[again[i]] += 1
    return again


def least_outstanding(r: Requests, finish, chosen, replicas: int) -> np.ndarray:
    """Each request to the replica with the fewest outstanding requests (ties: the lowest)."""
    return _by_load(r, finish, chosen, replicas, lambda i, out: out.index(min(out)))


def prefix_aware(r: Requests, finish, chosen, replicas: int) -> np.ndarray:
    """Each request with a cacheable path to the replica holding the longest start of it, as
    the router's own record says (the nodes of the requests it sent there: with enough KV
    memory, the replica's cache holds them), the least loaded of those (ties: the lowest),
    unless that start is under ``PREFIX_MATCH_SHARE`` of the path or that replica has more
    than ``PREFIX_LOAD_CAP`` outstanding requests beyond the least loaded one; every other
    request to the least loaded replica, of those the one whose record holds the fewest tokens
    (SGLang's router sends an unmatched request to its smallest tree).
    The chosen replica then holds the request's path. With one node per prefix, a replica
    holds a prefix once the router has sent it a request of that prefix."""
    paths = [tuple(int(k) for k in row if k >= 0) for row in np.asarray(r.path)]
    ends = np.asarray(r.node_end).tolist()
    tokens = (np.asarray(r.node_end) - np.asarray(r.node_start)).tolist()
    record = [set() for _ in range(replicas)]
    size = [0] * replicas  # tokens of the nodes in each record

    def held(path, j):
        """The leading nodes of ``path`` replica j holds."""
        h = 0
        while h < len(path) and path[h] in record[j]:
            h += 1
        return h

    def pick(i, out):
        least = min(out)
        path = paths[i]
        score = [held(path, j) for j in range(replicas)] if path else [0] * replicas
        top = max(score)
        j = min(range(replicas), key=lambda k: (out[k], size[k], k))
        if matched(ends, path, top):
            best = min((k for k in range(replicas) if score[k] == top),
                       key=lambda k: (out[k], k))
            if out[best] <= least + PREFIX_LOAD_CAP:
                j = best
        size[j] += sum(tokens[k] for k in path if k not in record[j])
        record[j].update(path)
        return j

    return _by_load(r, finish, chosen, replicas, pick)


#: The routers whose choices read the replicas' load, found by rounds (``topology.run``).
BY_LOAD = {"least_outstanding": least_outstanding, "prefix_aware": prefix_aware}


def load_cv(chosen, r: Requests, servers: int) -> float:
    """The coefficient of variation (population) of the requests each server was sent."""
    counts = np.bincount(np.asarray(chosen)[np.isfinite(r.arrival)], minlength=servers)
    mean = counts.mean()
    return float(counts.std() / mean) if mean > 0 else 0.0
