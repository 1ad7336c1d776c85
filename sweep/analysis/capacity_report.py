"""A capacity search in plain words: the cheapest fleet for the target (of one design, or
mixed), then each design's capacity and what stops the designs that carry nothing."""
from __future__ import annotations

import math

import pandas as pd

from sweep.analysis.report import launch_lines, levers_text, limit_text, transferred_lines, wrap
from sweep.study.config import Limit


def _money(x: float) -> str:
    return f"${x:,.2f}" if x >= 1 else f"${x:.3g}"


def render_capacity(cap: pd.DataFrame, fleet: pd.DataFrame | None, meta: dict,
                    shown: int = 10, mixed: pd.DataFrame | None = None) -> str:
    """A capacity search in plain words: the cheapest confirmed fleet for the target (and
    mixed fleet, with ``mixed``), or the designs by their cost at capacity; then what stops
    the designs that carry nothing. Each fleet, or without a target each design that carries
    load, with the commands that serve it (where its table has them)."""
    levers = [c for c in meta.get("axes", []) if c in cap.columns]
    conf = meta["capacity"]["confidence"]
    lines = [f"Capacity of {len(cap)} designs, {len(meta['seeds'])} seeds each: a design carries "
             f"a load when at least {conf:.0%} of its seeds meet the brief there."]
    brief = [Limit(**lim) for lim in meta["brief"]]
    slo = meta.get("slo") or {}
    lines += wrap("Brief: " + ", ".join([limit_text(lim) for lim in brief]
                                        + [f"{k} <= {v:g} per request" for k, v in slo.items()]),
                  indent="", more="  ")
    carrying = cap[cap["max_rate"] > 0].sort_values(["cost_per_mtok_at_max", "design"])
    target = meta.get("target_rate")
    by_design = cap.set_index("design")

    def design_text(row) -> str:  # a fleet's design, its own replicas lever included
        return levers_text(by_design.loc[int(row["design"])], levers)

    if target is not None:
        good = fleet[fleet["confirmed"]] if fleet is not None and len(fleet) else fleet
        if good is None or not len(good):
            lines.append(f"No fleet was confirmed to serve {target:g} requests/s within the brief"
                         + (" (no design carries any load within it)." if not len(carrying)
                            else ": the cheapest candidates missed it when simulated whole."))
        else:
            for k, (_, row) in enumerate(good.head(3).iterrows()):
                text = (f"{int(row['replicas'])} x ({design_text(row)}), "
                        f"{_money(row['fleet_usd_per_hour'])}/hour, "
                        f"{_money(row['cost_per_mtok'])} per million tokens")
                lines += wrap(f"To serve {target:g} requests/s within the brief: {text}."
                              if k == 0 else f"next: {text}", indent="" if k == 0 else "  ")
                lines += launch_lines(row)
        if fleet is not None and len(fleet):
            for _, row in fleet[~fleet["confirmed"]].iterrows():
                lines += wrap(f"not confirmed: {int(row['replicas'])} x "
                              f"({design_text(row)}): {row['note']}") + launch_lines(row)
        if mixed is not None:
            lines += _mixed_lines(mixed, design_text, good)
    lines.append(f"{len(carrying)} designs carry load within the brief; by cost at capacity:"
                 if len(carrying) else "No design carries any load within the brief.")
    for _, row in carrying.head(shown).iterrows():
        lines += wrap(f"design {int(row['design'])}: {_load_text(row)}, "
                      f"{_money(row['cost_per_mtok_at_max'])} per million tokens "
                      f"at capacity, {_money(row['usd_per_hour'])}/hour; bound by "
                      f"{row['binding']} | {levers_text(row, levers)}")
        if target is None:
            lines += launch_lines(row)
    if len(carrying) > shown:
        lines.append(f"  ... and {len(carrying) - shown} more (capacity.parquet)")
    none = cap[cap["max_rate"] <= 0]
    if len(none):
        lines.append(f"{len(none)} designs carry nothing within the brief:")
        for binding, group in none.groupby("binding", sort=True):
            lines += wrap(f"{len(group)} bound by {binding}, e.g. design "
                          f"{int(group['design'].iloc[0])}: {group['why'].iloc[0]}")
    return "\n".join(lines + transferred_lines(cap))


def _mixed_lines(mixed: pd.DataFrame, design_text, good) -> list[str]:
    """The cheapest confirmed mix of designs, against the cheapest confirmed single-design
    fleet; or why there is none."""
    ok = mixed[mixed["confirmed"]]
    if not len(ok):
        return wrap("Mixed fleets: " + ("none was confirmed when simulated whole."
                                        if len(mixed) else "no mix of designs is cheaper than "
                                        "the cheapest fleet of one design."), indent="")
    mix = ok[ok["mix"] == ok["mix"].iloc[0]]
    parts = [f"{int(r['replicas'])} x ({design_text(r)}, {r['share']:.0%} of the load)"
             for _, r in mix.iterrows()]
    usd = float(mix["fleet_usd_per_hour"].iloc[0])
    than = ""
    if good is not None and len(good):
        single = float(good["fleet_usd_per_hour"].min())
        than = (f" ({_money(single - usd)}/hour less than one design's)" if usd < single
                else f" (no cheaper than one design's, {_money(single)}/hour)")
    return wrap(f"Mixed fleet: {' + '.join(parts)}, {_money(usd)}/hour{than}, "
                f"{_money(float(mix['cost_per_mtok'].iloc[0]))} per million tokens.", indent="") \
        + [line for _, r in mix.iterrows() for line in launch_lines(r)]


def _load_text(row) -> str:
    """A design's capacity: requests/s (sessions/s) and their bracket, or a closed loop's
    clients."""
    if "max_concurrency" in row.index:
        high = row["max_concurrency_high"]
        more = f"{high:.0f} do not" if math.isfinite(high) else "censored"
        return f"{int(row['max_concurrency'])} clients ({more}), {row['max_rate']:.4g} requests/s"
    high, low = row["max_rate_high"], row["max_rate_low"]
    bracket = f"{low:.4g}..{high:.4g}" if math.isfinite(high) else f">= {low:.4g}, censored"
    unit = "sessions/s" if isinstance(row.get("turns_dist"), str) else "requests/s"
    return f"{row['max_rate']:.4g} {unit} ({bracket})"
