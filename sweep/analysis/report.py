"""The verdict of a sweep against a brief, and a plain-text report of it.

A brief is a list of limits (``sweep.study.config.Limit``) on metrics or lever columns. The
report follows the "Serve a Model" story: the passing designs, cheapest first; what the starting
server misses; the failing designs grouped by what they miss, in words ("fails on queueing").

**When a design passes.** A design *meets the brief* when every limit is met by its **mean**
metric over seeds (lever columns are compared as they are); a NaN mean misses its limit. The
share of seeds whose own run met every limit (``p_pass``, when the aggregate has it) is reported
alongside, not folded in: a design can meet the brief on its means with ``p_pass`` below 1 and
the reader should see that. Truncated simulations (``truncated`` mean > 0) are kept in every
list but flagged there and warned about: their metrics are not to be trusted.

``passes`` (``METRICS``) is the engine's pass count; the verdict is ``meets_brief``.
"""
from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sweep.analysis.launch import LAUNCH_COLUMNS
from sweep.physics.hardware import CATALOG
from sweep.study.metric_names import METRICS

#: Suffixes of the per-metric statistics in an aggregate.
STAT_SUFFIXES = ("_std", "_ci_low", "_ci_high")
#: Columns of an aggregate that are neither levers nor metrics.
BOOKKEEPING = ("design", "seed", "seeds", "p_pass", "passes", "meets_brief", *LAUNCH_COLUMNS)
#: Metrics shown for every design listed, before the brief's own metrics.
SHOWN_METRICS = ("cost_per_mtok", "p95_ttft_s", "p95_itl_ms")
WIDTH = 119
EXAMPLES = 3  # designs shown per failing family
MORE_IDS = 20  # further ids listed per family


# ------------------------------------------------------------------------------ limits
def _bound(lim, name):
    b = getattr(lim, name, None)
    return None if b is None else float(b)


def limit_text(lim) -> str:
    lo, hi = _bound(lim, "min"), _bound(lim, "max")
    if lo is not None and hi is not None:
        return f"{_num(lo)} <= {lim.key} <= {_num(hi)}"
    if lo is not None:
        return f"{lim.key} >= {_num(lo)}"
    if hi is not None:
        return f"{lim.key} <= {_num(hi)}"
    return f"{lim.key} (no bound)"


def metric_base(key: str) -> str | None:
    """The metric a column measures (``p95_ttft_s_ci_high`` -> ``p95_ttft_s``), or None."""
    if key in METRICS:
        return key
    for s in STAT_SUFFIXES:
        if key.endswith(s) and key[: -len(s)] in METRICS:
            return key[: -len(s)]
    return None


def is_metric(key: str) -> bool:
    """A metric or one of its statistics (``_std``, ``_ci_low``, ``_ci_high``)."""
    return metric_base(key) is not None


def _values(agg: pd.DataFrame, key: str) -> np.ndarray:
    if key not in agg.columns:
        metrics = [m for m in METRICS if m in agg.columns]
        levers = lever_columns(agg)
        raise ValueError(f"limit key {key!r} is not a column of the aggregate; metrics: "
                         f"{', '.join(metrics)}; levers: {', '.join(levers)}")
    return pd.to_numeric(agg[key], errors="coerce").to_numpy(dtype=np.float64)


def miss_sides(agg: pd.DataFrame, lim) -> np.ndarray:
    """Per row: "" when the limit is met, else "min", "max" or "nan" (no value)."""
    v = _values(agg, lim.key)
    lo, hi = _bound(lim, "min"), _bound(lim, "max")
    side = np.full(v.shape, "", dtype=object)
    if hi is not None:
        side[v > hi] = "max"
    if lo is not None:
        side[v < lo] = "min"
    if lo is not None or hi is not None:
        side[np.isnan(v)] = "nan"
    return side


def meets_brief(agg: pd.DataFrame, brief) -> pd.Series:
    """Boolean Series (aligned with ``agg``): every limit of ``brief`` met by the mean metrics."""
    ok = np.ones(len(agg), dtype=bool)
    for lim in brief or []:
        ok &= miss_sides(agg, lim) == ""
    return pd.Series(ok, index=agg.index, name="meets_brief")


