"""A minimal, dependency-free SVG chart writer for the HTML report.

Two chart kinds cover every plot of the report: `xy` (lines, steps and
point clouds on linear axes) and `bars` (grouped bars over categories).
Both return one `<svg class="plot">` element as a string: sized by its
`viewBox` so it scales with the page, with a `<title>` for accessibility,
the axes, "nice" tick values, and a legend. Output is deterministic (same
data, same bytes) and needs no script or font to display.

Coordinates are rounded to 0.1 px; callers keep series small (the report
thins them to a few hundred points, see `report.data`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    import numpy as np

#: Numbers to draw: a list or a numpy array.
Values = Union[Sequence[float], "np.ndarray"]

#: Colour-blind-safe colours (Okabe & Ito), one per run.
PALETTE: tuple[str, ...] = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
#: Dash patterns, one per sweep point.
DASHES: tuple[str, ...] = ("", "7 3", "2 3", "9 3 2 3", "4 4")

WIDTH = 560
HEIGHT = 320
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 62, 16, 34, 46
LEGEND_ROW = 16


@dataclass(frozen=True)
class Series:
    """One thing drawn on an `xy` chart: `kind` is `line` (points joined),
    `markers` (points joined, each marked: a few measured points), `step` (a
    CDF: horizontal then vertical) or `points` (a cloud); `radius` is the
    size of a point's dot."""

    name: str
    x: Values
    y: Values
    color: str = PALETTE[0]
    dash: str = ""
    kind: str = "line"
    radius: float = 2.2


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5 or 5 × 10^k apart) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(target, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.floor(lo / step + 1e-9) * step
    ticks = []
    value = first
    while value <= hi + step * 1e-9:
        if value >= lo - step * 1e-9:
            ticks.append(round(value, 12))
        value += step
    return ticks


def fmt_tick(value: float) -> str:
    """A tick label: 0.5, 12, 2.5k, 1.2M."""
    if value == 0:
        return "0"
    a = abs(value)
    if a >= 1e6:
        return f"{value / 1e6:g}M"
    if a >= 1e4:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def _extent(values: list[float], pad: float = 0.0, zero: bool = False) -> tuple[float, float]:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return 0.0, 1.0
    lo, hi = min(finite), max(finite)
    if zero:
        lo = min(lo, 0.0)
    if hi == lo:
        hi = lo + (abs(lo) or 1.0)
    span = hi - lo
    return lo - span * pad if not zero or lo < 0 else lo, hi + span * pad


class _Frame:
    """Maps data to pixels inside the plot area and draws the axes."""

    def __init__(self, xlim: tuple[float, float], ylim: tuple[float, float], legend_rows: int) -> None:
        self.height = HEIGHT + 8 + legend_rows * LEGEND_ROW
        self.x0, self.x1 = MARGIN_LEFT, WIDTH - MARGIN_RIGHT
        self.y0, self.y1 = MARGIN_TOP, HEIGHT - MARGIN_BOTTOM
        self.xticks = nice_ticks(*xlim)
        self.yticks = nice_ticks(*ylim)
        self.xlim = (min([xlim[0], *self.xticks]), max([xlim[1], *self.xticks])) if self.xticks else xlim
        self.ylim = (min([ylim[0], *self.yticks]), max([ylim[1], *self.yticks])) if self.yticks else ylim

    def px(self, x: float) -> float:
        lo, hi = self.xlim
        return self.x0 + (x - lo) / (hi - lo) * (self.x1 - self.x0)

    def py(self, y: float) -> float:
        lo, hi = self.ylim
        return self.y1 - (y - lo) / (hi - lo) * (self.y1 - self.y0)

    def axes(self, title: str, xlabel: str, ylabel: str) -> list[str]:
        out = [
            f'<text class="title" x="{self.x0}" y="20">{escape(title)}</text>',
            f'<rect class="area" x="{self.x0}" y="{self.y0}" width="{self.x1 - self.x0}" height="{self.y1 - self.y0}"/>',
        ]
        for t in self.yticks:
            y = self.py(t)
            out.append(f'<line class="grid" x1="{self.x0}" x2="{self.x1}" y1="{_r(y)}" y2="{_r(y)}"/>')
            out.append(f'<text class="tick" x="{self.x0 - 6}" y="{_r(y + 4)}" text-anchor="end">{fmt_tick(t)}</text>')
        for t in self.xticks:
            x = _r(self.px(t))
            out.append(f'<line class="grid" x1="{x}" x2="{x}" y1="{self.y0}" y2="{self.y1}"/>')
            out.append(f'<text class="tick" x="{x}" y="{self.y1 + 16}" text-anchor="middle">{fmt_tick(t)}</text>')
        out.append(f'<text class="label" x="{_r((self.x0 + self.x1) / 2)}" y="{self.y1 + 36}" text-anchor="middle">{escape(xlabel)}</text>')
        ymid = _r((self.y0 + self.y1) / 2)
        out.append(f'<text class="label" x="16" y="{ymid}" text-anchor="middle" transform="rotate(-90 16 {ymid})">{escape(ylabel)}</text>')
        return out

    def legend(self, entries: list[tuple[str, str, str, str]]) -> list[str]:
        """entries: (name, colour, dash, kind), laid out two per row below the axes."""
        out = []
        column = (self.x1 - self.x0) / 2
        for i, (name, color, dash, kind) in enumerate(entries):
            x = self.x0 + (i % 2) * column
            y = HEIGHT + 6 + (i // 2) * LEGEND_ROW
            if kind == "points":
                paint = f'fill="{color}"' if not dash else f'fill="none" stroke="{color}"'
                out.append(f'<circle cx="{_r(x + 11)}" cy="{_r(y - 4)}" r="3" {paint}/>')
            elif kind == "bar":
                opacity = ' fill-opacity="0.45"' if dash else ""
                out.append(f'<rect x="{_r(x + 4)}" y="{_r(y - 9)}" width="14" height="9" fill="{color}"{opacity}/>')
            else:
                dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
                out.append(f'<line x1="{x}" x2="{x + 22}" y1="{y - 4}" y2="{y - 4}" stroke="{color}" stroke-width="2"{dash_attr}/>')
            out.append(f'<text class="legend" x="{_r(x + 28)}" y="{y}">{escape(name)}</text>')
        return out


def _r(v: float) -> str:
    text = f"{v:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _svg(title: str, height: int, body: list[str]) -> str:
    return (
        f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="{escape(title)}"><title>{escape(title)}</title>' + "".join(body) + "</svg>"
    )


def empty(title: str, message: str = "no data") -> str:
    """A placeholder chart saying why there is nothing to draw."""
    return _svg(
        title,
        HEIGHT,
        [
            f'<text class="title" x="{MARGIN_LEFT}" y="20">{escape(title)}</text>',
            f'<text class="empty" x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle">{escape(message)}</text>',
        ],
    )


def xy(
    series: list[Series],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    xlim: tuple[float, float] | None = None,
    ylim: tuple[float, float] | None = None,
    x_from_zero: bool = False,
    y_from_zero: bool = True,
) -> str:
    """Lines, CDF steps and point clouds on linear axes, with a legend."""
    drawn = [s for s in series if len(s.x)]
    if not drawn:
        return empty(title)
    xs = [float(v) for s in drawn for v in s.x]
    ys = [float(v) for s in drawn for v in s.y]
    frame = _Frame(xlim or _extent(xs, 0.02, x_from_zero), ylim or _extent(ys, 0.05, y_from_zero), (len(drawn) + 1) // 2)
    body = frame.axes(title, xlabel, ylabel)
    for s in drawn:
        pts = [(frame.px(float(x)), frame.py(float(y))) for x, y in zip(s.x, s.y) if math.isfinite(x) and math.isfinite(y)]
        name = escape(s.name)
        if s.kind == "points":
            dots = "".join(f'<circle cx="{_r(x)}" cy="{_r(y)}" r="{s.radius:g}"/>' for x, y in pts)
            paint = f'fill="{s.color}" fill-opacity="0.55"' if not s.dash else f'fill="none" stroke="{s.color}" stroke-width="1"'
            body.append(f'<g class="series" {paint}><title>{name}</title>{dots}</g>')
            continue
        if s.kind == "step":
            path = []
            for i, (x, y) in enumerate(pts):
                if i == 0:
                    path.append(f"M{_r(x)},{_r(frame.py(0.0))}V{_r(y)}")
                else:
                    path.append(f"H{_r(x)}V{_r(y)}")
            d = "".join(path)
        else:
            d = "".join(f"{'M' if i == 0 else 'L'}{_r(x)},{_r(y)}" for i, (x, y) in enumerate(pts))
        dash_attr = f' stroke-dasharray="{s.dash}"' if s.dash else ""
        body.append(f'<path class="series" d="{d}" fill="none" stroke="{s.color}" stroke-width="1.8"{dash_attr}><title>{name}</title></path>')
        if s.kind == "markers":
            dots = "".join(f'<circle cx="{_r(x)}" cy="{_r(y)}" r="{s.radius:g}"/>' for x, y in pts)
            body.append(f'<g fill="{s.color}"><title>{name}</title>{dots}</g>')
    body += frame.legend([(s.name, s.color, s.dash, s.kind) for s in drawn])
    return _svg(title, frame.height, body)


def bars(
    categories: Sequence[str],
    groups: Sequence[tuple[str, Values, str, str]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    percent: bool = False,
) -> str:
    """Grouped bars: one group per category, one bar per (name, values,
    colour, variant); a non-empty variant (a dash pattern) draws it lighter."""
    if not categories or not groups:
        return empty(title)
    top = max([float(v) for _, values, _, _ in groups for v in values if math.isfinite(v)] + [0.0])
    frame = _Frame((0.0, float(len(categories))), (0.0, top * 1.08 or 1.0), (len(groups) + 1) // 2)
    frame.xticks = []
    body = frame.axes(title, xlabel, ylabel)
    slot = (frame.x1 - frame.x0) / len(categories)
    width = slot * 0.8 / len(groups)
    for c, category in enumerate(categories):
        left = frame.x0 + c * slot + slot * 0.1
        body.append(f'<text class="tick" x="{_r(frame.x0 + (c + 0.5) * slot)}" y="{frame.y1 + 16}" text-anchor="middle">{escape(category)}</text>')
        for g, (name, values, color, variant) in enumerate(groups):
            value = float(values[c])
            if not math.isfinite(value) or value <= 0:
                continue
            y = frame.py(value)
            shown = f"{value:.1%}" if percent else f"{value:g}"
            body.append(
                f'<rect class="series" x="{_r(left + g * width)}" y="{_r(y)}" width="{_r(width)}" height="{_r(frame.y1 - y)}" fill="{color}"'
                + (' fill-opacity="0.45">' if variant else ">")
                + f"<title>{escape(name)}: {escape(category)} → {shown}</title></rect>"
            )
    body += frame.legend([(name, color, variant, "bar") for name, _, color, variant in groups])
    return _svg(title, frame.height, body)
