"""``sweep validate``: the simulator's predictions against measurements of real servers.

A validation case is an ordinary config of one design (no arrays in ``[hardware]``,
``[model]``, ``[workload]`` or ``[levers]``) with a ``[measured]`` table: what the real server
measured under that workload, by metric name (any metric of the results)::

    [measured]
    p50_ttft_s = 0.0268
    p95_e2e_s = 2.29
    mean_tpot_ms = 8.19

A bool metric states a flag instead: ``unstable = true`` says the real server was overloaded,
and the simulation must say so too (a seed counts as flagged when it is ``unstable``, has
``unfinished`` requests or is ``truncated``); ``unstable = false`` says it must not.
``sweep run`` ignores ``[measured]``.

Usage::

    sweep validate CASE... [--out DIR] [--seeds N] [--quiet]

Each CASE is a ``.toml`` file or a folder (every ``*.toml`` file in it or its subfolders,
sorted).
Every case is checked before anything is simulated; a bad one (no ``[measured]``, an unknown
metric, a value that is not a number or that no real server could measure, ``check_measured``,
a grid of more than one design) stops the command with a one-line error and exit status 2, and
nothing is written. Then each case is simulated for its ``[run] seeds`` (``--seeds N`` overrides them; cases that share their seeds run together) at
the central factors, and, where ``[run] model_error`` draws the model's error for the case's GPU,
its first seed again at that error's 5% and 95% quantiles (``Simulated``). Compared: the
predicted value of a metric is its mean over the seeds, its error ``(predicted - measured) /
measured`` in per cent, its 90% interval the model error's ends around it, widened by 1.645
standard deviations of the seeds (``interval``); a flag passes when at least half the seeds are
flagged (for ``= true``; fewer than half for ``= false``).

stdout shows one row per case and metric, a note for each case that states no flag but whose
simulation is overloaded (its numbers then describe a growing queue), then per metric the
median and the largest absolute error over the cases (with the median per group: the name of
the folder holding each case, such as ``fit`` and ``holdout``), the signed bias and the
coverage, the same by group, GPU and tensor-parallel degree, the coverage over every measured
number, and how many flag checks passed (``validation_report``). Large errors are findings, not
failures: the exit status is 0 whenever the comparison ran. ``--out`` (default
``results/validation``, created or updated; only these files are replaced) receives, all
three or none (a failure writing any of them leaves none, with a one-line error and exit
status 2):

- ``validation.parquet``: one row per case and metric: ``case`` (the config's name),
  ``file``, ``group``, ``gpu``, ``gpus`` (its tensor-parallel degree), ``metric``, ``measured``
  (a flag as 1.0 or 0.0), ``predicted`` (for a flag: the share of seeds flagged),
  ``predicted_lo`` and ``predicted_hi`` (the 90% interval; NaN for flags), ``error_pct`` (NaN
  for flags), ``flagged_share`` (NaN for numbers), ``passed`` (flags only, else null) and
  ``seeds``;
- ``validation.png`` and ``validation.svg``: predicted against measured on log-log axes, a
  panel per unit (s, ms, ...), one marker per case and numeric metric (colour: the metric;
  shape: the group), with the line y = x and bands of +-10% and +-25%.

``validation/`` in the repository holds cases built from measured vLLM runs: open-loop ones
(``validation/make_cases.py``: ``sweep validate validation/fit validation/holdout``) and
closed-loop ones (``validation/make_closed_cases.py``: ``sweep validate
validation/closed-loop``).
"""
from __future__ import annotations

import math
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from sweep.analysis.tables import Z90, widened
from sweep.errors import UsageError, checked, clip, one_line, show
from sweep.files import out_folder, writable
from sweep.study import model_error, vllm_bench
from sweep.study.config import ConfigError, Study, load_study
from sweep.workflows import validation_parts
from sweep.workflows.validation_report import FLAGS, plot, render

DEFAULT_OUT = Path("results") / "validation"
FILES = ("validation.parquet", "validation.png", "validation.svg")
COLUMNS = ("case", "file", "group", "gpu", "gpus", "metric", "measured", "predicted",
           "predicted_lo", "predicted_hi", "error_pct", "flagged_share", "passed", "seeds",
           "load")


