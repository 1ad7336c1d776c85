"""``sweep run`` and ``sweep merge``: ``sweep.execution.study_run`` with its arguments from the
command line, a signal handler, progress, and the verdict printed."""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from sweep.commands.common import Stop, use_executable_cache
from sweep.errors import checked


def cmd_run(args) -> int:
    from sweep.execution.cluster import resolve
    from sweep.execution.progress import default_progress
    from sweep.execution.study_run import run

    # Compiled executables persist across runs (the same shapes recompile in ~10 s each
    # otherwise). Not JAX's persistent cache as well: what it loads cannot be written again.
    use_executable_cache()
    cluster = checked(resolve, args.coordinator, args.num_processes, args.process_id, os.environ)
    stop = Stop()
    handlers = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        outcome = run(args.config, args.out, seeds=args.seeds, chunk_size=args.chunk_size,
                      max_designs=args.max_designs, per_request=args.per_request,
                      processes=args.processes, resume=args.resume, force=args.force,
                      strict=args.strict, cluster=cluster,
                      progress=None if args.quiet else default_progress(),
                      stop=lambda: stop.signum is not None,
                      echo=lambda line: print(line, file=sys.stderr))
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    parts = outcome.work / "parts"
    if outcome.stopped:
        again = ("--resume" if outcome.work == outcome.folder
                 else "--force (the finished results are kept)")
        print(f"sweep run: interrupted; {outcome.saved} of {outcome.total} simulations saved in "
              f"{parts}; continue with: sweep run {args.config} --out {outcome.folder} {again}",
              file=sys.stderr)
        return 128 + stop.signum
    if outcome.results is None:
        import jax

        print(f"process {jax.process_index()}: its share is done ({outcome.saved} of "
              f"{outcome.total} simulations saved in {parts}); the last process to finish writes "
              f"the tables, or run 'sweep merge {outcome.folder}' when all are done")
        return 0
    wall = time.perf_counter() - args.started
    return _report(outcome.results, outcome.folder,
                   f"in {wall:.1f} s ({len(outcome.results.runs) / max(wall, 1e-9):,.1f} sims/s)")


def cmd_merge(args) -> int:
    from sweep.execution.study_run import merge

    res = merge(args.results, args.strict)
    return _report(res, Path(args.results),
                   f"by engine calls of {res.meta['seconds']:.1f} s in all")


def _report(res, folder: Path, took: str) -> int:
    """The run in one line, then its verdict against the brief."""
    from sweep.analysis.report import render, verdict

    print(f"{len(res.designs)} designs x {len(res.meta['seeds'])} seeds = {len(res.runs)} "
          f"simulations {took} on {res.meta['device']} -> {folder}")
    print(render(verdict(res.designs, res.brief), res.brief, res.axes))
    return 0
