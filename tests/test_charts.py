"""Charts: gridlines at round values of their kind, and room for every tick label, even at a phone's size."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from buildreport.http import humanize
from buildreport.insights import charts
from buildreport.insights.charts import MAX_INTERVALS, Scale, Series, label_room, text_width, tick_label, ticks


def evenly_spaced(values: list[float]) -> bool:
    step = values[1] - values[0]
    return all(b - a == pytest.approx(step, rel=1e-9) for a, b in itertools.pairwise(values))


@given(st.integers(min_value=0, max_value=10**12))
def test_integer_ticks_are_whole_numbers_at_whole_positions(highest):
    values = ticks(highest, Scale.INTEGER)
    assert values[0] == 0 and values[-1] >= highest
    assert all(float(v).is_integer() for v in values)
    assert 2 <= len(values) <= MAX_INTERVALS + 1 and evenly_spaced(values)


@given(st.one_of(st.just(0.0), st.floats(min_value=1e-6, max_value=1e9)), st.sampled_from(list(Scale)))
def test_ticks_cover_the_highest_value_in_a_few_even_steps(highest, scale):
    values = ticks(highest, scale)
    assert values[0] == 0 and values[-1] >= highest
    assert 2 <= len(values) <= MAX_INTERVALS + 1 and evenly_spaced(values)
    if len(values) > 2:
        assert values[-2] < highest  # the axis ends at the first step at or above the highest value


@pytest.mark.parametrize(
    ("highest", "scale", "expected"),
    [
        (5, Scale.INTEGER, [0, 2, 4, 6]),  # never a gridline at 2.5 labelled "2"
        (3, Scale.INTEGER, [0, 1, 2, 3]),
        (38, Scale.INTEGER, [0, 10, 20, 30, 40]),
        (0, Scale.INTEGER, [0, 1]),
        (1.0, Scale.NUMBER, [0, 0.25, 0.5, 0.75, 1.0]),
        (2500, Scale.DURATION, [0, 900, 1800, 2700]),  # 15m, 30m, 45m rather than "20m 50s" and "41m 40s"
        (40, Scale.DURATION, [0, 10, 20, 30, 40]),
        (50, Scale.DURATION, [0, 15, 30, 45, 60]),
        (5 * 3600, Scale.DURATION, [0, 7200, 14400, 21600]),
    ],
)
def test_ticks(highest, scale, expected):
    assert ticks(highest, scale) == expected


def test_a_count_chart_labels_each_gridline_with_its_own_value():
    svg = str(charts.stacked_bars("t", ["a", "b"], [Series("n", "s-ok", [5, 3])], lambda v: f"{v:,.0f}",
                                  Scale.INTEGER))
    lines = [float(y) for y in re.findall(r'<line class="grid" [^>]*y1="([\d.]+)"', svg)]
    labels = [int(t) for t in re.findall(r'<text class="tick" [^>]*dy="0.35em" text-anchor="end">([^<]+)</text>', svg)]
    assert labels == [0, 2, 4, 6]
    bottom, top = lines[0], lines[-1]
    for y, label in zip(lines, labels, strict=True):
        assert (bottom - y) / (bottom - top) == pytest.approx(label / 6)


@pytest.mark.parametrize("text", ["15m 0s", "1h 0m 0s", "1d 0h 0m"])
def test_tick_labels_drop_trailing_zero_parts(text):
    assert tick_label(lambda _: text, 0).split()[-1][0] != "0"
    assert tick_label(lambda _: "0s", 0) == "0s"


@pytest.mark.parametrize("highest", [2500, 4531, 86_000, 10**6])
def test_every_tick_label_has_room_left_of_the_plot(highest):
    """The widest label, at the phone's font size, ends before the left edge of the chart: nothing is cut off
    (a 2,500-second axis once showed its top label "41m 40s" with its first digit cut)."""
    svg = str(charts.lines("t", ["a"], [Series("p95", "s-p95", [highest])], humanize.duration, Scale.DURATION))
    ticks_drawn = re.findall(r'<text class="tick" x="([\d.]+)" [^>]*text-anchor="end">([^<]+)</text>', svg)
    assert ticks_drawn
    for x, text in ticks_drawn:
        assert float(x) - text_width(text) >= 0, text


def test_label_room_grows_with_the_widest_label():
    assert label_room(["0s"]) >= text_width("0s") + charts.GAP
    assert label_room(["0s", "1d 12h"]) > label_room(["0s", "45m"]) >= text_width("45m") + charts.GAP
