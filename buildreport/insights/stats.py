"""Statistics over builds, grouped: counts, success rate, CPU and exact percentiles.

Pure functions over the rows the store yields (see store/stats_queries.py), so every figure is
computed one way, in one place, and can be checked against a plain computation in a test.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import msgspec

from buildreport.figures import BILLABLE_STATUSES, KIND_INDEX, nearest_rank, percentiles_of_runs
from buildreport.filters import MAX_TIME_GROUPS, GroupBy, StatsQuery
from buildreport.models import BuildStatsGroup, Percentiles, UsageBreakdownGroup
from buildreport.store import day_figures, day_summaries
from buildreport.storepath import derivation_name
from buildreport.times import US_PER_DAY, format_us, from_us

US_PER_HOUR = US_PER_DAY // 24
_PERIODS = {"day": US_PER_DAY, "hour": US_PER_HOUR}
# A part of a group's durations or queue times: a stored day's doubles, ascending (a view of the row's value,
# never copied), or the values of builds read one by one, in no order (a list of floats).
Values = Sequence[float]
# A day's kept summary gives its percentiles, already ranked, in place of its values.
Part = Values | Percentiles


def period_key(kind: str, start_us: int) -> str:
    """A time group's key: the UTC date, or the hour as RFC 3339."""
    return from_us(start_us).date().isoformat() if kind == "day" else format_us(start_us)


# The figures of a row of stats_queries.stats_rows: of one status, or of every kind of build.
_BY_STATUS = msgspec.json.Decoder(tuple[int, int, list[float], list[float]])
_BY_KIND = msgspec.json.Decoder(tuple[int, int, int, int, int, int, list[float], list[float]])


class Newest(NamedTuple):
    """The newest build of a group, for a link to it."""

    create_us: int
    build_id: int
    status: str
    derivation_path: str


def newest_build(marks: Iterable[tuple[str, str | None]]) -> Newest | None:
    """The newest of `(derivation path, mark)` pairs, a mark being `create_us build_id status` zero-padded
    (so the greatest text is the newest build), or None when no mark is given."""
    path, mark = max(((p, m) for p, m in marks if m is not None), key=lambda pair: pair[1], default=(None, None))
    if path is None or mark is None:
        return None
    create_us, build_id, status = mark.split()
    return Newest(int(create_us), int(build_id), status, path)


class _Parts:
    """A group's durations (or queue times) as the parts its rows gave, kept apart rather than joined: a stored
    day's part is a view of its row's value, so a year of them costs no copy (joined, they took more memory than
    the rows themselves). Rows are grouped more than once (the dashboard), so no part is ever changed."""

    __slots__ = ("ordered", "parts", "ranked")

    def __init__(self) -> None:
        self.parts: list[Values] = []
        self.ordered = True  # every part is a stored day's, each ascending
        # A whole day's kept percentiles: they stand for all of the group's values, so they join nothing else
        # (a grouping by day gives a whole day one summary and no other row).
        self.ranked: Percentiles | None = None

    def add(self, part: Part) -> None:
        if isinstance(part, Percentiles):
            self._alone(bool(self.parts) or self.ranked is not None)
            self.ranked = part
        elif part:
            self._alone(self.ranked is not None)
            self.parts.append(part)
            self.ordered = self.ordered and not isinstance(part, list)

    @staticmethod
    def _alone(joined: bool) -> None:
        if joined:
            raise ValueError("a day's kept percentiles cannot be joined with other values")

    def values(self) -> list[float]:
        """Every value, as one list of its own (joined by `extend`, which copies a list's items in C)."""
        self._alone(self.ranked is not None)
        joined: list[float] = []
        for part in self.parts:
            joined.extend(part)
        return joined

    def in_order(self) -> list[float]:
        """Every value ascending; the group keeps them so, as one part, for what it is asked next."""
        if len(self.parts) != 1 or not isinstance(self.parts[0], list) or not self.ordered:
            merged = self.values()
            merged.sort()
            self.parts, self.ordered = [merged], True
        return self.parts[0]  # type: ignore[return-value]

    def percentiles(self) -> Percentiles | None:
        if self.ranked is not None:
            return self.ranked
        if self.ordered:
            return percentiles_of_runs(self.parts)
        # Values read one by one (a window's edges) are sorted apart, stored days left as they are: a month of a
        # common tag value is mostly stored days.
        return percentiles_of_runs([sorted(part) if isinstance(part, list) else part for part in self.parts])


class _Group:
    """One group's sums, filled from its rows."""

    __slots__ = ("billable_cpu", "build_count", "counts", "cpu", "durations", "queues")

    def __init__(self) -> None:
        self.counts = [0, 0, 0, 0]  # successful, failed, discarded, running
        self.build_count = 0
        self.cpu = 0
        self.billable_cpu = 0
        self.durations = _Parts()
        self.queues = _Parts()

    def add(self, figures: _Figures) -> None:
        counts, cpu, billable_cpu, durations, queues = figures
        own = self.counts
        own[0] += counts[0]
        own[1] += counts[1]
        own[2] += counts[2]
        own[3] += counts[3]
        self.build_count += counts[0] + counts[1] + counts[2] + counts[3]
        self.cpu += cpu
        self.billable_cpu += billable_cpu
        self.durations.add(durations)
        self.queues.add(queues)

    def p95_duration(self) -> float | None:
        """The nearest-rank p95 of the durations, for ranking groups (`result` reuses their order)."""
        ordered = self.durations.in_order()
        return nearest_rank(ordered, 95) if ordered else None

    def result(self, key: str, with_percentiles: bool = True) -> BuildStatsGroup:
        ok, failed, discarded, running = self.counts
        return BuildStatsGroup(
            key=key,
            build_count=self.build_count,
            running_build_count=running,
            discarded_build_count=discarded,
            failed_build_count=failed,
            successful_build_count=ok,
            success_rate=ok / (ok + failed) if ok + failed else None,
            total_cpu_seconds=self.cpu,
            billable_cpu_seconds=self.billable_cpu,
            duration_seconds=self.durations.percentiles() if with_percentiles else None,
            queue_time_seconds=self.queues.percentiles() if with_percentiles else None,
        )


