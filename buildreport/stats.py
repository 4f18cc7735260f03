"""Statistics over builds, grouped: counts, success rate, CPU and exact percentiles.

Pure functions over the rows the store yields (see store/stats_queries.py), so every figure is
computed one way, in one place, and can be checked against a plain computation in a test.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import msgspec

from buildreport.filters import GroupBy, StatsQuery
from buildreport.models import (
    BILLABLE,
    DISCARDED,
    FAILED,
    SUCCESSFUL,
    UNFINISHED,
    BuildStatsGroup,
    Percentiles,
    UsageBreakdownGroup,
)
from buildreport.times import US_PER_DAY, format_us, from_us

US_PER_HOUR = US_PER_DAY // 24
_PERIODS = {"day": US_PER_DAY, "hour": US_PER_HOUR}
_TAGS = msgspec.json.Decoder(dict[str, str])
_KIND = {
    **{s.value: "successful" for s in SUCCESSFUL},
    **{s.value: "failed" for s in FAILED},
    **{s.value: "discarded" for s in DISCARDED},
    **{s.value: "running" for s in UNFINISHED},
}
_BILLABLE = frozenset(s.value for s in BILLABLE)


def nearest_rank(ordered: Sequence[float], percent: int) -> float:
    """The nearest-rank percentile of values sorted ascending: the value at rank ceil(percent/100 * n)."""
    rank = max(1, -(-percent * len(ordered) // 100))
    return ordered[rank - 1]


def percentiles(values: Iterable[float]) -> Percentiles | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return Percentiles(
        p50=nearest_rank(ordered, 50),
        p90=nearest_rank(ordered, 90),
        p95=nearest_rank(ordered, 95),
        p99=nearest_rank(ordered, 99),
        max=ordered[-1],
    )


def derivation_name(path: str) -> str:
    """The name part of a derivation's store path: `/nix/store/<hash>-hello-2.12.drv` gives `hello-2.12`."""
    base = path.rsplit("/", 1)[-1].removesuffix(".drv")
    _, dash, name = base.partition("-")
    return name if dash and name else base


def period_key(kind: str, start_us: int) -> str:
    """A time group's key: the UTC date, or the hour as RFC 3339."""
    return from_us(start_us).date().isoformat() if kind == "day" else format_us(start_us)


_NUMBERS = msgspec.json.Decoder(list[float])


class Newest(NamedTuple):
    """The newest build of a group, for a link to it."""

    create_us: int
    build_id: int
    status: str
    value: Any  # the grouping value of its row, e.g. the derivation path


class _Group:
    """One group's sums, filled from its rows (one per status and grouping value)."""

    __slots__ = ("billable_cpu", "counts", "cpu", "durations", "newest", "newest_failed", "queues")

    def __init__(self) -> None:
        self.counts = {"successful": 0, "failed": 0, "discarded": 0, "running": 0}
        self.cpu = 0
        self.billable_cpu = 0
        self.durations: list[float] = []
        self.queues: list[float] = []
        self.newest: tuple[str, Any, str] | None = None
        self.newest_failed: tuple[str, Any, str] | None = None

    def add(self, value: Any, status: str, builds: int, cpu: int, durations: str, queues: str, newest: str) -> None:
        kind = _KIND[status]
        self.counts[kind] += builds
        self.cpu += cpu
        if status in _BILLABLE:
            self.billable_cpu += cpu
        # JSON arrays of the numbers as stored: decoding them gives exactly the values a client reads.
        self.durations += _NUMBERS.decode(durations)
        self.queues += _NUMBERS.decode(queues)
        mark = (newest, value, status)
        if self.newest is None or mark > self.newest:
            self.newest = mark
        if kind == "failed" and (self.newest_failed is None or mark > self.newest_failed):
            self.newest_failed = mark

    @property
    def build_count(self) -> int:
        return sum(self.counts.values())

    def result(self, key: str) -> BuildStatsGroup:
        ok, failed = self.counts["successful"], self.counts["failed"]
        return BuildStatsGroup(
            key=key,
            build_count=self.build_count,
            running_build_count=self.counts["running"],
            discarded_build_count=self.counts["discarded"],
            failed_build_count=failed,
            successful_build_count=ok,
            success_rate=ok / (ok + failed) if ok + failed else None,
            total_cpu_seconds=self.cpu,
            billable_cpu_seconds=self.billable_cpu,
            duration_seconds=percentiles(self.durations),
            queue_time_seconds=percentiles(self.queues),
        )


