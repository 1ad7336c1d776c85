"""Pareto frontiers of a sweep's designs, and a plot of one against a brief.

Every objective is minimised; an objective written with a leading ``-`` (``"-tokens_per_s"``) is
maximised. A design is *dominated* when another is at least as good on every objective and better
on one; identical designs do not dominate each other, so duplicates share the frontier. A design
with a NaN objective is never on the frontier and dominates nothing.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from sweep.errors import listed
from sweep.study.metric_names import unit

#: Elements (rows x rows x objectives) compared at once by the blocked dominance check.
_BLOCK_ELEMENTS = 1 << 22


def pareto_mask(values) -> np.ndarray:
    """Boolean mask of the Pareto-optimal rows of an ``(n, k)`` array, minimising every column.

    ``k = 1`` keeps every row equal to the minimum; ``k = 2`` sorts and sweeps (O(n log n));
    ``k >= 3`` visits the rows in lexicographic order (a dominator always comes first) and checks
    each block of rows against the frontier found so far and against itself, in chunks that bound
    memory (O(n x frontier size); fine up to ~100k rows). ``+-inf`` are ordinary values.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1:
        v = v[:, None]
    if v.ndim != 2:
        raise ValueError(f"pareto_mask expects an (n, k) array, got shape {v.shape}")
    n, k = v.shape
    mask = np.zeros(n, dtype=bool)
    if n == 0:
        return mask
    if k == 0:
        mask[:] = True  # nothing to compare: no row is better than another
        return mask
    good = ~np.isnan(v).any(axis=1)
    idx = np.flatnonzero(good)
    if idx.size == 0:
        return mask
    w = v[idx]
    if k == 1:
        mask[idx] = w[:, 0] == w[:, 0].min()
    elif k == 2:
        mask[idx] = _pareto_2d(w[:, 0], w[:, 1])
    else:
        mask[idx] = _pareto_blocked(w)
    return mask


