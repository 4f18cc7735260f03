"""bench/growth.svg: p50 and p99 against the number of builds, one panel per endpoint, in plain SVG.

Both axes are logarithmic: a cost that grows with the data climbs to the right, one that does not stays flat.
A panel per endpoint keeps its lines apart at any latency; each engine has a colour, p50 is solid, p99 dashed.
"""

from __future__ import annotations

import math
from typing import Any
from xml.sax.saxutils import escape

from growth import ENGINE_NAMES, Results, series, size_name, sizes

COLUMNS = 3
PANEL_W, PANEL_H = 330, 200
LEFT, RIGHT, TOP, BOTTOM = 56, 14, 30, 40  # a panel's margins around its plot
LEGEND_H = 56
COLOURS = {"sqlite": "#1f6fb4", "postgresql": "#d1571b"}
DASHES = {"p50": "", "p99": "6 4"}
FONT = 'font-family="sans-serif"'


def decades(low: float, high: float) -> tuple[int, int]:
    """The whole powers of ten around [low, high], at least one decade apart."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    return first, max(last, first + 1)


def ms_label(power: int) -> str:
    value = 10.0**power
    return f"{value:g}" if value >= 0.001 else f"1e{power}"


class Scale:
    """Log10 from a value range onto a pixel range."""

    def __init__(self, low: float, high: float, start: float, end: float) -> None:
        self.low, self.span = math.log10(low), math.log10(high) - math.log10(low)
        self.start, self.end = start, end

    def __call__(self, value: float) -> float:
        return self.start + (math.log10(value) - self.low) / self.span * (self.end - self.start)


def x_range(measured: list[int]) -> tuple[float, float]:
    """The builds axis: every size measured, with half a decade of room when there is one size only."""
    low, high = measured[0], measured[-1]
    return (low / 3, high * 3) if low == high else (low / 1.4, high * 1.4)


def panel(key: str, lines: dict[str, dict[str, Any]], measured: list[int], left: float, top: float) -> list[str]:
    """One endpoint's panel: frame, decade grid, the builds measured, and a path per engine and figure."""
    label = next(iter(lines.values()))["label"]
    values = [v for line in lines.values() for pair in line["points"].values() for v in pair]
    first, last = decades(min(values), max(values))
    x0, x1, y0, y1 = left + LEFT, left + PANEL_W - RIGHT, top + PANEL_H - BOTTOM, top + TOP
    x, y = Scale(*x_range(measured), x0, x1), Scale(10.0**first, 10.0**last, y0, y1)
    title = label if len(label) <= 52 else label[:51] + "…"
    out = [f'<g class="panel" data-endpoint="{escape(key)}">',
           f'<text x="{left + PANEL_W / 2:.1f}" y="{top + 16}" text-anchor="middle" font-size="11" {FONT}>'
           f"{escape(title)}</text>",
           f'<rect x="{x0:.1f}" y="{y1:.1f}" width="{x1 - x0:.1f}" height="{y0 - y1:.1f}" fill="none" stroke="#999"/>']
    for power in range(first, last + 1):
        at = y(10.0**power)
        out += [f'<line x1="{x0:.1f}" y1="{at:.1f}" x2="{x1:.1f}" y2="{at:.1f}" stroke="#e4e4e4"/>',
                f'<text x="{x0 - 4:.1f}" y="{at + 3:.1f}" text-anchor="end" font-size="9" {FONT}>'
                f"{ms_label(power)}</text>"]
    for builds in measured:
        at = x(builds)
        out += [f'<line x1="{at:.1f}" y1="{y0:.1f}" x2="{at:.1f}" y2="{y1:.1f}" stroke="#f0f0f0"/>',
                f'<text x="{at:.1f}" y="{y0 + 12:.1f}" text-anchor="middle" font-size="9" {FONT}>'
                f"{size_name(builds)}</text>"]
    out += [f'<text class="axis-label" x="{(x0 + x1) / 2:.1f}" y="{y0 + 26:.1f}" text-anchor="middle" '
            f'font-size="10" {FONT}>builds (log scale)</text>',
            f'<text class="axis-label" x="{left + 12:.1f}" y="{(y0 + y1) / 2:.1f}" text-anchor="middle" '
            f'font-size="10" {FONT} transform="rotate(-90 {left + 12:.1f} {(y0 + y1) / 2:.1f})">ms (log scale)</text>']
    for engine, line in lines.items():
        for index, figure in enumerate(("p50", "p99")):
            points = [(x(n), y(pair[index])) for n, pair in sorted(line["points"].items())]
            out += series_path(key, engine, figure, points)
    return [*out, "</g>"]


def series_path(key: str, engine: str, figure: str, points: list[tuple[float, float]]) -> list[str]:
    """One series: a path through its points and a dot on each, so a lone point still shows."""
    colour = COLOURS[engine]
    d = " ".join(f"{'M' if i == 0 else 'L'} {px:.1f} {py:.1f}" for i, (px, py) in enumerate(points))
    dash = f' stroke-dasharray="{DASHES[figure]}"' if DASHES[figure] else ""
    out = [f'<path class="series" data-endpoint="{escape(key)}" data-engine="{engine}" data-figure="{figure}" '
           f'd="{d}" fill="none" stroke="{colour}" stroke-width="1.6"{dash}/>']
    out += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.2" fill="{colour}"/>' for px, py in points]
    return out


def legend() -> list[str]:
    """The engines' colours and the two figures' strokes, across the top."""
    out = [f'<text x="12" y="20" font-size="14" font-weight="bold" {FONT}>buildreport: latency at one connection '
           "against the number of builds</text>"]
    at = 12.0
    items = [(ENGINE_NAMES[e], COLOURS[e], "") for e in ENGINE_NAMES]
    items += [("p50", "#444", ""), ("p99", "#444", DASHES["p99"])]
    for name, colour, dash in items:
        stroke = f' stroke-dasharray="{dash}"' if dash else ""
        out += [f'<line class="legend" x1="{at:.1f}" y1="40" x2="{at + 28:.1f}" y2="40" stroke="{colour}" '
                f'stroke-width="2.4"{stroke}/>',
                f'<text x="{at + 34:.1f}" y="44" font-size="11" {FONT}>{escape(name)}</text>']
        at += 44 + 7 * len(name)
    return out


def chart(results: Results) -> str | None:
    """The whole SVG document, or None when no latency was measured."""
    found = series(results)
    if not found:
        return None
    measured = sizes(results)
    endpoints: dict[str, dict[str, dict[str, Any]]] = {}
    for (key, engine), line in found.items():
        endpoints.setdefault(key, {})[engine] = line
    rows = math.ceil(len(endpoints) / COLUMNS)
    width, height = COLUMNS * PANEL_W, LEGEND_H + rows * PANEL_H
    body = legend()
    for index, (key, lines) in enumerate(endpoints.items()):
        left, top = (index % COLUMNS) * PANEL_W, LEGEND_H + (index // COLUMNS) * PANEL_H
        body += panel(key, lines, measured, left, top)
    return "\n".join([f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                      f'viewBox="0 0 {width} {height}">',
                      f'<rect width="{width}" height="{height}" fill="white"/>', *body, "</svg>"]) + "\n"