def miss_label(lim, side: str = "max", unstable: str = "") -> str:
    """Words for missing one limit, in the spirit of the "Serve a Model" document.

    TTFT -> "fails on queueing" (+ ``unstable``, e.g. "(queue still growing)"); ITL/TPOT ->
    "fails on time per token"; cost -> "over the cost ceiling"; a lever column -> "below the
    quality floor" (missing a max on a lever: "above the <key> limit"); any other metric (or
    ``p_pass``) -> "misses <key>". A metric's statistic (``p95_ttft_s_ci_high``) is labelled as
    its metric. ``side == "nan"`` adds "(<key> undefined)".
    """
    key = lim.key
    base = metric_base(key)
    if base is not None:
        low = base.lower()
        if "ttft" in low:
            text = "fails on queueing" + (f" {unstable}" if unstable else "")
        elif "itl" in low or "tpot" in low:
            text = "fails on time per token"
        elif low.startswith("cost"):
            text = "over the cost ceiling"
        else:
            text = f"misses {key}"
    elif key in BOOKKEEPING:
        text = f"misses {key}"
    else:
        text = f"above the {key} limit" if side == "max" else "below the quality floor"
    return text + (f" ({key} undefined)" if side == "nan" else "")


# ------------------------------------------------------------------------------ verdict
@dataclass
class Family:
    """Failing designs that miss the same limits (on the same sides)."""

    limits: tuple  # the Limit objects missed, in brief order
    sides: tuple  # "min" / "max" / "nan" for each
    labels: tuple  # words for each missed limit
    label: str  # the labels joined
    designs: list  # design ids, cheapest first
    unstable: int  # members whose queue still grows (unstable mean > 0.5)

    @property
    def count(self) -> int:
        return len(self.designs)


@dataclass
class Verdict:
    """The outcome of a sweep against a brief (see the module docstring for "meets")."""

    passing: pd.DataFrame  # designs meeting the brief, cheapest first, with p_pass
    baseline: pd.Series  # the starting design's row
    baseline_misses: list  # the Limit objects the starting design misses
    failures: dict  # design id -> list of Limit objects it misses (by the mean)
    families: list  # Family, largest first
    truncated: pd.DataFrame  # designs with truncated > 0 (untrusted)
    meets: pd.Series = field(repr=False, default=None)  # design id -> bool
    agg: pd.DataFrame = field(repr=False, default=None)


def _mean(row, key, default=np.nan) -> float:
    try:
        return float(row[key]) if key in row.index else default
    except (TypeError, ValueError):
        return default


def _unstable(row) -> bool:
    return _mean(row, "unstable", 0.0) > 0.5


def _cheapest_first(df: pd.DataFrame) -> pd.DataFrame:
    cost = (pd.to_numeric(df["cost_per_mtok"], errors="coerce") if "cost_per_mtok" in df
            else pd.Series(np.nan, index=df.index))
    key = pd.DataFrame({"cost": cost.fillna(np.inf).to_numpy(),
                        "design": df["design"].to_numpy()})
    order = np.lexsort((key["design"].to_numpy(), key["cost"].to_numpy()))
    return df.iloc[order]


