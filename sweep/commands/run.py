"""``sweep run`` and ``sweep merge``: a config's grid simulated into a results folder, resumable,
shared among processes and machines."""
from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from sweep.commands.common import (Stop, Truncated, UsageError, checked, device, out_folder,
                                   use_executable_cache)


#: Seconds above which a run says how long it will take before it starts.
LONG_RUN_S = 600


def cmd_run(args) -> int:
    import jax

    from sweep.analysis.results import PARTS, next_part, read_parts, staging, write_part
    from sweep.execution.cluster import barrier, initialize, resolve
    from sweep.execution.progress import default_progress
    from sweep.execution.planning import check_per_request
    from sweep.execution.runner import iter_chunks, plan_chunks
    from sweep.execution.workers import check as check_processes
    from sweep.execution.workers import default_processes
    from sweep.study.config import load_study

    # Compiled executables persist across runs (the same shapes recompile in ~10 s each
    # otherwise). Not JAX's persistent cache as well: what it loads cannot be written again.
    use_executable_cache()
    cluster = checked(resolve, args.coordinator, args.num_processes, args.process_id, os.environ)
    study = checked(load_study, args.config, seeds=args.seeds, max_designs=args.max_designs)
    out = out_folder(Path(args.out) if args.out else Path("results") / study.name)
    per_request = args.per_request or study.per_request
    if cluster:
        initialize(cluster)
    checked(plan_chunks, study, args.chunk_size)
    checked(check_per_request, study, per_request)
    processes = args.processes or default_processes(
        len(study.points) * len(study.seeds) // jax.process_count())
    checked(check_processes, processes)
    _say_when_long(study, args.config)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    fresh = _check_out(out, args, _manifest(study, per_request, started))
    # A forced rerun of finished results runs beside them, replacing them once complete.
    final, out = out, staging(out) if args.force and (out / "runs.parquet").exists() else out
    barrier("servesweep: output checked")
    if jax.process_index() == 0:
        _prepare_out(out, args.force, fresh, study, per_request, started)
    barrier("servesweep: output ready")
    for cols, reason in study.skipped:
        print(f"skipped: {reason}", file=sys.stderr)
    saved = read_parts(out, requests=False).metrics
    pid, total = jax.process_index(), len(study.points) * len(study.seeds)
    number = next_part(out, pid)
    info = {"started": started, "device": device(), "jax": jax.__version__}
    stop = Stop()
    handlers = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        chunks = iter_chunks(study, chunk_size=args.chunk_size, per_request=per_request,
                             skip=set(zip(saved["design"], saved["seed"])),
                             share=(pid, jax.process_count()),
                             progress=None if args.quiet else default_progress(),
                             stop=lambda: stop.signum is not None, processes=processes)
        done = len(saved)
        for chunk in chunks:
            if len(chunk.metrics):
                write_part(out, pid, number, chunk.metrics, chunk.requests,
                           {**info, "seconds": chunk.seconds})
                number += 1
                done += len(chunk.metrics)
            if args.strict:
                _refuse_truncated(chunk.metrics, out)
        if stop.signum is not None:
            again = "--resume" if out == final else "--force (the finished results are kept)"
            print(f"sweep run: interrupted; {done} of {total} simulations saved in "
                  f"{out / PARTS}; continue with: sweep run {args.config} --out {final} "
                  f"{again}", file=sys.stderr)
            return 128 + stop.signum
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    saved = read_parts(out, requests=False).metrics
    if len(saved) < total:
        print(f"process {pid}: its share is done ({len(saved)} of {total} simulations saved in "
              f"{out / PARTS}); the last process to finish writes the tables, or run "
              f"'sweep merge {final}' when all are done")
        return 0
    return _finish(out, read_parts(out), args.strict, wall=time.perf_counter() - args.started,
                   final=final)


def _manifest(study, per_request: bool, started: str) -> dict:
    """What a sweep runs (``identity``: a resumed run must match it) and the results' metadata."""
    import jax

    return {
        "identity": {"config_text": study.text, "seeds": study.seeds, "per_request": per_request},
        "meta": {
            "name": study.name, "config_path": study.path, "config_text": study.text,
            "axes": study.axes, "seeds": study.seeds,
            "brief": [{"key": lim.key, "min": lim.min, "max": lim.max} for lim in study.brief],
            "skipped": [reason for _, reason in study.skipped], "per_request": per_request,
            "drawn": list(study.uncertain),
            "jax": jax.__version__, "device": device(), "started": started,
        },
    }


def _say_when_long(study, config) -> None:
    """A run estimated above ``LONG_RUN_S`` says so before it starts, even under --quiet: one
    zero too many should be heard at once."""
    from sweep.execution.planning import CPU_REQUESTS_PER_S, estimate_seconds

    sims = len(study.points) * len(study.seeds)
    seconds = estimate_seconds(study, sims)
    if seconds is not None and seconds > LONG_RUN_S:
        print(f"sweep run: {sims} simulations of ~{seconds * CPU_REQUESTS_PER_S / sims:,.0f} "
              f"requests each: about {seconds / 60:,.0f} minutes on this CPU (at "
              f"{CPU_REQUESTS_PER_S:,} requests/s); Ctrl-C keeps what is done and --resume "
              f"continues it, or shrink {config}", file=sys.stderr)


def _check_out(out: Path, args, manifest: dict) -> dict | None:
    """Refuse an output folder the run may not use; the manifest to start with, or None when
    resuming a matching partial run."""
    from sweep.analysis.results import MANIFEST, PARTS, read_manifest

    if args.force and out.is_dir() and any(out.iterdir()) and not (
            (out / "runs.parquet").exists() or (out / PARTS / MANIFEST).exists()):
        raise UsageError(f"{out}: not a servesweep results folder; --force deletes only those "
                         "(allowed: an empty, new or results folder)")
    if not out.exists() or args.force:
        return manifest
    if not args.resume:
        raise UsageError(f"{out}: already exists; use --resume to continue an interrupted sweep "
                         "or --force to overwrite")
    old = checked(read_manifest, out)
    if old.get("identity") != manifest["identity"]:
        raise UsageError(f"{out}: holds a sweep of another config, seeds or --per-request; "
                         "allowed: --resume with the same config and options, or --force to "
                         "start over")
    return None


def _prepare_out(out: Path, force: bool, manifest: dict | None, study, per_request: bool,
                 started: str) -> None:
    from sweep.analysis.results import start_parts
    from sweep.analysis.tables import grid_table

    if manifest is None:
        return
    try:
        if force and out.exists():
            shutil.rmtree(out)
        start_parts(out, manifest, grid_table(study))
    except OSError as exc:
        raise UsageError(f"{out}: cannot create the results folder: "
                         f"{exc.strerror or exc}") from None


def _refuse_truncated(runs, out: Path) -> None:
    cut = runs[runs["truncated"].astype(bool)]
    if len(cut):
        raise Truncated(f"{len(cut)} simulation(s) hit their step bound (e.g. design "
                        f"{cut['design'].iloc[0]} seed {cut['seed'].iloc[0]}) and --strict "
                        f"refuses them; raise [run] max_steps (finished chunks stay in {out})")


def _finish(out: Path, partial, strict: bool, wall: float | None = None,
            final: Path | None = None) -> int:
    """Join every process's parts into the final tables and print the verdict, with this
    command's wall time (``wall``; a merge states the engine calls' time instead). A run built
    beside finished results (``final``) then takes their place."""
    from sweep.analysis.report import render, verdict
    from sweep.analysis.results import replace_folder, write_results
    from sweep.analysis.tables import aggregate, requests_table, runs_table
    from sweep.study.config import Limit

    meta = dict(partial.manifest["meta"])
    runs = checked(runs_table, partial.grid, partial.metrics, meta["seeds"])
    if strict:
        _refuse_truncated(runs, out)
    brief = [Limit(**lim) for lim in meta["brief"]]
    designs = aggregate(runs, brief, drawn=meta.get("drawn", ()))
    tables = {"runs": runs, "designs": designs}
    if meta["per_request"]:
        tables["requests"] = requests_table(partial.requests)
    # Engine calls overlap on worker threads: their seconds add up to more than the wall time.
    meta["seconds"] = round(sum(i["seconds"] for i in partial.infos), 3)
    meta["processes"] = len({i["process"] for i in partial.infos})
    write_results(out, tables, meta)
    if final is not None and final != out:
        replace_folder(out, final)
        out = final
    took = (f"in {wall:.1f} s ({len(runs) / max(wall, 1e-9):,.1f} sims/s)" if wall is not None
            else f"by engine calls of {meta['seconds']:.1f} s in all")
    print(f"{len(designs)} designs x {len(meta['seeds'])} seeds = {len(runs)} simulations "
          f"{took} on {meta['device']} -> {out}")
    print(render(verdict(designs, brief), brief, meta["axes"]))
    return 0


def cmd_merge(args) -> int:
    from sweep.analysis.results import PARTS, read_parts, staging

    final = Path(args.results)
    out = staging(final) if (staging(final) / PARTS).is_dir() else final  # a forced rerun's
    return _finish(out, checked(read_parts, out), args.strict, final=final)
