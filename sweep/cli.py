"""The ``sweep`` command: run a study, draw its frontier, report its verdict.

User errors (a bad config, a missing results folder, an unknown column) print one line and exit
with status 2, leaving no output behind.
"""
from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

EXIT_USAGE = 2


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


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sweep", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="simulate every design x workload x seed of a TOML config")
    run.add_argument("config", help="the TOML sweep definition")
    run.add_argument("--out", help="results folder (default: results/<name>)")
    run.add_argument("--seeds", type=_positive_int, help="seeds per design (overrides [run])")
    run.add_argument("--chunk-size", type=_positive_int, help="simulations per compiled batch")
    run.add_argument("--max-designs", type=_positive_int,
                     help="refuse grids with more designs than this (default 100000)")
    run.add_argument("--per-request", action="store_true",
                     help="also write every request's times (requests.parquet)")
    run.add_argument("--force", action="store_true", help="overwrite an existing results folder")
    run.add_argument("--quiet", action="store_true", help="no progress output")

    fr = sub.add_parser("frontier", help="Pareto-optimal designs of a results folder, and a plot")
    fr.add_argument("results", help="a folder written by 'sweep run'")
    fr.add_argument("--x", default="cost_per_mtok", help="first objective (minimised)")
    fr.add_argument("--y", default="p95_ttft_s", help="second objective (minimised)")
    fr.add_argument("--z", help="optional third objective; prefix '-' to maximise")
    fr.add_argument("--out", help="where to write frontier.parquet/.png/.svg (default: RESULTS)")

    rep = sub.add_parser("report", help="the verdict against the config's brief")
    rep.add_argument("results", help="a folder written by 'sweep run'")

    cal = sub.add_parser("calibrate", help="fit efficiency factors and overhead to measured "
                                           "pass times or request latencies")
    cal.add_argument("measurements", help="CSV: prefill_tokens, decode_seqs, context_tokens, "
                                          "seconds; or prompt_tokens, output_tokens, ttft_s, "
                                          "e2e_s (one request at a time)")
    cal.add_argument("--gpu", required=True, help="catalog GPU the measurements ran on")
    cal.add_argument("--model", required=True, help="catalog model, or a config.json path")
    cal.add_argument("--gpus", type=_positive_int, default=1, help="tensor-parallel degree")
    cal.add_argument("--weight-bits", type=_positive_int, default=16)
    cal.add_argument("--kv-bits", type=_positive_int, default=16)
    cal.add_argument("--out", help="profile to write (default: MEASUREMENTS with .profile.toml)")
    cal.add_argument("--force", action="store_true", help="overwrite an existing profile")
    return ap


def _cmd_run(args) -> int:
    from .config import load_study
    from .report import render, verdict
    from .results import write_results
    from .runner import aggregate, default_progress, device_description, plan_chunks, run_study

    import jax

    # Compiled engines persist across runs (the same shapes recompile in ~10 s each otherwise).
    jax.config.update("jax_compilation_cache_dir",
                      os.environ.get("SERVESWEEP_CACHE", str(Path.home() / ".cache" / "servesweep")))
    study = _checked(load_study, args.config, seeds=args.seeds, max_designs=args.max_designs)
    out = Path(args.out) if args.out else Path("results") / study.name
    if out.exists() and not args.force:
        raise UsageError(f"{out}: already exists; use --force to overwrite")
    _checked(plan_chunks, study, args.chunk_size)
    for cols, reason in study.skipped:
        print(f"skipped: {reason}", file=sys.stderr)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    res = run_study(study, chunk_size=args.chunk_size,
                    per_request=args.per_request or None,
                    progress=None if args.quiet else default_progress())
    designs = aggregate(res.runs, study.brief, drawn=list(study.uncertain))
    tables = {"runs": res.runs, "designs": designs}
    if res.requests is not None:
        tables["requests"] = res.requests
    meta = {
        "name": study.name, "config_path": study.path, "config_text": study.text,
        "axes": study.axes, "seeds": study.seeds,
        "brief": [{"key": lim.key, "min": lim.min, "max": lim.max} for lim in study.brief],
        "skipped": [reason for _, reason in study.skipped],
        "jax": jax.__version__, "device": device_description(), "started": started,
        "seconds": round(res.seconds, 3),
    }
    write_results(out, tables, meta, force=args.force)
    print(f"{len(study.points)} designs x {len(study.seeds)} seeds = {res.simulations} "
          f"simulations in {res.seconds:.1f} s ({res.simulations / max(res.seconds, 1e-9):,.1f} "
          f"sims/s) on {device_description()} -> {out}")
    print(render(verdict(designs, study.brief), study.brief, study.axes))
    return 0


def _cmd_frontier(args) -> int:
    from .frontier import frontier, plot_frontier
    from .results import load_results

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


def _cmd_report(args) -> int:
    from .report import render, verdict
    from .results import load_results

    res = _checked(load_results, args.results)
    print(render(verdict(res.designs, res.brief), res.brief, res.axes))
    return 0


def _cmd_calibrate(args) -> int:
    from .calibrate import FACTORS, fit, profile_text, read_measurements, roofline
    from .models import get_model, load_hf_config

    model = _checked(load_hf_config if args.model.endswith(".json") else get_model, args.model)
    gpu, tp = _checked(roofline, args.gpu, model, args.gpus, args.weight_bits, args.kv_bits)
    meas = Path(args.measurements)
    out = Path(args.out) if args.out else meas.with_suffix(".profile.toml")
    if out.exists() and not args.force:
        raise UsageError(f"{out}: already exists; use --force to overwrite")
    f = fit(tp, _checked(read_measurements, meas))
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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    command = {"run": _cmd_run, "frontier": _cmd_frontier, "report": _cmd_report,
               "calibrate": _cmd_calibrate}[args.command]
    try:
        return command(args)
    except UsageError as exc:
        print(f"sweep {args.command}: error: " + " ".join(str(exc).splitlines()), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("sweep: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into head or less, which closed early
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
