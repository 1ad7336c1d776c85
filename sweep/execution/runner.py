"""The sweep runner: a study's grid -> engine calls of vmapped simulations -> tables.

Simulations are grouped by seat tier and request slots (one compilation per group, see
``planning``); each group is cut into calls of equal shape (the last padded with simulations
that have no requests), run by ``calls`` on worker threads over every local device
(``dispatch``). A simulation's result depends only on its own design, workload and seed, never
on its call-mates, so any grouping, any device count and any split over processes give the same
rows: ``iter_chunks`` yields the finished rows call by call (the CLI saves each as a part, so a
killed run can resume), and ``tables.runs_table`` joins rows from anywhere into the (design,
seed)-ordered table.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import jax
import pandas as pd

from sweep.analysis.tables import grid_table, requests_table, runs_table
from sweep.execution.calls import Chunk, local_chunks
from sweep.execution.planning import Planned, plan_chunks
from sweep.execution.progress import Progress
from sweep.execution.workers import in_processes
from sweep.study.config import Study

__all__ = ["Chunk", "SweepResult", "device_description", "iter_chunks", "plan_chunks",
           "run_study"]


@dataclass
class SweepResult:
    runs: pd.DataFrame  # one row per design x seed
    requests: pd.DataFrame | None  # one row per request, when asked for
    seconds: float
    compile_groups: int
    simulations: int = 0
    extra: dict = field(default_factory=dict)


def iter_chunks(study: Study, chunk_size: int | None = None, per_request: bool | None = None,
                devices=None, skip=frozenset(), share: tuple[int, int] = (0, 1),
                progress: Progress | None = None, stop: Callable[[], bool] | None = None,
                processes: int = 1, compile_order: int = 0, planned: Planned | None = None
                ) -> Iterator[Chunk]:
    """Simulate this process's share of the grid points x seeds, less the (design, seed) pairs
    in ``skip`` (already saved), yielding the finished rows call by call.

    ``share = (index, count)``: simulation k of the (design, seed) order belongs to process
    ``k % count``. Simulations are spread over ``devices`` (default: every local device; a CPU
    is one device unless XLA_FLAGS=--xla_force_host_platform_device_count=N splits it, which on
    2 cores gained little in steady state and doubled compilation). Up to
    ``calls_in_flight()`` calls run at once, on worker threads, and their chunks come back as
    they finish. ``stop`` is asked between chunks: once it says so, no call starts, and those
    in flight finish and are yielded.

    ``processes > 1`` (a CPU only) splits the share over that many worker processes, each
    pinned to one core (``workers.in_processes``). ``compile_order`` rotates the order in which
    the groups compile: workers sharing a folder of executables (or JAX's cache) start on
    different groups, so each is compiled once and loaded by the others. ``planned``
    (``planning.Planned``) shapes the calls for a caller with batches of varying size and
    load, such as a capacity search: for at least that many simulations, with request slots
    in powers of two (padding costs little), so that each shape compiles once, and first tries
    wider for simulations expected to hold many requests at once."""
    if processes == 1:
        yield from local_chunks(study, chunk_size, per_request, devices, skip, share, progress,
                                stop, compile_order, planned)
        return
    if devices is not None:
        raise ValueError(f"processes: {processes}; allowed: 1 with devices given")
    yield from in_processes(study, processes, chunk_size=chunk_size, per_request=per_request,
                            skip=skip, share=share, progress=progress, stop=stop,
                            planned=planned)


def run_study(study: Study, chunk_size: int | None = None, per_request: bool | None = None,
              progress: Progress | None = None, devices=None, processes: int = 1
              ) -> SweepResult:
    """Simulate every grid point x seed of ``study`` in memory; rows come back in (design,
    seed) order (see ``iter_chunks``)."""
    t0 = time.perf_counter()
    chunks = list(iter_chunks(study, chunk_size, per_request, devices, progress=progress,
                              processes=processes))
    runs = runs_table(grid_table(study), pd.concat([c.metrics for c in chunks]), study.seeds)
    requests = None
    if chunks and chunks[0].requests is not None:
        requests = requests_table([c.requests for c in chunks])
    return SweepResult(runs, requests, time.perf_counter() - t0,
                       len({(c.seats, c.slots) for c in chunks}), len(runs))


def simulate_rows(study: Study, skip=frozenset(), progress: Progress | None = None,
                  planned: Planned | None = None) -> pd.DataFrame:
    """The metric rows (``design``, ``seed``, the metrics) of every grid point x seed of
    ``study`` less the (design, seed) pairs in ``skip``, in (design, seed) order: for a caller
    that keeps rows of its own, such as the capacity search."""
    chunks = list(iter_chunks(study, skip=skip, progress=progress, planned=planned))
    if not chunks:
        return pd.DataFrame(columns=["design", "seed"])
    rows = pd.concat([c.metrics for c in chunks], ignore_index=True)
    return rows.sort_values(["design", "seed"], kind="stable").reset_index(drop=True)


def device_description() -> str:
    d = jax.devices()[0]
    return f"{d.platform}:{getattr(d, 'device_kind', d.platform)} x{len(jax.devices())}"
