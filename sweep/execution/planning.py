"""How a sweep's simulations are cut into engine calls: which simulations are this process's,
which calls share a compiled shape, how many simulations a call holds and runs at once."""
from __future__ import annotations

import os
from typing import NamedTuple

import jax

from sweep.errors import got
from sweep.execution.budget import (machine_bytes, memory_budget_bytes, simulation_bytes,
                                    study_bytes)
from sweep.study.config import Study

#: Simulations in flight at once (vmapped lanes, shared by the calls in flight) unless the study
#: or the user says otherwise: an accelerator wants as many as memory allows. On a CPU a few
#: dozen run fastest (faster than hundreds, benchmarks/README.md):
#: there this sets how many simulations a call holds (x ``POOL_ROUNDS``), and each tier's lanes
#: follow ``CPU_SEAT_LANES``.
DEFAULT_CHUNK_CPU = 32
DEFAULT_CHUNK_ACCELERATOR = 65536
#: On a CPU, by default, a call's lanes x seats, and its lanes at most: the decode run's
#: [lanes, seats, passes] arrays then stay in a core's cache: on 2 cores, two calls at once,
#: the Serve a Model study's wide tier (256 seats) ran faster with 4 lanes per call than with
#: 8 or 16, and its narrow tier (64 seats) as fast with 16 lanes as with 32.
CPU_SEAT_LANES = 1024
CPU_LANES_MAX = 32
#: Engine calls in flight at once on a CPU, at most (one per core): one call keeps only part of
#: a second core busy (XLA splits its small kernels over both and waits for each); on 2 cores,
#: two calls of half the lanes each ran the Serve a Model study faster than one.
#: An accelerator takes one call at a time, as wide as memory allows.
CALLS_IN_FLIGHT_CPU = 4
#: Requests a 2-core CPU simulates per second in a large study's steady state, the low end of
#: those measured (benchmarks/README.md), for a run's time estimate.
CPU_REQUESTS_PER_S = 50_000
#: Peak bytes of a per-request row: 9 eight-byte columns, held in the chunks' parts and in the
#: joined, sorted table at once.
REQUEST_ROW_BYTES = 200
#: Seats of the first try (see ``calls``) unless the caller says (``first_seats``).
SMALL_SEATS = 64
#: Request slots of a simulation, at least: a power of two, like every slot count, so that
#: workloads of similar size share a compiled shape.
MIN_SLOTS = 64
#: A compiled call (one chunk, one saved part) simulates up to this many times ``chunk``
#: simulations per device, ``chunk`` at a time: enough for the lane pool to refill, few enough
#: that a killed run loses little.
POOL_ROUNDS = 16


class Sim(NamedTuple):
    """One simulation: a grid point and a seed."""

    point: int
    seed: int


class Group(NamedTuple):
    """Simulations that share calls and a compiled shape: a seat tier and request slots."""

    seats: int
    slots: int


class Shape(NamedTuple):
    """A group's compiled call shape."""

    size: int  # simulations per call
    lanes: int  # lanes per device
    slots: int  # requests per simulation


class Planned(NamedTuple):
    """Shapes planned across the batches of a caller that runs many, such as a capacity search,
    so that each is compiled once."""

    simulations: int  # calls shaped for at least this many simulations
    first_seats: int  # the seats of every simulation's first try (``groups``)
    min_slots: int = 0  # request slots at least: a search's shapes only grow
    k_max: int = 0  # draft tokens at least: a batch without its widest drafts compiles no other


