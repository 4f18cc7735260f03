"""The rules every statistics figure follows, whether stats.py computes it from a group's builds or from a day's
kept figures (store/day_figures.py): the kind each status counts as, which statuses bill their
CPU seconds, and nearest-rank percentiles.
"""

from __future__ import annotations

from collections.abc import Sequence

from buildreport.models import BILLABLE, DISCARDED, FAILED, SUCCESSFUL, UNFINISHED

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