def verdict(agg: pd.DataFrame, brief, baseline: int | None = None) -> Verdict:
    """Judge every design of ``agg`` against ``brief``.

    A design passes when **every limit is met by its mean metrics** (lever columns as they are;
    NaN misses). ``p_pass`` (the share of seeds that met every limit) is carried alongside and
    does not decide. ``baseline`` is the starting design's id (default: the smallest id, the
    grid's first point). Raises ValueError for an unknown limit key or baseline id.
    """
    brief = list(brief or [])
    if "design" not in agg.columns:
        raise ValueError("the aggregate has no 'design' column")
    agg = agg.reset_index(drop=True)
    sides = {i: miss_sides(agg, lim) for i, lim in enumerate(brief)}
    ok = meets_brief(agg, brief).to_numpy()
    ids = agg["design"].to_numpy()

    passing = agg.loc[ok].copy()
    if "p_pass" not in passing.columns:
        passing["p_pass"] = np.nan
    passing = _cheapest_first(passing)

    if baseline is None:
        if len(agg) == 0:
            raise ValueError("the aggregate is empty")
        baseline = int(agg["design"].min())
    hit = np.flatnonzero(ids == baseline)
    if hit.size == 0:
        raise ValueError(f"baseline design {baseline} is not in the aggregate")
    base_row = agg.iloc[hit[0]]
    base_misses = [lim for i, lim in enumerate(brief) if sides[i][hit[0]] != ""]

    failures = {}
    groups: dict[tuple, list[int]] = {}
    for r in np.flatnonzero(~ok):
        missed = tuple((i, sides[i][r]) for i in range(len(brief)) if sides[i][r] != "")
        failures[int(ids[r])] = [brief[i] for i, _ in missed]
        groups.setdefault(missed, []).append(r)

    unstable = (pd.to_numeric(agg["unstable"], errors="coerce").fillna(0).to_numpy() > 0.5
                if "unstable" in agg.columns else np.zeros(len(agg), dtype=bool))
    families = []
    for missed, rows in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        sub = _cheapest_first(agg.iloc[rows])
        n_unst = int(unstable[rows].sum())
        growing = ("" if n_unst == 0 else "(queue still growing)" if n_unst == len(rows)
                   else f"(queue still growing in {n_unst} of {len(rows)})")
        labels = tuple(miss_label(brief[i], s, growing) for i, s in missed)
        families.append(Family(
            limits=tuple(brief[i] for i, _ in missed), sides=tuple(s for _, s in missed),
            labels=labels, label="; ".join(labels),
            designs=[int(d) for d in sub["design"]], unstable=n_unst))

    trunc = (pd.to_numeric(agg["truncated"], errors="coerce").fillna(0).to_numpy() > 0
             if "truncated" in agg.columns else np.zeros(len(agg), dtype=bool))
    truncated = agg.loc[trunc].sort_values("design", kind="mergesort")
    meets = pd.Series(ok, index=pd.Index(ids, name="design"), name="meets_brief")
    return Verdict(passing, base_row, base_misses, failures, families, truncated, meets, agg)


# ------------------------------------------------------------------------------ text
def _num(x) -> str:
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, (float, np.floating)):
        x = float(x)
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        if x == int(x) and abs(x) < 1e15:
            return str(int(x))
        return f"{x:.4g}"
    return str(x)


def lever_columns(agg: pd.DataFrame) -> list[str]:
    """The aggregate's lever and workload columns: neither bookkeeping nor metric statistics."""
    out = []
    for c in agg.columns:
        if c not in BOOKKEEPING and not is_metric(c):
            out.append(c)
    return out


def varying(agg: pd.DataFrame, columns) -> list[str]:
    """The columns (of ``columns``, in that order) that take more than one value in ``agg``."""
    return [c for c in columns if c in agg.columns and agg[c].nunique(dropna=False) > 1]


_NBSP = "\u00a0"  # joins words that must stay on one line; textwrap does not break at it


def _keep(text: str) -> str:
    return text.replace(" ", _NBSP)


def wrap(text: str, indent: str = "  ", more: str = "      ") -> list[str]:
    lines = textwrap.wrap(text, width=WIDTH, initial_indent=indent, subsequent_indent=more,
                          break_long_words=True, break_on_hyphens=False) or [indent.rstrip()]
    return [line.replace(_NBSP, " ") for line in lines]


def levers_text(row, levers) -> str:
    return " ".join(f"{c}={_num(row[c])}" for c in levers) if levers else "(no varying lever)"


def _design_lines(row, metrics, levers) -> list[str]:
    parts = [f"design {_num(row['design'])}:"]
    if "p_pass" in row.index:
        parts.append(f"p_pass={_num(row['p_pass'])}")
    parts += [f"{m}={_num(row[m])}" for m in metrics if m in row.index]
    if _unstable(row):
        parts.append(_keep("[queue growing]"))
    if _mean(row, "truncated", 0.0) > 0:
        parts.append(_keep("[TRUNCATED: untrusted]"))
    text = " ".join(parts) + " | " + levers_text(row, levers)
    return wrap(text, "  ", "      ")


def own_command(row) -> dict:
    """Of a row's launch commands, its own engine's alone (``launch_lines`` of it prints one)."""
    engine = row.get("engine")
    engine = engine if isinstance(engine, str) else "vllm"
    return {"engine": engine, f"launch_{engine}": row.get(f"launch_{engine}")}


