"""The sweep runner: a study's grid -> engine arrays -> chunks of vmapped simulations -> tables.

Simulations are grouped by seat count (one compilation per group); each group is cut into chunks
of equal shape (the last padded with simulations that have no requests). A simulation's result
depends only on its own design, workload and seed, never on its chunk-mates, so any chunking,
any device count and any split over processes give the same rows: ``iter_chunks`` yields the
finished rows chunk by chunk (the CLI saves each as a part, so a killed run can resume), and
``runs_table`` joins rows from anywhere into the (design, seed)-ordered table.
"""
from __future__ import annotations

import atexit
import math
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from queue import Queue
from typing import Callable, Iterator, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from sweep.analysis.metrics import METRICS
from sweep.api import stack, summarize_batch
from sweep.engine import (DEFAULT_LOOKAHEAD, DEFAULT_STATIC_LOOKAHEAD, ITL_BINS, simulate_batch,
                          uses_extensions)
from sweep.execution import topology
from sweep.study.config import Study
from sweep.study.uncertainty import draws
from sweep.study.workload import Workload, sample_args, sample_batch, sample_batch_shape

#: Simulations in flight at once (vmapped lanes, shared by the calls in flight) unless the study
#: or the user says otherwise: an accelerator wants as many as memory allows. On a CPU a few
#: dozen run fastest (measured: 24-48 lanes 1.5-2x faster than 512, see benchmarks/README.md):
#: there this sets how many simulations a call holds (x ``POOL_ROUNDS``), and each tier's lanes
#: follow ``CPU_SEAT_LANES``.
DEFAULT_CHUNK_CPU = 32
DEFAULT_CHUNK_ACCELERATOR = 65536
#: On a CPU, by default, a call's lanes x seats, and its lanes at most: the decode run's
#: [lanes, seats, passes] arrays then stay in a core's cache. Measured on 2 cores, two calls at
#: once (benchmarks/README.md): the brief's wide tier (256 seats) ran 4 lanes per call ~20%
#: faster than 16, and 8 lanes ~10%; its narrow tier (64 seats) 16 lanes as fast as 32.
CPU_SEAT_LANES = 1024
CPU_LANES_MAX = 32
#: Engine calls in flight at once on a CPU, at most (one per core): one call keeps only part of
#: a second core busy (XLA splits its small kernels over both and waits for each); on 2 cores,
#: two calls of half the lanes each ran the brief ~20% faster than one (benchmarks/README.md).
#: An accelerator takes one call at a time, as wide as memory allows.
CALLS_IN_FLIGHT_CPU = 4
#: Memory a CPU sweep may use for simulations in flight and queued, bytes.
MEMORY_BUDGET_CPU = 4e9
#: Seats of the first try (see ``iter_chunks``).
SMALL_SEATS = 64
#: A compiled call (one chunk, one saved part) simulates up to this many times ``chunk``
#: simulations per device, ``chunk`` at a time: enough for the lane pool to refill, few enough
#: that a killed run loses little.
POOL_ROUNDS = 16
#: A workload with no requests: padding that ends at once.
_NOTHING = Workload(arrival_rate=1.0, duration_s=None, num_requests=0)
_DTYPES = {"f8": "float64", "i8": "int64", "b": "bool"}


@dataclass
class SweepResult:
    runs: pd.DataFrame  # one row per design x seed
    requests: pd.DataFrame | None  # one row per request, when asked for
    seconds: float
    compile_groups: int
    simulations: int = 0
    extra: dict = field(default_factory=dict)


@dataclass
class Chunk:
    """The finished simulations of one compiled call (those that overflowed the narrow seat
    array are rerun in a later chunk)."""

    metrics: pd.DataFrame  # design, seed and every metric, one row per finished simulation
    requests: pd.DataFrame | None  # their requests, when asked for
    seats: int  # the call's seat tier (one compilation per tier)
    seconds: float  # wall time of the call


@dataclass(frozen=True)
class _Sim:
    point: int
    seed: int


