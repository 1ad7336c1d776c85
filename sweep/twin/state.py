"""The event-driven twin's state (docs/model.md "State"), read from a design and its requests,
and its result."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sweep.engine.params import EngineParams
from sweep.physics import timing
from sweep.study.workload import Requests
from sweep.twin import sessions


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def lru_dropped(tw: "Twin", nodes, room: int) -> list[int]:
    """Of ``nodes``, those that do not fit in ``room`` blocks, least recently used first (the
    oldest stamp, then the deeper node, then the id): a node stays if it and every more
    recently used one fit."""
    dropped, younger = [], 0
    for c in sorted(nodes, key=lambda c: (tw.stamps[c], -tw.node_start[c], c), reverse=True):
        younger += tw.node_blocks[c]
        if younger > room:
            dropped.append(c)
    return dropped


@dataclass
class Seat:
    """An occupied seat (docs/model.md "State")."""

    req: int  # request index i
    p: int  # prompt tokens
    o: int  # output tokens
    g: int = 0  # tokens generated so far
    b: int = 0  # KV blocks held
    last: float = math.nan  # time of its last token
    npass: int = 0  # decode passes taken (keys the speculative draws; kept across preemption)
    preempted: bool = False
    path: tuple = ()  # the nodes of its cacheable path under prefix caching (none: empty)
    todo: int = 0  # context tokens still to prefill (chunked prefill); 0 once decoding


@dataclass
class Twin:
    """One server between two rules: its requests and design as Python scalars (so the per-step
    bookkeeping is exact integer arithmetic), the state the rules change, and the outputs."""

    # The requests, sorted by arrival: the real ones (finite arrival) first, then padding.
    arrival: list[float]
    prompt: list[int]
    output: list[int]
    paths: list[tuple]  # each request's path of cache nodes (empty: none, or no prefix caching)
    node_start: list[int]  # tokens before each node
    node_end: list[int]  # tokens up to its end
    end_time: float
    seed: np.uint32  # keys the speculative draws
    # The design: its engine params as Python scalars (``accept_thresholds``: T_1 .. T_k, a
    # draft accepted below its threshold; ``timing``: float64), as the rules read them.
    design: EngineParams
    node_blocks: list[int]  # each node's blocks: ceil(end / block_tokens) - ceil(start / ...)
    max_steps: int | None
    # A closed loop (docs/model.md "Closed loop"): request ``clients + k`` arrives at the k-th
    # send due, the j-th finish's due its ``gaps[clients + j]`` later (each row's gap: its
    # pause and the request overhead; until then its arrival is +inf); 0 clients: arrivals as
    # given. Sessions send a row its own gap after the finish.
    clients: int = 0
    gaps: list[float] = field(default_factory=list)
    sends: list[tuple] = field(default_factory=list)  # (due, j) of each send, in time order
    real: int = 0  # requests to send (those after are padding)
    warmup: int = 0  # the first requests, after which the measured ones start together
    # A workload of sessions: its rows, sent in an order the finishes set (the lists above are
    # by the order sent).
    table: sessions.Table | None = None
    # The state.
    t: float = 0.0
    head: int = 0  # requests ever admitted
    tail: int = 0  # requests with arrival <= t
    occupied: dict[int, Seat] = field(default_factory=dict)  # seat index -> seat
    free_seats: list[int] = field(init=False)  # a min-heap
    cached: set[int] = field(default_factory=set)  # nodes whose KV is cached
    stamps: dict[int, int] = field(default_factory=dict)  # node -> pass of its last lookup
    host: set[int] = field(default_factory=set)  # nodes whose KV is in host memory (CPU tier)
    block: int = 0  # the next pass's place in its block of num_scheduler_steps (multi-step)
    reserve_since: int = 0  # the pass count at the last preemption (SGLang's admission)
    # The outputs.
    first_token: np.ndarray = field(init=False)
    finish: np.ndarray = field(init=False)
    generated: np.ndarray = field(init=False)
    itl_gaps: list[float] = field(default_factory=list)
    cached_tokens: np.ndarray = field(init=False)
    lookups: int = 0
    hits: int = 0
    saved: int = 0  # prompt tokens the hits found cached
    preemptions: int = 0
    max_queue: int = 0
    peak_blocks: int = 0
    steps: int = 0
    passes: int = 0
    tokens: int = 0
    finished: int = 0
    truncated: bool = False

    def __post_init__(self):
        n = len(self.arrival)
        self.free_seats = list(range(self.design.max_batch))  # a sorted list is a valid min-heap
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.generated = np.zeros(n, dtype=np.int64)
        self.cached_tokens = np.zeros(n, dtype=np.int64)


def columns(req: Requests):
    """Arrival (float64), prompt and output (int64) as flat arrays, and their length."""
    arrival = np.asarray(req.arrival, dtype=np.float64).reshape(-1)
    return (arrival, np.asarray(req.prompt).astype(np.int64).reshape(-1),
            np.asarray(req.output).astype(np.int64).reshape(-1), arrival.shape[0])


def _checked(req: Requests):
    arrival, prompt, output, n = columns(req)
    if prompt.shape[0] != n or output.shape[0] != n:
        raise ValueError("requests: arrival, prompt and output must have the same length")
    if n > 1 and not np.all(arrival[1:] >= arrival[:-1]):
        raise ValueError("requests: arrivals must be sorted (padding +inf at the end)")
    if np.any(np.isnan(arrival)):
        raise ValueError("requests: arrival times must not be nan")
    if np.any(output[np.isfinite(arrival)] < 1):
        raise ValueError("requests: every real request needs output >= 1")
    return arrival, prompt, output, n


def scalars(params: EngineParams) -> EngineParams:
    """One design's engine params as the twin reads them: Python ints and bools, the timing
    constants as Python floats (``timing.scalar_time``), and the thresholds of the
    ``draft_tokens`` drafts only."""
    plain = {k: np.asarray(v).item() for k, v in params._asdict().items()
             if k not in ("timing", "accept_thresholds", "summary")}
    return params._replace(
        timing=timing.TimingParams(*(float(v) for v in params.timing)),
        accept_thresholds=np.asarray(params.accept_thresholds)[:int(params.draft_tokens)],
        **plain)


def gap(req: Requests, params: EngineParams) -> np.ndarray:
    """Each row's gap: the time from a finish to the arrival of the request it sends, by that
    row's pause (``Requests.think``) and the request overhead."""
    think = np.broadcast_to(np.asarray(req.think, np.float64), np.shape(req.arrival)).reshape(-1)
    return think + np.asarray(params.summary.request_overhead_s, np.float64)


