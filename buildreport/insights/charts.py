"""SVG charts drawn on the server: no JavaScript, colours from the stylesheet (light and dark), and a
`<title>` on every mark so a pointer or a screen reader tells its value.

Charts scale to their container through `viewBox`; text sizes come from CSS classes, never inline styles,
which the page's Content-Security-Policy forbids.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from html import escape

from markupsafe import Markup

WIDTH, HEIGHT = 720, 220
# Tick labels are 12 units high on a wide screen and 22 on a phone (dashboard.css), where the 720-unit chart is
# drawn about 350 px wide: the margins leave room for the larger size, so no label is ever cut off.
PHONE_TICK_FONT = 22
# Widths of a sans-serif font's characters as a share of its size, rounded up (DejaVu Sans, the widest common
# one); any other character counts as the widest.
_NARROW, _DIGIT, _WIDE = 0.35, 0.64, 1.0
_CHAR_WIDTHS = {**dict.fromkeys(" .,:", _NARROW), **dict.fromkeys("0123456789hsd-+", _DIGIT), "m": _WIDE}
TOP, BOTTOM, RIGHT, GAP = 14, 32, 8, 8
MIN_LEFT = 40
PLOT_H = HEIGHT - TOP - BOTTOM
MAX_INTERVALS = 4

Format = Callable[[float], str]


class Scale(Enum):
    """What a value axis counts, and so which steps its ticks take."""

    NUMBER = "number"  # 1, 2, 2.5 or 5 times a power of ten
    INTEGER = "integer"  # counts: whole steps only, so every tick sits at a whole number
    DURATION = "duration"  # seconds: steps of the clock (15s, 1m, 5m, 15m, 1h, 6h, 1d …)


_DURATION_STEPS = (
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1200, 1800, 3600, 7200, 10_800, 21_600, 43_200, 86_400,
)


@dataclass(frozen=True)
class Series:
    name: str
    css: str  # the class that colours it
    values: Sequence[float | None]


def _steps(scale: Scale, value: float) -> Iterator[float]:
    """Candidate distances between ticks for an axis up to `value`, smallest first, without end."""
    if scale is Scale.DURATION:
        yield from _DURATION_STEPS
        base: float = 86_400
        multiples: tuple[float, ...] = (2, 5, 10)
    elif scale is Scale.INTEGER:
        base, multiples = 1.0, (1, 2, 5)
    else:  # from the power of ten below a quarter of the value: no smaller step can do
        base, multiples = 10.0 ** math.floor(math.log10(value / MAX_INTERVALS)), (1, 2, 2.5, 5)
    while True:
        for multiple in multiples:
            yield multiple * base
        base *= 10


def ticks(value: float, scale: Scale = Scale.NUMBER) -> list[float]:
    """Values of the gridlines for an axis whose highest value is `value`: 0, one step, two … up to the first
    step at or above `value`, at most MAX_INTERVALS steps, each a round number of the scale's kind."""
    if value < 1e-9:  # nothing, or nothing a chart can show
        return [0.0, 1.0]
    for step in _steps(scale, value):
        count = math.ceil(value / step)
        count += step * count < value  # the product rounded below the value
        if count <= MAX_INTERVALS:
            return [step * i for i in range(count + 1)]
    raise AssertionError("unreachable: the steps grow without end")


def tick_label(fmt: Format, value: float) -> str:
    """A tick's text: the value as `fmt` writes it, without trailing zero parts (`15m 0s` is `15m`)."""
    return _ZERO_PARTS.sub("", fmt(value)) or fmt(value)


_ZERO_PARTS = re.compile(r"(?: 0[a-z]+)+$")


def text_width(text: str, size: float = PHONE_TICK_FONT) -> float:
    """At least the width of `text` at font `size`, in the same units."""
    return sum(_CHAR_WIDTHS.get(char, _WIDE) for char in text) * size


def label_room(labels: Sequence[str]) -> int:
    """Units left of the plot for the widest of `labels` at the phone's tick size, and a gap."""
    return max(MIN_LEFT, math.ceil(max((text_width(label) for label in labels), default=0)) + 2 * GAP)


def _open(title: str, labels: Sequence[str]) -> list[str]:
    return [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" preserveAspectRatio="xMidYMid meet"'
        f' xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
    ]


@dataclass(frozen=True)
class _Frame:
    """Where the plot sits: its left edge (after the tick labels), its width, and the value at its top."""

    left: float
    top: float

    @property
    def width(self) -> float:
        return WIDTH - RIGHT - self.left


