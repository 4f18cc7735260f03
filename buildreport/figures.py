"""The rules every statistics figure follows, whether insights/stats.py computes it from a group's builds or
the store keeps it for a day (store/day_figures.py, store/day_summaries.py): the kind each status counts as,
which statuses bill their CPU seconds, and nearest-rank percentiles.
"""

from __future__ import annotations

from collections.abc import Sequence

from buildreport.models import BILLABLE, DISCARDED, FAILED, SUCCESSFUL, UNFINISHED, Percentiles

KINDS = ("successful", "failed", "discarded", "running")
_KIND_OF = {
    **{s.value: "successful" for s in SUCCESSFUL},
    **{s.value: "failed" for s in FAILED},
    **{s.value: "discarded" for s in DISCARDED},
    **{s.value: "running" for s in UNFINISHED},
}
# A status's place in a group's counts (successful, failed, discarded, running).
KIND_INDEX = {status: KINDS.index(kind) for status, kind in _KIND_OF.items()}
BILLABLE_STATUSES = frozenset(s.value for s in BILLABLE)
# The percentiles answered besides the maximum, in the order of models.Percentiles' fields.
PERCENTS = (50, 90, 95, 99)


def rank(percent: int, count: int) -> int:
    """The nearest rank (from 1) of a percentile of `count` values: ceil(percent/100 * count), at least 1."""
    return max(1, -(-percent * count // 100))


def nearest_rank(ordered: Sequence[float], percent: int) -> float:
    """The nearest-rank percentile of values sorted ascending."""
    return ordered[rank(percent, len(ordered)) - 1]


def percentiles_of_runs(runs: Sequence[Sequence[float]]) -> Percentiles | None:
    """Percentiles of ascending runs (each status of each stored day), without sorting them all: the longest run
    stays where it is (in a day most builds are of one status), the others are merged into one list, and each
    rank is found between the two by a binary search. Turning a year's doubles into floats to sort them cost
    half of a statistics answer by day."""
    lengths = [len(run) for run in runs]
    if not any(lengths):
        return None
    longest = runs[lengths.index(max(lengths))]
    rest: list[float] = []
    for run in runs:
        if run is not longest:
            rest.extend(run)
    rest.sort()  # ascending runs: the sort merges them
    count = len(longest) + len(rest)
    picks = [_kth(longest, rest, rank(percent, count)) for percent in PERCENTS]
    top = max(longest[-1], rest[-1]) if rest else longest[-1]
    return Percentiles(*picks, top)


def _kth(run: Sequence[float], rest: list[float], k: int) -> float:
    """The k-th smallest (from 1) of `run` and `rest` together, both ascending: the number `i` taken from `rest`
    is the least whose next value is not below the run's k-i-th."""
    length = len(run)
    lo, hi = max(0, k - length), min(k, len(rest))
    while lo < hi:
        i = (lo + hi) // 2
        if rest[i] < run[k - i - 1]:
            lo = i + 1
        else:
            hi = i
    taken = k - lo
    if lo == 0:
        return run[taken - 1]
    if taken == 0:
        return rest[lo - 1]
    return max(rest[lo - 1], run[taken - 1])
