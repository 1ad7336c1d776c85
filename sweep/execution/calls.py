"""The calls of one process: its simulations grouped by seat tier and request slots, compiled
on a background thread, run on worker threads, and their overflows rerun in a wider tier.

Each simulation first runs with at most ``SMALL_SEATS`` seats (or the caller's
``Planned.first_seats``), which is exact unless the narrow
seat array held back an admission (the engine flags it); those few rerun with all
``max_batch`` seats in a later call. Every group has one compiled shape, fixed up front, so
that groups compile on a background thread: the narrowest tier's while the first calls sample
their requests, the wide ones (needed only by the simulations that overflow) while the narrow
ones run, if they run long.
"""
from __future__ import annotations

import atexit
import threading
import time
from dataclasses import dataclass
from functools import partial
from queue import Queue
from typing import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from sweep.analysis.tables import call_metrics, call_requests
from sweep.engine.fleet_sessions import keeps_sessions
from sweep.engine import topology
from sweep.execution.batch import stack
from sweep.execution.budget import widest
from sweep.execution.dispatch import NOTHING, dispatch, warm
from sweep.execution.planning import (Group, Planned, Shape, Sim, call_shape, groups,
                                      plan_chunks, request_slots, share_of, split)
from sweep.execution.progress import Progress, Tally
from sweep.physics.numerics import float64
from sweep.study import model_error
from sweep.study.config import Study
from sweep.study.fleet import each, members
from sweep.study.lengths import Pauses
from sweep.study.uncertainty import draws
from sweep.study.workload import path_shape, sample_batch, workload_params


@dataclass
class Chunk:
    """The finished simulations of one compiled call (those that overflowed the narrow seat
    array are rerun in a later chunk)."""

    metrics: pd.DataFrame  # design, seed and every metric, one row per finished simulation
    requests: pd.DataFrame | None  # their requests, when asked for
    seats: int  # the call's seat tier
    slots: int  # its request slots (one compilation per tier and slots)
    seconds: float  # wall time of the call


def local_chunks(study: Study, chunk_size: int | None = None, per_request: bool | None = None,
                 devices=None, skip=frozenset(), share: tuple[int, int] = (0, 1),
                 progress: Progress | None = None, stop: Callable[[], bool] | None = None,
                 compile_order: int = 0, planned: Planned | None = None) -> Iterator[Chunk]:
    """``runner.iter_chunks`` in this process: its calls' chunks as they finish."""
    scheduler = Scheduler(study, chunk_size, per_request, devices, skip, share, compile_order,
                          planned)
    try:
        while (chunk := scheduler.next_chunk(stop)) is not None:
            scheduler.tally.report(progress)
            yield chunk
    finally:
        scheduler.compiler.close()  # no compilation starts once the caller is done
        scheduler.settle()


