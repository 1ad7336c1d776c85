"""The report of ``sweep validate``: the errors per metric, per GPU and tensor-parallel degree,
the coverage of the predicted intervals, the flag checks (text), and the plot of predicted
against measured."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sweep.study.metric_names import METRICS, unit_of

#: Metrics stated as flags (true or false) rather than numbers.
FLAGS = tuple(m for m, kind in METRICS.items() if kind == "b")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


def covered(table: pd.DataFrame) -> pd.Series:
    """Per numeric row: is the measured value inside the predicted 90% interval?"""
    num = table[~table["metric"].isin(FLAGS)]
    return (num["measured"] >= num["predicted_lo"]) & (num["measured"] <= num["predicted_hi"])



def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per numeric metric: cases, median and largest absolute error (%) and its case, the
    median per group, the signed bias (mean signed error, %) and the coverage (% of measured
    values inside the predicted 90% interval)."""
    num = table[~table["metric"].isin(FLAGS)].copy()
    num["abs_err"] = num["error_pct"].abs()
    num["inside"] = covered(table)
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
        row.update(bias_pct=float(ok["error_pct"].mean()) if len(ok) else math.nan,
                   coverage_pct=100 * float(m["inside"].mean()) if len(m) else math.nan)
        rows.append(row)
    return pd.DataFrame(rows)


#: The headline metrics the errors by GPU are given for: end-to-end latency and TTFT.
E2E = ("mean_e2e_s", "p50_e2e_s", "p90_e2e_s", "p95_e2e_s")
TTFT = ("mean_ttft_s", "p50_ttft_s", "p90_ttft_s", "p95_ttft_s")


def by_gpu(table: pd.DataFrame) -> pd.DataFrame:
    """Per group, GPU and tensor-parallel degree, for end-to-end latency and for TTFT (their
    mean, p50, p90 and p95 where measured): cases, median and largest absolute error (%),
    signed bias (mean signed error, %) and coverage (%, over every measured number)."""
    num = table[~table["metric"].isin(FLAGS)].copy()
    num["inside"] = covered(table)
    rows = []
    for (group, gpu, tp), part in num.groupby(["group", "gpu", "gpus"], sort=True):
        row = {"group": group, "gpu": gpu, "gpus": int(tp), "cases": part["case"].nunique(),
               "coverage_pct": 100 * float(part["inside"].mean())}
        row.update(_headline_errors(part))
        rows.append(row)
    return pd.DataFrame(rows)


def _headline_errors(part: pd.DataFrame) -> dict[str, float]:
    """End to end and TTFT (``E2E``, ``TTFT``): median and largest absolute error and signed
    bias (%) over ``part``'s rows."""
    out = {}
    for name, metrics in (("e2e", E2E), ("ttft", TTFT)):
        err = part[part["metric"].isin(metrics)]["error_pct"].dropna()
        out.update({f"{name}_median_pct": float(err.abs().median()) if len(err) else math.nan,
                    f"{name}_max_pct": float(err.abs().max()) if len(err) else math.nan,
                    f"{name}_bias_pct": float(err.mean()) if len(err) else math.nan})
    return out


#: The load bands: the real server's seats in use (``validate.load``) below half, or above.
HALF = 0.5


def by_load(table: pd.DataFrame) -> pd.DataFrame:
    """Per GPU, tensor-parallel degree and load band (cases whose real server's seats were
    below ``HALF`` in use, or above it; open-loop cases only), as ``by_gpu``."""
    num = table[~table["metric"].isin(FLAGS) & table["load"].notna()].copy()
    num["band"] = np.where(num["load"] < HALF, "light", "heavy")
    rows = []
    for (gpu, tp, band), part in num.groupby(["gpu", "gpus", "band"], sort=True):
        row = {"gpu": gpu, "gpus": int(tp), "band": band, "cases": part["case"].nunique(),
               "load_max": float(part["load"].max()), **_headline_errors(part)}
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
        head += [c[len("median_"):] for c in extra] + ["max", "bias", "covered", "worst case"]
        rows = [head]
        for r in s.to_dict("records"):
            rows.append([r["metric"], str(r["cases"]), _abs(r["median_abs_error_pct"])]
                        + [_abs(r[c]) for c in extra]
                        + [_abs(r["max_abs_error_pct"]), _pct(r["bias_pct"]),
                           _abs(r["coverage_pct"]), str(r["worst_case"])])
        groups = f"; by group: {', '.join(c[len('median_'):] for c in extra)}" if extra else ""
        parts.append(f"median |error| % per metric over the cases{groups}; max: the largest "
                     "|error| % and its case; bias: the mean signed error; covered: the share "
                     "of measured values inside the predicted 90% interval:\n"
                     + _columns(rows, set(range(1, len(head) - 1))))
        g = by_gpu(table)
        rows = [["group", "gpu", "tp", "cases", "E2E median", "max", "bias", "TTFT median", "max",
                 "bias", "covered"]]
        for r in g.to_dict("records"):
            rows.append([r["group"], r["gpu"], str(r["gpus"]), str(r["cases"])]
                        + [f(r[f"{k}_{v}_pct"]) for k in ("e2e", "ttft")
                           for v, f in (("median", _abs), ("max", _abs), ("bias", _pct))]
                        + [_abs(r["coverage_pct"])])
        parts.append("by group, GPU and tensor-parallel degree (E2E and TTFT: mean, p50, p90, "
                     "p95 where measured):\n" + _columns(rows, set(range(2, len(rows[0])))))
        b = by_load(table)
        if len(b):
            rows = [["gpu", "tp", "load", "cases", "seats up to", "E2E median", "bias",
                     "TTFT median", "bias"]]
            for r in b.to_dict("records"):
                rows.append([r["gpu"], str(r["gpus"]), r["band"], str(r["cases"]),
                             f"{r['load_max']:.2f}"]
                            + [f(r[f"{k}_{v}_pct"]) for k in ("e2e", "ttft")
                               for v, f in (("median", _abs), ("bias", _pct))])
            parts.append(f"by GPU, tensor-parallel degree and load (open loop; light: the real "
                         f"server's seats under {HALF:.0%} in use by Little's law on its measured "
                         "mean latency, heavy: above):\n"
                         + _columns(rows, set(range(3, len(rows[0])))))
        inside = covered(table)
        parts.append(f"coverage of the predicted 90% intervals: {int(inside.sum())} of "
                     f"{len(inside)} measured values ({100 * inside.mean():.0f}%)")
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


