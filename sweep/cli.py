"""The ``sweep`` command: run a study, draw its frontier, report its verdict.

User errors (a bad config, a missing results folder, an unknown column) print one line and exit
with status 2, leaving no output behind. ``--strict`` turns simulations that hit their step
bound into exit status 3; an interrupted run (Ctrl-C, SIGTERM) keeps its finished chunks, says
how to resume and exits with 128 + the signal (130 for Ctrl-C).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

EXIT_USAGE = 2
EXIT_TRUNCATED = 3


class UsageError(Exception):
    """Something the user can fix; printed as one line, exit status 2."""


def _checked(fn, *args, **kwargs):
    """Run an input-validating call; its ValueError (ConfigError, ResultsError, a lever's own
    check) becomes a UsageError. Errors anywhere else keep their traceback: they are bugs."""
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sweep", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="simulate every design x workload x seed of a TOML config")
    run.add_argument("config", help="the TOML sweep definition")
    run.add_argument("--out", help="results folder (default: results/<name>)")
    run.add_argument("--seeds", type=_positive_int, help="seeds per design (overrides [run])")
    run.add_argument("--chunk-size", type=_positive_int,
                     help="simulations in flight per device (default: what memory allows)")
    run.add_argument("--max-designs", type=_positive_int,
                     help="refuse grids with more designs than this (default 100000)")
    run.add_argument("--per-request", action="store_true",
                     help="also write every request's times (requests.parquet)")
    run.add_argument("--processes", type=_positive_int,
                     help="worker processes, each pinned to one CPU core (default: one per core, "
                          "up to 4, for 1,000 simulations or more on a CPU; else 1)")
    again = run.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true",
                       help="continue the interrupted sweep in --out: simulate only what is missing")
    again.add_argument("--force", action="store_true", help="overwrite an existing results folder")
    run.add_argument("--strict", action="store_true",
                     help=f"a simulation that hits its step bound is an error (exit "
                          f"{EXIT_TRUNCATED})")
    run.add_argument("--quiet", action="store_true", help="no progress output")
    run.add_argument("--coordinator", help="HOST:PORT of process 0 of a multi-process sweep "
                                           "(default: $SERVESWEEP_COORDINATOR; found inside srun)")
    run.add_argument("--num-processes", type=_positive_int,
                     help="processes sharing the sweep (default: $SERVESWEEP_NUM_PROCESSES, "
                          "$SLURM_NTASKS, else 1)")
    run.add_argument("--process-id", type=_non_negative_int,
                     help="this process, 0..N-1 (default: $SERVESWEEP_PROCESS_ID, "
                          "$SLURM_PROCID, $JOB_COMPLETION_INDEX)")

    cap = sub.add_parser("capacity", help="the most load each design carries within the brief, "
                                          "and the cheapest fleet for a target load")
    cap.add_argument("config", help="the TOML sweep definition (with a [brief])")
    cap.add_argument("--out", help="results folder (default: results/<name>-capacity)")
    cap.add_argument("--seeds", type=_positive_int, help="seeds per design (overrides [run])")
    cap.add_argument("--target-rate", type=float,
                     help="requests/s to size fleets for (overrides [capacity] target_rate)")
    again = cap.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true",
                       help="continue the interrupted search in --out: simulate only what is "
                            "missing")
    again.add_argument("--force", action="store_true", help="overwrite an existing results folder")
    cap.add_argument("--quiet", action="store_true", help="no progress output")

    mg = sub.add_parser("merge", help="join the parts every process wrote into the final tables")
    mg.add_argument("results", help="a folder written by 'sweep run' (by one or more processes)")
    mg.add_argument("--strict", action="store_true",
                    help=f"a simulation that hit its step bound is an error (exit {EXIT_TRUNCATED})")

    fr = sub.add_parser("frontier", help="Pareto-optimal designs of a results folder, and a plot")
    fr.add_argument("results", help="a folder written by 'sweep run' or 'sweep capacity'")
    fr.add_argument("--x", help="first objective, minimised (default: cost_per_mtok; of a "
                                "capacity result: usd_per_hour)")
    fr.add_argument("--y", help="second objective, minimised; prefix '-' to maximise (default: "
                                "p95_ttft_s; of a capacity result: -max_rate)")
    fr.add_argument("--z", help="optional third objective; prefix '-' to maximise")
    fr.add_argument("--out", help="where to write frontier.parquet/.png/.svg (default: RESULTS)")

    rep = sub.add_parser("report", help="the verdict against the config's brief")
    rep.add_argument("results", help="a folder written by 'sweep run' or 'sweep capacity'")

    cal = sub.add_parser("calibrate", help="fit efficiency factors and overhead to measured "
                                           "pass times or request latencies")
    cal.add_argument("measurements", help="CSV: prefill_tokens, decode_seqs, context_tokens, "
                                          "seconds; or prompt_tokens, output_tokens, ttft_s, "
                                          "e2e_s (one request at a time); or Splitwise's "
                                          "perf_model.csv; or validation cases (a .toml or a "
                                          "folder) of measured serving runs")
    cal.add_argument("--gpu", help="catalog GPU the measurements ran on (cases name it)")
    cal.add_argument("--model", help="catalog model, or a config.json path (not with cases)")
    cal.add_argument("--gpus", type=_positive_int, default=1, help="tensor-parallel degree")
    cal.add_argument("--weight-bits", type=_positive_int, default=16)
    cal.add_argument("--kv-bits", type=_positive_int, default=16)
    cal.add_argument("--measured-model",
                     help="of a Splitwise perf_model.csv with several models: the model column's "
                          "value to fit")
    cal.add_argument("--duration", type=float, default=120.0,
                     help="cases only: seconds of each case's arrivals simulated (default 120)")
    cal.add_argument("--seeds", type=_positive_int, help="cases only: seeds (default: [run])")
    cal.add_argument("--out", help="profile to write (default: MEASUREMENTS with .profile.toml)")
    cal.add_argument("--force", action="store_true", help="overwrite an existing profile")

    val = sub.add_parser("validate", help="compare predictions with measured runs (cases: "
                                          "configs with a [measured] table)")
    val.add_argument("cases", nargs="+", metavar="CASE",
                     help="a .toml case, or a folder of them (every *.toml in it and its "
                          "subfolders)")
    val.add_argument("--out", help="where to write validation.parquet/.png/.svg (default: "
                                   "results/validation)")
    val.add_argument("--seeds", type=_positive_int, help="seeds per case (overrides [run])")
    val.add_argument("--quiet", action="store_true", help="no progress output")
    return ap


class Truncated(Exception):
    """--strict: a simulation hit its step bound; exit status 3."""


def _cmd_run(args) -> int:
    import jax

    from sweep.analysis.results import PARTS, next_part, read_parts, write_part
    from sweep.execution import executables
    from sweep.execution.cluster import barrier, initialize, resolve
    from sweep.execution.progress import default_progress
    from sweep.execution.runner import iter_chunks, plan_chunks
    from sweep.execution.workers import check as check_processes
    from sweep.execution.workers import default_processes
    from sweep.study.config import load_study

    # Compiled executables persist across runs (the same shapes recompile in ~10 s each
    # otherwise). Not JAX's persistent cache as well: what it loads cannot be written again.
    cache = os.environ.get("SERVESWEEP_CACHE", Path.home() / ".cache" / "servesweep")
    executables.use(Path(cache) / "executables")
    cluster = _checked(resolve, args.coordinator, args.num_processes, args.process_id, os.environ)
    study = _checked(load_study, args.config, seeds=args.seeds, max_designs=args.max_designs)
    out = Path(args.out) if args.out else Path("results") / study.name
    per_request = args.per_request or study.per_request
    if cluster:
        initialize(cluster)
    _checked(plan_chunks, study, args.chunk_size)
    processes = args.processes or default_processes(
        len(study.points) * len(study.seeds) // jax.process_count())
    _checked(check_processes, processes)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    fresh = _check_out(out, args, _manifest(study, per_request, started))
    barrier("servesweep: output checked")
    if jax.process_index() == 0:
        _prepare_out(out, args.force, fresh, study, per_request, started)
    barrier("servesweep: output ready")
    for cols, reason in study.skipped:
        print(f"skipped: {reason}", file=sys.stderr)
    saved = read_parts(out, requests=False).metrics
    pid, total = jax.process_index(), len(study.points) * len(study.seeds)
    number = next_part(out, pid)
    info = {"started": started, "device": _device(), "jax": jax.__version__}
    stop = _Stop()
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
            print(f"sweep run: interrupted; {done} of {total} simulations saved in "
                  f"{out / PARTS}; resume with: sweep run {args.config} --out {out} --resume",
                  file=sys.stderr)
            return 128 + stop.signum
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    saved = read_parts(out, requests=False).metrics
    if len(saved) < total:
        print(f"process {pid}: its share is done ({len(saved)} of {total} simulations saved in "
              f"{out / PARTS}); the last process to finish writes the tables, or run "
              f"'sweep merge {out}' when all are done")
        return 0
    return _finish(out, read_parts(out), args.strict, wall=time.perf_counter() - args.started)


class _Stop:
    """SIGINT/SIGTERM handler: let the chunks in flight finish and be saved, then stop; a second
    signal stops at once (the saved chunks stay)."""

    def __init__(self):
        self.signum = None

    def __call__(self, signum, frame):
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum
        print("sweep run: stopping after the chunks in flight (again to stop now)",
              file=sys.stderr)


def _device() -> str:
    from sweep.execution.runner import device_description

    return device_description()


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
            "jax": jax.__version__, "device": _device(), "started": started,
        },
    }


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
    old = _checked(read_manifest, out)
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


def _finish(out: Path, partial, strict: bool, wall: float | None = None) -> int:
    """Join every process's parts into the final tables and print the verdict, with this
    command's wall time (``wall``; a merge states the engine calls' time instead)."""
    from sweep.analysis.report import render, verdict
    from sweep.analysis.results import write_results
    from sweep.analysis.tables import aggregate, requests_table, runs_table
    from sweep.study.config import Limit

    meta = dict(partial.manifest["meta"])
    runs = _checked(runs_table, partial.grid, partial.metrics, meta["seeds"])
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
    took = (f"in {wall:.1f} s ({len(runs) / max(wall, 1e-9):,.1f} sims/s)" if wall is not None
            else f"by engine calls of {meta['seconds']:.1f} s in all")
    print(f"{len(designs)} designs x {len(meta['seeds'])} seeds = {len(runs)} simulations "
          f"{took} on {meta['device']} -> {out}")
    print(render(verdict(designs, brief), brief, meta["axes"]))
    return 0


def _cmd_capacity(args) -> int:
    import jax

    from sweep.analysis import capacity
    from sweep.analysis.report import render_capacity
    from sweep.analysis.results import CAPACITY_PARTS, write_capacity_part, write_results
    from sweep.execution import executables
    from sweep.execution.progress import default_progress
    from sweep.execution.runner import run_study
    from sweep.study.config import load_study

    cache = os.environ.get("SERVESWEEP_CACHE", Path.home() / ".cache" / "servesweep")
    executables.use(Path(cache) / "executables")
    study = _checked(load_study, args.config, seeds=args.seeds)
    target = args.target_rate if args.target_rate is not None else study.capacity["target_rate"]
    _checked(capacity.check, study, target)
    out = Path(args.out) if args.out else Path("results") / f"{study.name}-capacity"
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    identity = {"config_text": study.text, "seeds": study.seeds, "target_rate": target}
    saved = _capacity_out(out, args, identity)
    limits = capacity.load_limits(study)
    progress = None if args.quiet else default_progress()
    rounds = [0 if saved is None else int(saved["round"].max()) + 1 if len(saved) else 0]

    def on_round(rows):
        write_capacity_part(out, rounds[0], rows.assign(round=rounds[0]))
        rounds[0] += 1

    def run(sub, shape_for):
        if not args.quiet:
            print(f"round {rounds[0] + 1}: {len(sub.points)} rates x {len(sub.seeds)} seeds",
                  file=sys.stderr)
        return run_study(sub, progress=progress, shape_for=shape_for).runs

    runner = capacity.Runner(study, run, saved=None if saved is None else saved.drop(
        columns="round"), on_round=on_round)
    found = capacity.search(study, runner, limits)
    table = capacity.table(study, runner, found, limits)
    tables = {"capacity": table, "search": runner.table()}
    if target is not None:
        tables["fleet"] = capacity.fleets(study, table, found, runner, target, limits)
    seconds = time.perf_counter() - args.started
    meta = {"kind": "capacity", "name": study.name, "config_path": study.path,
            "config_text": study.text, "axes": [a for a in study.axes if a != "arrival_rate"],
            "seeds": study.seeds,
            "brief": [{"key": lim.key, "min": lim.min, "max": lim.max} for lim in study.brief],
            "slo": study.slo, "capacity": study.capacity, "target_rate": target,
            "jax": jax.__version__, "device": _device(), "started": started,
            "seconds": round(seconds, 3)}
    write_results(out, tables, meta, last="capacity")
    shutil.rmtree(out / CAPACITY_PARTS, ignore_errors=True)
    print(f"{len(table)} designs x {len(study.seeds)} seeds: {len(tables['search'])} simulations "
          f"in {seconds:.1f} s on {meta['device']} -> {out}")
    print(render_capacity(table, tables.get("fleet"), meta))
    return 0


def _capacity_out(out: Path, args, identity: dict):
    """Refuse a folder the search may not use; the saved rows of a resumed search (None when
    starting afresh)."""
    from sweep.analysis.results import CAPACITY_PARTS, read_capacity_parts, start_capacity_parts

    ours = (out / "capacity.parquet").exists() or (out / CAPACITY_PARTS).is_dir()
    if args.force and out.is_dir() and any(out.iterdir()) and not ours:
        raise UsageError(f"{out}: not a servesweep capacity folder; --force deletes only those "
                         "(allowed: an empty, new or capacity results folder)")
    if (args.resume and not ours and out.is_dir() and any(out.iterdir())) or (
            out.exists() and not out.is_dir()):
        raise UsageError(f"{out}: not a servesweep capacity folder; allowed: an empty, new or "
                         "capacity results folder")
    if out.exists() and not args.force and not args.resume:
        raise UsageError(f"{out}: already exists; use --resume to continue an interrupted search "
                         "or --force to overwrite")
    if args.resume and (out / CAPACITY_PARTS).is_dir():
        manifest, rows = _checked(read_capacity_parts, out)
        if manifest.get("identity") != identity:
            raise UsageError(f"{out}: holds a search of another config, seeds or target; "
                             "allowed: --resume with the same config and options, or --force to "
                             "start over")
        return rows
    try:
        if out.exists() and (args.force or args.resume):
            shutil.rmtree(out)
        start_capacity_parts(out, {"identity": identity})
    except OSError as exc:
        raise UsageError(f"{out}: cannot create the results folder: "
                         f"{exc.strerror or exc}") from None
    return None


def _cmd_merge(args) -> int:
    from sweep.analysis.results import read_parts

    return _finish(Path(args.results), _checked(read_parts, args.results), args.strict)


def _cmd_frontier(args) -> int:
    from sweep.analysis.frontier import frontier, plot_frontier
    from sweep.analysis.results import load_results

    if (Path(args.results) / "capacity.parquet").exists():
        return _capacity_frontier(args)
    args.x, args.y = args.x or "cost_per_mtok", args.y or "p95_ttft_s"
    res = _checked(load_results, args.results)
    objectives = [args.x, args.y] + ([args.z] if args.z else [])
    front = _checked(frontier, res.designs, objectives)
    out = Path(args.out) if args.out else Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    front.to_parquet(out / "frontier.parquet", index=False)
    paths = plot_frontier(res.designs, args.x, args.y, res.brief, out / "frontier.png",
                          out / "frontier.svg", title=res.meta.get("name"))
    shown = ["design"] + res.axes + [o.lstrip("-") for o in objectives] + ["p_pass"]
    with_cols = [c for c in dict.fromkeys(shown) if c in front.columns]
    print(front[with_cols].to_string(index=False))
    print(f"{len(front)} of {len(res.designs)} designs on the frontier -> "
          f"{out / 'frontier.parquet'}, {', '.join(map(str, paths))}")
    return 0


def _capacity_frontier(args) -> int:
    """Max rate against $/hour (or the objectives given) of the designs that carry load."""
    from sweep.analysis.frontier import frontier, plot_frontier
    from sweep.analysis.results import load_capacity

    cap, _, meta = _checked(load_capacity, args.results)
    x, y = args.x or "usd_per_hour", args.y or "-max_rate"
    objectives = [x, y] + ([args.z] if args.z else [])
    carrying = cap[cap["max_rate"] > 0].reset_index(drop=True)
    front = _checked(frontier, carrying, objectives)
    out = Path(args.out) if args.out else Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    front.to_parquet(out / "frontier.parquet", index=False)
    paths = plot_frontier(carrying, x, y, [], out / "frontier.png",
                          out / "frontier.svg",
                          title=f"{meta.get('name')}: capacity of the {len(carrying)} designs "
                                "that carry load")
    shown = ["design"] + meta["axes"] + [o.lstrip("-") for o in objectives]
    print(front[[c for c in dict.fromkeys(shown) if c in front.columns]].to_string(index=False))
    print(f"{len(front)} of {len(carrying)} designs on the frontier -> "
          f"{out / 'frontier.parquet'}, {', '.join(map(str, paths))}")
    return 0


def _cmd_report(args) -> int:
    from sweep.analysis.report import render, render_capacity, verdict
    from sweep.analysis.results import load_capacity, load_results

    if (Path(args.results) / "capacity.parquet").exists():
        cap, fleet, meta = _checked(load_capacity, args.results)
        print(render_capacity(cap, fleet, meta))
        return 0
    res = _checked(load_results, args.results)
    print(render(verdict(res.designs, res.brief), res.brief, res.axes))
    return 0


def _cmd_calibrate(args) -> int:
    from sweep.analysis.calibrate import FACTORS, fit, profile_text, read_measurements, roofline
    from sweep.physics.models import get_model, load_hf_config

    meas = Path(args.measurements)
    if meas.is_dir() or meas.suffix == ".toml":
        return _calibrate_serving(args, meas)
    for flag in ("gpu", "model"):
        if getattr(args, flag) is None:
            raise UsageError(f"--{flag}: required for measured pass times or latencies; allowed: "
                             "--gpu NAME --model NAME (not with validation cases)")
    model = _checked(load_hf_config if args.model.endswith(".json") else get_model, args.model)
    gpu, tp = _checked(roofline, args.gpu, model, args.gpus, args.weight_bits, args.kv_bits)
    out = Path(args.out) if args.out else meas.with_suffix(".profile.toml")
    if out.exists() and not args.force:
        raise UsageError(f"{out}: already exists; use --force to overwrite")
    f = fit(tp, _checked(read_measurements, meas, gpu.name, args.gpus, args.measured_model), gpu)
    print(f"{model.name} on {args.gpus} x {gpu.name}, {args.weight_bits}-bit weights: "
          f"compute_efficiency {f.compute_efficiency:.4f}, bandwidth_efficiency "
          f"{f.bandwidth_efficiency:.4f}, overhead_ms {f.overhead_ms:.4f}")
    print(f"fit: {f.n} measurements, R^2 {f.r2:.5f}, RMSE {f.rmse_ms:.4g} ms, max relative "
          f"error {100 * f.max_relative_error:.2f}%")
    for k in (k for k in FACTORS if k not in f.identified):
        print(f"note: no measurement depends on {k}; it keeps its default")
    tmp = out.with_name(f".{out.name}.tmp")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text(profile_text(f, gpu.name, model.name, args.gpus, args.weight_bits,
                                args.kv_bits, meas.name))
    tmp.replace(out)
    print(f"-> {out} (name it in a config: [hardware] profile = \"{out.name}\")")
    return 0


def _calibrate_serving(args, meas: Path) -> int:
    """``sweep calibrate CASES``: the factors that best replay measured serving runs."""
    from sweep.analysis.calibrate import (SERVING_KEYS, fit_serving, serving_profile_text,
                                          serving_table)
    from sweep.analysis.validate import load_cases

    if not 0 < args.duration < float("inf"):
        raise UsageError(f"--duration: {args.duration}; allowed: seconds > 0")
    cases = _checked(load_cases, [meas], args.seeds)
    gpus = sorted({c.study.points[0].columns["gpu"] for c in cases})
    if len(gpus) != 1 or (args.gpu is not None and args.gpu != gpus[0]):
        raise UsageError(f"{meas}: cases on {', '.join(gpus)}; allowed: cases of one GPU"
                         + (f" ({args.gpu}, as --gpu says)" if args.gpu else ""))
    need = ("mean_e2e_s", "p50_e2e_s", "p95_e2e_s", "mean_ttft_s", "p50_ttft_s", "p95_ttft_s")
    for c in cases:
        missing = [m for m in need if m not in c.study.measured]
        if missing:
            raise UsageError(f"{c.path}: measured: lacks {', '.join(missing)}; allowed: cases "
                             f"measuring {', '.join(need)}")
    out = Path(args.out) if args.out else meas.with_suffix(".profile.toml")
    if out.exists() and not args.force:
        raise UsageError(f"{out}: already exists; use --force to overwrite")
    f = fit_serving(serving_table([c.study for c in cases], args.duration))
    print(f"{gpus[0]}, {f.cases} serving cases: " + ", ".join(
        f"{k} {f.factors[k]:.4g}" for k in SERVING_KEYS))
    print(f"fit: RMS relative error {100 * f.rms_e2e_error:.2f}% (end to end), "
          f"{100 * f.rms_ttft_error:.2f}% (TTFT)")
    tmp = out.with_name(f".{out.name}.tmp")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text(serving_profile_text(f, gpus[0], meas.name))
    tmp.replace(out)
    print(f"-> {out} (name it in a config: [hardware] profile = \"{out.name}\")")
    return 0


def _cmd_validate(args) -> int:
    from sweep.analysis.validate import (DEFAULT_OUT, check_out, compare, load_cases, metadata,
                                         overloaded, plan, render, simulate, write)
    from sweep.execution import executables
    from sweep.execution.progress import default_progress

    cache = os.environ.get("SERVESWEEP_CACHE", Path.home() / ".cache" / "servesweep")
    executables.use(Path(cache) / "executables")
    out = Path(args.out) if args.out else DEFAULT_OUT
    cases = _checked(load_cases, args.cases, seeds=args.seeds)
    _checked(check_out, out)
    runs = _checked(plan, cases)
    if not args.quiet:
        print(f"sweep validate: {len(cases)} cases, "
              f"{sum(len(c.study.seeds) for c in cases)} simulations", file=sys.stderr)
    sims = simulate(cases, runs, None if args.quiet else default_progress())
    table = compare(cases, sims)
    print(render(table, overloaded(cases, sims)))
    try:
        paths = write(out, table, metadata(cases))
    except OSError as exc:
        raise UsageError(f"{out}: cannot write the report: {exc.strerror or exc}") from None
    print(f"-> {', '.join(paths)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.started = time.perf_counter()  # a command's wall time counts from here
    command = {"run": _cmd_run, "capacity": _cmd_capacity, "merge": _cmd_merge,
               "frontier": _cmd_frontier,
               "report": _cmd_report, "calibrate": _cmd_calibrate,
               "validate": _cmd_validate}[args.command]
    try:
        return command(args)
    except UsageError as exc:
        print(f"sweep {args.command}: error: " + " ".join(str(exc).splitlines()), file=sys.stderr)
        return EXIT_USAGE
    except Truncated as exc:
        print(f"sweep {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_TRUNCATED
    except KeyboardInterrupt:
        print("sweep: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into head or less, which closed early
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