def _newest(mark: tuple[str, Any, str] | None) -> Newest | None:
    if mark is None:
        return None
    create_us, build_id = mark[0].split()
    return Newest(int(create_us), int(build_id), mark[2], mark[1])


def _grouped(rows: Iterable[tuple], group_by: GroupBy) -> dict[Any, _Group]:
    groups: dict[Any, _Group] = {}
    tag = group_by.tag_key or ""
    names: dict[str, str] = {}
    for row in rows:
        value = row[0]
        if group_by.kind == "tag":
            key = value if group_by.plain_tag else _TAGS.decode(value).get(tag)
            if key is None:
                continue  # builds without the grouping tag are left out
        elif group_by.kind == "derivation":
            key = names.get(value) or names.setdefault(value, derivation_name(value))
        else:
            key = value
        group = groups.get(key)
        if group is None:
            group = groups[key] = _Group()
        group.add(*row)
    return groups


def _ordered(groups: dict[Any, _Group], query: StatsQuery) -> list[tuple[Any, _Group]]:
    """Time groups: every period of the window, ascending. Value groups: the largest `limit` of them."""
    period = _PERIODS.get(query.group_by.kind)
    if period is None:
        ordered = sorted(groups.items(), key=lambda item: (-item[1].build_count, str(item[0])))
        return ordered[: query.limit]
    low = query.filter.create_from_us
    first = low - low % period
    last = query.end_us - 1 if query.end_us > low else first - 1
    if groups:
        last = max(last, max(groups))
    return [(start, groups.get(start) or _Group()) for start in range(first, last + 1, period)]


def _key(kind: str, key: Any) -> str:
    return period_key(kind, key) if kind in _PERIODS else str(key)


def build_stats(rows: Iterable[tuple], query: StatsQuery) -> list[BuildStatsGroup]:
    """The groups of /builds/stats from the rows of `stats_queries.stats_rows`."""
    kind = query.group_by.kind
    return [group.result(_key(kind, key)) for key, group in _ordered(_grouped(rows, query.group_by), query)]


def build_stats_with_newest(
    rows: Iterable[tuple], query: StatsQuery
) -> list[tuple[BuildStatsGroup, Newest | None, Newest | None]]:
    """As build_stats, with each group's newest build and newest failed build (for the dashboard's links)."""
    kind = query.group_by.kind
    return [
        (group.result(_key(kind, key)), _newest(group.newest), _newest(group.newest_failed))
        for key, group in _ordered(_grouped(rows, query.group_by), query)
    ]


def usage_breakdown(rows: Iterable[tuple], group_by: GroupBy) -> list[UsageBreakdownGroup]:
    """Groups of the rows of `Reader.usage_rows`: days ascending; systems and tag values by billable CPU
    seconds descending, ties by key, the group of builds without the tag last among its equals."""
    if group_by.kind == "day":
        return [
            UsageBreakdownGroup(key=period_key("day", day), billable_cpu_seconds=cpu, billable_build_count=builds)
            for day, cpu, builds in rows
        ]
    totals: dict[str | None, list[int]] = {}
    if group_by.kind == "system":
        for system, cpu, builds in rows:
            totals[system] = [cpu, builds]
    else:
        for tags, cpu in rows:
            value = _TAGS.decode(tags).get(group_by.tag_key or "")
            entry = totals.setdefault(value, [0, 0])
            entry[0] += cpu
            entry[1] += 1
    ordered = sorted(totals.items(), key=lambda item: (-item[1][0], item[0] is None, item[0] or ""))
    return [UsageBreakdownGroup(key=k, billable_cpu_seconds=cpu, billable_build_count=n) for k, (cpu, n) in ordered]

