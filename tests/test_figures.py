"""The rank rule every percentile follows, and the k-th smallest of several sorted runs without merging them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from buildreport.insights.figures import KIND_INDEX, KINDS, rank, smallest_at
from buildreport.models import BuildStatus

# Few distinct values, so that runs share values and ranks fall inside runs of equal ones.
runs_of = st.lists(st.lists(st.integers(0, 12).map(float)).map(sorted), min_size=1, max_size=6).filter(any)


@given(runs_of, st.data())
def test_the_kth_smallest_of_sorted_runs_is_that_of_all_their_values_sorted(runs, data):
    merged = sorted(value for run in runs for value in run)
    at = data.draw(st.integers(1, len(merged)))
    assert smallest_at(runs, at) == merged[at - 1]


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1), st.integers(1, 100))
def test_a_rank_is_the_ceiling_of_the_percent_of_the_count(values, percent):
    at = rank(percent, len(values))
    assert 1 <= at <= len(values)
    assert (at - 1) * 100 < percent * len(values) <= at * 100 or at == 1


def test_every_status_counts_as_one_kind():
    assert set(KIND_INDEX) == {status.value for status in BuildStatus}
    assert set(KIND_INDEX.values()) == set(range(len(KINDS)))