def launch_lines(row, indent: str = "      ") -> list[str]:
    """The row's launch commands where its table has them (of a vLLM design, vLLM's and
    SGLang's; of another engine's, that engine's): each a shell command whose lines end in a
    backslash where it wraps (a flag and its value kept together), then its note as comment
    lines."""
    lines = []
    engine = row.get("engine")
    engine = engine if isinstance(engine, str) and engine != "vllm" else None
    for col in ([f"launch_{engine}"] if engine else LAUNCH_COLUMNS[:2]):
        text = row.get(col)
        if not isinstance(text, str):
            continue
        for command in text.split("\n"):
            command, _, note = command.partition("  # ")
            head, *flags = command.split(" --")
            line = indent + head
            for flag in flags:
                if len(line) + len(flag) + 3 > WIDTH - 2:
                    lines.append(line + " \\")
                    line = indent + "    --" + flag
                else:
                    line += " --" + flag
            lines.append(line)
            if note:
                lines += wrap(note, indent + "# ", indent + "# ")
    return lines


def _metric_list(brief, agg) -> list[str]:
    out = [m for m in SHOWN_METRICS if m in agg.columns]
    out += [lim.key for lim in brief if is_metric(lim.key) and lim.key not in out
            and lim.key in agg.columns]
    return out


def _ci(row, key) -> str:
    if METRICS.get(key) == "b":
        return " (share of seeds)"
    lo, hi = f"{key}_ci_low", f"{key}_ci_high"
    if lo in row.index and hi in row.index:
        return f" (95% CI {_num(row[lo])} .. {_num(row[hi])})"
    return ""


def render(v: Verdict, brief, columns=None, max_passing: int = 50) -> str:
    """A plain-text report (lines < 120 characters, deterministic): the brief; the starting
    design, its metrics and the limits it misses; the designs that meet the brief, cheapest
    first, each with its launch commands; each failing family with its label, count and
    examples; a warning for truncated simulations; and a note for GPUs whose factors were
    transferred. ``columns``: the lever columns to consider (default: every lever column of
    the aggregate); only those that vary across designs are shown per design. At most
    ``max_passing`` passing designs are listed (the cheapest), then a count."""
    brief = list(brief or [])
    agg = v.agg if v.agg is not None else pd.concat([v.passing, v.truncated])
    levers = varying(agg, lever_columns(agg) if columns is None else list(columns))
    metrics = _metric_list(brief, agg)
    lines = (_brief_lines(v, brief, agg) + _baseline_lines(v, brief, levers, metrics)
             + _passing_lines(v, levers, metrics, max_passing)
             + _family_lines(v, agg, levers, metrics) + _truncated_lines(v)
             + transferred_lines(agg))
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _brief_lines(v: Verdict, brief, agg: pd.DataFrame) -> list[str]:
    n = len(agg)
    seeds = ""
    if "seeds" in agg.columns and n:
        s = sorted(set(int(x) for x in agg["seeds"]))
        seeds = f", {s[0]} seeds each" if len(s) == 1 else f", {s[0]}-{s[-1]} seeds each"
    lines = [f"Sweep verdict: {n} designs{seeds}; {len(v.passing)} meet the brief, "
             f"{n - len(v.passing)} do not.",
             "A design meets the brief when its mean metrics meet every limit; p_pass is the "
             "share of seeds that met every limit.", "", f"Brief ({len(brief)} limits):"]
    for lim in brief:
        kind = "metric" if is_metric(lim.key) else "lever"
        lines += wrap(f"{limit_text(lim)}  [{kind}]", "  ", "    ")
    if not brief:
        lines.append("  (no limits)")
    return lines + [""]