class ChunkPlan(NamedTuple):
    """How many simulations a call holds and how many it runs at once."""

    chunk: int  # simulations in flight per call, the study's or the user's if set
    rounds: int  # a call simulates up to chunk x rounds of them
    by_seats: bool  # a call's lanes follow its tier's seats (``CPU_SEAT_LANES``), else chunk
    fits: int  # lanes in flight per call that the memory budget allows
    calls: int  # calls in flight at once (``calls_in_flight``)

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
    chunk size that cannot fit is refused before anything runs, as is one that is not a
    positive integer (the config's ``[run] chunk_size`` check, for a caller's argument)."""
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int)
                                   or chunk_size < 1):
        raise ValueError(f"run.chunk_size: must be a positive integer, got {got(chunk_size)}; "
                         "allowed: an integer >= 1, or None (the study's)")
    workers = calls_in_flight()
    budget = memory_budget_bytes() / workers
    per_lane, per_sim = study_bytes(study)
    _check_one_fits(study, per_lane + per_sim)
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
    return ChunkPlan(chunk, rounds, by_seats, fits, workers)


def _check_one_fits(study: Study, one: float) -> None:
    """Refuse a study whose largest simulation alone needs more memory than the machine has,
    naming what makes it so: its requests or its seats."""
    have = machine_bytes()
    if one <= have:
        return
    requests = max(p.workload.capacity for p in study.points)
    seats = max(p.design.seats for p in study.points)
    if simulation_bytes(requests, 1, 0) >= simulation_bytes(1, seats, 0):
        key, what = "workload.duration_s", f"{requests} requests ([run] max_requests, a rate x " \
                                           "duration_s or num_requests)"
    else:
        key, what = "levers.max_batch", f"{seats} seats (max_batch)"
    raise ValueError(f"{key}: one simulation of {what} needs ~{one / 1e9:.1f} GB, more than the "
                     f"{have / 1e9:.1f} GB this machine has; allowed: a smaller one")


def check_per_request(study: Study, per_request: bool) -> None:
    """Refuse per-request rows that the final table could not hold in memory."""
    if not isinstance(per_request, bool):
        raise ValueError(f"run.per_request: must be true or false, got {got(per_request)}")
    if not per_request:
        return
    rows = sum(p.workload.capacity for p in study.points) * len(study.seeds)
    need, have = rows * REQUEST_ROW_BYTES, machine_bytes()
    if need > have:
        raise ValueError(f"run.per_request: ~{rows:,} request rows need ~{need / 1e9:.1f} GB, "
                         f"more than the {have / 1e9:.1f} GB this machine has; allowed: false, "
                         "or fewer designs, seeds or requests")


def estimate_seconds(study: Study, simulations: int) -> float | None:
    """A CPU run's time at the steady rate a 2-core CPU simulates requests; None on an
    accelerator (far faster, and its rate depends on the chip)."""
    if jax.local_devices()[0].platform != "cpu":
        return None
    mean = sum(p.workload.capacity for p in study.points) / len(study.points)
    return simulations * mean / CPU_REQUESTS_PER_S


def calls_in_flight() -> int:
    """Engine calls run at once: one per CPU core (at most ``CALLS_IN_FLIGHT_CPU``), one on an
    accelerator."""
    if jax.local_devices()[0].platform != "cpu":
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(CALLS_IN_FLIGHT_CPU, cores or 1))


def share_of(study: Study, share: tuple[int, int]) -> list[Sim]:
    """The simulations of ``share = (index, count)``: the k-th of the (design, seed) order
    belongs to ``k % count``."""
    index, count = share
    return [Sim(i, seed) for k, (i, seed) in enumerate(
        (i, seed) for i in range(len(study.points)) for seed in study.seeds) if k % count == index]


def request_slots(study: Study, planned: Planned | None = None) -> list[int]:
    """Each grid point's request slots. Points share calls by the power-of-two bucket of their
    workload's capacity (at least ``MIN_SLOTS``), so that a small workload never pays for a
    large one's slots; a bucket's slots are its largest capacity. When the caller ``planned``
    shapes across studies, every point takes the study's largest bucket instead (at least
    ``planned.min_slots``): one group per seat tier, so that a batch of similar loads (a
    capacity search's round) runs as few, full calls rather than one pair of part-empty calls
    per bucket (benchmarks/README.md, ``capacity.py``), and every shape is a power of two
    (compiled once). The draws of the slots in use
    do not depend on how many there are, and a workload's requests outnumber its capacity with
    p < 1e-9 (``Workload.capacity``), so the slots change no result."""
    capacity = [p.workload.capacity for p in study.points]
    bucket = [max(MIN_SLOTS, 1 << (c - 1).bit_length()) for c in capacity]
    if planned:
        return [max(max(bucket), planned.min_slots)] * len(bucket)
    most: dict[int, int] = {}
    for b, c in zip(bucket, capacity):
        most[b] = max(most.get(b, 0), c)
    return [most[b] for b in bucket]


def groups(study: Study, mine: list[Sim], skip, slots: list[int],
           first_seats: int | None = None) -> tuple[dict, dict]:
    """The groups of ``mine`` less ``skip`` (the first try's, every simulation at most
    ``first_seats`` seats, default ``SMALL_SEATS``; ``slots`` by grid point), and every group a
    simulation may run in (its own seats, after overflowing the first try): group ->
    simulations."""
    first_seats = first_seats or SMALL_SEATS
    first: dict[Group, list[Sim]] = {}
    bound: dict[Group, list[Sim]] = {}
    for s in mine:
        if (s.point, s.seed) in skip:
            continue
        seats = study.points[s.point].design.seats
        first.setdefault(Group(min(seats, first_seats), slots[s.point]), []).append(s)
        bound.setdefault(Group(min(seats, first_seats), slots[s.point]), []).append(s)
        if seats > first_seats:  # may overflow the narrow first try
            bound.setdefault(Group(seats, slots[s.point]), []).append(s)
    return first, bound


def call_shape(sims: int, chunk: int, rounds: int, n_dev: int, n_req: int, workers: int
               ) -> Shape:
    """The call shape for up to ``sims`` simulations: equal calls, equal shares per device, as
    many calls as ``workers`` run at once (or a multiple)."""
    lanes = min(chunk, -(-sims // n_dev))
    calls = workers * -(-sims // (workers * n_dev * lanes * rounds))
    return Shape(-(-sims // (calls * n_dev * lanes)) * lanes * n_dev, lanes, n_req)


def split(sims: list, size: int, lanes: int, workers: int) -> list[list]:
    """Consecutive parts of ``sims``, at most ``size`` each: as few as fit, but one per worker
    while each would still fill its lanes."""
    n = max(-(-len(sims) // size), min(workers, len(sims) // lanes), 1)
    return [sims[i * len(sims) // n:(i + 1) * len(sims) // n] for i in range(n)]