class ValidationError(ValueError):
    """A refused case or output folder (one line)."""


@dataclass
class Case:
    path: Path  # as given (or found in a folder given)
    group: str  # the name of the folder holding the file
    study: Study  # one design point, with ``measured``

    @property
    def name(self) -> str:
        return self.study.name


# --- the cases ---------------------------------------------------------------------------------

def find_cases(paths) -> list[Path]:
    """The case files named by ``paths``: files as they are, folders as the ``*.toml`` files
    in them and their subfolders (sorted); each file once."""
    found: list[Path] = []
    seen: set[Path] = set()
    if not paths:
        raise ValidationError("no case given; allowed: .toml files or folders of them")
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files = sorted(f for f in p.rglob("*.toml") if f.is_file())
            if not files:
                raise ValidationError(f"{p}: no *.toml case files in this folder; allowed: a "
                                      "folder of validation cases or a .toml file")
        elif p.exists():
            files = [p]
        else:
            raise ValidationError(f"{p}: no such file or folder")
        for f in files:
            key = f.resolve()
            if key not in seen:
                seen.add(key)
                found.append(f)
    return found


def load_cases(paths, seeds: int | None = None) -> list[Case]:
    """Parse and check every case (``seeds``: a count overriding each case's [run] seeds)."""
    cases, names = [], {}
    for path in find_cases(paths):
        study = load_study(path, seeds=seeds)  # ConfigError: a ValueError, one line
        n = len(study.points) + len(study.skipped)
        if n != 1:
            raise ConfigError(f"{path}: grid: {n} design points; allowed: one design per "
                              "validation case (no arrays in [hardware], [model], [workload], "
                              "[levers])", path=str(path))
        if not study.points:  # (a lone design that does not fit is refused by the parser)
            raise ConfigError(f"{path}: grid: {study.skipped[0][1]}", path=str(path))
        if not study.measured:
            raise ConfigError(f"{path}: measured: missing; a validation case needs a [measured] "
                              "table of measured metrics (e.g. p50_ttft_s = 0.05)",
                              path=str(path))
        check_measured(path, study)
        if study.name in names:
            raise ConfigError(f"{path}: name: {study.name!r} also names {names[study.name]}; "
                              "allowed: distinct case names", path=str(path))
        names[study.name] = path
        cases.append(Case(Path(path), Path(path).resolve().parent.name, study))
    return cases


def tensor_parallel(design) -> int:
    """The degree a case is grouped by: its server's, or of disaggregated pools the decode
    pool's (which sets the time per token)."""
    return design.decode_gpus if design.disaggregated else design.gpus


def peak_rate(design) -> float:
    """The most output tokens per second ``design``'s GPUs could compute: every token costs at
    least 2 FLOPs per active parameter, at twice each GPU's best dense tensor peak (sparse
    tensor cores double it). A completed request is at least one token, so it bounds requests
    per second too."""
    pools = design.pools() if design.disaggregated else ((design, 1),)
    flops = sum(n * p.total_gpus * 2e12 * max(p.gpu_spec.tflops_16bit, p.gpu_spec.tflops_8bit,
                                              p.gpu_spec.tflops_4bit) for p, n in pools)
    return flops / (2 * design.model_spec.active_params) if flops > 0 else math.inf


def check_measured(path: Path, study: Study) -> None:
    """Refuse a measured number no real server could have measured (``vllm_bench.plausible``),
    or a rate beyond what the case's GPUs can compute (``peak_rate``), naming the case and key:
    stated in ``[measured]`` or read from a file, it would otherwise reach the comparison's
    divisions and the plot's log axes."""
    design = study.points[0].design
    peak = peak_rate(design)
    for metric, v in study.measured.items():
        if metric in FLAGS:
            continue
        why = vllm_bench.plausible(metric, float(v))
        if why is None and metric in vllm_bench.RATES and v > peak:
            why = (f"above {peak:.3g}/s, what {design.total_gpus} x "
                   f"{design.gpu_spec.name} compute at their peak (2 FLOPs per active parameter "
                   "a token)")
        if why:
            raise ConfigError(f"{path}: measured.{metric}: {show(v)}: {why}", path=str(path),
                              key=f"measured.{metric}")