def _pareto_2d(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Sort by (x, y) and sweep: a row is optimal iff its y is the least of its x-group and
    strictly below every y of the groups with smaller x."""
    order = np.lexsort((y, x))
    xs, ys = x[order], y[order]
    n = xs.size
    start = np.ones(n, dtype=bool)
    start[1:] = xs[1:] != xs[:-1]
    group = np.cumsum(start) - 1
    starts = np.flatnonzero(start)
    gmin = ys[starts]  # least y of each x-group (rows are sorted by y within a group)
    prev = np.empty_like(gmin)  # least y over all earlier groups
    prev[0] = np.inf
    if gmin.size > 1:
        prev[1:] = np.minimum.accumulate(gmin)[:-1]
    group_ok = gmin < prev
    group_ok[0] = True  # nothing precedes the first group (matters when its y is +inf)
    on = (ys == gmin[group]) & group_ok[group]
    out = np.empty(n, dtype=bool)
    out[order] = on
    return out


def _dominated_by(block: np.ndarray, others: np.ndarray) -> np.ndarray:
    """For each row of ``block``, whether some row of ``others`` dominates it (chunked)."""
    dom = np.zeros(block.shape[0], dtype=bool)
    if others.shape[0] == 0 or block.shape[0] == 0:
        return dom
    k = block.shape[1]
    step = max(1, _BLOCK_ELEMENTS // max(1, block.shape[0] * k))
    for s in range(0, others.shape[0], step):
        o = others[s:s + step]
        le = o[None, :, 0] <= block[:, None, 0]  # (B, m): o at least as good on every column
        lt = o[None, :, 0] < block[:, None, 0]  # ... and better on one
        for c in range(1, k):
            le &= o[None, :, c] <= block[:, None, c]
            lt |= o[None, :, c] < block[:, None, c]
        dom |= (le & lt).any(axis=1)
    return dom


def _pareto_blocked(w: np.ndarray) -> np.ndarray:
    n, k = w.shape
    order = np.lexsort(w.T[::-1])  # lexicographic by column 0, then 1, ...
    ws = w[order]
    on = np.zeros(n, dtype=bool)
    front = np.empty((0, k))
    block = 256
    for s in range(0, n, block):
        b = ws[s:s + block]
        dom = _dominated_by(b, front) | _dominated_by(b, b)
        on[s:s + block] = ~dom
        if (~dom).any():
            front = np.concatenate([front, b[~dom]])
    out = np.empty(n, dtype=bool)
    out[order] = on
    return out


def _parse_objective(obj: str) -> tuple[str, float]:
    """``"-name"`` -> ("name", -1) (maximise); ``"name"`` -> ("name", +1)."""
    if not isinstance(obj, str) or not obj:
        raise ValueError(f"objective must be a column name, got {obj!r}")
    return (obj[1:], -1.0) if obj.startswith("-") else (obj, 1.0)


def _objective_values(agg: pd.DataFrame, objectives: list[str]) -> np.ndarray:
    if isinstance(objectives, str):
        objectives = [objectives]
    if not objectives:
        raise ValueError("frontier needs at least one objective")
    allowed = [c for c in agg.columns if pd.api.types.is_numeric_dtype(agg[c])
               and not pd.api.types.is_bool_dtype(agg[c])]
    cols = []
    for obj in objectives:
        name, sign = _parse_objective(obj)
        if name not in agg.columns or name not in allowed:
            what = "is not a numeric column" if name in agg.columns else "is not a column"
            raise ValueError(f"objective {name!r} {what}; allowed (prefix '-' to maximise): "
                             + listed(allowed))
        cols.append(sign * agg[name].to_numpy(dtype=np.float64))
    return np.column_stack(cols)


def frontier(agg: pd.DataFrame, objectives: list[str]) -> pd.DataFrame:
    """The Pareto-optimal rows of ``agg`` on ``objectives`` (minimised; ``-name`` maximised),
    best first on the first objective (ties: the next objectives, then the original order).

    Raises ValueError naming the column when an objective is not a numeric column of ``agg``.
    """
    vals = _objective_values(agg, objectives)
    mask = pareto_mask(vals)
    sub = vals[mask]
    order = np.lexsort(sub.T[::-1]) if sub.shape[0] else np.arange(0)
    return agg.loc[mask].iloc[order]


def _log_axis(values: np.ndarray) -> bool:
    """Log scale when the finite values are all positive and span more than two decades."""
    v = values[np.isfinite(values)]
    return v.size > 1 and bool((v > 0).all()) and v.max() / v.min() > 100.0


def plot_frontier(agg: pd.DataFrame, x: str, y: str, brief=(), path_png="frontier.png",
                  path_svg=None, title=None, also: dict | None = None) -> tuple[str, ...]:
    """``frontier_figure`` written by ``figures.save_figure``: the PNG (and the SVG when
    ``path_svg`` is given) with the files of ``also``, all or none; returns the plots' paths, as
    strings."""
    from sweep.analysis.figures import save_figure

    return save_figure(frontier_figure(agg, x, y, brief, title), path_png, path_svg, also)


def frontier_figure(agg: pd.DataFrame, x: str, y: str, brief=(), title=None):
    """Scatter every design (``x`` against ``y``), draw the Pareto frontier of (x, y) as a step
    line, mark the designs that meet ``brief`` (every limit met by the mean metrics, as in
    ``report.verdict``) apart from those that fail, and draw the brief's limits on x and y as
    labelled dashed lines. ``x``/``y`` may carry a leading ``-`` to maximise that axis (the
    values are plotted as they are). An axis goes to log scale when its values span > 2 decades.
    Designs with a non-finite x or y cannot be placed; the title says how many were left off.

    Returns the figure (a ``figures.NotebookFigure``: outside pyplot, nothing left open);
    nothing is written.
    """
    from sweep.analysis.figures import NotebookFigure
    from sweep.analysis.report import meets_brief

    xname, xsign = _parse_objective(x)
    yname, ysign = _parse_objective(y)
    vals = _objective_values(agg, [x, y])  # validates both names
    xs, ys = vals[:, 0] * xsign, vals[:, 1] * ysign
    ok = meets_brief(agg, brief or []).to_numpy()
    finite = np.isfinite(xs) & np.isfinite(ys)
    front = pareto_mask(vals) & finite

    fig = NotebookFigure(figsize=(8, 5.5), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    fail = finite & ~ok
    pas = finite & ok
    ax.scatter(xs[fail], ys[fail], s=18, marker="x", color="tab:red", alpha=0.6, linewidths=1,
               label=f"fails the brief ({int((~ok).sum())})")
    # Above the frontier's boxes, each named by its design number where the table has one.
    ax.scatter(xs[pas], ys[pas], s=36, marker="o", facecolors="none", edgecolors="tab:green",
               linewidths=1.5, zorder=3, label=f"meets the brief ({int(ok.sum())})")
    if "design" in agg.columns:
        for k, i in enumerate(np.flatnonzero(pas)):  # stepped up, so neighbours stay legible
            ax.annotate(f"{agg['design'].iloc[i]}", (xs[i], ys[i]), xytext=(5, 4 + 9 * (k % 4)),
                        textcoords="offset points", fontsize=7, color="tab:green", zorder=3,
                        arrowprops={"arrowstyle": "-", "color": "tab:green", "lw": 0.5})
    if front.any():
        fi = np.flatnonzero(front)
        fi = fi[np.lexsort((ys[fi], xs[fi]))]
        ax.plot(xs[fi], ys[fi], drawstyle="steps-post" if xsign > 0 else "steps-pre",
                color="black", linewidth=1.0, zorder=1, label=f"Pareto frontier ({fi.size})")
        ax.scatter(xs[fi], ys[fi], s=110, marker="s", facecolors="none", edgecolors="black",
                   linewidths=0.8, zorder=1)
    for lim in brief or []:
        for bound, word in ((getattr(lim, "min", None), ">="), (getattr(lim, "max", None), "<=")):
            if bound is None:
                continue
            label = f"{lim.key} {word} {bound:g}"
            if lim.key == xname:
                ax.axvline(bound, linestyle="--", color="tab:blue", linewidth=1, label=label)
            if lim.key == yname:
                ax.axhline(bound, linestyle="--", color="tab:purple", linewidth=1, label=label)
    if _log_axis(xs):
        ax.set_xscale("log")
    if _log_axis(ys):
        ax.set_yscale("log")
    better = {1.0: "lower is better", -1.0: "higher is better"}
    ax.set_xlabel(f"{unit(xname)}, {better[xsign]}")
    ax.set_ylabel(f"{unit(yname)}, {better[ysign]}")
    head = title or f"{yname} against {xname}: {len(agg)} designs"
    off = int((~finite).sum())
    ax.set_title(head + (f" ({off} off the plot: non-finite)" if off else ""), fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig
