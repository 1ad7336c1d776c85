"""A config's grid simulated into a results folder: resumable, shared among processes and
machines, replaced only once complete. ``sweep run`` and ``sweep merge`` are these functions
with their arguments from the command line; ``sweep.run`` is ``run`` from Python."""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from sweep.errors import Truncated, UsageError, checked
from sweep.files import disk_refusal, out_folder, writable


@dataclass
class RunOutcome:
    """What a run left: its results once complete; else why not (a stop, or another process's
    share still running) and how much is saved."""

    folder: Path  # the results folder asked for
    results: object | None  # analysis.results.Results, once the tables are written
    saved: int  # simulations saved
    total: int
    work: Path  # where the parts are (``folder``, or beside it for a forced rerun)
    stopped: bool = False  # ``stop`` said so before every simulation was saved
    seconds: float = 0.0  # wall time of this call


def run(config, out=None, *, seeds: int | None = None, chunk_size: int | None = None,
        max_designs: int | None = None, per_request: bool = False, processes: int | None = None,
        resume: bool = False, force: bool = False, strict: bool = False, cluster=None,
        progress=None, stop: Callable[[], bool] = lambda: False,
        echo: Callable[[str], None] = lambda line: None) -> RunOutcome:
    """Simulate every design x seed of ``config`` into ``out`` (default ``results/<name>``).

    ``resume`` continues an interrupted run of the same config; ``force`` replaces finished
    results once the new ones are complete (anything else in ``out`` is refused). A refusal is a
    one-line ``UsageError`` (a ``ValueError``), raised before anything is written; ``strict``
    raises ``Truncated`` for a simulation that hit its step bound. ``stop()`` true ends the run
    after the chunks in flight, saved; ``echo`` hears the notices (skipped designs, a long
    run's estimate)."""
    import jax

    from sweep.analysis.ownership import staging
    from sweep.analysis.results import next_part, read_parts, write_part
    from sweep.execution.cluster import initialize
    from sweep.execution.planning import check_per_request
    from sweep.execution.runner import device_description, iter_chunks, plan_chunks
    from sweep.execution.workers import check as check_processes
    from sweep.execution.workers import default_processes
    from sweep.study.config import load_study

    t0 = time.perf_counter()
    study = checked(load_study, config, seeds=seeds, max_designs=max_designs)
    out = out_folder(Path(out) if out else Path("results") / study.name)
    per_request = per_request or study.per_request
    if cluster:
        initialize(cluster)
    checked(plan_chunks, study, chunk_size)
    checked(check_per_request, study, per_request)
    if processes is None:
        processes = default_processes(len(study.points) * len(study.seeds) // jax.process_count())
    checked(check_processes, processes)
    _say_when_long(study, config, echo)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    manifest = sweep_manifest(study, per_request, started, device_description())
    fresh = _check_out(out, resume, force, manifest)
    # A forced rerun of finished results runs beside them, replacing them once complete.
    final, out = out, staging(out) if force and (out / "runs.parquet").exists() else out
    writable(final)
    if out != final:
        writable(out.parent)
    existed = final.exists()
    for _, reason in study.skipped:
        echo(f"skipped: {reason}")
    chunks = None
    try:
        _prepare(out, force, fresh, study, beside=out != final)
        saved = read_parts(out, requests=False).metrics
        pid, total = jax.process_index(), len(study.points) * len(study.seeds)
        number = next_part(out, pid)
        info = {"started": started, "device": manifest["meta"]["device"], "jax": jax.__version__}
        chunks = iter_chunks(study, chunk_size=chunk_size, per_request=per_request,
                             skip=set(zip(saved["design"], saved["seed"])),
                             share=(pid, jax.process_count()), progress=progress, stop=stop,
                             processes=processes)
        done = len(saved)
        for chunk in chunks:
            if len(chunk.metrics):
                write_part(out, pid, number, chunk.metrics, chunk.requests,
                           {**info, "seconds": chunk.seconds})
                number += 1
                done += len(chunk.metrics)
            if strict:
                _refuse_truncated(chunk.metrics, out)
        outcome = RunOutcome(final, None, done, total, out, stopped=stop())
        if not outcome.stopped:
            outcome.saved = len(read_parts(out, requests=False).metrics)
            if outcome.saved == total:
                outcome.results = finish(out, strict, final=final)
    except OSError as exc:  # a full disk: one line, and the folder as it was
        alone = fresh is not None and jax.process_count() == 1  # a fresh run, its own folder
        raise _failed(exc, chunks, out, final, existed if alone else None) from None
    outcome.seconds = time.perf_counter() - t0
    return outcome


def _failed(exc: OSError, chunks, out: Path, final: Path, existed: bool | None) -> UsageError:
    """A write that failed during a run, as one line, once the calls in flight are done: a
    fresh run's output removed (``existed``: whether its folder was there before it), a
    resumed one's parts kept (``existed`` None)."""
    from sweep.analysis.ownership import undo

    if chunks is not None:
        chunks.close()
    return disk_refusal(exc, final, kept=undo(out, final, existed) if existed is not None else
                        f"the finished chunks stay in {out / 'parts'} for --resume")


def merge(results, strict: bool = False):
    """Join the parts every process of a run saved into the final tables (a forced rerun's,
    beside finished results, then takes their place); returns the ``Results``."""
    from sweep.analysis.ownership import PARTS, staging

    final = Path(results)
    out = staging(final) if (staging(final) / PARTS).is_dir() else final
    writable(out, "RESULTS")
    if out != final:
        writable(final.parent, "RESULTS")
    try:
        return finish(out, strict, final=final)
    except OSError as exc:
        raise disk_refusal(exc, final, "RESULTS", f"the parts stay in {out / PARTS}") from None


def finish(out: Path, strict: bool, final: Path | None = None):
    """Join every process's parts in ``out`` into the final tables, written and returned as
    ``Results`` (not read back); a run built beside finished results (``final``) then takes
    their place."""
    from sweep.analysis.ownership import replace_folder
    from sweep.analysis.results import Results, read_parts, write_results
    from sweep.analysis.tables import aggregate, requests_table, runs_table
    from sweep.study.config import Limit

    partial = checked(read_parts, out)
    meta = dict(partial.manifest["meta"])
    runs = checked(runs_table, partial.grid, partial.metrics, meta["seeds"])
    if strict:
        _refuse_truncated(runs, out)
    brief = [Limit(**lim) for lim in meta["brief"]]
    tables = {"runs": runs, "designs": aggregate(runs, brief, drawn=meta.get("drawn", ()),
                                                 tail_sd=meta.get("tail_sd"))}
    if meta["per_request"]:
        tables["requests"] = requests_table(partial.requests)
    # Engine calls overlap on worker threads: their seconds add up to more than the wall time.
    meta["seconds"] = round(sum(i["seconds"] for i in partial.infos), 3)
    meta["processes"] = len({i["process"] for i in partial.infos})
    write_results(out, tables, meta)
    if final is not None and final != out:
        replace_folder(out, final, last="runs.parquet")
    return Results(tables["runs"], tables["designs"], tables.get("requests"), meta)


#: Seconds above which a run says how long it will take before it starts.
LONG_RUN_S = 600


def _say_when_long(study, config, echo) -> None:
    """A run estimated above ``LONG_RUN_S`` says so before it starts: one zero too many should
    be heard at once."""
    from sweep.execution.planning import CPU_REQUESTS_PER_S, estimate_seconds

    sims = len(study.points) * len(study.seeds)
    seconds = estimate_seconds(study, sims)
    if seconds is not None and seconds > LONG_RUN_S:
        echo(f"sweep run: {sims} simulations of ~{seconds * CPU_REQUESTS_PER_S / sims:,.0f} "
             f"requests each: about {seconds / 60:,.0f} minutes on this CPU (at "
             f"{CPU_REQUESTS_PER_S:,} requests/s); Ctrl-C keeps what is done and --resume "
             f"continues it, or shrink {config}")


def sweep_manifest(study, per_request: bool, started: str, device: str) -> dict:
    """What a sweep runs (``identity``: a resumed run must match it) and the results' metadata."""
    import jax

    from sweep.execution.calls import errs
    from sweep.study import model_error

    return {
        "identity": {"config_text": study.text, "seeds": study.seeds, "per_request": per_request},
        "meta": {
            "name": study.name, "config_path": study.path, "config_text": study.text,
            "axes": study.axes, "seeds": study.seeds,
            "brief": [{"key": lim.key, "min": lim.min, "max": lim.max} for lim in study.brief],
            "skipped": [reason for _, reason in study.skipped], "per_request": per_request,
            "drawn": list(study.uncertain),
            "tail_sd": model_error.tails() if errs(study) else {},
            "jax": jax.__version__, "device": device, "started": started,
        },
    }


def _check_out(out: Path, resume: bool, force: bool, manifest: dict) -> dict | None:
    """Refuse an output folder the run may not use; the manifest to start with, or None when
    resuming a matching partial run."""
    from sweep.analysis.ownership import is_results
    from sweep.analysis.results import read_manifest

    if force and out.is_dir() and any(out.iterdir()) and not is_results(out):
        raise UsageError(f"{out}: not a servesweep results folder; --force replaces results "
                         "only there (allowed: an empty, new or results folder)")
    if not out.exists() or force:
        return manifest
    if not resume:
        raise UsageError(f"{out}: already exists; use --resume to continue an interrupted sweep "
                         "or --force to overwrite")
    old = checked(read_manifest, out)
    if old.get("identity") != manifest["identity"]:
        raise UsageError(f"{out}: holds a sweep of another config, seeds or --per-request; "
                         "allowed: --resume with the same config and options, or --force to "
                         "start over")
    return None


def _prepare(out: Path, force: bool, manifest: dict | None, study, beside: bool) -> None:
    """Start the parts of a fresh run (process 0; the others wait for it): ``force`` removes
    servesweep's entries of ``out`` (all of it, where the run is ``beside`` finished results)."""
    import jax

    from sweep.analysis.ownership import clear
    from sweep.analysis.results import start_parts
    from sweep.analysis.tables import grid_table
    from sweep.execution.cluster import barrier

    barrier("servesweep: output checked")
    if jax.process_index() == 0 and manifest is not None:
        if force and beside:
            shutil.rmtree(out, ignore_errors=True)
        elif force:
            clear(out)
        start_parts(out, manifest, grid_table(study))
    barrier("servesweep: output ready")


def _refuse_truncated(runs, out: Path) -> None:
    cut = runs[runs["truncated"].astype(bool)]
    if len(cut):
        raise Truncated(f"{len(cut)} simulation(s) hit their step bound (e.g. design "
                        f"{cut['design'].iloc[0]} seed {cut['seed'].iloc[0]}) and --strict "
                        f"refuses them; raise [run] max_steps (finished chunks stay in {out})")