def _axes(parts: list[str], highest: float, scale: Scale, fmt: Format, labels: Sequence[str]) -> _Frame:
    values = ticks(highest, scale)
    texts = [tick_label(fmt, v) for v in values]
    frame = _Frame(label_room(texts), values[-1])
    for value, text in zip(values, texts, strict=True):
        y = TOP + PLOT_H * (1 - value / frame.top)
        parts.append(f'<line class="grid" x1="{frame.left}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(
            f'<text class="tick" x="{frame.left - GAP}" y="{y:.1f}" dy="0.35em" text-anchor="end">{escape(text)}</text>'
        )
    if labels:
        picks = {0, len(labels) - 1, (len(labels) - 1) // 2} if len(labels) > 2 else set(range(len(labels)))
        step = frame.width / len(labels)
        for index in sorted(picks):
            x = frame.left + step * (index + 0.5)
            anchor = (
                "start"
                if index == 0 and len(labels) > 1
                else "end"
                if index == len(labels) - 1 and len(labels) > 1
                else "middle"
            )
            if anchor == "start":
                x = frame.left
            elif anchor == "end":
                x = WIDTH - RIGHT
            parts.append(
                f'<text class="tick" x="{x:.1f}" y="{HEIGHT - 6}" text-anchor="{anchor}">{escape(labels[index])}</text>'
            )
    return frame


def stacked_bars(
    title: str, labels: Sequence[str], series: Sequence[Series], fmt: Format, scale: Scale = Scale.NUMBER
) -> Markup:
    """One bar per label, the series stacked bottom up in the order given."""
    totals = [sum(s.values[i] or 0 for s in series) for i in range(len(labels))]
    parts = _open(title, labels)
    frame = _axes(parts, max(totals, default=0), scale, fmt, labels)
    top = frame.top
    step = frame.width / max(len(labels), 1)
    width = max(step * 0.78, 1.0)
    for index, label in enumerate(labels):
        x = frame.left + step * index + (step - width) / 2
        base = 0.0
        for s in series:
            value = s.values[index] or 0
            if value <= 0:
                continue
            height = PLOT_H * value / top
            y = TOP + PLOT_H - PLOT_H * base / top - height
            parts.append(
                f'<rect class="{s.css}" x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{height:.1f}">'
                f"<title>{escape(label)}: {escape(s.name)} {escape(fmt(value))}</title></rect>"
            )
            base += value
    parts.append("</svg>")
    return Markup("".join(parts))


def lines(
    title: str, labels: Sequence[str], series: Sequence[Series], fmt: Format, scale: Scale = Scale.NUMBER
) -> Markup:
    """One line per series; a missing value breaks the line, and every value has a dot."""
    values = [v for s in series for v in s.values if v is not None]
    parts = _open(title, labels)
    frame = _axes(parts, max(values, default=0), scale, fmt, labels)
    top = frame.top
    step = frame.width / max(len(labels), 1)
    for s in series:
        run: list[str] = []
        runs: list[list[str]] = [run]
        for index, value in enumerate(s.values):
            if value is None:
                run = []
                runs.append(run)
                continue
            x = frame.left + step * (index + 0.5)
            y = TOP + PLOT_H * (1 - value / top)
            run.append(f"{x:.1f},{y:.1f}")
            parts.append(
                f'<circle class="{s.css}" cx="{x:.1f}" cy="{y:.1f}" r="3">'
                f"<title>{escape(labels[index])}: {escape(s.name)} {escape(fmt(value))}</title></circle>"
            )
        for points in runs:
            if len(points) > 1:
                parts.append(f'<polyline class="{s.css} line" fill="none" points="{" ".join(points)}"/>')
    parts.append("</svg>")
    return Markup("".join(parts))


def compare(title: str, rows: Sequence[tuple[str, float, str]], css: Sequence[str]) -> Markup:
    """Horizontal bars of a few labelled values on one scale, e.g. this month against last month."""
    top = max((value for _, value, _ in rows), default=0) or 1
    height = 34 * len(rows) + 6
    parts = [
        f'<svg class="chart compare" viewBox="0 0 {WIDTH} {height}" role="img" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{escape(title)}</title>"
    ]
    for index, (label, value, text) in enumerate(rows):
        y = 6 + 34 * index
        width = (WIDTH - 260) * value / top
        parts.append(f'<text class="label" x="0" y="{y + 18}">{escape(label)}</text>')
        parts.append(
            f'<rect class="{css[index % len(css)]}" x="150" y="{y}" width="{max(width, 0):.1f}" height="24">'
            f"<title>{escape(label)}: {escape(text)}</title></rect>"
        )
        parts.append(f'<text class="label" x="{150 + width + 8:.1f}" y="{y + 18}">{escape(text)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
