"""The rules every statistics figure follows, whether insights/stats.py computes it from a group's builds or
the store keeps it for a day (store/day_figures.py, store/day_summaries.py): the kind each status counts as,
which statuses bill their CPU seconds, and nearest-rank percentiles.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import chain
from math import inf, isqrt

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
# Shorter runs are merged into one list: searching a run for each rank costs about as much as merging this many
# values.
_SHORT = 128


def rank(percent: int, count: int) -> int:
    """The nearest rank (from 1) of a percentile of `count` values: ceil(percent/100 * count), at least 1."""
    return max(1, -(-percent * count // 100))


def nearest_rank(ordered: Sequence[float], percent: int) -> float:
    """The nearest-rank percentile of values sorted ascending."""
    return ordered[rank(percent, len(ordered)) - 1]


def percentiles_of_runs(runs: Sequence[Sequence[float]]) -> Percentiles | None:
    """Percentiles of ascending runs (each part of each status of each stored day): exactly those of all their
    values sorted together, None when every run is empty. Unless two runs or more hold `_SHORT` values or more,
    all runs but the longest are merged into one list, and each rank is found between the two by a binary
    search (in a day most builds are of one status). Otherwise the shorter runs are merged into one list, each
    rank is bracketed by two values of a sample of every run, and only the values between them are sorted:
    merging a month of days (some 150 runs) sorted nearly every value."""
    lengths = [len(run) for run in runs]
    count = sum(lengths)
    if not count:
        return None
    top = max(run[-1] for run in runs if len(run))
    if sum(length >= _SHORT for length in lengths) > 1:
        keep = {at for at, length in enumerate(lengths) if length >= _SHORT}
    else:
        keep = {lengths.index(max(lengths))}
    kept: list[Sequence[float]] = []
    pooled: list[float] = []
    for at, run in enumerate(runs):
        if at in keep:
            kept.append(run)
        else:
            pooled.extend(run)
    pooled.sort()  # ascending runs: the sort merges them
    if len(kept) == 1:
        return Percentiles(*(_kth(kept[0], pooled, rank(percent, count)) for percent in PERCENTS), top)
    if pooled:
        kept.append(pooled)
    return Percentiles(*_bracketed(kept, count), top)


def _bracketed(runs: list[Sequence[float]], count: int) -> list[float]:
    """The percentiles of `count` values in ascending runs, bracketed by a sample of every `step`-th value of each
    run. A run has at most `step` times as many values below a value v as it has sampled values below v, and at
    least `step` times as many at or below v as sampled ones, less `step - 1` (if any). So the k-th value lies
    between the sorted sample's (k-1)//step-th value (from 0) and its (k-1 + (step-1) * runs)//step-th."""
    # Sorting costs about the same per value: count/step sampled ones, against the four ranks' windows of some
    # `step` values of each run.
    step = max(1, isqrt(count // (4 * len(runs))))
    sample: list[float] = []
    for run in runs:
        sample.extend(run[::step])
    sample.sort()
    slack = (step - 1) * len(runs)
    picks = []
    for percent in PERCENTS:
        k = rank(percent, count)
        above = (k - 1 + slack) // step
        pick = _kth_between(runs, k, sample[(k - 1) // step], sample[above] if above < len(sample) else inf)
        if pick is None:  # not with the bounds above, unless a value is NaN
            pick = sorted(chain.from_iterable(runs))[k - 1]
        picks.append(pick)
    return picks


def _kth_between(runs: list[Sequence[float]], k: int, low: float, high: float) -> float | None:
    """The k-th smallest (from 1) value of ascending runs if it lies between `low` and `high`, else None. Only
    the values strictly between them are gathered and sorted: those equal to a bound are counted, as one value
    may be most of them (queue times of 0)."""
    below = upto = past_low = before_high = 0
    inner: list[Sequence[float]] = []
    for run in runs:
        start = bisect_left(run, low)
        end = bisect_right(run, high, start)
        after = bisect_right(run, low, start, end)
        before = bisect_left(run, high, after, end)
        below += start
        upto += end
        past_low += after
        before_high += before
        if after < before:
            inner.append(run[after:before])  # a view of a memoryview, not a copy
    if not below < k <= upto:
        return None
    if k <= past_low:
        return low
    if k > before_high:
        return high
    window: list[float] = []
    for values in inner:
        window.extend(values)
    window.sort()
    return window[k - past_low - 1]


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
