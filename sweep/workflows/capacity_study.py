"""A capacity study on disk: the search of ``workflows.capacity`` run in resumable rounds into a
results folder, and its tables. ``sweep capacity`` is ``capacity`` with its arguments from the
command line; ``sweep.capacity`` is the same from Python."""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import pandas as pd

from sweep.errors import UsageError, checked
from sweep.files import disk_refusal, out_folder, writable


@dataclass
class CapacityOutcome:
    """A capacity study's tables and metadata, and where they are."""

    capacity: pd.DataFrame  # one row per design: the most load it carries within the brief
    fleet: pd.DataFrame | None  # the cheapest fleets for the target (None without one)
    meta: dict
    folder: Path
    kept: bool = False  # a finished search of the same config, kept as it was
    simulations: int = 0  # run by this search, in all its rounds
    seconds: float = 0.0
    mixed: pd.DataFrame | None = None  # the cheapest mixed fleets ([capacity] mixed_fleets)


def capacity(config, out=None, *, seeds: int | None = None, target_rate: float | None = None,
             resume: bool = False, force: bool = False, progress=None,
             echo: Callable[[str], None] = lambda line: None) -> CapacityOutcome:
    """The most load each design of ``config`` carries within its brief, and the cheapest fleet
    for ``target_rate`` (default ``[capacity] target_rate``), into ``out`` (default
    ``results/<name>-capacity``). ``resume`` continues an interrupted search (a finished one of
    the same config is kept); ``force`` replaces a finished one once the new tables are
    complete. A refusal is a one-line ``UsageError`` raised before anything is written."""
    from sweep.analysis.ownership import undo
    from sweep.analysis.results import load_mixed, write_capacity_part
    from sweep.execution.runner import simulate_rows
    from sweep.study.config import load_study
    from sweep.workflows import capacity as search, capacity_checks

    t0 = time.perf_counter()
    study = checked(load_study, config, seeds=seeds)
    target = target_rate if target_rate is not None else study.capacity["target_rate"]
    checked(capacity_checks.check, study, target)
    out = out_folder(Path(out) if out else Path("results") / f"{study.name}-capacity")
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    identity = {"config_text": study.text, "seeds": study.seeds, "target_rate": target}
    existed = out.exists()
    work, saved = _capacity_out(out, resume, force, identity)
    if work is None:  # a finished search of the same config: kept, as read
        return CapacityOutcome(*saved, out, kept=True, mixed=load_mixed(out))
    limits = search.load_limits(study)
    rounds = [0 if saved is None else int(saved["round"].max()) + 1 if len(saved) else 0]

    def on_round(rows):
        write_capacity_part(work, rounds[0], rows.assign(round=rounds[0]))
        rounds[0] += 1

    def run(sub, skip, planned):
        echo(f"round {rounds[0] + 1}: {len(sub.points)} rates x {len(sub.seeds)} seeds"
             + (f", {len(skip)} of them run before or implied" if skip else ""))
        return simulate_rows(sub, skip, progress=progress, planned=planned)

    runner = search.Runner(study, run, saved=None if saved is None else saved.drop(
        columns="round"), on_round=on_round)
    try:
        found = search.search(study, runner, limits)
        return _finish(study, runner, found, limits, target, work, out,
                       {"started": started, "t0": t0})
    except (OSError, search.CapacityError) as exc:  # a full disk, a probe that sent nothing
        kept = (undo(work, out, existed) if saved is None else
                f"the finished rounds stay in {work / 'capacity-parts'} for --resume")
        if isinstance(exc, OSError):
            raise disk_refusal(exc, out, kept=kept) from None
        raise UsageError(f"{exc}; {kept}") from None


