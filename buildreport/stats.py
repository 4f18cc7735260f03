"""Statistics over builds, grouped: counts, success rate, CPU and exact percentiles.

Pure functions over the rows the store yields (see store/stats_queries.py), so every figure is
computed one way, in one place, and can be checked against a plain computation in a test.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from buildreport.filters import GroupBy, StatsQuery
from buildreport.models import (
    BILLABLE,
    DISCARDED,
    FAILED,
    SUCCESSFUL,
    UNFINISHED,
    BuildStatsGroup,
    BuildStatus,
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
    digest, dash, name = base.partition("-")
    return name if dash and digest else base


def period_key(kind: str, start_us: int) -> str:
    """A time group's key: the UTC date, or the hour as RFC 3339."""
    return from_us(start_us).date().isoformat() if kind == "day" else format_us(start_us)


class _Group:
    __slots__ = ("billable_cpu", "counts", "cpu", "durations", "queues")

    def __init__(self) -> None:
        self.counts = {"successful": 0, "failed": 0, "discarded": 0, "running": 0}
        self.cpu = 0
        self.billable_cpu = 0
        self.durations: list[float] = []
        self.queues: list[float] = []

    def add(self, status: str, cpu: int, duration: str | None, queue: str | None) -> None:
        self.counts[_KIND[status]] += 1
        self.cpu += cpu
        if status in _BILLABLE:
            self.billable_cpu += cpu
        # The JSON text of each number, as stored: float() of it is the value a client decodes.
        if duration is not None and duration != "null":
            self.durations.append(float(duration))
        if queue is not None and queue != "null":
            self.queues.append(float(queue))

    def result(self, key: str) -> BuildStatsGroup:
        c = self.counts
        decided = c["successful"] + c["failed"]
        return BuildStatsGroup(
            key=key,
            build_count=sum(c.values()),
            running_build_count=c["running"],
            discarded_build_count=c["discarded"],
            failed_build_count=c["failed"],
            successful_build_count=c["successful"],
            success_rate=c["successful"] / decided if decided else None,
            total_cpu_seconds=self.cpu,
            billable_cpu_seconds=self.billable_cpu,
            duration_seconds=percentiles(self.durations),
            queue_time_seconds=percentiles(self.queues),
        )


def _value_key(group_by: GroupBy, value: object) -> str | None:
    if group_by.kind == "tag":
        return _TAGS.decode(value).get(group_by.tag_key or "") if value is not None else None
    if group_by.kind == "derivation":
        return derivation_name(str(value))
    return None if value is None else str(value)


def build_stats(rows: Iterable[tuple], query: StatsQuery) -> list[BuildStatsGroup]:
    """Groups of the rows of `stats_queries.stats_rows`: every period of the window in time order,
    or the `limit` largest value groups (by build count, ties by key)."""
    group_by = query.group_by
    groups: dict[object, _Group] = {}
    period = _PERIODS.get(group_by.kind)
    for create_us, status, cpu, duration, queue, value, _ in rows:
        if period is not None:
            key: object = create_us - create_us % period
        else:
            key = _value_key(group_by, value)
            if key is None:
                continue  # without the grouping tag
        group = groups.get(key)
        if group is None:
            group = groups[key] = _Group()
        group.add(status, cpu, duration, queue)
    if period is None:
        ordered = sorted(groups.items(), key=lambda item: (-sum(item[1].counts.values()), item[0]))
        return [group.result(str(key)) for key, group in ordered[: query.limit]]
    low = query.filter.create_from_us
    first = low - low % period
    last = query.end_us - 1 if query.end_us > low else first - 1
    if groups:
        last = max(last, max(groups))  # type: ignore[type-var]
    empty = _Group()
    return [
        groups.get(start, empty).result(period_key(group_by.kind, start)) for start in range(first, last + 1, period)
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


def status_kind(status: BuildStatus | str) -> str:
    """successful, failed, discarded or running: how a status counts in every figure."""
    return _KIND[str(status)]
