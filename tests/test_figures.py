"""The rank rule every percentile follows, the percentiles of ascending runs, and the kind each status counts as."""

from __future__ import annotations

import math
import random
from array import array
from collections.abc import Sequence
from itertools import chain
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from buildreport.figures import KIND_INDEX, KINDS, PERCENTS, percentiles_of_runs, rank
from buildreport.models import BuildStatus, Percentiles


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1), st.integers(1, 100))
def test_a_rank_is_the_ceiling_of_the_percent_of_the_count(values, percent):
    at = rank(percent, len(values))
    assert 1 <= at <= len(values)
    assert (at - 1) * 100 < percent * len(values) <= at * 100 or at == 1


def test_every_status_counts_as_one_kind():
    assert set(KIND_INDEX) == {status.value for status in BuildStatus}
    assert set(KIND_INDEX.values()) == set(range(len(KINDS)))


def as_run(values: list[float], view: bool) -> Sequence[float]:
    """Values sorted, as a list or as a stored day's doubles are read: a view of their bytes."""
    values = sorted(values)
    return memoryview(array("d", values).tobytes()).cast("d") if view else values


def plain_percentiles(runs: list[Sequence[float]]) -> Percentiles | None:
    ordered = sorted(chain.from_iterable(runs))
    if not ordered:
        return None
    picks = (ordered[max(1, math.ceil(p * len(ordered) / 100)) - 1] for p in PERCENTS)
    return Percentiles(*picks, ordered[-1])


@st.composite
def long_values(draw: st.DrawFn) -> list[float]:
    """Hundreds to thousands of values, from one distinct value to all distinct."""
    distinct = draw(st.sampled_from([1, 2, 3, 5, 60, 2**40]))
    rng = random.Random(draw(st.integers(0, 2**32)))
    return [rng.randrange(distinct) / 8 for _ in range(draw(st.integers(100, 2000)))]


SHORT_VALUES = st.lists(st.sampled_from([0.0, 0.5, 1.0, 7200.125]) | st.floats(0, 1e9), max_size=12)
TINY_VALUES = st.lists(st.sampled_from([0.0, 1.0, 2.0]) | st.floats(0, 10), max_size=3)
# Runs, each a list or a view: several, most long; or up to hundreds of tiny ones (or one, or none).
RUNS = st.lists(st.tuples(long_values() | SHORT_VALUES, st.booleans()), min_size=2, max_size=16) | st.lists(
    st.tuples(TINY_VALUES, st.booleans()), max_size=300
)


@settings(deadline=None)
@given(RUNS)
def test_percentiles_of_runs_equal_those_of_all_their_values_sorted(runs):
    """Whatever the runs (one, many tiny ones, long ones with ties within and across them, empty ones, lists or
    views of doubles), the percentiles are those of all the values sorted together; None without values."""
    runs = [as_run(values, view) for values, view in runs]
    assert percentiles_of_runs(runs) == plain_percentiles(runs)


@pytest.mark.parametrize("runs", [2, 3, 12])
@pytest.mark.parametrize("ties", [True, False])
def test_a_median_on_the_last_value_below_the_upper_half_is_that_value(ties, runs):
    """Each run holds 400 values below 1 (0s and 0.5s, or all distinct), then 400 2s: the median is the largest
    value below 1."""
    rng = random.Random(runs)
    halves = [sorted(rng.choice([0.0, 0.5]) if ties else rng.random() for _ in range(400)) for _ in range(runs)]
    ranked = percentiles_of_runs([as_run([*half, *[2.0] * 400], view=at % 2 == 0) for at, half in enumerate(halves)])
    assert ranked == Percentiles(max(half[-1] for half in halves), 2.0, 2.0, 2.0, 2.0)


class CountedRun(Sequence[float]):
    """An ascending run that counts the values read from it, one by one or by slices."""

    def __init__(self, values: Sequence[float]) -> None:
        self.values = values
        self.read = 0

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, at: Any) -> Any:
        part = self.values[at]
        self.read += len(part) if isinstance(at, slice) else 1
        return part


def month_of_days(ties: bool = True) -> list[Sequence[float]]:
    """150 runs (30 days of 5 statuses) of some 2,000 values each, whole seconds with many ties (or all
    distinct); a few runs empty or of a handful of values."""
    rng = random.Random(5)
    runs: list[Sequence[float]] = []
    for day in range(30):
        for status in range(5):
            length = rng.choice([0, 3, 40]) if (day + status) % 11 == 0 else rng.randrange(1_800, 2_200)
            values = [rng.lognormvariate(3, 1.5) for _ in range(length)]
            if ties:
                values = [float(round(value)) for value in values]
            runs.append(as_run(values, view=status != 4))
    return runs


def test_percentiles_of_a_month_of_days_equal_those_of_their_values_sorted():
    """Some 280,000 values with many ties, in 150 runs: the percentiles are those of all of them sorted."""
    runs = month_of_days()
    assert sum(map(len, runs)) > 250_000
    assert percentiles_of_runs(runs) == plain_percentiles(runs)


@pytest.mark.parametrize("ties", [True, False])
def test_percentiles_of_a_month_of_days_read_a_fraction_of_their_values(ties):
    """Neither merged nor sorted whole: most values of the month's runs are never read."""
    runs = [CountedRun(run) for run in month_of_days(ties)]
    assert percentiles_of_runs(runs) == plain_percentiles([run.values for run in runs])
    assert sum(run.read for run in runs) < sum(map(len, runs)) // 4