def _finish(study, runner, found, limits, target, work: Path, out: Path,
            clock: dict) -> CapacityOutcome:
    """The search's tables, written into ``work`` and put in the place of ``out``."""
    import jax

    from sweep.analysis.ownership import replace_folder
    from sweep.analysis.results import CAPACITY_PARTS, write_results
    from sweep.execution.runner import device_description
    from sweep.workflows import capacity as search, capacity_tables, mixed_fleets

    table = capacity_tables.table(study, runner, found, limits)
    tables = {"capacity": table}
    if target is not None:
        tables["fleet"] = capacity_tables.fleets(study, table, found, runner, target, limits)
        if study.capacity["mixed_fleets"]:
            tables["mixed_fleet"] = mixed_fleets.mixed_fleets(study, table, found, runner,
                                                              target, limits)
    tables["search"] = runner.table()
    seconds = time.perf_counter() - clock["t0"]
    meta = {"kind": "capacity", "name": study.name, "config_path": study.path,
            "config_text": study.text, "axes": [a for a in study.axes if a not in search.LOADS],
            "seeds": study.seeds,
            "brief": [{"key": lim.key, "min": lim.min, "max": lim.max} for lim in study.brief],
            "slo": study.slo, "capacity": study.capacity, "target_rate": target,
            "jax": jax.__version__, "device": device_description(),
            "started": clock["started"], "seconds": round(seconds, 3)}
    write_results(work, tables, meta, last="capacity")
    shutil.rmtree(work / CAPACITY_PARTS, ignore_errors=True)
    if work != out:
        replace_folder(work, out, last="capacity.parquet")
    return CapacityOutcome(table, tables.get("fleet"), meta, out,
                           simulations=len(tables["search"]), seconds=seconds,
                           mixed=tables.get("mixed_fleet"))


def _capacity_out(out: Path, resume: bool, force: bool, identity: dict):
    """Refuse a folder the search may not use; (the folder to search in, the saved rows of a
    resumed search or None). A finished search is kept: ``--resume`` of the same config finds
    it done (folder None, and its tables as read), and ``--force`` searches beside it
    (``staging``), replacing it only once the new tables are complete."""
    from sweep.analysis.ownership import clear, staging, undo
    from sweep.analysis.results import (CAPACITY_PARTS, load_capacity, read_capacity_parts,
                                        start_capacity_parts)

    finished = (out / "capacity.parquet").is_file() and not (out / CAPACITY_PARTS).is_dir()
    ours = finished or (out / CAPACITY_PARTS).is_dir()
    if force and out.is_dir() and any(out.iterdir()) and not ours:
        raise UsageError(f"{out}: not a servesweep capacity folder; --force replaces only those "
                         "(allowed: an empty, new or capacity results folder)")
    if (resume and not ours and out.is_dir() and any(out.iterdir())) or (
            out.exists() and not out.is_dir()):
        raise UsageError(f"{out}: not a servesweep capacity folder; allowed: an empty, new or "
                         "capacity results folder")
    if out.exists() and not force and not resume:
        raise UsageError(f"{out}: already exists; use --resume to continue an interrupted search "
                         "or --force to overwrite")
    if resume and finished:
        kept = checked(load_capacity, out)
        if {k: kept[2].get(k) for k in identity} != identity:
            raise UsageError(f"{out}: holds a finished search of another config, seeds or "
                             "target; allowed: --resume with the same config and options, or "
                             "--force to replace it")
        return None, kept
    if resume and (out / CAPACITY_PARTS).is_dir():
        manifest, rows = checked(read_capacity_parts, out)
        if not isinstance(manifest, dict) or manifest.get("identity") != identity:
            raise UsageError(f"{out}: holds a search of another config, seeds or target; "
                             "allowed: --resume with the same config and options, or --force to "
                             "start over")
        return out, rows
    work = staging(out) if force and finished else out
    writable(out)
    if work != out:
        writable(work.parent)
    existed = out.exists()
    try:  # a fresh search's start
        if work != out:
            shutil.rmtree(work, ignore_errors=True)
        elif force or resume:
            clear(work)
        start_capacity_parts(work, {"identity": identity})
    except OSError as exc:
        raise disk_refusal(exc, out, kept=undo(work, out, existed)) from None
    return work, None
