"""A results folder as one HTML page a person opens in a browser: a study's verdict with its
frontier plot, a capacity search's table and cheapest fleets, or a validation's comparison
with its plot. Self-contained (an inline style, plots as inline SVG, nothing fetched) and every
text escaped. Pure functions from the tables to the page's text."""
from __future__ import annotations

import math
from html import escape

import numpy as np
import pandas as pd

from sweep.analysis.capacity_report import _load_text, _money
from sweep.analysis.frontier import pareto_mask
from sweep.analysis.report import (EXAMPLES, SHOWN_METRICS, _num, is_metric, launch_lines,
                                   levers_text, limit_text, miss_label, miss_sides,
                                   transferred_lines, varying, verdict)
from sweep.analysis.svg_plot import Point, Rule, scatter_svg
from sweep.study.config import Limit
from sweep.study.metric_names import METRICS, unit, unit_of

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif;
       max-width: 72rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.45; color: #222; }
h1 { font-size: 1.6rem; } h2 { margin-top: 2rem; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.9rem; }
th, td { border: 1px solid #bbb; padding: 0.2rem 0.5rem; text-align: left; }
th { background: #f0f0f0; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f6f6f6; border: 1px solid #ddd; padding: 0.6rem; overflow-x: auto; }
.warn { color: #a00; } .muted { color: #666; }
"""
#: Designs listed per failing family; the rest by id.
FAMILY_ROWS = 10
#: Passing designs (or fleets) whose launch commands are shown.
MAX_LISTED = 50


# --- the page and its parts ---------------------------------------------------------------------
def page(title: str, sections) -> str:
    """The whole document: ``title`` as its heading and ``sections`` (HTML text) below."""
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
            f"<h1>{escape(title)}</h1>\n" + "\n".join(sections) + "\n</body>\n</html>\n")


def para(text: str, cls: str = "") -> str:
    return f'<p class="{cls}">{escape(text)}</p>' if cls else f"<p>{escape(text)}</p>"


def cell(value) -> str:
    """A table cell: numbers right-aligned as the text report writes them."""
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_))
    missing = value is None or (not isinstance(value, str) and pd.isna(value))
    text = ("n/a" if number else "") if missing else _num(value)
    return f'<td class="n">{escape(text)}</td>' if number else f"<td>{escape(text)}</td>"


def table(head, rows) -> str:
    """A bordered table: ``head`` names the columns, ``rows`` are lists of values."""
    th = "".join(f"<th>{escape(str(h))}</th>" for h in head)
    body = "\n".join("<tr>" + "".join(cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table>\n<tr>{th}</tr>\n{body}\n</table>"


def frame_table(df: pd.DataFrame) -> str:
    return table(list(df.columns), df.itertuples(index=False))


def commands(row, name: str) -> str:
    """``name``'s launch commands, where its table has them, as a shell block."""
    lines = launch_lines(row, indent="")
    if not lines:
        return ""
    return f"<h3>{escape(name)}</h3>\n<pre>{escape(chr(10).join(lines))}</pre>"


def _note(lines: list[str]) -> str:
    text = " ".join(line.strip() for line in lines if line.strip())
    return para(text, "muted") if text else ""


# --- a study ------------------------------------------------------------------------------------
def study_html(designs: pd.DataFrame, brief, axes, meta: dict, x: str = "cost_per_mtok",
               y: str = "p95_ttft_s") -> str:
    """A study's verdict (as ``sweep report`` prints it): the designs that meet the brief and
    their launch commands, the plot of ``x`` against ``y``, then the failing designs."""
    brief = list(brief)
    v = verdict(designs, brief)
    agg = v.agg
    levers = varying(agg, [c for c in axes if c in agg.columns])
    metrics = [m for m in SHOWN_METRICS if m in agg.columns]
    metrics += [lim.key for lim in brief if is_metric(lim.key) and lim.key not in metrics
                and lim.key in agg.columns]
    n, ok = len(agg), len(v.passing)
    seeds = sorted({int(s) for s in agg["seeds"]}) if "seeds" in agg.columns and n else []
    each = (f", {seeds[0]} seeds each" if len(seeds) == 1
            else f", {seeds[0]}-{seeds[-1]} seeds each" if seeds else "")
    sections = [para(f"Sweep verdict: {n} designs{each}; {ok} meet the brief, {n - ok} do not. "
                     "A design meets the brief when its mean metrics meet every limit; p_pass "
                     "is the share of seeds that met every limit."),
                _brief_section(brief), _baseline_section(v, brief, levers, metrics),
                _passing_section(v, levers, metrics), _study_plot(v, agg, brief, levers, x, y),
                _family_section(v, agg, levers, metrics)]
    if len(v.truncated):
        ids = ", ".join(str(int(d)) for d in v.truncated["design"])
        sections.append(para(f"Warning: truncated simulations (step bound hit before the end) "
                             f"in {len(v.truncated)} design(s); do not trust their metrics: "
                             f"{ids}", "warn"))
    sections.append(_note(transferred_lines(agg)))
    return page(f"{meta.get('name', 'study')}: sweep report", sections)


def _brief_section(brief, slo=None) -> str:
    items = [f"{limit_text(lim)} [{'metric' if is_metric(lim.key) else 'lever'}]"
             for lim in brief]
    items += [f"{k} <= {v:g} per request" for k, v in (slo or {}).items()]
    body = "".join(f"<li>{escape(i)}</li>" for i in items) or "<li>no limits</li>"
    return f"<h2>Brief ({len(items)} limits)</h2>\n<ul>{body}</ul>"


def _design_rows(rows: pd.DataFrame, metrics, levers) -> str:
    head = ["design", "p_pass", *metrics, *levers, "note"]
    body = []
    for _, r in rows.iterrows():
        note = "; ".join(w for w, on in (("queue growing", _mean(r, "unstable") > 0.5),
                                          ("TRUNCATED: untrusted", _mean(r, "truncated") > 0))
                         if on)
        body.append([int(r["design"]), r.get("p_pass", math.nan), *(r[m] for m in metrics),
                     *(r[c] for c in levers), note])
    return table(head, body)


def _mean(row, key: str) -> float:
    value = pd.to_numeric(row.get(key, 0.0), errors="coerce")
    return 0.0 if pd.isna(value) else float(value)


def _baseline_section(v, brief, levers, metrics) -> str:
    """The starting design: its metrics against the brief, and what it misses."""
    b = v.baseline
    shown = dict.fromkeys([lim.key for lim in brief if is_metric(lim.key)] + metrics
                          + ["tokens_per_s", "unstable", "truncated"] + [lim.key for lim in brief])
    one = b.to_frame().T
    rows = []
    for key in (k for k in shown if k in b.index):
        lo, hi = b.get(f"{key}_ci_low", math.nan), b.get(f"{key}_ci_high", math.nan)
        status = "; ".join(f"{'MISSES' if miss_sides(one, lim)[0] else 'meets'} "
                           f"{limit_text(lim)}" for lim in brief if lim.key == key)
        rows.append([key, b[key], lo, hi, status])
    if v.baseline_misses:
        growing = "(queue still growing)" if _mean(b, "unstable") > 0.5 else ""
        said = "It " + "; ".join(miss_label(lim, miss_sides(one, lim)[0], growing)
                                 for lim in v.baseline_misses) + "."
    else:
        said = "It meets the brief."
    return (f"<h2>Starting design {int(b['design'])}</h2>\n"
            + para(levers_text(b, levers)) + "\n"
            + table(["metric", "mean", "95% CI low", "95% CI high", "against the brief"], rows)
            + "\n" + para(said))


def _passing_section(v, levers, metrics) -> str:
    shown = v.passing.head(MAX_LISTED)
    parts = [f"<h2>Designs that meet the brief ({len(v.passing)}), cheapest first</h2>"]
    if not len(v.passing):
        return parts[0] + "\n" + para("none")
    parts.append(_design_rows(shown, metrics, levers))
    if len(v.passing) > MAX_LISTED:
        parts.append(para(f"... and {len(v.passing) - MAX_LISTED} more (designs.parquet)"))
    blocks = [commands(r, f"design {int(r['design'])}: {levers_text(r, levers)}")
              for _, r in shown.iterrows()]
    if any(blocks):
        parts += ["<h2>Launch commands</h2>", *filter(None, blocks)]
    return "\n".join(parts)


def _family_section(v, agg, levers, metrics) -> str:
    parts = [f"<h2>Failing designs by what they miss ({len(v.failures)} designs, "
             f"{len(v.families)} families)</h2>"]
    if not v.families:
        parts.append(para("none"))
    by_id = agg.set_index("design", drop=False)
    for f in v.families:
        word = "design" if f.count == 1 else "designs"
        parts.append(f"<h3>{escape(f.label)}: {f.count} {word}</h3>")
        parts.append(para("misses " + ", ".join(limit_text(lim) for lim in f.limits)))
        parts.append(_design_rows(by_id.loc[f.designs[:max(EXAMPLES, FAMILY_ROWS)]], metrics,
                                  levers))
        rest = f.designs[max(EXAMPLES, FAMILY_ROWS):]
        if rest:
            parts.append(para(f"... and {len(rest)} more: {', '.join(map(str, rest))}"))
    return "\n".join(parts)


def _study_plot(v, agg, brief, levers, x: str, y: str) -> str:
    """Every design placed by ``x`` and ``y``, named on hover, the brief's limits dashed."""
    if x not in agg.columns or y not in agg.columns:
        return ""
    vals = agg[[x, y]].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)
    finite = np.isfinite(vals).all(axis=1)
    front = pareto_mask(vals) & finite
    points = []
    for i, (_, r) in enumerate(agg.iterrows()):
        d = int(r["design"])
        passes = bool(v.meets.get(d, False))
        said = ("meets the brief" if passes else
                "; ".join(miss_label(lim) for lim in v.failures.get(d, [])) or "fails the brief")
        label = (f"design {d}: {x}={_num(vals[i, 0])}, {y}={_num(vals[i, 1])}; {said}"
                 + ("; on the Pareto frontier" if front[i] else "")
                 + f" | {levers_text(r, levers)}")
        kind = "front" if passes and front[i] else "pass" if passes else "fail"
        points.append(Point(vals[i, 0], vals[i, 1], label, kind))
    rules = [Rule(axis, float(bound), f"{lim.key} {word} {_num(bound)}")
             for lim in brief for axis, key in (("x", x), ("y", y)) if lim.key == key
             for bound, word in ((lim.min, ">="), (lim.max, "<=")) if bound is not None]
    off = int((~finite).sum())
    head = f"<h2>{escape(y)} against {escape(x)}: {len(agg)} designs</h2>"
    tail = para(f"{off} designs off the plot (no finite value)", "muted") if off else ""
    return "\n".join([head, para("Hover a point for its design and metrics."),
                      scatter_svg(points, unit(x) + ", lower is better",
                                  unit(y) + ", lower is better", rules,
                                  caption=f"{y} against {x}"), tail])


# --- a capacity search --------------------------------------------------------------------------
def capacity_html(cap: pd.DataFrame, fleet, meta: dict, mixed=None) -> str:
    """A capacity search's table (each design's capacity and what bounds it), its cheapest
    fleets for the target, each with the commands that serve it."""
    levers = [c for c in meta.get("axes", []) if c in cap.columns]
    conf = meta["capacity"]["confidence"]
    sections = [para(f"Capacity of {len(cap)} designs, {len(meta['seeds'])} seeds each: a "
                     f"design carries a load when at least {conf:.0%} of its seeds meet the "
                     "brief there."),
                _brief_section([Limit(**lim) for lim in meta["brief"]], meta.get("slo"))]
    target = meta.get("target_rate")
    if target is not None:
        sections.append(_fleet_section(cap, fleet, levers, target, mixed))
    carrying = cap[cap["max_rate"] > 0].sort_values(["cost_per_mtok_at_max", "design"])
    order = pd.concat([carrying, cap[cap["max_rate"] <= 0].sort_values("design")])
    rows = [[int(r["design"]), _load_text(r) if r["max_rate"] > 0 else "nothing",
             r["binding"], r["cost_per_mtok_at_max"], r["usd_per_hour"],
             levers_text(r, levers), r["why"] if r["max_rate"] <= 0 else ""]
            for _, r in order.iterrows()]
    sections += [f"<h2>Capacity ({len(carrying)} of {len(cap)} designs carry load within the "
                 "brief), cheapest at capacity first</h2>",
                 table(["design", "max rate or clients", "bound by",
                        "$ per million tokens at capacity", "$/hour", "levers", "why"], rows),
                 _capacity_plot(carrying, levers)]
    if target is None:
        blocks = [commands(r, f"design {int(r['design'])}: {levers_text(r, levers)}")
                  for _, r in carrying.head(MAX_LISTED).iterrows()]
        if any(blocks):
            sections += ["<h2>Launch commands</h2>", *filter(None, blocks)]
    sections.append(_note(transferred_lines(cap)))
    return page(f"{meta.get('name', 'capacity')}: capacity report", sections)


def _capacity_plot(carrying: pd.DataFrame, levers) -> str:
    """Each design that carries load: its capacity against its cost at capacity, named on
    hover."""
    points = [Point(float(r["cost_per_mtok_at_max"]), float(r["max_rate"]),
                    f"design {int(r['design'])}: {_load_text(r)}, "
                    f"{_num(r['cost_per_mtok_at_max'])} $/M tokens at capacity, bound by "
                    f"{r['binding']} | {levers_text(r, levers)}", "pass")
              for _, r in carrying.iterrows()]
    if not points:
        return ""
    return "\n".join(["<h2>Capacity against cost</h2>",
                      para("Hover a point for its design; to the upper left is better."),
                      scatter_svg(points, unit("cost_per_mtok") + " at capacity, lower is better",
                                  "capacity (requests/s, or clients), higher is better",
                                  caption="capacity against cost at capacity")])


def _fleet_section(cap, fleet, levers, target: float, mixed) -> str:
    """The cheapest confirmed fleets for ``target`` requests/s, the unconfirmed ones and the
    cheapest mixed fleet, each with its launch commands."""
    by_design = cap.set_index("design")
    parts = [f"<h2>Cheapest fleets for {target:g} requests/s within the brief</h2>"]
    fleet = fleet if fleet is not None else pd.DataFrame(columns=["confirmed"])
    good = fleet[fleet["confirmed"].astype(bool)]
    if not len(good):
        parts.append(para(f"No fleet was confirmed to serve {target:g} requests/s within the "
                          "brief."))
    rows, blocks = [], []
    for k, (_, r) in enumerate(fleet.iterrows()):
        design = levers_text(by_design.loc[int(r["design"])], levers)
        rows.append([int(r["replicas"]), int(r["design"]), design, r["fleet_usd_per_hour"],
                     r["cost_per_mtok"], r["p_pass"],
                     "confirmed" if r["confirmed"] else f"not confirmed: {r['note']}"])
        if r["confirmed"] and k < 3:
            blocks.append(commands(r, f"{int(r['replicas'])} x design {int(r['design'])} "
                                      f"({design}), {_money(r['fleet_usd_per_hour'])}/hour"))
    if rows:
        parts.append(table(["replicas", "design", "levers", "fleet $/hour",
                            "$ per million tokens", "p_pass", "simulated whole"], rows))
    parts += [b for b in blocks if b]
    if mixed is not None:
        ok = mixed[mixed["confirmed"].astype(bool)]
        if len(ok):
            mix = ok[ok["mix"] == ok["mix"].iloc[0]]
            parts.append("<h3>Cheapest mixed fleet</h3>")
            parts.append(table(["replicas", "design", "share of the load", "fleet $/hour",
                                "$ per million tokens"],
                               [[int(r["replicas"]), int(r["design"]), r["share"],
                                 r["fleet_usd_per_hour"], r["cost_per_mtok"]]
                                for _, r in mix.iterrows()]))
            parts += [commands(r, f"{int(r['replicas'])} x design {int(r['design'])}")
                      for _, r in mix.iterrows()]
        else:
            parts.append(para("Mixed fleets: none was confirmed, or none is cheaper than one "
                              "design's."))
    return "\n".join(parts)


# --- a validation -------------------------------------------------------------------------------
FLAGS = tuple(m for m, kind in METRICS.items() if kind == "b")


def validation_html(comparisons: pd.DataFrame, summaries: dict) -> str:
    """A validation's summaries (titled tables, as ``sweep validate`` prints them), its plots
    (one per unit, each point named on hover) and its predicted against measured, case by
    case and metric by metric."""
    rows, points = [], {}
    for r in comparisons.itertuples(index=False):
        if r.metric in FLAGS:
            rows.append([r.case, r.group, r.gpu, r.gpus, r.metric,
                         "true" if r.measured else "false", f"flagged in "
                         f"{round(r.flagged_share * r.seeds)}/{r.seeds} seeds", "", "",
                         "PASS" if r.passed else "FAIL"])
            continue
        error = "n/a" if pd.isna(r.error_pct) else f"{r.error_pct:+.1f}%"
        rows.append([r.case, r.group, r.gpu, r.gpus, r.metric, r.measured, r.predicted,
                     r.predicted_lo, r.predicted_hi, error])
        points.setdefault(unit_of(r.metric), []).append(Point(
            float(r.measured), float(r.predicted),
            f"{r.case}: {r.metric} measured {_num(r.measured)}, predicted {_num(r.predicted)} "
            f"({error}); {r.gpu} x{r.gpus}, {r.group}"))
    cases = comparisons["case"].nunique()
    sections = [para(f"{cases} cases, {len(comparisons)} comparisons: the simulator's prediction "
                     "(the mean over seeds, with its 90% interval) against what the real "
                     "server measured.")]
    for title, df in summaries.items():
        if len(df):
            sections += [f"<h2>{escape(title)}</h2>", frame_table(df)]
    for u, pts in points.items():
        sections += [f"<h2>The plot, metrics in {escape(u)}</h2>",
                     para("Hover a point for its case and metric; the line is predicted = "
                          "measured."),
                     scatter_svg(pts, f"measured ({u})", f"predicted ({u}, mean over seeds)",
                                 diagonal=True, caption=f"predicted against measured, {u}")]
    sections += ["<h2>Predicted against measured</h2>",
                 table(["case", "group", "gpu", "tp", "metric", "measured", "predicted",
                        "90% low", "90% high", "error"], rows)]
    return page(f"Validation: {cases} cases", sections)