def batches(cases: list[Case]) -> list[tuple[Study, list[int]]]:
    """The cases as few studies as can run together (the same seeds, step bound, chunk size and
    drawn factors), each with the indices of its cases in design order. A simulation's result
    depends only on its own design, workload and seed, so running cases together changes
    nothing but the time taken."""
    groups: dict[tuple, list[int]] = {}
    for i, c in enumerate(cases):
        s = c.study
        key = (tuple(s.seeds), s.max_steps, s.chunk_size, repr(sorted(s.uncertain.items())),
               s.model_error)
        groups.setdefault(key, []).append(i)
    out = []
    for members in groups.values():
        first = cases[members[0]].study
        study = replace(first, name="validation", path=None, text="",
                        points=[cases[i].study.points[0] for i in members], axes=[], skipped=[],
                        brief=[], per_request=False, measured={},
                        max_designs=max(first.max_designs, len(members)))
        out.append((study, members))
    return out


def check_out(out: Path) -> None:
    """Refuse an output path that cannot become the report folder (before simulating)."""
    if out.exists() and not out.is_dir():
        raise ValidationError(f"{out}: exists and is not a folder; allowed: a folder (created "
                              "if missing)")
    for name in FILES:
        if (out / name).is_dir():
            raise ValidationError(f"{out / name}: is a folder; allowed: a folder without one "
                                  "of that name")


def plan(cases: list[Case]) -> list[tuple[Study, list[int]]]:
    """The studies to run, their chunking checked before anything runs."""
    from sweep.execution.runner import plan_chunks

    runs = batches(cases)
    for study, _ in runs:
        plan_chunks(study, study.chunk_size)  # a ValueError refuses it
    return runs


# --- simulating and comparing ------------------------------------------------------------------

@dataclass
class Simulated:
    """A case's simulations: every seed at the central factors, and its first seed at the
    quantiles ``model_error.INTERVAL`` of the model's error (None where it has none)."""

    runs: pd.DataFrame
    spread: pd.DataFrame | None = None


def simulate(cases: list[Case], runs=None,
             progress: Callable[[int, int, int, int, float], None] | None = None,
             parts: Path | None = None, resume: bool = False) -> list[Simulated]:
    """Every case's simulations, in case order; each study's saved under ``parts`` as they
    finish where it is given (``validation_parts``: with ``resume``, an interrupted
    validation's are read back)."""
    from sweep.execution.runner import run_study

    def simulated(study: Study, members: list[int], kind: str, batch: int) -> pd.DataFrame:
        if parts is None:
            return run_study(study, chunk_size=study.chunk_size, per_request=False,
                             progress=progress).runs
        want = validation_parts.identity([cases[i] for i in members], study.seeds, kind,
                                         batch)
        return validation_parts.resumable(study, parts / f"{batch:04d}-{kind}", want, resume,
                                          progress)

    out: list[Simulated | None] = [None] * len(cases)
    for batch, (study, members) in enumerate(runs if runs is not None else plan(cases)):
        central = replace(study, model_error=False)
        central_runs = simulated(central, members, "central", batch)
        ends, erring = [], []
        for design, i in enumerate(members):
            out[i] = Simulated(central_runs[central_runs["design"] == design]
                               .reset_index(drop=True))
            point = cases[i].study.points[0]
            if study.model_error and model_error.spreads(point.design):
                erring.append(i)
                ends += [replace(point, design=point.design.replace(
                    **model_error.factors_at(point.design, u))) for u in model_error.INTERVAL]
        if ends:
            spread = simulated(replace(central, points=ends, seeds=central.seeds[:1],
                                       max_designs=max(central.max_designs, len(ends))),
                               erring, "spread", batch)
            k = len(model_error.INTERVAL)
            for j, i in enumerate(erring):
                out[i].spread = spread[spread["design"].between(k * j, k * j + k - 1)] \
                    .reset_index(drop=True)
    return out


def flagged(runs: pd.DataFrame, metric: str = "unstable") -> np.ndarray:
    """Per seed: does the simulation say ``metric``? For ``unstable``: unstable, or requests
    left unfinished, or the step bound hit; for another flag, that flag."""
    if metric == "unstable":
        return (runs["unstable"].astype(bool).to_numpy() | (runs["unfinished"].to_numpy() > 0)
                | runs["truncated"].astype(bool).to_numpy())
    return runs[metric].astype(bool).to_numpy()


