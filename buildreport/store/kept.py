"""Which kept (derived) figures may answer a filter: each kept table declares, next to its definition, the
filter fields it holds apart (names of filter_spec.FILTER_FIELDS), the period its rows cover and how many tag
pairs it answers for; `answers` is the one rule that reads them. A filter restricting any field a table does not
declare (a field added to the specification later, say) is answered from the builds instead."""

from __future__ import annotations

from typing import NamedTuple

import msgspec

from buildreport.filter_spec import FIELDS_BY_NAME
from buildreport.filters import BuildFilter, set_fields
from buildreport.times import US_PER_DAY, now_us

US_PER_HOUR = US_PER_DAY // 24

# The fields every table of figures by creation time declares: its rows are whole periods of that time.
# How rows of a totals table (builds, CPU seconds, duration, NAR bytes, first start, last stop) add up into one:
# sums add, and the first start and last stop are the least and greatest of theirs.
SUMMED_FIGURES = (
    "sum(builds), sum(cpu_seconds), sum(duration_us), sum(nar_size_bytes), min(first_start_us), max(last_stop_us)"
)
WINDOW = frozenset({"create_time_from", "create_time_to"})


class KeptTable(NamedTuple):
    """A table of figures the writer keeps in step with the builds."""

    name: str
    fields: frozenset[str]  # the filter fields its rows are kept apart by
    period_us: int  # each row covers whole periods of this length (UTC hours or days)
    tag_pairs: int = 0  # the number of tag pairs a filter must name for it to answer (a row is of one pair)

    def check(self) -> KeptTable:
        """The table itself, once its fields are known to be the specification's."""
        unknown = self.fields - FIELDS_BY_NAME.keys()
        if unknown:
            raise ValueError(f"{self.name} names fields the filter specification does not have: {sorted(unknown)}")
        return self


def answers(table: KeptTable, build_filter: BuildFilter) -> bool:
    """Whether the table holds figures for the filter: every field the filter restricts is one the table keeps
    apart, with the number of tag pairs it is kept for. Its whole periods only; the edges come from builds."""
    return set_fields(build_filter) <= table.fields and len(build_filter.tags) == table.tag_pairs


def whole_periods(table: KeptTable, low: int, high: int | None) -> tuple[int, int | None] | None:
    """The first and the end of the table's whole periods inside `[low, high)` (end None: no bound), or None
    when the window holds none."""
    period = table.period_us
    first = -(-low // period) * period
    end = None if high is None else high // period * period
    if end is not None and end <= first:
        return None
    return first, end


def whole_and_edges(table: KeptTable, build_filter: BuildFilter) -> tuple[int, int, list[BuildFilter]] | None:
    """The first and the end of the table's whole periods in the filter's window, and the filters of the edges
    before and after them, which the builds answer; None when the window holds no whole period. An open window's
    whole periods end now (never at the newest build, which may be dated far ahead): later builds are an edge."""
    low, high = build_filter.create_from_us, build_filter.create_to_us
    whole = whole_periods(table, low, high if high is not None else max(now_us(), low))
    if whole is None:
        return None
    first, end = whole
    assert end is not None  # the window was given an end
    edges = [
        msgspec.structs.replace(build_filter, create_from_us=edge_low, create_to_us=edge_high)
        for edge_low, edge_high in ((low, first), (end, high))
        if edge_high is None or edge_low < edge_high
    ]
    return first, end, edges
