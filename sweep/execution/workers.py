"""Local worker processes: a CPU sweep split over one JAX process per core.

XLA's CPU runtime sizes its thread pool to the cores a process may use. Pinned to one core, a
process runs a call's few hundred small kernels per step on one thread; a pool of two hands
each of them between threads, and a profile of one process on 2 cores found much of the CPU
time in the runtime. The Serve a Model study's steady state runs faster as two pinned
processes (benchmarks/README.md, ``per_core.py``). With a cache set (``sweep run`` always sets
one), the workers compile the call groups in turn and load each other's executables
(``executables``); each still starts its own Python and JAX, so a small study gains nothing.

A worker is ``python -m sweep.execution.workers FD``: it reads its job (a pickle) on stdin,
writes its chunks (pickles, then None or the error) on file descriptor FD, and stops starting
calls once anything (a byte, or the end of the stream) arrives on stdin.
"""
from __future__ import annotations

import os
import pickle
import select
import subprocess
import sys
from multiprocessing.connection import wait
from typing import Iterator

from sweep.errors import show

#: Simulations (of this machine's share) from which ``sweep run`` splits a CPU run over one
#: worker per core unless told (``--processes``): on 2 cores with executables kept, half the
#: Serve a Model study's simulations ran faster in one process (the workers' start-up outweighs
#: their gain), the whole study faster as two workers (benchmarks/README.md, ``sweep run``).
AUTO_FROM_SIMULATIONS = 1000
#: Workers at most by default: each holds its own JAX runtime, engines and requests (~1 GB).
AUTO_MAX = 4


def default_processes(simulations: int) -> int:
    """Worker processes for a run of this many simulations when the user does not say."""
    import jax

    if jax.default_backend() != "cpu" or simulations < AUTO_FROM_SIMULATIONS:
        return 1
    return max(1, min(len(os.sched_getaffinity(0)), AUTO_MAX))


def check(processes: int) -> None:
    """Worker processes split a CPU, not an accelerator, one pinned to each core at most (more
    would share cores, each with its own ~1 GB runtime, and only slow the run)."""
    import jax

    cores = len(os.sched_getaffinity(0))
    whole = isinstance(processes, int) and not isinstance(processes, bool)
    if whole and processes > 1 and jax.default_backend() != "cpu":
        raise ValueError(f"--processes: {processes}; allowed: 1 on a {jax.default_backend()} "
                         f"(worker processes split a CPU's cores)")
    if not whole or not 1 <= processes <= cores:
        raise ValueError(f"--processes: {show(processes)}; allowed: 1 to {cores} (one worker per "
                         "core this process may use)")


def in_processes(study, processes: int, *, share: tuple[int, int], skip, progress, stop,
                 **kw) -> Iterator:
    """``runner.iter_chunks`` over ``processes`` workers, each pinned to one core and given
    every ``processes``-th simulation of ``share``; their chunks are yielded as they come."""
    import jax

    from sweep.execution.planning import share_of
    from sweep.execution.progress import Tally
    from sweep.runtime import executables

    check(processes)
    cores = sorted(os.sched_getaffinity(0))
    index, count = share
    tally = Tally(study, share_of(study, share), skip)
    cache = jax.config.jax_compilation_cache_dir, executables.directory()
    procs, streams = [], {}
    try:
        for i in range(processes):
            r, w = os.pipe()
            proc = subprocess.Popen([sys.executable, "-m", "sweep.execution.workers", str(w)],
                                    stdin=subprocess.PIPE, pass_fds=(w,))
            os.close(w)
            procs.append(proc)
            streams[os.fdopen(r, "rb")] = proc
            job = dict(kw, skip=skip, share=(index + count * i, count * processes),
                       compile_order=i if any(cache) else 0)
            proc.stdin.write(pickle.dumps((cores[i % len(cores)], cache, study, job)))
            proc.stdin.flush()
        halted = False
        while streams:
            if stop and not halted and stop():
                halted = True
                for proc in procs:
                    proc.stdin.close()
            for stream in wait(list(streams), timeout=0.1):
                try:
                    got = pickle.load(stream)
                except EOFError:
                    raise RuntimeError("a worker process ended without its results") from None
                if got is None:
                    del streams[stream]
                    stream.close()
                    continue
                if isinstance(got, BaseException):
                    raise got
                tally.add(got.metrics["design"])
                tally.report(progress)
                yield got
    finally:
        for stream in streams:
            stream.close()
        for proc in procs:
            if not proc.stdin.closed:
                proc.stdin.close()
            if streams:  # stopped early, or an error: no need to wait for the rest
                proc.kill()
            proc.wait()


def _main(fd: int) -> None:
    core, cache, study, job = pickle.load(sys.stdin.buffer)
    os.sched_setaffinity(0, {core})  # before JAX starts its runtime and sizes its thread pool
    import jax

    from sweep.execution.calls import local_chunks
    from sweep.runtime import executables

    xla_cache, executables_dir = cache
    if xla_cache:
        jax.config.update("jax_compilation_cache_dir", xla_cache)
    executables.use(executables_dir)
    out = os.fdopen(fd, "wb")

    def stop() -> bool:  # the parent wrote, closed stdin, or died
        return bool(select.select([sys.stdin], [], [], 0)[0])

    try:
        for chunk in local_chunks(study, stop=stop, **job):
            pickle.dump(chunk, out)
            out.flush()
        pickle.dump(None, out)
    except BaseException as exc:  # handed to the parent, which raises it
        try:
            pickle.dump(exc, out)
        except Exception:
            pickle.dump(RuntimeError(f"{type(exc).__name__}: {exc}"), out)
    out.close()


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops its workers itself
    _main(int(sys.argv[1]))