def interval(sim: Simulated, metric: str, predicted: float) -> tuple[float, float]:
    """The 90% prediction interval of ``metric`` around ``predicted``: the model error's ends
    (the first seed's values at the interval's quantiles, relative to its central value; a tail
    metric's widened by its own error, ``model_error.tail_sd``, in quadrature on a log scale),
    widened by 1.645 standard deviations of the seeds (the workload's own noise)."""
    vals = sim.runs[metric].to_numpy(dtype=float)
    lo = hi = predicted
    if sim.spread is not None:
        centre = vals[0]
        ends = sim.spread[metric].to_numpy(dtype=float) / centre * predicted
        if np.isfinite(ends).all():
            lo, hi = float(ends.min()), float(ends.max())
        tail = Z90 * model_error.tail_sd(metric)
        if tail and min(lo, predicted) > 0:  # the tail's own error, independent of the speed's
            lo, hi = (float(e) for e in widened(predicted, lo, hi, tail))
    ok = vals[~np.isnan(vals)]
    noise = Z90 * float(ok.std(ddof=1)) if ok.size > 1 else 0.0
    return min(lo, predicted) - noise, max(hi, predicted) + noise


def load(case: Case) -> float:
    """How loaded the real server was: the sequences it held on average (Little's law on the
    measured mean end-to-end latency, at the offered rate) over the most it decodes together
    (its seats); NaN for closed loops and traces, and without a measured mean latency."""
    point = case.study.points[0]
    e2e = case.study.measured.get("mean_e2e_s")
    if point.workload.arrival in ("closed", "trace") or not e2e:
        return math.nan
    return point.workload.arrival_rate * float(e2e) / (point.design.seats
                                                       * point.design.replicas)


def compare(cases: list[Case], sims: list[Simulated]) -> pd.DataFrame:
    """One row per case and measured metric (``COLUMNS``)."""
    rows = []
    for case, sim in zip(cases, sims):
        r = sim.runs
        n = len(r)
        occupied = load(case)
        for metric, meas in case.study.measured.items():
            design = case.study.points[0].design
            row = {"case": case.name, "file": str(case.path), "group": case.group,
                   "gpu": design.gpu_spec.name, "gpus": tensor_parallel(design), "metric": metric,
                   "measured": float(meas), "seeds": n, "load": occupied}
            if metric in FLAGS:
                share = float(flagged(r, metric).mean()) if n else math.nan
                row.update(predicted=share, predicted_lo=math.nan, predicted_hi=math.nan,
                           error_pct=math.nan, flagged_share=share,
                           passed=bool(share >= 0.5) if meas else bool(share < 0.5))
            else:
                vals = r[metric].to_numpy(dtype=float)
                vals = vals[~np.isnan(vals)]
                pred = float(vals.mean()) if vals.size else math.nan
                err = (pred - meas) / meas * 100 if meas != 0 else math.nan
                lo, hi = interval(sim, metric, pred) if vals.size else (math.nan, math.nan)
                row.update(predicted=pred, predicted_lo=lo, predicted_hi=hi, error_pct=err,
                           flagged_share=math.nan, passed=None)
            rows.append(row)
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    for col in ("measured", "predicted", "predicted_lo", "predicted_hi", "error_pct",
                "flagged_share", "load"):
        table[col] = table[col].astype("float64")
    table["passed"] = table["passed"].astype("boolean")
    for col in ("seeds", "gpus"):
        table[col] = table[col].astype("int64")
    return table


def overloaded(cases: list[Case], sims: list[Simulated]) -> list[str]:
    """A note per case that states no flag but whose simulation is flagged in some seed: its
    predictions describe a server whose queue grows."""
    notes = []
    for case, r in zip(cases, (sim.runs for sim in sims)):
        if any(m in FLAGS for m in case.study.measured) or not len(r):
            continue
        k = int(flagged(r).sum())
        if k:
            notes.append(f"note: {case.name}: simulated as overloaded (unstable, unfinished "
                         f"requests or the step bound hit) in {k}/{len(r)} seeds; its predictions "
                         "describe a growing queue")
    return notes


