"""SVG charts drawn on the server: no JavaScript, colours from the stylesheet (light and dark), and a
`<title>` on every mark so a pointer or a screen reader tells its value.

Charts scale to their container through `viewBox`; text sizes come from CSS classes, never inline styles,
which the page's Content-Security-Policy forbids.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from markupsafe import Markup

WIDTH, HEIGHT = 720, 220
LEFT, RIGHT, TOP, BOTTOM = 56, 8, 10, 24
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

Format = Callable[[float], str]


@dataclass(frozen=True)
class Series:
    name: str
    css: str  # the class that colours it
    values: Sequence[float | None]


def _nice_max(value: float) -> float:
    """A round number at or above `value` for the top of the axis: 1, 2, 2.5 or 5 times a power of ten."""
    if value <= 0:
        return 1.0
    power = 10.0 ** (len(str(int(value))) - 1) if value >= 1 else 1.0
    while power > value:
        power /= 10
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= value:
            return step * power
    return 10 * power


def _open(title: str, labels: Sequence[str]) -> list[str]:
    return [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" preserveAspectRatio="xMidYMid meet"'
        f' xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
    ]


def _axes(parts: list[str], top: float, fmt: Format, labels: Sequence[str]) -> None:
    for fraction in (0, 0.5, 1):
        y = TOP + PLOT_H * (1 - fraction)
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(
            f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(fmt(top * fraction))}</text>'
        )
    if labels:
        picks = {0, len(labels) - 1, (len(labels) - 1) // 2} if len(labels) > 2 else set(range(len(labels)))
        step = PLOT_W / len(labels)
        for index in sorted(picks):
            x = LEFT + step * (index + 0.5)
            anchor = (
                "start"
                if index == 0 and len(labels) > 1
                else "end"
                if index == len(labels) - 1 and len(labels) > 1
                else "middle"
            )
            if anchor == "start":
                x = LEFT
            elif anchor == "end":
                x = WIDTH - RIGHT
            parts.append(
                f'<text class="tick" x="{x:.1f}" y="{HEIGHT - 6}" text-anchor="{anchor}">{escape(labels[index])}</text>'
            )


def stacked_bars(title: str, labels: Sequence[str], series: Sequence[Series], fmt: Format) -> Markup:
    """One bar per label, the series stacked bottom up in the order given."""
    totals = [sum(s.values[i] or 0 for s in series) for i in range(len(labels))]
    top = _nice_max(max(totals, default=0))
    parts = _open(title, labels)
    _axes(parts, top, fmt, labels)
    step = PLOT_W / max(len(labels), 1)
    width = max(step * 0.78, 1.0)
    for index, label in enumerate(labels):
        x = LEFT + step * index + (step - width) / 2
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


def lines(title: str, labels: Sequence[str], series: Sequence[Series], fmt: Format) -> Markup:
    """One line per series; a missing value breaks the line, and every value has a dot."""
    values = [v for s in series for v in s.values if v is not None]
    top = _nice_max(max(values, default=0))
    parts = _open(title, labels)
    _axes(parts, top, fmt, labels)
    step = PLOT_W / max(len(labels), 1)
    for s in series:
        run: list[str] = []
        runs: list[list[str]] = [run]
        for index, value in enumerate(s.values):
            if value is None:
                run = []
                runs.append(run)
                continue
            x = LEFT + step * (index + 0.5)
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
