"""A scatter plot drawn as SVG text, for a page read in a browser: every point a ``<circle>``
whose ``<title>`` names it, so hovering a point shows what it is without any script. Axes go to
log scale when their values span more than two decades; limits are dashed lines."""
from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 760, 460
LEFT, RIGHT, TOP, BOTTOM = 84, 24, 40, 58
#: A point's look by its kind: (fill, stroke, radius).
LOOKS = {"pass": ("#2ca02c", "#145214", 5.5), "fail": ("#d62728", "#6b1414", 4.0),
         "front": ("#2ca02c", "#000000", 6.5), "point": ("#1f77b4", "#0b2f4d", 5.0)}
DRAWN = ("point", "fail", "pass", "front")  # the order points are drawn in, last on top
LEGEND = {"pass": "meets the brief", "fail": "fails the brief",
          "front": "meets the brief, on the Pareto frontier", "point": "one comparison"}


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    label: str  # shown on hover
    kind: str = "point"  # a key of LOOKS


@dataclass(frozen=True)
class Rule:
    """A limit drawn as a dashed line across the plot at ``value`` on ``axis`` ("x" or "y")."""

    axis: str
    value: float
    label: str


@dataclass(frozen=True)
class Scale:
    lo: float
    hi: float
    log: bool
    start: float  # pixel of ``lo``
    end: float  # pixel of ``hi``

    def __call__(self, v: float) -> float:
        f = ((math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
             if self.log else (v - self.lo) / (self.hi - self.lo))
        return self.start + f * (self.end - self.start)


def _scale(values: list[float], start: float, end: float) -> Scale:
    """The range of ``values`` with a margin: log when all are positive and span > 100x."""
    vals = [v for v in values if math.isfinite(v)] or [0.0, 1.0]
    lo, hi = min(vals), max(vals)
    if lo > 0 and hi / lo > 100.0:
        return Scale(lo / 1.3, hi * 1.3, True, start, end)
    pad = (hi - lo) * 0.06 or abs(hi) * 0.1 or 1.0
    return Scale(lo - pad, hi + pad, False, start, end)


def ticks(s: Scale) -> list[float]:
    """Tick values within the scale: decades on a log scale, 1-2-5 steps on a linear one."""
    if s.log:
        first, last = math.floor(math.log10(s.lo)), math.ceil(math.log10(s.hi))
        steps = (1, 2, 5) if last - first <= 3 else (1,)
        out = [m * 10.0 ** k for k in range(first, last + 1) for m in steps]
    else:
        raw = (s.hi - s.lo) / 6
        mag = 10 ** math.floor(math.log10(raw))
        step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
        out = [step * k for k in range(math.ceil(s.lo / step), math.floor(s.hi / step) + 1)]
    return [t for t in out if s.lo <= t <= s.hi]


def _tick_text(v: float) -> str:
    return f"{v:.3g}" if v != 0 else "0"


def _axes(xs: Scale, ys: Scale, x_label: str, y_label: str) -> list[str]:
    """The frame, grid lines, tick labels and axis labels."""
    out = [f'<rect x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" '
           f'height="{HEIGHT - TOP - BOTTOM}" fill="none" stroke="#444"/>']
    for t in ticks(xs):
        px = xs(t)
        out.append(f'<line x1="{px:.1f}" y1="{TOP}" x2="{px:.1f}" y2="{HEIGHT - BOTTOM}" '
                   'stroke="#ddd"/>')
        out.append(f'<text x="{px:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">'
                   f"{_tick_text(t)}</text>")
    for t in ticks(ys):
        py = ys(t)
        out.append(f'<line x1="{LEFT}" y1="{py:.1f}" x2="{WIDTH - RIGHT}" y2="{py:.1f}" '
                   'stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{py + 4:.1f}" text-anchor="end">'
                   f"{_tick_text(t)}</text>")
    mid_x, mid_y = (LEFT + WIDTH - RIGHT) / 2, (TOP + HEIGHT - BOTTOM) / 2
    out.append(f'<text x="{mid_x:.1f}" y="{HEIGHT - 14}" text-anchor="middle">'
               f"{escape(x_label)}</text>")
    out.append(f'<text x="18" y="{mid_y:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 18 {mid_y:.1f})">{escape(y_label)}</text>')
    return out


def _rules(rules, xs: Scale, ys: Scale) -> list[str]:
    out = []
    for r in rules:
        if r.axis == "x":
            px = xs(r.value)
            out.append(f'<line x1="{px:.1f}" y1="{TOP}" x2="{px:.1f}" y2="{HEIGHT - BOTTOM}" '
                       f'stroke="#1f4fb4" stroke-dasharray="6 4"><title>{escape(r.label)}'
                       "</title></line>")
            out.append(f'<text x="{px + 4:.1f}" y="{TOP + 14}" fill="#1f4fb4">'
                       f"{escape(r.label)}</text>")
        else:
            py = ys(r.value)
            out.append(f'<line x1="{LEFT}" y1="{py:.1f}" x2="{WIDTH - RIGHT}" y2="{py:.1f}" '
                       f'stroke="#7b1fa2" stroke-dasharray="6 4"><title>{escape(r.label)}'
                       "</title></line>")
            out.append(f'<text x="{WIDTH - RIGHT - 4}" y="{py - 4:.1f}" text-anchor="end" '
                       f'fill="#7b1fa2">{escape(r.label)}</text>')
    return out


def _legend(kinds: list[str]) -> list[str]:
    out, x = [], LEFT
    for kind in kinds:
        fill, stroke, r = LOOKS[kind]
        out.append(f'<circle cx="{x + 6}" cy="{TOP - 16}" r="{r}" fill="{fill}" '
                   f'stroke="{stroke}"/>')
        out.append(f'<text x="{x + 16}" y="{TOP - 12}">{escape(LEGEND[kind])}</text>')
        x += 26 + 7 * len(LEGEND[kind])
    return out


def scatter_svg(points, x_label: str, y_label: str, rules=(), diagonal: bool = False,
                caption: str = "") -> str:
    """One ``<svg>`` element: ``points`` (non-finite ones left off; on a log axis, those not
    positive too), ``rules`` dashed, and with ``diagonal`` both axes on one range with the line
    y = x. ``caption`` is the plot's accessible title."""
    rules = [r for r in rules if math.isfinite(r.value)]
    xv = [p.x for p in points] + [r.value for r in rules if r.axis == "x"]
    yv = [p.y for p in points] + [r.value for r in rules if r.axis == "y"]
    if diagonal:
        xv = yv = xv + yv
    xs = _scale(xv, LEFT, WIDTH - RIGHT)
    ys = _scale(yv, HEIGHT - BOTTOM, TOP)
    out = [f'<svg width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11" '
           f'role="img" aria-label="{escape(caption)}">']
    out += _axes(xs, ys, x_label, y_label)
    if diagonal:
        out.append(f'<line x1="{xs(xs.lo):.1f}" y1="{ys(xs.lo):.1f}" x2="{xs(xs.hi):.1f}" '
                   f'y2="{ys(xs.hi):.1f}" stroke="#000" stroke-width="0.8">'
                   "<title>predicted = measured</title></line>")
    out += _rules(rules, xs, ys)
    placed = [p for p in points if _placeable(p.x, xs) and _placeable(p.y, ys)]
    out += _legend(list(dict.fromkeys(p.kind for p in placed)))
    # Passing points over failing ones, the frontier's over both: a passing design is never hidden.
    for p in sorted(placed, key=lambda p: DRAWN.index(p.kind)):
        fill, stroke, r = LOOKS[p.kind]
        out.append(f'<circle cx="{xs(p.x):.1f}" cy="{ys(p.y):.1f}" r="{r}" fill="{fill}" '
                   f'fill-opacity="0.8" stroke="{stroke}"><title>{escape(p.label)}</title>'
                   "</circle>")
    out.append("</svg>")
    return "\n".join(out)


def _placeable(v: float, s: Scale) -> bool:
    return math.isfinite(v) and (v > 0 or not s.log)