class Scheduler:
    """Calls in flight on worker threads (up to ``calls_in_flight()``), started group by group:
    a group's simulations wait while a narrower tier may still overflow into it."""

    @float64()
    def __init__(self, study: Study, chunk_size, per_request, devices, skip, share,
                 compile_order: int, planned: Planned | None):
        self.study = study
        self.devices = list(devices or jax.local_devices())
        self.want_requests = study.per_request if per_request is None else per_request
        self.max_steps = None if study.max_steps is None else jnp.int32(study.max_steps)
        self.params = [with_slo(topology.plan(p.design), study.slo) for p in study.points]
        self.drawn = {seed: draws(study.uncertain, seed) for seed in study.seeds}
        self.sim_params = _uncertain_params(study, self.params, self.drawn)
        self.k_max = max([p.design.draft_tokens for p in study.points]
                         + [planned.k_max if planned else 0])
        self.widest = widest(study)
        # Every call of the study stacks its requests' paths in one shape.
        self.paths = path_shape(p.workload for p in study.points)
        mine = share_of(study, share)
        self.pending, bound = groups(study, mine, skip, request_slots(study, planned),
                                     planned and planned.first_seats)
        shape_for = planned.simulations if planned else 0
        plan = plan_chunks(study, chunk_size)
        self.workers = plan.calls
        # (Tiers of fewer lanes take more rounds: as many simulations per call.)
        self.shapes = {g: call_shape(max(len(sims), shape_for), plan.lanes(g.seats),
                                     max(1, plan.per_call() // plan.lanes(g.seats)),
                                     len(self.devices), g.slots, self.workers)
                       for g, sims in bound.items()}
        self.compiler = Compiler(self._compile_jobs(bound, compile_order))
        self.tally = Tally(study, mine, skip)
        self.running: dict[int, Group] = {}  # call -> its group
        self.queue: list[tuple[Group, list[Sim]]] = []
        self.finished: Queue = Queue()
        self.calls = 0

    def _kind(self, s: Sim) -> tuple[str, bool]:
        """Simulations of a kind share calls: a batch of lanes skips the general pass only if
        none of them needs it (full static batches, ``engine.needs_pass``), and takes the
        cheaper decode run only if none of them speculates (``engine.step``)."""
        design = self.study.points[s.point].design
        return design.batching, design.draft_tokens > 0

    def _compile_jobs(self, bound: dict, order: int) -> list[tuple[Group, Callable]]:
        """Compile up front the narrowest tier's groups, and the groups only overflows reach
        if the narrow calls run long enough to hide them; ``order`` rotates the jobs, so that
        processes sharing executables start on different groups."""
        if not self.pending:
            return []
        narrow = min(self.pending)
        many = sum(len(v) for v in self.pending.values()) > self.shapes[narrow].size
        first = [g for g in sorted(self.shapes) if g.seats == narrow.seats and g in self.pending
                 or g not in self.pending and many]
        turn = order % len(first)
        return [(g, partial(warm, self.shapes[g], g.seats, self.k_max, self.devices,
                            self.max_steps, self._first_plans(g, bound), self.widest, self.paths,
                            **self._loops(g, bound)))
                for g in first[turn:] + first[:turn]]

    def _first_call(self, group: Group, bound: dict) -> list[Sim]:
        return (sorted(self.pending[group], key=self._kind)[:self.shapes[group].size]
                if group in self.pending else bound[group])

    def _first_plans(self, group: Group, bound: dict) -> list[topology.Plan]:
        """The plans of the group's first call, whose servers' features it compiles."""
        return [self.params[s.point] for s in self._first_call(group, bound)]

    def _loops(self, group: Group, bound: dict) -> dict:
        """Whether the group's first call holds a closed loop, or sessions, and pauses drawn
        from a table: features its requests switch on. Over several servers a loop reaches
        them open, as the rounds send it (``topology.run``), unless the session router keeps
        each replica's sessions whole."""
        loads = []
        for s in self._first_call(group, bound):
            w, p = self.study.points[s.point].workload, self.params[s.point]
            if topology.plain(p) or (w.turns is not None and keeps_sessions(p)):
                loads.append(w)
        return {"closed": any(w.arrival == "closed" for w in loads),
                "sessions": any(w.turns is not None for w in loads),
                "pauses": any(isinstance(w.think_time_s, Pauses) and w.think_time_s.dist != "fixed"
                              for w in loads)}

    @float64()
    def _simulate(self, group: Group, part: list[Sim]):
        """One engine call on ``part`` (padded to the group's shape), on a worker thread."""
        t_call = time.perf_counter()
        shape: Shape = self.shapes[group]
        points = self.study.points
        args = [workload_params(points[s.point].workload, s.seed,
                                points[s.point].design.context_limit, shape.slots, self.paths)
                for s in part]
        plist = [self.sim_params(s) for s in part]
        # Pad with simulations that have no requests: they end at once.
        args += [workload_params(NOTHING, 0, 2, shape.slots, self.paths)] * (shape.size
                                                                            - len(part))
        plist += [plist[0]] * (shape.size - len(part))
        reqs = sample_batch(shape.slots, stack(args))
        # Sampled while the group compiles; the call's seconds leave the wait out.
        t_wait = time.perf_counter()
        self.compiler.wait(group)
        t_call += time.perf_counter() - t_wait
        out, mets = dispatch(plist, reqs, group.seats, self.k_max, shape.lanes, self.devices,
                             self.max_steps, self.widest, real=len(part))
        return part, reqs, out, mets, time.perf_counter() - t_call

    def _ready(self) -> list[tuple[Group, list[Sim]]]:
        """Calls to start next: a group's simulations, in parts (one per worker at least),
        once no narrower tier is left to run or overflow into it; before that, as soon as
        they fill the lanes of a call, so that no worker waits for the last narrow call to
        finish."""
        for group in sorted(self.pending):
            shape = self.shapes[group]
            narrower = any(g.seats < group.seats for g in (*self.pending, *self.running.values()))
            if narrower and len(self.pending[group]) < shape.lanes:
                continue
            sims = sorted(self.pending.pop(group), key=self._kind)
            return [(group, part) for part in split(sims, shape.size, shape.lanes, self.workers)]
        return []

    def _start(self, group: Group, part: list[Sim]) -> None:
        """``_simulate`` on a daemon thread (an interrupted run exits without waiting for
        it)."""
        call = self.calls
        self.calls += 1

        def work():
            try:
                self.finished.put((call, self._simulate(group, part), None))
            except BaseException as exc:  # handed to the caller by ``next_chunk``
                self.finished.put((call, None, exc))

        self.running[call] = group
        threading.Thread(target=work, daemon=True).start()

    def settle(self) -> None:
        """Wait for the calls in flight, their results dropped: a caller that gave up (an
        error) goes on, or exits, only once no engine call runs under it (a process that exits
        during one aborts)."""
        while self.running:
            call, _, _ = self.finished.get()
            self.running.pop(call, None)

    def next_chunk(self, stop: Callable[[], bool] | None) -> Chunk | None:
        """Start calls while workers are free (none once ``stop`` says so), then the next
        call to finish as a chunk, its overflows queued for their own tier; None when no call
        is left."""
        while len(self.running) < self.workers and not (stop and stop()):
            self.queue = self.queue or self._ready()
            if not self.queue:
                break
            self._start(*self.queue.pop(0))
        if not self.running:
            return None
        call, result, error = self.finished.get()
        group = self.running.pop(call)
        if error is not None:
            raise error
        part, reqs, out, mets, seconds = result
        overflow = np.asarray(out.overflow, dtype=bool)[:len(part)]
        kept = np.flatnonzero(~overflow)
        for j in np.flatnonzero(overflow):
            seats = self.study.points[part[j].point].design.seats
            self.pending.setdefault(Group(seats, group.slots), []).append(part[j])
        sims = [part[j] for j in kept]
        metrics = call_metrics(sims, mets, kept, self.drawn, self.study.uncertain)
        requests = call_requests(sims, reqs, out, kept) if self.want_requests else None
        self.tally.add(s.point for s in sims)
        return Chunk(metrics, requests, group.seats, group.slots, seconds)


def with_slo(plan: topology.Plan, slo: dict) -> topology.Plan:
    """The plan with the brief's per-request limits in the arrays its metrics read."""
    if not slo:
        return plan
    summary = plan.system.summary._replace(
        slo_ttft_s=np.float64(slo.get("request_ttft_s", np.inf)),
        slo_tpot_s=np.float64(slo.get("request_tpot_ms", np.inf) * 1e-3))
    return plan._replace(system=plan.system._replace(summary=summary))


def errs(study: Study) -> bool:
    """Whether ``study``'s seeds draw the model's own error (for some design's factors)."""
    return study.model_error and any(model_error.spreads(d) for p in study.points
                                     for d in members(p.design))


def _uncertain_params(study: Study, params: list, drawn: dict) -> Callable:
    """A simulation's plan: its design's, with the seed's draws of the uncertain factors and of
    the model's error when there are any (the same draw for every design: common random
    numbers)."""
    erring = errs(study)
    if not study.uncertain and not erring:
        return lambda s: params[s.point]
    cache: dict = {}

    def drawn_design(design, seed: int):
        design = design.replace(**drawn[seed])
        if erring:
            design = design.replace(**model_error.factors_at(design,
                                                             model_error.seed_quantile(seed)))
        return design

    def sim_params(s: Sim):
        if (s.point, s.seed) not in cache:
            design = each(study.points[s.point].design, lambda d: drawn_design(d, s.seed))
            cache[(s.point, s.seed)] = with_slo(topology.plan(design), study.slo)
        return cache[(s.point, s.seed)]

    return sim_params


_COMPILING: set[threading.Thread] = set()


@atexit.register
def _let_compilations_finish() -> None:
    """A daemon thread still compiling when the interpreter finalises aborts the process:
    wait for them at exit (they start no new job once their run is done)."""
    for thread in list(_COMPILING):
        thread.join()


class Compiler:
    """Calls ``(group, fn)`` jobs in order on a daemon thread (compilation releases the GIL, so
    it overlaps the caller's simulations); ``wait(group)`` returns once that group's job is
    done and re-raises any job's error."""

    def __init__(self, jobs: list[tuple[Group, Callable]]):
        self.ready = {group: threading.Event() for group, _ in jobs}
        self.error: BaseException | None = None
        self.closed = False
        self.thread = threading.Thread(target=self._run, args=(jobs,), daemon=True)
        self.thread.start()
        _COMPILING.add(self.thread)

    @float64()
    def _run(self, jobs):
        try:
            for group, fn in jobs:
                if self.closed:
                    return
                try:
                    fn()
                except BaseException as exc:  # handed to the caller by wait()
                    self.error = exc
                    for event in self.ready.values():
                        event.set()
                    return
                self.ready[group].set()
        finally:
            _COMPILING.discard(threading.current_thread())

    def close(self):
        """Start no further job (the one compiling finishes on its own)."""
        self.closed = True

    def wait(self, group: Group):
        if group in self.ready:
            self.ready[group].wait()
        if self.error is not None:
            raise self.error