# (successful, failed, discarded, running), CPU seconds, billable CPU seconds, durations, queue times
_Figures = tuple[tuple[int, int, int, int], int, int, Part, Part]
_NO_BUILDS = (0, 0, 0, 0)


def _figures(status: str | None, text: str | bytes | None) -> _Figures:
    """The figures of a row of stats_rows: of builds of one status, or of every kind. The numbers are decoded
    from the JSON text of the values as stored, so they are exactly the values a client reads; a day's kept
    figures come as their binary value (store/day_figures.py, or without a status store/day_summaries.py), or
    null when the day has no such builds."""
    if text is None:
        return _NO_BUILDS, 0, 0, [], []
    if isinstance(text, bytes | memoryview) and status is None:
        day = day_summaries.unpack(bytes(text))
        return day.counts, day.cpu_seconds, day.billable_cpu_seconds, day.durations or [], day.queue_times or []
    if isinstance(text, bytes | memoryview):
        builds, cpu, durations, queues = day_figures.unpack(text)
    elif status is None:
        builds, ok, discarded, running, cpu, unbilled_cpu, durations, queues = _BY_KIND.decode(text)
        return (ok, builds - ok - discarded - running, discarded, running), cpu, cpu - unbilled_cpu, durations, queues
    else:
        builds, cpu, durations, queues = _BY_STATUS.decode(text)
    assert status is not None  # rows of kept figures are of one status
    counts = [0, 0, 0, 0]
    counts[KIND_INDEX[status]] = builds
    return tuple(counts), cpu, cpu if status in BILLABLE_STATUSES else 0, durations, queues  # type: ignore[return-value]


# A row of stats_rows with its figures decoded: (value, figures).
Decoded = tuple[Any, _Figures]


def decode_rows(rows: Iterable[tuple]) -> list[Decoded]:
    """The rows of stats_rows with builds in them, their figures decoded (once, however often they are grouped)."""
    decoded = []
    for value, status, text in rows:
        figures = _figures(status, text)
        if figures[0] != _NO_BUILDS:  # a period, status or value without builds in the window has none
            decoded.append((value, figures))
    return decoded


def _grouped(rows: Iterable[Decoded], group_by: GroupBy) -> dict[Any, _Group]:
    groups: dict[Any, _Group] = {}
    names: dict[str, str] = {}
    for value, figures in rows:
        if group_by.kind == "derivation":
            key = names.get(value) or names.setdefault(value, derivation_name(value))
        else:
            key = value
        group = groups.get(key)
        if group is None:
            group = groups[key] = _Group()
        group.add(figures)
    return groups


def value_groups(rows: Iterable[Decoded], kind: str) -> dict[str, _Group]:
    """The rows' groups by `derivation` or `derivation_path`, unordered and unfinished: a caller that shows a
    few of thousands ranks them and finishes only those (with `_Group.result`)."""
    return _grouped(rows, GroupBy(kind))


def _ordered(groups: dict[Any, _Group], query: StatsQuery) -> list[tuple[Any, _Group]]:
    """Time groups: every period of the window, ascending. Value groups: the largest `limit` of them."""
    period = _PERIODS.get(query.group_by.kind)
    if period is None:
        ordered = sorted(groups.items(), key=lambda item: (-item[1].build_count, str(item[0])))
        return ordered[: query.limit]
    low = query.filter.create_from_us
    first = low - low % period
    last = query.end_us - 1 if query.end_us > low else first - 1
    if (last - first) // period >= MAX_TIME_GROUPS:
        raise ValueError(f"a time grouping of more than {MAX_TIME_GROUPS} periods")  # the query parsers refuse it
    return [(start, groups.get(start) or _Group()) for start in range(first, last + 1, period)]


def _key(kind: str, key: Any) -> str:
    return period_key(kind, key) if kind in _PERIODS else str(key)


def build_stats(rows: Iterable[tuple], query: StatsQuery) -> list[BuildStatsGroup]:
    """The groups of /builds/stats from the rows of `stats_queries.stats_rows`."""
    kind = query.group_by.kind
    groups = _grouped(decode_rows(rows), query.group_by)
    return [group.result(_key(kind, key)) for key, group in _ordered(groups, query)]


def usage_breakdown(rows: Iterable[tuple], group_by: GroupBy) -> list[UsageBreakdownGroup]:
    """Groups of the rows of `Reader.usage_rows`: days ascending; systems and tag values by billable CPU
    seconds descending, ties by key, the group of builds without the tag last among its equals."""
    if group_by.kind == "day":
        return [
            UsageBreakdownGroup(key=period_key("day", day), billable_cpu_seconds=cpu, billable_build_count=builds)
            for day, cpu, builds in rows
        ]
    ordered = sorted(rows, key=lambda row: (-row[1], row[0] is None, row[0] or ""))
    return [UsageBreakdownGroup(key=k, billable_cpu_seconds=cpu, billable_build_count=n) for k, cpu, n in ordered]

