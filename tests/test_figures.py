"""The rank rule every percentile follows, and the kind each status counts as."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from buildreport.figures import KIND_INDEX, KINDS, rank
from buildreport.models import BuildStatus


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1), st.integers(1, 100))
def test_a_rank_is_the_ceiling_of_the_percent_of_the_count(values, percent):
    at = rank(percent, len(values))
    assert 1 <= at <= len(values)
    assert (at - 1) * 100 < percent * len(values) <= at * 100 or at == 1


def test_every_status_counts_as_one_kind():
    assert set(KIND_INDEX) == {status.value for status in BuildStatus}
    assert set(KIND_INDEX.values()) == set(range(len(KINDS)))