def _baseline_lines(v: Verdict, brief, levers, metrics) -> list[str]:
    """The starting design: its levers, its metrics against the brief, and what it misses."""
    b = v.baseline
    lines = wrap(f"Starting design {_num(b['design'])}: {levers_text(b, levers)}", "", "    ")
    shown = list(dict.fromkeys([lim.key for lim in brief if is_metric(lim.key)] + metrics
                               + ["tokens_per_s", "unstable", "truncated"]
                               + [lim.key for lim in brief]))
    base_df = b.to_frame().T

    def base_side(lim) -> str:
        return miss_sides(base_df, lim)[0]

    for key in (k for k in shown if k in b.index):
        status = ""
        for lim in brief:
            if lim.key == key:
                status += f"  {'MISSES' if base_side(lim) else 'meets'} {limit_text(lim)}"
        lines += wrap(f"{key} = {_num(b[key])}{_ci(b, key) if is_metric(key) else ''}{status}",
                      "  ", "    ")
    if v.baseline_misses:
        growing = "(queue still growing)" if _unstable(b) else ""
        words = "; ".join(miss_label(lim, base_side(lim), growing)
                          for lim in v.baseline_misses)
        lines += wrap(f"It {words}.", "  ", "    ")
    else:
        lines.append("  It meets the brief.")
    return lines + [""]


def _passing_lines(v: Verdict, levers, metrics, max_passing: int) -> list[str]:
    """The passing designs, cheapest first, each with the commands that serve it."""
    lines = [f"Designs that meet the brief ({len(v.passing)}), cheapest first:"]
    if len(v.passing) == 0:
        lines.append("  none")
    for _, row in v.passing.head(max_passing).iterrows():
        lines += _design_lines(row, metrics, levers) + launch_lines(row)
    if len(v.passing) > max_passing:
        lines.append(f"  ... and {len(v.passing) - max_passing} more "
                     "(Verdict.passing has them all)")
    return lines + [""]


def _family_lines(v: Verdict, agg: pd.DataFrame, levers, metrics) -> list[str]:
    """Each family of failing designs: its label, what it misses, a few examples."""
    lines = [f"Failing designs by what they miss ({len(v.failures)} designs, "
             f"{len(v.families)} families):"]
    if not v.families:
        lines.append("  none")
    by_id = agg.set_index("design", drop=False)
    for f in v.families:
        word = "design" if f.count == 1 else "designs"
        lines += wrap(f"{f.label}: {f.count} {word} (misses "
                      f"{', '.join(_keep(limit_text(lim)) for lim in f.limits)})", "- ", "    ")
        for d in f.designs[:EXAMPLES]:
            lines += _design_lines(by_id.loc[d], metrics, levers)
        rest = f.designs[EXAMPLES:]
        if rest:
            listed = ", ".join(str(d) for d in rest[:MORE_IDS]) + (", ..." if len(rest) > MORE_IDS
                                                                    else "")
            lines += wrap(f"... and {len(rest)} more: {listed}", "  ", "      ")
    return lines


def _truncated_lines(v: Verdict) -> list[str]:
    if not len(v.truncated):
        return []
    tids = [str(int(d)) for d in v.truncated["design"]]
    ids = ", ".join(tids[:MORE_IDS]) + (", ..." if len(tids) > MORE_IDS else "")
    return [""] + wrap(f"WARNING: truncated simulations (step bound hit before the end) in "
                       f"{len(v.truncated)} design(s); do not trust their metrics: {ids}",
                       "", "    ")


def transferred_lines(table: pd.DataFrame) -> list[str]:
    """A note for the GPUs whose factors were transferred from another's real runs: a row's GPU
    as its calibration says, or, of a disaggregated design's pools, each pool's as the catalog
    does."""
    moved = set()
    for rec in table.to_dict("records"):
        cal = str(rec.get("calibration", "")).split("+")[0]  # the GPU's part, not the engine's
        if not cal.startswith("transferred:"):
            continue
        pools = [g for g in (rec.get("prefill_gpu"), rec.get("decode_gpu")) if isinstance(g, str)]
        moved.update((g, CATALOG[g].calibration.removeprefix("transferred:")) for g in pools
                     if g in CATALOG and CATALOG[g].calibration.startswith("transferred:"))
        if not pools:
            moved.add((str(rec.get("gpu")), cal.removeprefix("transferred:")))
    moved = sorted(moved)
    return [""] + wrap("Note: no real runs of " + ", ".join(g for g, _ in moved) + " were "
                       "fitted: " + "; ".join(f"{g} runs with the {src}'s factors"
                                              for g, src in moved)
                       + " (the calibration column; docs/model.md).", "", "  ") if moved else []