def false_alarms(cases: list[Case], sims: list[Simulated]) -> list[str]:
    """The line that counts the open-loop cases whose real server kept up (no ``unstable =
    true`` measured) and those of them simulated as overloaded in a majority of seeds (closed
    loops cannot queue without end); none without such cases."""
    served = [(c, s) for c, s in zip(cases, sims)
              if not math.isnan(load(c)) and not c.study.measured.get("unstable")]
    if not served:
        return []
    wrong = [c.name for c, s in served if len(s.runs) and flagged(s.runs).mean() >= 0.5]
    return [f"false alarms: {len(wrong)} of {len(served)} open-loop cases the real server kept "
            "up with are simulated as overloaded" + (f" ({', '.join(wrong)})" if wrong else "")]


def write(out: Path, table: pd.DataFrame, meta: dict) -> tuple[str, ...]:
    """The report files in ``out`` (created if missing), all or none: each is written beside
    its name and replaces the old one only once all are whole. On any failure this run's files
    are removed (and ``out``, if this run created it and it is empty), and the error raised."""
    from sweep.analysis.results import _write_table
    from sweep.version import __version__

    created = not out.exists()
    final = [out / name for name in FILES]
    staged = [p.with_name(f".{p.name}.new") for p in final]
    placed = False
    try:
        out.mkdir(parents=True, exist_ok=True)
        _write_table(staged[0], table, {"package": f"servesweep {__version__}",
                                        "kind": "validation", **meta})
        plot(table, staged[1], staged[2])
        for new, old in zip(staged, final):
            new.replace(old)
            placed = True
    except BaseException:
        for p in staged + (final if placed else []):  # no mix of this run's and an old one's
            p.unlink(missing_ok=True)
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        raise
    return tuple(map(str, final))


@dataclass
class Validation:
    """Predictions against the measurements: the table (one row per case and metric), its
    text, and the report files written."""

    table: pd.DataFrame
    text: str
    paths: tuple[str, ...]


def validate(paths, out: str | Path | None = None, seeds: int | None = None,
             progress: Callable[[int, int, int, int, float], None] | None = None,
             echo: Callable[[str], None] = lambda line: None,
             resume: bool = False) -> Validation:
    """Check every case and the output folder, simulate, compare and write the report into
    ``out`` (default ``results/validation``). A bad case or output folder raises a one-line
    ``UsageError`` (a ValueError) before anything is simulated or written. The simulations are
    saved in ``out`` as they finish, until the report is written: ``resume`` reuses those of
    an interrupted validation of the same cases and seeds."""
    out = out_folder(DEFAULT_OUT if out is None else Path(out))
    cases = checked(load_cases, paths, seeds)
    checked(check_out, out)
    writable(out)
    runs = checked(plan, cases)
    echo(f"sweep validate: {len(cases)} cases, {sum(len(c.study.seeds) for c in cases)} "
         "simulations")
    created, parts = not out.exists(), out / validation_parts.PARTS_FOLDER

    def failed(where: Path, what: str, exc: Exception) -> UsageError:
        """One line; a fresh validation leaves the folder as it was (a resumed one keeps what
        it saved, for the next ``resume``)."""
        if not resume:
            shutil.rmtree(parts, ignore_errors=True)
            if created and out.is_dir() and not any(out.iterdir()):
                out.rmdir()
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        return UsageError(f"{where}: cannot {what} ({type(exc).__name__}: "
                          f"{clip(one_line(why), 120)}); nothing written")

    try:
        sims = simulate(cases, runs, progress, parts, resume)
    except OSError as exc:  # a full disk
        raise failed(parts, "save the simulations", exc) from None
    table = compare(cases, sims)
    try:
        written = write(out, table, metadata(cases))
    except Exception as exc:  # a disk's or the plot's error
        raise failed(out, "write the report", exc) from None
    shutil.rmtree(parts, ignore_errors=True)
    return Validation(table, render(table, overloaded(cases, sims) + false_alarms(cases, sims)),
                      written)


def metadata(cases: list[Case]) -> dict:
    """What the report's Parquet metadata records besides the table."""
    from sweep.execution.runner import device_description

    return {"cases": [{"case": c.name, "file": str(c.path), "group": c.group,
                       "seeds": c.study.seeds} for c in cases],
            "device": device_description()}
