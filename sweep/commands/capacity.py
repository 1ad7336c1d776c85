"""``sweep capacity``: the most load each design carries within the brief, and the cheapest fleet
for a target load, searched in resumable rounds."""
from __future__ import annotations

import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from sweep.commands.common import UsageError, checked, device, out_folder, use_executable_cache


def cmd_capacity(args) -> int:
    import jax

    from sweep.analysis.report import render_capacity
    from sweep.analysis.results import (CAPACITY_PARTS, load_capacity, replace_folder,
                                        write_capacity_part, write_results)
    from sweep.execution.progress import default_progress
    from sweep.execution.runner import simulate_rows
    from sweep.study.config import load_study
    from sweep.workflows import capacity, capacity_tables

    use_executable_cache()
    study = checked(load_study, args.config, seeds=args.seeds)
    target = args.target_rate if args.target_rate is not None else study.capacity["target_rate"]
    checked(capacity.check, study, target)
    out = out_folder(Path(args.out) if args.out else Path("results") / f"{study.name}-capacity")
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    identity = {"config_text": study.text, "seeds": study.seeds, "target_rate": target}
    work, saved = _capacity_out(out, args, identity)
    if work is None:  # a finished search of the same config: kept
        cap, fleet, meta = checked(load_capacity, out)
        print(f"{out}: the search is complete; its tables are kept (--force runs it again)")
        print(render_capacity(cap, fleet, meta))
        return 0
    limits = capacity.load_limits(study)
    progress = None if args.quiet else default_progress()
    rounds = [0 if saved is None else int(saved["round"].max()) + 1 if len(saved) else 0]

    def on_round(rows):
        write_capacity_part(work, rounds[0], rows.assign(round=rounds[0]))
        rounds[0] += 1

    def run(sub, skip, planned):
        if not args.quiet:
            print(f"round {rounds[0] + 1}: {len(sub.points)} rates x {len(sub.seeds)} seeds"
                  + (f", {len(skip)} of them run before or implied" if skip else ""),
                  file=sys.stderr)
        return simulate_rows(sub, skip, progress=progress, planned=planned)

    runner = capacity.Runner(study, run, saved=None if saved is None else saved.drop(
        columns="round"), on_round=on_round)
    found = capacity.search(study, runner, limits)
    table = capacity_tables.table(study, runner, found, limits)
    tables = {"capacity": table, "search": runner.table()}
    if target is not None:
        tables["fleet"] = capacity_tables.fleets(study, table, found, runner, target, limits)
    seconds = time.perf_counter() - args.started
    meta = {"kind": "capacity", "name": study.name, "config_path": study.path,
            "config_text": study.text, "axes": [a for a in study.axes if a != "arrival_rate"],
            "seeds": study.seeds,
            "brief": [{"key": lim.key, "min": lim.min, "max": lim.max} for lim in study.brief],
            "slo": study.slo, "capacity": study.capacity, "target_rate": target,
            "jax": jax.__version__, "device": device(), "started": started,
            "seconds": round(seconds, 3)}
    write_results(work, tables, meta, last="capacity")
    shutil.rmtree(work / CAPACITY_PARTS, ignore_errors=True)
    if work != out:
        replace_folder(work, out)
    print(f"{len(table)} designs x {len(study.seeds)} seeds: {len(tables['search'])} simulations "
          f"in {seconds:.1f} s on {meta['device']} -> {out}")
    print(render_capacity(table, tables.get("fleet"), meta))
    return 0


def _capacity_out(out: Path, args, identity: dict):
    """Refuse a folder the search may not use; (the folder to search in, the saved rows of a
    resumed search or None). A finished search is kept: ``--resume`` of the same config finds
    it done (folder None), and ``--force`` searches beside it (``staging``), replacing it only
    once the new tables are complete."""
    from sweep.analysis.results import (CAPACITY_PARTS, load_capacity, read_capacity_parts,
                                        staging, start_capacity_parts)

    finished = (out / "capacity.parquet").is_file() and not (out / CAPACITY_PARTS).is_dir()
    ours = finished or (out / CAPACITY_PARTS).is_dir()
    if args.force and out.is_dir() and any(out.iterdir()) and not ours:
        raise UsageError(f"{out}: not a servesweep capacity folder; --force replaces only those "
                         "(allowed: an empty, new or capacity results folder)")
    if (args.resume and not ours and out.is_dir() and any(out.iterdir())) or (
            out.exists() and not out.is_dir()):
        raise UsageError(f"{out}: not a servesweep capacity folder; allowed: an empty, new or "
                         "capacity results folder")
    if out.exists() and not args.force and not args.resume:
        raise UsageError(f"{out}: already exists; use --resume to continue an interrupted search "
                         "or --force to overwrite")
    if args.resume and finished:
        meta = checked(load_capacity, out)[2]
        if {k: meta.get(k) for k in identity} != identity:
            raise UsageError(f"{out}: holds a finished search of another config, seeds or "
                             "target; allowed: --resume with the same config and options, or "
                             "--force to replace it")
        return None, None
    if args.resume and (out / CAPACITY_PARTS).is_dir():
        manifest, rows = checked(read_capacity_parts, out)
        if not isinstance(manifest, dict) or manifest.get("identity") != identity:
            raise UsageError(f"{out}: holds a search of another config, seeds or target; "
                             "allowed: --resume with the same config and options, or --force to "
                             "start over")
        return out, rows
    work = staging(out) if args.force and finished else out
    try:
        if work.exists() and (args.force or args.resume):
            shutil.rmtree(work)
        start_capacity_parts(work, {"identity": identity})
    except OSError as exc:
        raise UsageError(f"{out}: cannot create the results folder: "
                         f"{exc.strerror or exc}") from None
    return work, None