# --- the plot ----------------------------------------------------------------------------------

def plot(table: pd.DataFrame, path_png, path_svg=None) -> tuple[str, ...]:
    """``validation_figure`` written to the PNG (and the SVG when ``path_svg`` is given), each
    file atomically; returns their paths, as strings."""
    from sweep.analysis.figures import figure_files
    from sweep.analysis.results import _write_file

    files = figure_files(validation_figure(table), path_png, path_svg)
    for path, write in files.items():
        _write_file(path, write)
    return tuple(map(str, files))


def _panel(ax, ok: pd.DataFrame, colour: dict, marker: dict, unit_name: str) -> None:
    """One unit's predicted-against-measured, log-log, with y = x and +-10% / +-25% bands."""
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
    ax.set_xlabel(f"measured ({unit_name})")
    ax.set_ylabel(f"predicted, mean over seeds ({unit_name})")
    ax.grid(True, which="major", alpha=0.3)


def validation_figure(table: pd.DataFrame):
    """Predicted against measured (log-log), one panel per unit (s, ms, ...), with y = x and
    +-10% / +-25% bands: a ``figures.NotebookFigure`` (outside pyplot, nothing left open),
    nothing written."""
    import matplotlib
    from matplotlib.lines import Line2D

    from sweep.analysis.figures import NotebookFigure

    num = table[~table["metric"].isin(FLAGS)]
    ok = num[(num["measured"] > 0) & (num["predicted"] > 0)
             & np.isfinite(num["measured"]) & np.isfinite(num["predicted"])]
    metrics = list(dict.fromkeys(num["metric"]))
    groups = sorted(num["group"].unique())
    palette = list(matplotlib.colormaps["tab10"].colors) + list(
        matplotlib.colormaps["Dark2"].colors)
    colour = {m: palette[i % len(palette)] for i, m in enumerate(metrics)}
    marker = {g: _MARKERS[i % len(_MARKERS)] for i, g in enumerate(groups)}
    units = list(dict.fromkeys(unit_of(m) for m in metrics)) or ["s"]

    width = 4.2 * len(units) + 2.4  # each panel, then the legends beside the last
    fig = NotebookFigure(figsize=(width, 5.2), dpi=110)
    axes = [fig.add_subplot(1, len(units), i + 1) for i in range(len(units))]
    for ax, u in zip(axes, units):
        _panel(ax, ok[ok["metric"].map(unit_of) == u], colour, marker, u)
    off = len(num) - len(ok)
    fig.suptitle(f"servesweep against measurements: {ok['case'].nunique()} cases, {len(ok)} "
                 f"comparisons" + (f" ({off} off the plot: not positive)" if off else ""),
                 fontsize=10)
    fig.subplots_adjust(left=0.9 / width, right=1.0 - 2.3 / width, top=0.9, bottom=0.12,
                        wspace=0.35)
    fig.legend(*axes[0].get_legend_handles_labels(), fontsize=8, loc="upper right")
    handles = [Line2D([], [], linestyle="", marker="o", color=colour[m], markeredgecolor="black",
                      markeredgewidth=0.4, label=m) for m in metrics]
    handles += [Line2D([], [], linestyle="", marker=marker[g], color="white",
                       markeredgecolor="black", label=g) for g in groups]
    if handles:
        fig.legend(handles=handles, fontsize=8, loc="lower right")
    return fig