class ChunkPlan(NamedTuple):
    """How many simulations a call holds and how many it runs at once."""

    chunk: int  # simulations in flight per call, the study's or the user's if set
    rounds: int  # a call simulates up to chunk x rounds of them
    by_seats: bool  # a call's lanes follow its tier's seats (``CPU_SEAT_LANES``), else chunk
    fits: int  # lanes in flight per call that the memory budget allows

    def lanes(self, seats: int) -> int:
        """Lanes of a call in the tier of ``seats`` seats."""
        if not self.by_seats:
            return self.chunk
        return max(1, min(CPU_SEAT_LANES // seats, CPU_LANES_MAX, self.fits))

    def per_call(self) -> int:
        """Simulations a call holds at most, in any tier."""
        return self.chunk * self.rounds


def plan_chunks(study: Study, chunk_size: int | None = None) -> ChunkPlan:
    """The calls' shape within the memory budget, shared by the calls in flight at once; a
    chunk size that cannot fit is refused before anything runs."""
    workers = calls_in_flight()
    budget = memory_budget_bytes() / workers
    per_lane, per_sim = study_bytes(study)
    fits = max(1, int(budget // (per_lane + per_sim)))
    chunk = chunk_size or study.chunk_size
    if chunk and chunk > fits:
        raise ValueError(f"run.chunk_size: {chunk} simulations in flight need ~"
                         f"{workers * chunk * (per_lane + per_sim) / 1e9:.1f} GB in {workers} "
                         f"call(s) at once, more than the {workers * budget / 1e9:.1f} GB "
                         f"budget; allowed: at most {fits}")
    cpu = jax.local_devices()[0].platform == "cpu"
    by_seats = cpu and not chunk
    chunk = chunk or min(max(1, DEFAULT_CHUNK_CPU // workers) if cpu
                         else DEFAULT_CHUNK_ACCELERATOR, fits)
    rounds = max(1, min(POOL_ROUNDS, int((budget - chunk * per_lane) // (chunk * per_sim))))
    return ChunkPlan(chunk, rounds, by_seats, fits)


def _widest(study: Study) -> int:
    """Servers of the study's widest simulation in one engine call (its replicas)."""
    return max(p.design.replicas for p in study.points)


def _dispatch(params: list, reqs, seats: int, k_max: int, lanes: int, devices,
              max_steps, widest: int = 1, real: int | None = None) -> tuple:
    """Shard a call's simulations (their ``topology.Plan``s) over a 1-D mesh of ``devices``
    (axis ``sims``), run the same single-device compiled engine on every shard (asynchronously:
    the devices work at once), gather the EngineOutput on the host in mesh order, merge the
    servers of each simulation (``topology.run``), and summarize the same way.

    Not one SPMD program over the mesh: ``jit`` of the sharded batch and ``shard_map`` both
    compile a different HLO module, whose fusions (FMA contraction) changed the last bit of
    finish times for some simulations (measured; openxla/xla#41579); the same executable per
    shard keeps the rows byte-identical to one device.

    Simulations after the first ``real`` (default all) are padding: with plain designs only
    (one server each, the requests as given) they are not simulated, and their rows are zero."""
    def call(server_params, server_reqs, real=None):
        # Requests as device arrays, whichever composition stacked them (see ``_warm``).
        server_reqs = jax.tree_util.tree_map(jnp.asarray, server_reqs)
        outs = _engine(_shards([stack(server_params), server_reqs], devices), seats, k_max,
                       lanes, max_steps, real=real)
        return jax.tree_util.tree_map(lambda *xs: np.concatenate([np.asarray(x) for x in xs]),
                                      *outs)

    # ``widest`` servers per simulation whatever the chunk holds: one compiled shape.
    out = topology.run(params, reqs, call, len(params) * widest, real)
    parts = [summarize_batch(o_d, r_d, p_d) for o_d, r_d, p_d in
             _shards([out, reqs, stack([p.system for p in params])], devices)]
    mets = {k: np.concatenate([np.asarray(m[k]) for m in parts]) for k in METRICS}
    return out, mets


def _shards(trees: list, devices) -> list[list]:
    """Every device's shard of each tree, split along the leading axis over a 1-D mesh."""
    sharding = NamedSharding(Mesh(np.array(devices), ("sims",)), PartitionSpec("sims"))
    placed = [jax.device_put(t, sharding) for t in trees]
    return [[jax.tree_util.tree_map(lambda x: _shard_on(x, d), t) for t in placed]
            for d in devices]


def _engine(shards: list, seats: int, k_max: int, lanes: int, max_steps,
            compile_only: bool = False, real: int | None = None) -> list:
    """The engine on every device's (params, requests) shard at once: each device compiles
    its own executable, on threads. Rows after the first ``real`` of all shards together
    are padding, not simulated. ``compile_only`` compiles (into the same cache a call uses)
    without simulating."""
    per = shards[0][0].max_batch.shape[0]

    def run_on(i, trees):
        count = per if real is None else min(max(real - i * per, 0), per)
        return simulate_batch(*trees, seats=seats, k_max=k_max, lanes=lanes,
                              max_steps=max_steps, count=count, compile_only=compile_only)

    with ThreadPoolExecutor(len(shards)) as pool:
        return list(pool.map(run_on, range(len(shards)), shards))


def _shard_on(x: jax.Array, device) -> jax.Array:
    return next(s.data for s in x.addressable_shards if s.device == device)


def iter_chunks(study: Study, chunk_size: int | None = None, per_request: bool | None = None,
                devices=None, skip=frozenset(), share: tuple[int, int] = (0, 1),
                progress: Callable[[int, int, int, int, float], None] | None = None,
                stop: Callable[[], bool] | None = None, processes: int = 1,
                compile_order: int = 0, shape_for: tuple[int, int] = (0, 0)
                ) -> Iterator[Chunk]:
    """Simulate this process's share of the grid points x seeds, less the (design, seed) pairs
    in ``skip`` (already saved), yielding the finished rows call by call.

    ``share = (index, count)``: simulation k of the (design, seed) order belongs to process
    ``k % count``. Each simulation first runs with at most ``SMALL_SEATS`` seats, which is exact
    unless the narrow seat array held back an admission (the engine flags it); those few rerun
    with all ``max_batch`` seats in a later chunk. Simulations are spread over ``devices``
    (default: every local device; a CPU is one device unless
    XLA_FLAGS=--xla_force_host_platform_device_count=N splits it, which on 2 cores measured only
    ~5% faster in steady state and doubled compilation). Up to ``calls_in_flight()`` calls run
    at once, on worker threads, and their chunks come back as they finish. ``stop`` is asked
    between chunks: once it says so, no call starts, and those in flight finish and are
    yielded.

    ``processes > 1`` (a CPU only) splits the share over that many worker processes, each
    pinned to one core (``workers.in_processes``). ``compile_order`` rotates the order in which
    the tiers compile: workers sharing a folder of executables (or JAX's cache) start on
    different tiers, so each tier is compiled once and loaded by the others. ``shape_for =
    (simulations, requests)`` plans the calls' shapes for at least that many simulations of at
    least that many request slots (padding costs little), so that a caller with batches of
    varying size, such as a capacity search, compiles each shape once."""
    if processes > 1:
        from sweep.execution.workers import in_processes

        if devices is not None:
            raise ValueError(f"processes: {processes}; allowed: 1 with devices given")

        yield from in_processes(study, processes, chunk_size=chunk_size,
                                 per_request=per_request, skip=skip, share=share,
                                 progress=progress, stop=stop)
        return
    devices = list(devices or jax.local_devices())
    workers = calls_in_flight()
    plan = plan_chunks(study, chunk_size)
    want_requests = study.per_request if per_request is None else per_request
    max_steps = None if study.max_steps is None else jnp.int32(study.max_steps)
    params = [with_slo(topology.plan(p.design), study.slo) for p in study.points]
    drawn = {seed: draws(study.uncertain, seed) for seed in study.seeds}
    sim_params = _uncertain_params(study, params, drawn)
    k_max = max(p.design.draft_tokens for p in study.points)
    mine = share_of(study, share)
    pending: dict[int, list[_Sim]] = {}
    bound: dict[int, list[_Sim]] = {}  # seat tier -> every simulation that may run in it
    for s in mine:
        if (s.point, s.seed) not in skip:
            seats = study.points[s.point].design.seats
            pending.setdefault(min(seats, SMALL_SEATS), []).append(s)
            bound.setdefault(min(seats, SMALL_SEATS), []).append(s)
            if seats > SMALL_SEATS:  # may overflow the narrow first try
                bound.setdefault(seats, []).append(s)

    def kind(s: _Sim) -> tuple[str, bool]:
        """Simulations of a kind share calls: a batch of lanes skips the general pass only if
        none of them needs it (full static batches, ``engine.needs_pass``), and takes the
        cheaper decode run only if none of them speculates (``engine.step``)."""
        design = study.points[s.point].design
        return design.batching, design.draft_tokens > 0

    # One compiled shape per tier, fixed up front so that every tier compiles on a background
    # thread: the first while the first calls sample their requests, the wide ones (needed
    # only by the simulations that overflow) while the narrow ones run, if they run long.
    # (Tiers of fewer lanes take more rounds: as many simulations per call.)
    shapes = {seats: _call_shape(max(len(sims), shape_for[0]), plan.lanes(seats),
                                 max(1, plan.per_call() // plan.lanes(seats)), len(devices),
                                 max(shape_for[1], *(study.points[s.point].workload.capacity
                                                     for s in sims)),
                                 workers)
              for seats, sims in bound.items()}
    tiers = [seats for seats in sorted(shapes) if pending and (
        seats == min(pending) or (seats not in pending and sum(len(v) for v in pending.values())
                                  > shapes[min(pending)][0]))]

    def like(seats: int):
        """A plan compiling as the tier's first call will (with prefix caching and chunked
        prefill if any of its simulations uses them)."""
        sims = (sorted(pending[seats], key=kind)[:shapes[seats][0]] if seats in pending
                else bound[seats])
        plans = [params[s.point] for s in sims]
        return next((p for p in plans if uses_extensions(p.first[0])), plans[0])

    turn = compile_order % max(len(tiers), 1)
    compiler = _Compiler([(seats, partial(_warm, shapes[seats], seats, k_max, devices, max_steps,
                                          like(seats), _widest(study)))
                          for seats in tiers[turn:] + tiers[:turn]])
    tally = Tally(study, mine, skip)

    def simulate(seats: int, part: list[_Sim]):
        """One engine call on ``part`` (padded to the tier's shape), on a worker thread."""
        t_call = time.perf_counter()
        size, lanes, n_req = shapes[seats]
        args = [sample_args(study.points[s.point].workload, s.seed,
                            study.points[s.point].design.context_limit, n_req) for s in part]
        plist = [sim_params(s) for s in part]
        # Pad with simulations that have no requests: they end at once.
        args += [sample_args(_NOTHING, 0, 2, n_req)] * (size - len(part))
        plist += [plist[0]] * (size - len(part))
        reqs = sample_batch(n_req, stack(args))
        # Sampled while the tier compiles; the call's seconds leave the wait out.
        t_wait = time.perf_counter()
        compiler.wait(seats)
        t_call += time.perf_counter() - t_wait
        out, mets = _dispatch(plist, reqs, seats, k_max, lanes, devices, max_steps,
                              _widest(study), real=len(part))
        return seats, part, reqs, out, mets, time.perf_counter() - t_call

    def ready() -> list[tuple[int, list[_Sim]]]:
        """Calls to start next: the narrowest tier's simulations, in parts (one per worker at
        least), once nothing narrower is left to run or overflow into it; a wider tier's as
        soon as they fill the lanes of a call, so that no worker waits for the last narrow
        call to finish."""
        for seats in sorted(pending):
            size, lanes, _ = shapes[seats]
            narrower = any(s < seats for s in pending) or any(s < seats for s in running.values())
            if narrower and len(pending[seats]) < lanes:
                continue
            sims = sorted(pending.pop(seats), key=kind)
            return [(seats, part) for part in _split(sims, size, lanes, workers)]
        return []

    running: dict = {}  # call -> its tier
    queue: list[tuple[int, list[_Sim]]] = []
    finished: Queue = Queue()

    def start(call: int, seats: int, part: list[_Sim]) -> None:
        """``simulate`` on a daemon thread (an interrupted run exits without waiting for it)."""
        def work():
            try:
                finished.put((call, simulate(seats, part), None))
            except BaseException as exc:  # handed to the caller below
                finished.put((call, None, exc))

        running[call] = seats
        threading.Thread(target=work, daemon=True).start()

    calls = 0
    try:
        while True:
            while len(running) < workers and not (stop and stop()):
                queue = queue or ready()
                if not queue:
                    break
                seats, part = queue.pop(0)
                start(calls, seats, part)
                calls += 1
            if not running:
                break
            call, result, error = finished.get()
            del running[call]
            if error is not None:
                raise error
            seats, part, reqs, out, mets, seconds = result
            overflow = np.asarray(out.overflow)
            kept = [j for j, s in enumerate(part) if not overflow[j]]
            for j, s in enumerate(part):
                if overflow[j]:
                    pending.setdefault(study.points[s.point].design.seats, []).append(s)
            sims_kept = [part[j] for j in kept]
            metrics = pd.DataFrame({
                "design": np.array([s.point for s in sims_kept], dtype=np.int64),
                "seed": np.array([s.seed for s in sims_kept], dtype=np.int64),
                **{c: np.array([drawn[s.seed][c] for s in sims_kept], dtype=np.float64)
                   for c in study.uncertain},
                **{k: mets[k][kept].astype(_DTYPES[kind]) for k, kind in METRICS.items()}})
            requests = _request_table(sims_kept, reqs, out, kept) if want_requests else None
            tally.add(s.point for s in sims_kept)
            tally.report(progress)
            yield Chunk(metrics, requests, seats, seconds)
    finally:
        compiler.close()  # no compilation starts once the caller is done


class Tally:
    """Progress over a share ``mine``: simulations and designs done, the ones in ``skip``
    (saved before) counted as done."""

    def __init__(self, study: Study, mine: list[_Sim], skip):
        self.points = {s.point for s in mine}
        self.left = [0] * len(study.points)  # simulations of each point still to run
        for s in mine:
            self.left[s.point] += (s.point, s.seed) not in skip
        self.total = len(mine)
        self.done = self.total - sum(self.left)
        self.t0 = time.perf_counter()

    def add(self, points) -> None:
        """One finished simulation of each of ``points``."""
        for point in points:
            self.left[point] -= 1
            self.done += 1

    def report(self, progress: Callable[[int, int, int, int, float], None] | None) -> None:
        if progress:
            progress(self.done, self.total, sum(1 for i in self.points if self.left[i] == 0),
                     len(self.points), time.perf_counter() - self.t0)


def share_of(study: Study, share: tuple[int, int]) -> list[_Sim]:
    """The simulations of ``share = (index, count)``: the k-th of the (design, seed) order
    belongs to ``k % count``."""
    index, count = share
    return [_Sim(i, seed) for k, (i, seed) in enumerate(
        (i, seed) for i in range(len(study.points)) for seed in study.seeds) if k % count == index]


def calls_in_flight() -> int:
    """Engine calls run at once: one per CPU core (at most ``CALLS_IN_FLIGHT_CPU``), one on an
    accelerator."""
    if jax.local_devices()[0].platform != "cpu":
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(CALLS_IN_FLIGHT_CPU, cores or 1))


def _split(sims: list, size: int, lanes: int, workers: int) -> list[list]:
    """Consecutive parts of ``sims``, at most ``size`` each: as few as fit, but one per worker
    while each would still fill its lanes."""
    n = max(-(-len(sims) // size), min(workers, len(sims) // lanes), 1)
    return [sims[i * len(sims) // n:(i + 1) * len(sims) // n] for i in range(n)]


def _call_shape(sims: int, chunk: int, rounds: int, n_dev: int, n_req: int, workers: int
                ) -> tuple[int, int, int]:
    """(simulations per call, lanes per device, requests per simulation) for up to ``sims``
    simulations: equal calls, equal shares per device, as many calls as ``workers`` run at
    once (or a multiple)."""
    lanes = min(chunk, -(-sims // n_dev))
    calls = workers * -(-sims // (workers * n_dev * lanes * rounds))
    return -(-sims // (calls * n_dev * lanes)) * lanes * n_dev, lanes, n_req


def _warm(shape: tuple[int, int, int], seats: int, k_max: int, devices, max_steps, plan,
          widest: int):
    """Compile a tier's engine and summaries for the shapes of its calls (``widest`` servers
    per simulation) without simulating: compiled functions are cached, so its calls find
    them."""
    size, lanes, n_req = shape
    width = size * widest
    shaped = sample_batch_shape(n_req, stack([sample_args(_NOTHING, 0, 2, n_req)] * width))

    def zeros(tree, m: int, xp=np):
        return jax.tree_util.tree_map(lambda x: xp.zeros((m,) + x.shape[1:], x.dtype), tree)

    # Requests come as device arrays (sampled), plans and results as host arrays, as in the
    # calls: a sharded device array's shards have a type of their own, another compilation.
    shards = _shards([stack([plan.first[0]] * width), zeros(shaped, width, jnp)], devices)
    engine = _engine(shards, seats, k_max, lanes, max_steps, compile_only=True)[0]
    # The summaries see whole simulations (servers merged), as in the calls.
    for o_d, r_d, p_d in _shards([zeros(engine.out_info, size), zeros(shaped, size, jnp),
                                  stack([plan.system] * size)], devices):
        summarize_batch(o_d, r_d, p_d, compile_only=True)


_COMPILING: set[threading.Thread] = set()


@atexit.register
def _let_compilations_finish() -> None:
    """A daemon thread still compiling when the interpreter finalises aborts the process:
    wait for them at exit (they start no new job once their run is done)."""
    for thread in list(_COMPILING):
        thread.join()


class _Compiler:
    """Calls ``(tier, fn)`` jobs in order on a daemon thread (compilation releases the GIL, so
    it overlaps the caller's simulations); ``wait(tier)`` returns once that tier's job is done
    and re-raises any job's error."""

    def __init__(self, jobs: list[tuple[int, Callable]]):
        self.ready = {tier: threading.Event() for tier, _ in jobs}
        self.error: BaseException | None = None
        self.closed = False
        self.thread = threading.Thread(target=self._run, args=(jobs,), daemon=True)
        self.thread.start()
        _COMPILING.add(self.thread)

    def _run(self, jobs):
        try:
            for tier, fn in jobs:
                if self.closed:
                    return
                try:
                    fn()
                except BaseException as exc:  # handed to the caller by wait()
                    self.error = exc
                    for event in self.ready.values():
                        event.set()
                    return
                self.ready[tier].set()
        finally:
            _COMPILING.discard(threading.current_thread())

    def close(self):
        """Start no further job (the one compiling finishes on its own)."""
        self.closed = True

    def wait(self, tier: int):
        if tier in self.ready:
            self.ready[tier].wait()
        if self.error is not None:
            raise self.error


def run_study(study: Study, chunk_size: int | None = None, per_request: bool | None = None,
              progress: Callable[[int, int, int, int, float], None] | None = None,
              devices=None, processes: int = 1, shape_for: tuple[int, int] = (0, 0)
              ) -> SweepResult:
    """Simulate every grid point x seed of ``study`` in memory; rows come back in (design,
    seed) order (see ``iter_chunks``)."""
    t0 = time.perf_counter()
    chunks = list(iter_chunks(study, chunk_size, per_request, devices, progress=progress,
                              processes=processes, shape_for=shape_for))
    runs = runs_table(grid_table(study), pd.concat([c.metrics for c in chunks]), study.seeds)
    requests = None
    if chunks and chunks[0].requests is not None:
        requests = requests_table([c.requests for c in chunks])
    return SweepResult(runs, requests, time.perf_counter() - t0,
                       len({c.seats for c in chunks}), len(runs))


def with_slo(plan: topology.Plan, slo: dict) -> topology.Plan:
    """The plan with the brief's per-request limits in the arrays its metrics read."""
    if not slo:
        return plan
    return plan._replace(system=plan.system._replace(
        slo_ttft_s=np.float64(slo.get("request_ttft_s", np.inf)),
        slo_tpot_s=np.float64(slo.get("request_tpot_ms", np.inf) * 1e-3)))


def _uncertain_params(study: Study, params: list, drawn: dict) -> Callable:
    """A simulation's plan: its design's, with the seed's draws of the uncertain factors when
    there are any (the same draw for every design: common random numbers)."""
    if not study.uncertain:
        return lambda s: params[s.point]
    cache: dict = {}

    def sim_params(s: _Sim):
        if (s.point, s.seed) not in cache:
            design = study.points[s.point].design.replace(**drawn[s.seed])
            cache[(s.point, s.seed)] = with_slo(topology.plan(design), study.slo)
        return cache[(s.point, s.seed)]

    return sim_params


def grid_table(study: Study) -> pd.DataFrame:
    """One typed row per grid point: ``design`` and every column of the config."""
    return typed(pd.DataFrame([{"design": i, **p.columns} for i, p in enumerate(study.points)]))


def runs_table(grid: pd.DataFrame, metrics: pd.DataFrame, seeds: list[int]) -> pd.DataFrame:
    """The grid's columns, ``seed`` and the metrics, one row per design x seed in (design, seed)
    order, from metric rows in any order; refuses missing or repeated simulations."""
    key = pd.MultiIndex.from_frame(metrics[["design", "seed"]])
    if key.has_duplicates:
        d, s = key[key.duplicated()][0]
        raise ValueError(f"runs: design {d} seed {s} was simulated twice (two processes with "
                         "the same process id?); allowed: each simulation once")
    want = pd.MultiIndex.from_product([grid["design"], seeds], names=["design", "seed"])
    missing = want.difference(key, sort=False)
    if len(missing):
        raise ValueError(f"runs: {len(missing)} of {len(want)} simulations are missing (e.g. "
                         f"design {missing[0][0]} seed {missing[0][1]}); allowed: a complete "
                         "run (resume it with --resume)")
    values = metrics.set_index(["design", "seed"]).loc[want].reset_index(drop=True)
    rows = grid.iloc[np.repeat(np.arange(len(grid)), len(seeds))].reset_index(drop=True)
    rows["seed"] = np.tile(np.asarray(seeds, dtype=np.int64), len(grid))
    for col in values.columns.difference(list(METRICS)):  # factors drawn per seed
        rows[col] = values[col]
    return pd.concat([rows, values[list(METRICS)]], axis=1)


def requests_table(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Per-request rows from any chunks, ordered by design, seed and request."""
    return pd.concat(parts, ignore_index=True).sort_values(
        ["design", "seed", "request"], kind="stable", ignore_index=True)


def typed(df: pd.DataFrame) -> pd.DataFrame:
    """Levers as categoricals, counts int64, times float64, flags bool (the Parquet schema)."""
    df = df.copy()
    for col in df.columns:
        if col in METRICS:
            kind = METRICS[col]
            df[col] = df[col].astype({"f8": "float64", "i8": "int64", "b": "bool"}[kind])
        elif col in ("design", "seed"):
            df[col] = df[col].astype("int64")
        elif df[col].map(lambda v: isinstance(v, str)).any():
            df[col] = pd.Categorical(df[col].astype(str), categories=list(dict.fromkeys(df[col])))
        elif df[col].isna().all():
            df[col] = df[col].astype("float64")
        elif all(isinstance(v, (bool, np.bool_)) for v in df[col]):
            df[col] = df[col].astype("bool")
        elif all(isinstance(v, (int, np.integer)) for v in df[col].dropna()) and df[col].notna().all():
            df[col] = df[col].astype("int64")
        else:
            df[col] = df[col].astype("float64")
    return df


def _request_table(sims, reqs, out, rows) -> pd.DataFrame:
    """Per-request rows of the simulations ``sims``, found at batch rows ``rows``."""
    rows = np.asarray(rows, dtype=np.int64)
    arrival = np.asarray(reqs.arrival)[rows]
    real = np.isfinite(arrival)
    n = arrival.shape[1]
    design = np.repeat([s.point for s in sims], n).reshape(len(sims), n)
    seed = np.repeat([s.seed for s in sims], n).reshape(len(sims), n)
    return pd.DataFrame({
        "design": design[real].astype(np.int64), "seed": seed[real].astype(np.int64),
        "request": np.tile(np.arange(n, dtype=np.int64), (len(sims), 1))[real],
        "arrival_s": arrival[real],
        "prompt_tokens": np.asarray(reqs.prompt)[rows][real].astype(np.int64),
        "output_tokens": np.asarray(reqs.output)[rows][real].astype(np.int64),
        "first_token_s": np.asarray(out.first)[rows][real],
        "finish_s": np.asarray(out.finish)[rows][real],
        "generated": np.asarray(out.generated)[rows][real].astype(np.int64),
    })


# ------------------------------------------------------------------ aggregation over seeds
#: Two-sided 95% Student-t quantiles by degrees of freedom (1..30); beyond, the normal 1.96.
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t975(dof: int) -> float:
    if dof < 1:
        return math.nan
    return _T975[dof - 1] if dof <= len(_T975) else 1.96


def meets(df: pd.DataFrame, brief) -> pd.Series:
    """Row by row: does this run (or this design's means) meet every limit of the brief?"""
    ok = pd.Series(True, index=df.index)
    for lim in brief:
        ok &= df[lim.key].map(lambda v, lim=lim: bool(lim.ok(float(v))))
    return ok


def aggregate(runs: pd.DataFrame, brief, drawn=()) -> pd.DataFrame:
    """One row per design: lever columns, ``seeds``, and for every metric m: m (mean), m_std,
    m_ci_low, m_ci_high (95% CI of the mean, Student t); ``p_pass`` (share of seeds whose run
    meets the brief) and ``meets_brief`` (the means meet every limit). The columns ``drawn``
    (factors drawn per seed) hold their mean over the seeds."""
    lever_cols = [c for c in runs.columns if c not in METRICS and c != "seed"]
    runs = runs.assign(_pass=meets(runs, brief).astype("float64"))
    g = runs.groupby("design", sort=True, observed=True)
    first = g[lever_cols].first().reset_index(drop=True)
    for c in drawn:
        first[c] = g[c].mean().to_numpy()
    n = g.size().to_numpy()
    out = {"seeds": n}
    half = np.array([t975(k - 1) for k in n]) / np.sqrt(n)
    for m in METRICS:
        x = runs[m].astype("float64")
        mean = x.groupby(runs["design"]).mean().to_numpy()
        std = x.groupby(runs["design"]).std(ddof=1).to_numpy()
        out[m] = mean
        out[f"{m}_std"] = std
        out[f"{m}_ci_low"] = mean - half * std
        out[f"{m}_ci_high"] = mean + half * std
    out["p_pass"] = g["_pass"].mean().to_numpy()
    agg = pd.concat([first, pd.DataFrame(out)], axis=1)
    agg["meets_brief"] = meets(agg, brief).to_numpy()
    return agg


def memory_budget_bytes() -> float:
    """Half the accelerator's free memory (room for XLA's temporaries), or MEMORY_BUDGET_CPU on
    a CPU."""
    stats = getattr(jax.local_devices()[0], "memory_stats", lambda: None)() or {}
    limit = stats.get("bytes_limit")
    return 0.5 * (limit - stats.get("bytes_in_use", 0)) if limit else MEMORY_BUDGET_CPU


def study_bytes(study: Study) -> tuple[int, int]:
    """``simulation_bytes`` at the study's largest shapes; a simulation's replicas are queued
    as simulations of their own."""
    per_lane, per_sim = simulation_bytes(max(p.workload.capacity for p in study.points),
                                         max(p.design.seats for p in study.points),
                                         max(p.design.draft_tokens for p in study.points))
    return per_lane, per_sim * _widest(study)


def simulation_bytes(n_requests: int, seats: int, k_max: int) -> tuple[int, int]:
    """Estimated bytes of one simulation in flight (its lane: state and the decode run's
    seats x lookahead temporaries) and of one queued simulation (its requests and results)."""
    look = max(DEFAULT_LOOKAHEAD, DEFAULT_STATIC_LOOKAHEAD)
    # Per request: first and finish times (16 bytes), arrivals in blocks (8), the admission
    # window's two lengths (8), and the lane's copy of the requests (arrival, prompt, output,
    # prefix: 20).
    lane = 52 * (n_requests + seats) + 4 * ITL_BINS + 16 * seats * look * (8 + k_max)
    queued = n_requests * (16 + 20) + 4 * ITL_BINS + 256
    return 2 * lane, queued  # x2: XLA keeps the loop carry and its update


def device_description() -> str:
    d = jax.devices()[0]
    return f"{d.platform}:{getattr(d, 'device_kind', d.platform)} x{len(jax.devices())}"


def default_progress(stream=sys.stderr) -> Callable[[int, int, int, int, float], None]:
    """A one-line bar on a terminal; plain log lines (at most ~20) otherwise."""
    tty = stream.isatty()
    last = [-1]

    def show(done: int, total: int, designs: int, designs_total: int, elapsed: float) -> None:
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else math.inf
        msg = (f"{designs}/{designs_total} designs, {done}/{total} simulations, "
               f"{rate:,.1f} sims/s, {eta:,.0f} s left")
        if tty:
            filled = int(30 * done / total)
            stream.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {msg}   ")
            if done == total:
                stream.write("\n")
        else:
            step = int(20 * done / total)
            if step != last[0] or done == total:
                last[0] = step
                stream.write(msg + "\n")
        stream.flush()

    return show
