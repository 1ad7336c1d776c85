"""The ``sweep`` command: run a study, draw its frontier, report its verdict.

User errors (a bad config, a missing results folder, an unknown column) print one line and exit
with status 2, leaving no output behind. ``--strict`` turns simulations that hit their step
bound into exit status 3; an interrupted run (Ctrl-C, SIGTERM) keeps its finished chunks, says
how to resume and exits with 128 + the signal (130 for Ctrl-C).
"""
from __future__ import annotations

import argparse
import sys
import time

from sweep.commands.calibrate import cmd_calibrate, cmd_validate
from sweep.commands.capacity import cmd_capacity
from sweep.commands.common import EXIT_TRUNCATED, EXIT_USAGE
from sweep.commands.importing import cmd_import
from sweep.commands.plan import cmd_plan
from sweep.commands.report import cmd_export, cmd_frontier, cmd_report
from sweep.commands.run import cmd_merge, cmd_run
from sweep.errors import Truncated, UsageError, fit_line, one_line


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

    _add_run(sub)
    _add_capacity(sub)
    _add_results(sub)
    _add_fit(sub)
    _add_import(sub)
    _add_plan(sub)
    return ap


def _add_run(sub) -> None:
    """``sweep run``: simulate a config's grid."""
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


def _add_capacity(sub) -> None:
    """``sweep capacity``: each design's capacity and the cheapest fleet."""
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


def _add_results(sub) -> None:
    """``sweep merge``, ``frontier``, ``report`` and ``export``: read a results folder."""
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
    rep.add_argument("results", help="a folder written by 'sweep run', 'sweep capacity' or "
                                     "'sweep validate --out'")
    rep.add_argument("--html", action="store_true",
                     help="write the report as one self-contained HTML page (plots inline)")
    rep.add_argument("--out", help="the HTML file to write (default: RESULTS/report.html)")

    ex = sub.add_parser("export", help="the designs as vLLM benchmark results or CSV")
    ex.add_argument("results", help="a folder written by 'sweep run'")
    ex.add_argument("--format", required=True, choices=("vllm", "csv"),
                    help="vllm: one 'vllm bench serve --save-result' object per design (JSON "
                         "lines); csv: designs.parquet's rows")
    ex.add_argument("--out", help="file to write (default: RESULTS/export.jsonl or .csv)")
    ex.add_argument("--force", action="store_true", help="overwrite an existing file")


def _add_fit(sub) -> None:
    """``sweep calibrate`` and ``validate``: the model against measurements."""
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
    val.add_argument("--resume", action="store_true",
                     help="reuse the simulations an interrupted validate into the same --out "
                          "saved (without it they are simulated again)")
    val.add_argument("--quiet", action="store_true", help="no progress output")


def _add_import(sub) -> None:
    """``sweep import``: validation cases from benchmark result files."""
    imp = sub.add_parser("import", help="write one validation case per run of benchmark result "
                                        "files (vllm bench serve, sglang.bench_serving, "
                                        "GuideLLM, AIPerf)")
    imp.add_argument("kind", metavar="KIND", help="the files' tool: vllm, sglang, guidellm "
                                                  "(its JSON report) or aiperf "
                                                  "(profile_export_aiperf.json, or GenAI-Perf's)")
    imp.add_argument("files", nargs="+", metavar="FILE",
                     help="result files: one JSON object, or one a line")
    imp.add_argument("--out", help="folder to write the cases into (created)")
    imp.add_argument("--gpu", help="catalog GPU the runs ran on")
    imp.add_argument("--model", help="catalog model or config.json (default: the file's, where "
                                     "it is a catalog model)")
    imp.add_argument("--gpus", type=_positive_int, default=None,
                     help="tensor-parallel degree (default: server.toml's, else 1)")
    imp.add_argument("--set", action="append", metavar="KEY=VALUE",
                     help="any other [hardware] or [levers] key of the server (repeatable)")
    imp.add_argument("--force", action="store_true", help="replace existing case files")


def _add_plan(sub) -> None:
    """``sweep plan``: a capacity question in one line."""
    pl = sub.add_parser("plan", help="the cheapest fleet and best designs for a model, a GPU, "
                                      "lengths, p95 targets and a load, in one line")
    pl.add_argument("--model", help="catalog model or config.json (required)")
    pl.add_argument("--gpu", help="catalog GPU (required)")
    pl.add_argument("--gpus-max", default="8", help="GPUs per server at most (default 8; beyond "
                    "a node, whole nodes of pipeline stages)")
    pl.add_argument("--isl", help="mean prompt length, tokens (required)")
    pl.add_argument("--osl", help="mean output length, tokens (required)")
    pl.add_argument("--ttft-ms", help="p95 time to first token, ms (required)")
    pl.add_argument("--tpot-ms", help="p95 gap between tokens, ms (required)")
    pl.add_argument("--rate", help="requests/s, an open loop (or --concurrency)")
    pl.add_argument("--concurrency", help="clients, a closed loop (or --rate)")
    pl.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="any other [hardware] or [levers] key (repeatable); a searched lever "
                         "so set is searched at that value")
    pl.add_argument("--out", help="results folder (default: results/plan-<model>-<gpu>)")
    pl.add_argument("--write-config", metavar="FILE",
                    help="write the config it would run (for sweep capacity) and run nothing")
    pl.add_argument("--force", action="store_true",
                    help="replace an existing results folder or --write-config file")
    pl.add_argument("--quiet", action="store_true", help="no progress output")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.started = time.perf_counter()  # a command's wall time counts from here
    command = {"run": cmd_run, "capacity": cmd_capacity, "merge": cmd_merge,
               "frontier": cmd_frontier,
               "report": cmd_report, "export": cmd_export, "calibrate": cmd_calibrate,
               "validate": cmd_validate, "import": cmd_import,
               "plan": cmd_plan}[args.command]
    try:
        return command(args)
    except UsageError as exc:
        print(fit_line(f"sweep {args.command}: error: " + " ".join(str(exc).splitlines())),
              file=sys.stderr)
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
    except OSError as exc:  # the disk failed a read or write that no check foresaw
        where = f"{exc.filename}: " if exc.filename else ""
        print(fit_line(f"sweep {args.command}: error: {where}{one_line(exc.strerror or exc)}"),
              file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
