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
metric, a value that is not a number, a grid of more than one design) stops the command with a
one-line error and exit status 2, and nothing is written. Then each case is simulated for its
``[run] seeds`` (``--seeds N`` overrides them; cases that share their seeds run together) and
compared: the predicted value of a metric is its mean over the seeds, its error
``(predicted - measured) / measured`` in per cent; a flag passes when at least half the seeds
are flagged (for ``= true``; fewer than half for ``= false``).

stdout shows one row per case and metric, a note for each case that states no flag but whose
simulation is overloaded (its numbers then describe a growing queue), then per metric the
median and the largest absolute error over the cases (with the median per group: the name of
the folder holding each case, such as ``fit`` and ``holdout``), and how many flag checks
passed. Large errors are findings, not
failures: the exit status is 0 whenever the comparison ran. ``--out`` (default
``results/validation``, created or updated; only these files are replaced) receives:

- ``validation.parquet``: one row per case and metric: ``case`` (the config's name),
  ``file``, ``group``, ``metric``, ``measured`` (a flag as 1.0 or 0.0), ``predicted`` (for a
  flag: the share of seeds flagged), ``error_pct`` (NaN for flags), ``flagged_share`` (NaN for
  numbers), ``passed`` (flags only, else null) and ``seeds``;
- ``validation.png`` and ``validation.svg``: predicted against measured on log-log axes, one
  marker per case and numeric metric (colour: the metric; shape: the group), with the line
  y = x and bands of +-10% and +-25%.

``validation/`` in the repository holds cases built from measured vLLM runs
(``validation/make_cases.py``): ``sweep validate validation``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from sweep.analysis.metrics import METRICS
from sweep.study.config import ConfigError, Study, load_study

DEFAULT_OUT = Path("results") / "validation"
FILES = ("validation.parquet", "validation.png", "validation.svg")
#: Metrics stated as flags (true or false) rather than numbers.
FLAGS = tuple(m for m, kind in METRICS.items() if kind == "b")
COLUMNS = ("case", "file", "group", "metric", "measured", "predicted", "error_pct",
           "flagged_share", "passed", "seeds")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


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
        if study.name in names:
            raise ConfigError(f"{path}: name: {study.name!r} also names {names[study.name]}; "
                              "allowed: distinct case names", path=str(path))
        names[study.name] = path
        cases.append(Case(Path(path), Path(path).resolve().parent.name, study))
    return cases


def batches(cases: list[Case]) -> list[tuple[Study, list[int]]]:
    """The cases as few studies as can run together (the same seeds, step bound, chunk size and
    drawn factors), each with the indices of its cases in design order. A simulation's result
    depends only on its own design, workload and seed, so running cases together changes
    nothing but the time taken."""
    groups: dict[tuple, list[int]] = {}
    for i, c in enumerate(cases):
        s = c.study
        key = (tuple(s.seeds), s.max_steps, s.chunk_size, repr(sorted(s.uncertain.items())))
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

def simulate(cases: list[Case], runs=None,
             progress: Callable[[int, int, int, int, float], None] | None = None
             ) -> list[pd.DataFrame]:
    """Every case's rows of the runs table (one per seed), in case order."""
    from sweep.execution.runner import run_study

    out: list[pd.DataFrame | None] = [None] * len(cases)
    for study, members in runs if runs is not None else plan(cases):
        res = run_study(study, chunk_size=study.chunk_size, per_request=False,
                        progress=progress)
        for design, i in enumerate(members):
            out[i] = res.runs[res.runs["design"] == design].reset_index(drop=True)
    return out


def flagged(runs: pd.DataFrame, metric: str = "unstable") -> np.ndarray:
    """Per seed: does the simulation say ``metric``? For ``unstable``: unstable, or requests
    left unfinished, or the step bound hit; for another flag, that flag."""
    if metric == "unstable":
        return (runs["unstable"].astype(bool).to_numpy() | (runs["unfinished"].to_numpy() > 0)
                | runs["truncated"].astype(bool).to_numpy())
    return runs[metric].astype(bool).to_numpy()


def compare(cases: list[Case], runs: list[pd.DataFrame]) -> pd.DataFrame:
    """One row per case and measured metric (``COLUMNS``)."""
    rows = []
    for case, r in zip(cases, runs):
        n = len(r)
        for metric, meas in case.study.measured.items():
            row = {"case": case.name, "file": str(case.path), "group": case.group,
                   "metric": metric, "measured": float(meas), "seeds": n}
            if metric in FLAGS:
                share = float(flagged(r, metric).mean()) if n else math.nan
                row.update(predicted=share, error_pct=math.nan, flagged_share=share,
                           passed=bool(share >= 0.5) if meas else bool(share < 0.5))
            else:
                vals = r[metric].to_numpy(dtype=float)
                vals = vals[~np.isnan(vals)]
                pred = float(vals.mean()) if vals.size else math.nan
                err = (pred - meas) / meas * 100 if meas != 0 else math.nan
                row.update(predicted=pred, error_pct=err, flagged_share=math.nan, passed=None)
            rows.append(row)
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    for col in ("measured", "predicted", "error_pct", "flagged_share"):
        table[col] = table[col].astype("float64")
    table["passed"] = table["passed"].astype("boolean")
    table["seeds"] = table["seeds"].astype("int64")
    return table


def overloaded(cases: list[Case], runs: list[pd.DataFrame]) -> list[str]:
    """A note per case that states no flag but whose simulation is flagged in some seed: its
    predictions describe a server whose queue grows."""
    notes = []
    for case, r in zip(cases, runs):
        if any(m in FLAGS for m in case.study.measured) or not len(r):
            continue
        k = int(flagged(r).sum())
        if k:
            notes.append(f"note: {case.name}: simulated as overloaded (unstable, unfinished "
                         f"requests or the step bound hit) in {k}/{len(r)} seeds; its predictions "
                         "describe a growing queue")
    return notes


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per numeric metric: cases, median and largest absolute error (%) and its case, and the
    median per group."""
    num = table[~table["metric"].isin(FLAGS)].copy()
    num["abs_err"] = num["error_pct"].abs()
    groups = sorted(num["group"].unique())
    rows = []
    for metric in dict.fromkeys(num["metric"]):
        m = num[num["metric"] == metric]
        ok = m[m["abs_err"].notna()]
        row = {"metric": metric, "cases": len(m),
               "median_abs_error_pct": float(ok["abs_err"].median()) if len(ok) else math.nan}
        if len(groups) > 1:
            for g in groups:
                mg = ok[ok["group"] == g]
                row[f"median_{g}"] = float(mg["abs_err"].median()) if len(mg) else math.nan
        if len(ok):
            worst = ok.loc[ok["abs_err"].idxmax()]
            row.update(max_abs_error_pct=float(worst["abs_err"]), worst_case=worst["case"])
        else:
            row.update(max_abs_error_pct=math.nan, worst_case="-")
        rows.append(row)
    return pd.DataFrame(rows)


def _fmt(v: float) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4g}"


def _pct(v: float) -> str:
    return "n/a" if math.isnan(v) else f"{v:+.1f}%"


def _columns(rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) if i in right else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip()
                     for r in rows)


def render(table: pd.DataFrame, notes=()) -> str:
    """The comparison table, ``notes`` (lines), the error summary per metric and the flag
    checks, as text."""
    rows = [["case", "metric", "measured", "predicted", "error"]]
    for r in table.itertuples(index=False):
        if r.metric in FLAGS:
            k = round(r.flagged_share * r.seeds)
            rows.append([r.case, r.metric, "true" if r.measured else "false",
                         f"flagged in {k}/{r.seeds} seeds", "PASS" if r.passed else "FAIL"])
        else:
            rows.append([r.case, r.metric, _fmt(r.measured), _fmt(r.predicted),
                         _pct(r.error_pct)])
    parts = [_columns(rows, {2, 3, 4})]
    if notes:
        parts.append("\n".join(notes))
    s = summary(table)
    if len(s):
        head = ["metric", "cases", "median"]
        extra = [c for c in s.columns if c.startswith("median_") and c != "median_abs_error_pct"]
        head += [c[len("median_"):] for c in extra] + ["max", "worst case"]
        rows = [head]
        for r in s.to_dict("records"):
            rows.append([r["metric"], str(r["cases"]), _abs(r["median_abs_error_pct"])]
                        + [_abs(r[c]) for c in extra]
                        + [_abs(r["max_abs_error_pct"]), str(r["worst_case"])])
        groups = f"; by group: {', '.join(c[len('median_'):] for c in extra)}" if extra else ""
        parts.append(f"median |error| % per metric over the cases{groups}; max: the largest "
                     "|error| % and its case:\n" + _columns(rows, set(range(1, len(head) - 1))))
    flags = table[table["metric"].isin(FLAGS)]
    if len(flags):
        failed = flags[~flags["passed"].astype(bool)]
        line = f"flag checks: {int(flags['passed'].sum())} of {len(flags)} passed"
        if len(failed):
            line += " (failed: " + ", ".join(f"{c} {m}" for c, m in
                                             zip(failed["case"], failed["metric"])) + ")"
        parts.append(line)
    return "\n\n".join(parts)


def _abs(v: float) -> str:
    return "n/a" if math.isnan(v) else f"{v:.1f}%"


# --- writing -----------------------------------------------------------------------------------

def plot(table: pd.DataFrame, path_png, path_svg=None) -> tuple[str, ...]:
    """Predicted against measured (log-log) for the numeric rows, with y = x and +-10% / +-25%
    bands. Matplotlib's object API on the Agg canvas; each file written atomically."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    from sweep.analysis.results import _write_file

    num = table[~table["metric"].isin(FLAGS)]
    ok = num[(num["measured"] > 0) & (num["predicted"] > 0)
             & np.isfinite(num["measured"]) & np.isfinite(num["predicted"])]
    metrics = list(dict.fromkeys(num["metric"]))
    groups = sorted(num["group"].unique())
    palette = list(matplotlib.colormaps["tab10"].colors) + list(
        matplotlib.colormaps["Dark2"].colors)
    colour = {m: palette[i % len(palette)] for i, m in enumerate(metrics)}
    marker = {g: _MARKERS[i % len(_MARKERS)] for i, g in enumerate(groups)}

    fig = Figure(figsize=(9.5, 6.5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    if len(ok):
        values = np.concatenate([ok["measured"].to_numpy(), ok["predicted"].to_numpy()])
        lo, hi = values.min() / 1.5, values.max() * 1.5
    else:
        lo, hi = 0.01, 100.0
    x = np.geomspace(lo, hi, 200)
    ax.fill_between(x, x * 0.75, x * 1.25, color="tab:gray", alpha=0.15, linewidth=0,
                    label="within ±25%")
    ax.fill_between(x, x * 0.9, x * 1.1, color="tab:gray", alpha=0.3, linewidth=0,
                    label="within ±10%")
    ax.plot(x, x, color="black", linewidth=0.8, label="predicted = measured")
    for (m, g), part in ok.groupby(["metric", "group"], sort=False):
        ax.scatter(part["measured"], part["predicted"], s=30, color=colour[m], marker=marker[g],
                   edgecolors="black", linewidths=0.4, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    ax.set_xlabel("measured (each metric in its unit: s or ms)")
    ax.set_ylabel("predicted (mean over seeds)")
    off = len(num) - len(ok)
    ax.set_title(f"servesweep against measurements: {ok['case'].nunique()} cases, {len(ok)} "
                 f"comparisons" + (f" ({off} off the plot: not positive)" if off else ""),
                 fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    bands = ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    ax.add_artist(bands)
    handles = [Line2D([], [], linestyle="", marker="o", color=colour[m], markeredgecolor="black",
                      markeredgewidth=0.4, label=m) for m in metrics]
    handles += [Line2D([], [], linestyle="", marker=marker[g], color="white",
                       markeredgecolor="black", label=g) for g in groups]
    if handles:
        ax.legend(handles=handles, fontsize=8, loc="lower left", bbox_to_anchor=(1.02, 0.0))
    fig.tight_layout()
    written = []
    _write_file(Path(path_png), lambda fh: fig.savefig(fh, format="png"))
    written.append(str(path_png))
    if path_svg is not None:
        with matplotlib.rc_context({"svg.hashsalt": "servesweep"}):
            _write_file(Path(path_svg),
                        lambda fh: fig.savefig(fh, format="svg", metadata={"Date": None}))
        written.append(str(path_svg))
    return tuple(written)


def write(out: Path, table: pd.DataFrame, meta: dict) -> tuple[str, ...]:
    """The report files in ``out`` (created if missing), each written atomically."""
    from sweep.analysis.results import _write_table
    from sweep.version import __version__

    out.mkdir(parents=True, exist_ok=True)
    _write_table(out / FILES[0], table, {"package": f"servesweep {__version__}",
                                         "kind": "validation", **meta})
    return (str(out / FILES[0]),) + plot(table, out / FILES[1], out / FILES[2])


def validate(paths, out: str | Path | None = None, seeds: int | None = None,
             progress: Callable[[int, int, int, int, float], None] | None = None
             ) -> tuple[pd.DataFrame, str, tuple[str, ...]]:
    """Check every case and the output folder, simulate, compare and write the report:
    (the table, its text, the paths written). A bad case raises a ValueError (one line) before
    anything is simulated or written."""
    out = DEFAULT_OUT if out is None else Path(out)
    cases = load_cases(paths, seeds)
    check_out(out)
    runs = plan(cases)
    sims = simulate(cases, runs, progress)
    table = compare(cases, sims)
    return table, render(table, overloaded(cases, sims)), write(out, table, metadata(cases))


def metadata(cases: list[Case]) -> dict:
    """What the report's Parquet metadata records besides the table."""
    from sweep.execution.runner import device_description

    return {"cases": [{"case": c.name, "file": str(c.path), "group": c.group,
                       "seeds": c.study.seeds} for c in cases],
            "device": device_description()}