def load(params: EngineParams, req: Requests, max_steps: int | None) -> Twin:
    """The twin at t = 0: one design, its requests, and an optional bound on the steps."""
    arrival, prompt, output, n = _checked(req)
    path = np.asarray(req.path)
    rows = path.reshape(n, path.shape[-1]).tolist()
    paths = ([tuple(k for k in row if k >= 0) for row in rows] if bool(params.prefix_cache)
             else [()] * n)
    start = np.asarray(req.node_start).astype(np.int64).reshape(-1).tolist()
    end = np.asarray(req.node_end).astype(np.int64).reshape(-1).tolist()
    b = int(params.block_tokens)
    clients = int(np.asarray(req.clients))
    real = int(np.isfinite(arrival).sum())
    if clients > 0:  # sent at once: the first clients (the warm-up's, if it is shorter)
        w = int(np.asarray(req.warmup))
        arrival = np.where(np.arange(n) < (min(clients, w) if w > 0 else clients), arrival,
                           np.inf)
    tw = Twin(
        arrival=arrival.tolist(), prompt=prompt.tolist(), output=output.tolist(), paths=paths,
        node_start=start, node_end=end, end_time=float(np.asarray(req.end_time)),
        seed=np.uint32(np.asarray(req.seed)), design=scalars(params),
        node_blocks=[ceil_div(e, b) - ceil_div(a, b) for a, e in zip(start, end)],
        max_steps=max_steps,
        clients=clients, real=real, warmup=int(np.asarray(req.warmup)),
        gaps=gap(req, params).tolist(),
        table=sessions.table(req, prompt.tolist(), output.tolist(), paths))
    if tw.table is not None:
        sessions.start(tw)
    return tw


@dataclass
class RefResult:
    """What one simulation by the twin yields."""

    first_token: np.ndarray  # float64 [N]: time of the first token (nan if none)
    finish: np.ndarray  # float64 [N]: finish time (nan if not finished)
    generated: np.ndarray  # int64 [N]: tokens generated by the stop
    t_stop: float  # clock when the simulation stopped
    itl_gaps: np.ndarray  # float64 [*]: every inter-token gap, seconds
    preemptions: int
    max_queue: int  # max over passes of waiting requests after admission
    peak_blocks: int  # max blocks in use after a pass's allocations
    area_in_system: float  # integral over [0, t_stop] of (arrived and not finished)
    steps: int  # steps taken (passes + preemption steps)
    passes: int
    tokens: int  # total tokens generated
    truncated: bool  # hit max_steps before the simulation was done
    replica: np.ndarray | None = None  # int [N]: each request's replica, behind a router
    arrival: np.ndarray | None = None  # float64 [N]: a closed loop's arrivals, as it set them
    prefix_lookups: int = 0  # prefills of a sequence with a path, under prefix caching
    prefix_hits: int = 0  # of which found some of it cached
    prefix_saved: int = 0  # prompt tokens those hits found cached
    cached_tokens: np.ndarray | None = None  # int64 [N]: tokens each admission found cached
    servers: int = 1  # servers behind the router (``replica`` indexes them)


def result(tw: Twin) -> RefResult:
    """The twin's outputs once it has stopped."""
    arrival = np.asarray(tw.arrival, dtype=np.float64)
    real = np.isfinite(arrival) & (arrival <= tw.t)
    ends = np.where(np.isfinite(tw.finish), np.minimum(tw.finish, tw.t), tw.t)
    area = float(np.sum(np.clip(ends[real] - arrival[real], 0.0, None)))
    res = RefResult(
        first_token=tw.first_token, finish=tw.finish, generated=tw.generated, t_stop=float(tw.t),
        itl_gaps=np.asarray(tw.itl_gaps, dtype=np.float64), preemptions=tw.preemptions,
        max_queue=tw.max_queue, peak_blocks=tw.peak_blocks, area_in_system=area, steps=tw.steps,
        passes=tw.passes, tokens=tw.tokens, truncated=tw.truncated, prefix_lookups=tw.lookups,
        prefix_hits=tw.hits, prefix_saved=tw.saved, cached_tokens=tw.cached_tokens,
        arrival=arrival if tw.clients > 0 else None)
    if tw.table is not None:
        sessions.in_table_order(tw, res)
    return res
