"""Kept figures answer exactly as the builds do: for random builds and random filters over every field of the
filter specification, every answer that may come from kept tables (summary, statistics by day and by tag, usage
and usage by day, which the dashboard's figures are made of) equals a plain computation over the builds stored,
on both engines; and the rule that chooses them (store/kept.py) steps aside for any field a table does not keep."""

from __future__ import annotations

import asyncio
import json
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import record, write_jsonl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_tag_totals import patched

from buildreport.filters import BuildFilter, GroupBy, StatsQuery, UsageQuery, set_fields
from buildreport.imports.load import import_files
from buildreport.insights.stats import build_stats, usage_breakdown
from buildreport.models import (
    BILLABLE,
    DISCARDED,
    FAILED,
    SUCCESSFUL,
    UNFINISHED,
    BuildStatsGroup,
    BuildStatus,
    Usage,
)
from buildreport.store import open_database, open_reader
from buildreport.store.day_figures import DAY_FIGURES
from buildreport.store.day_summaries import DAY_SUMMARIES
from buildreport.store.kept import US_PER_DAY, US_PER_HOUR, KeptTable, answers, whole_periods
from buildreport.store.reader import summary_from_row
from buildreport.store.tag_figures import TAG_DAY_FIGURES
from buildreport.store.tag_totals import TAG_DAILY_TOTALS
from buildreport.store.totals import DAILY_TOTALS, DAILY_USAGE, HOURLY_TOTALS
from buildreport.times import to_us

KEPT_TABLES = (HOURLY_TOTALS, DAILY_TOTALS, DAILY_USAGE, TAG_DAILY_TOTALS, TAG_DAY_FIGURES, DAY_FIGURES, DAY_SUMMARIES)
ORIGIN = datetime(2026, 3, 2, tzinfo=UTC)  # midnight UTC: day and hour boundaries fall on whole minutes from it
ORIGIN_US = to_us(ORIGIN)
SPAN_MINUTES = 3 * 24 * 60  # builds are created over three days
NOW_US = ORIGIN_US + 4 * US_PER_DAY
PATHS = (f"/nix/store/{'a' * 32}-hello-2.12.drv", f"/nix/store/{'b' * 32}-world-1.0.drv")
TAG_KEYS = ("project", "team")
TAG_VALUES = ("web", "ml", "x:y")
STATUSES = list(BuildStatus)

a_build = st.fixed_dictionaries({
    "minute": st.integers(0, SPAN_MINUTES),
    "second": st.integers(0, 59),
    "status": st.sampled_from(STATUSES),
    "cpu": st.integers(0, 10_000),
    "duration": st.integers(0, 20_000) | st.sampled_from([0.25, 1.5, 90.125]),
    "queue": st.integers(0, 600) | st.just(0.75),
    "path": st.sampled_from(PATHS),
    "tags": st.dictionaries(st.sampled_from(TAG_KEYS), st.sampled_from(TAG_VALUES), max_size=2),
})
a_moment = st.one_of(
    st.integers(-1, 4).map(lambda day: ORIGIN_US + day * US_PER_DAY),  # whole days
    st.integers(-2, 4 * 24).map(lambda hour: ORIGIN_US + hour * US_PER_HOUR),  # whole hours
    st.integers(-90, SPAN_MINUTES + 90).map(lambda minute: ORIGIN_US + minute * 60_000_000 + 17),  # anywhere
)
a_tag_pair = st.tuples(st.sampled_from(TAG_KEYS), st.sampled_from(TAG_VALUES))


@st.composite
def a_filter(draw: Any) -> BuildFilter:
    low = draw(a_moment)
    high = draw(st.none() | a_moment.filter(lambda moment: moment >= low))
    return BuildFilter(
        create_from_us=low,
        create_to_us=high,
        # Each field as often left out as given: the filters kept figures may answer are drawn often.
        statuses=draw(st.just(()) | st.lists(st.sampled_from(STATUSES), min_size=1, max_size=3, unique=True)
                      .map(tuple)),
        tags=draw(st.just(()) | st.lists(a_tag_pair, min_size=1, max_size=3, unique=True).map(tuple)),
        derivation_path=draw(st.none() | st.sampled_from(PATHS)),
    )


def to_record(build_id: int, build: dict[str, Any]) -> dict[str, Any]:
    created = ORIGIN + timedelta(minutes=build["minute"], seconds=build["second"])
    unfinished = BuildStatus(build["status"]) in UNFINISHED
    return record(
        build_id,
        account="globex" if build_id % 3 == 0 else "acme",  # a build id stays in its account
        create_time=created,
        start_time=(created + timedelta(seconds=build["queue"])).isoformat(),
        queue_time_seconds=build["queue"],
        build_status=build["status"],
        duration_seconds=None if unfinished else build["duration"],
        cpu_seconds=build["cpu"],
        derivation_path=build["path"],
        tags=build["tags"],
    )


def with_fewer_fields(build_filter: BuildFilter) -> list[BuildFilter]:
    """The filter, and it without its derivation path, its tags or both: the filters kept figures may answer
    are checked at every example."""
    replace = msgspec.structs.replace
    return [build_filter, replace(build_filter, derivation_path=None), replace(build_filter, tags=()),
            replace(build_filter, derivation_path=None, tags=())]


# --- the plain computation, over the builds stored ------------------------------------------------------

BUILD_COLUMNS = (
    "build_id, account_id, create_us, status, cpu_seconds, duration_us, start_us, stop_us, nar_size_bytes,"
    " derivation_path, duration_text, queue_text"
)


class Stored(msgspec.Struct):
    build_id: int
    account_id: int
    create_us: int
    status: BuildStatus
    cpu_seconds: int
    duration_us: int | None
    start_us: int
    stop_us: int | None
    nar_size_bytes: int
    derivation_path: str
    duration_text: str | None
    queue_text: str | None
    tags: dict[str, str]


def stored_builds(db: Any) -> list[Stored]:
    conn = open_database(db)
    try:
        tags: dict[int, dict[str, str]] = {}
        for build_id, key, value in conn.execute("SELECT build_id, key, value FROM build_tags").fetchall():
            tags.setdefault(build_id, {})[key] = value
        rows = conn.execute(f"SELECT {BUILD_COLUMNS} FROM builds").fetchall()
    finally:
        conn.close()
    return [Stored(*row[:3], BuildStatus(row[3]), *row[4:], tags.get(row[0], {})) for row in rows]


def matching(builds: list[Stored], account_id: int, build_filter: BuildFilter) -> list[Stored]:
    high = build_filter.create_to_us
    return [
        b for b in builds
        if b.account_id == account_id and b.create_us >= build_filter.create_from_us
        and (high is None or b.create_us < high)
        and (not build_filter.statuses or b.status in build_filter.statuses)
        and (build_filter.derivation_path is None or b.derivation_path == build_filter.derivation_path)
        and all(b.tags.get(key) == value for key, value in build_filter.tags)
    ]


def plain_summary_row(builds: list[Stored]) -> tuple:
    """The columns summary_from_row reads, summed over the builds one by one."""
    def count(statuses: frozenset[BuildStatus]) -> int:
        return sum(1 for b in builds if b.status in statuses)

    starts = [b.start_us for b in builds]
    stops = [b.stop_us for b in builds if b.stop_us is not None]
    return (
        len(builds), count(SUCCESSFUL), count(FAILED), count(DISCARDED), count(UNFINISHED),
        sum(b.cpu_seconds for b in builds), sum(b.cpu_seconds for b in builds if b.status in BILLABLE),
        sum(b.duration_us or 0 for b in builds), min(starts, default=None), max(stops, default=None),
        int(any(b.status in UNFINISHED for b in builds)), sum(b.nar_size_bytes for b in builds),
    )


def without_queue_times(groups: list[BuildStatsGroup]) -> list[BuildStatsGroup]:
    """The groups as the dashboard reads them: it asks for no queue times (kept days may hold them anyway)."""
    return [msgspec.structs.replace(group, queue_time_seconds=None) for group in groups]


def plain_stats_rows(builds: list[Stored], group_of: Any, queue_times: bool = True) -> list[tuple]:
    """Rows of the one-status form (stats_queries' docstring) made in Python: one per group and status; without
    `queue_times` their arrays left empty."""
    groups: dict[tuple[Any, str], list[Stored]] = {}
    for b in builds:
        group = group_of(b)
        if group is not None:
            groups.setdefault((group, b.status.value), []).append(b)
    rows = []
    for (group, status), members in groups.items():
        durations = [json.loads(b.duration_text) for b in members if b.duration_text is not None]
        queues = [json.loads(b.queue_text) for b in members if b.queue_text is not None and queue_times]
        figures = json.dumps([len(members), sum(b.cpu_seconds for b in members), durations, queues])
        rows.append((group, status, figures))
    return rows


def plain_usage_days(builds: list[Stored], account_id: int, query: UsageQuery) -> list[tuple[int, int, int]]:
    days: dict[int, list[int]] = {}
    for b in builds:
        if (b.account_id == account_id and b.status in BILLABLE and b.stop_us is not None
                and b.stop_us >= query.from_us and (query.to_us is None or b.stop_us < query.to_us)):
            day = days.setdefault(b.stop_us - b.stop_us % US_PER_DAY, [0, 0])
            day[0] += b.cpu_seconds
            day[1] += 1
    return [(day, cpu, count) for day, (cpu, count) in sorted(days.items())]


# --- the answers, through the server's reader -------------------------------------------------------------

def stats_query(build_filter: BuildFilter, kind: str, tag_key: str | None = None) -> StatsQuery:
    """As parse_stats_query makes it: a time grouping's window ends at `to`, or now."""
    end_us = build_filter.create_to_us if build_filter.create_to_us is not None else NOW_US
    if kind == "day":
        build_filter = msgspec.structs.replace(build_filter, create_to_us=end_us)
    return StatsQuery(filter=build_filter, group_by=GroupBy(kind, tag_key), end_us=end_us, limit=1_000)


async def answers_of(db: Any, account_id: int, build_filter: BuildFilter, usage: UsageQuery) -> dict[str, Any]:
    reader = await open_reader(str(db))
    try:
        by_day = stats_query(build_filter, "day")
        by_tag = stats_query(build_filter, "tag", TAG_KEYS[0])
        return {
            "summary": await reader.summary(account_id, build_filter, NOW_US),
            "stats by day": build_stats(await reader.stats_rows(account_id, by_day.filter, by_day.group_by), by_day),
            "stats by tag": build_stats(await reader.stats_rows(account_id, by_tag.filter, by_tag.group_by), by_tag),
            "stats by day, no queue times (the dashboard's)": without_queue_times(build_stats(
                await reader.stats_rows(account_id, by_day.filter, by_day.group_by, queue_times=False), by_day)),
            "usage": await reader.usage(account_id, usage),
            "usage by day": usage_breakdown(await reader.usage_rows(account_id, usage, GroupBy("day")), GroupBy("day")),
        }
    finally:
        await reader.close()


def plain_answers(builds: list[Stored], account_id: int, build_filter: BuildFilter, usage: UsageQuery) -> dict:
    by_day = stats_query(build_filter, "day")
    by_tag = stats_query(build_filter, "tag", TAG_KEYS[0])
    days = plain_usage_days(builds, account_id, usage)
    # Grouped by day, every day of the window is listed, empty ones too: the same empty days on both sides.
    day_rows = plain_stats_rows(matching(builds, account_id, by_day.filter),
                                lambda b: b.create_us - b.create_us % US_PER_DAY)
    return {
        "summary": summary_from_row(plain_summary_row(matching(builds, account_id, build_filter)), NOW_US),
        "stats by day": build_stats(day_rows, by_day),
        "stats by tag": build_stats(plain_stats_rows(matching(builds, account_id, by_tag.filter),
                                                     lambda b: b.tags.get(TAG_KEYS[0])), by_tag),
        "stats by day, no queue times (the dashboard's)": without_queue_times(build_stats(
            plain_stats_rows(matching(builds, account_id, by_day.filter),
                             lambda b: b.create_us - b.create_us % US_PER_DAY, queue_times=False), by_day)),
        "usage": Usage(billable_cpu_seconds=sum(cpu for _, cpu, _ in days),
                       billable_build_count=sum(count for *_, count in days)),
        "usage by day": usage_breakdown(days, GroupBy("day")),
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(
    first=st.lists(a_build, min_size=3, max_size=30),
    second=st.lists(st.tuples(st.integers(1, 40), a_build), max_size=10),
    filters=st.lists(a_filter(), min_size=1, max_size=6),
    usage_days=st.tuples(st.integers(-1, 4), st.none() | st.integers(0, 5)),
    promote_at=st.integers(1, 4),
)
def test_every_answer_of_kept_figures_equals_a_plain_computation_over_the_builds(
    fresh_db, first, second, filters, usage_days, promote_at
):
    """Two writes: an import into an empty database, then one that adds builds and rewrites some (kept figures
    brought in step by differences, builds taken away from their periods)."""
    low_day, days = usage_days
    low = ORIGIN_US + low_day * US_PER_DAY
    usage = UsageQuery(from_us=low, to_us=None if days is None else low + days * US_PER_DAY)
    with tempfile.TemporaryDirectory() as tmp, patched(PROMOTE_AT=promote_at):
        db = fresh_db(Path(tmp))
        conn = open_database(db)
        try:
            for number, records in enumerate((
                [to_record(i + 1, build) for i, build in enumerate(first)],
                [to_record(build_id, build) for build_id, build in dict(second).items()],
            )):
                if records:
                    import_files(conn, [write_jsonl(Path(tmp) / f"{number}.jsonl", records)], NOW_US)
            accounts = dict(conn.execute("SELECT name, account_id FROM accounts").fetchall())
        finally:
            conn.close()
        builds = stored_builds(db)
        account_id = accounts.get("acme", 0)
        for build_filter in {narrowed for drawn in filters for narrowed in with_fewer_fields(drawn)}:
            got = asyncio.run(answers_of(db, account_id, build_filter, usage))
            assert got == plain_answers(builds, account_id, build_filter, usage), build_filter


# --- the rule that chooses kept figures -----------------------------------------------------------------

def test_every_kept_table_checks_its_fields():
    for table in KEPT_TABLES:
        assert table.check() is table


def test_a_table_that_does_not_keep_a_field_refuses_every_filter_restricting_it():
    table = KeptTable("t", frozenset({"create_time_from", "create_time_to"}), US_PER_DAY)
    assert answers(table, BuildFilter(create_from_us=0, create_to_us=US_PER_DAY))
    assert not answers(table, BuildFilter(create_from_us=0, statuses=(BuildStatus.built,)))
    assert not answers(table, BuildFilter(create_from_us=0, derivation_path="/nix/store/x.drv"))
    assert not answers(table, BuildFilter(create_from_us=0, tags=(("a", "b"),)))
    with pytest.raises(ValueError, match="not_a_field"):
        KeptTable("t", frozenset({"not_a_field"}), US_PER_DAY).check()


@given(a_filter())
def test_kept_tables_answer_exactly_the_filters_whose_fields_they_keep(build_filter):
    for table in KEPT_TABLES:
        expected = set_fields(build_filter) <= table.fields and len(build_filter.tags) == table.tag_pairs
        assert answers(table, build_filter) == expected


def test_tag_totals_answer_one_tag_pair_only():
    one = BuildFilter(create_from_us=0, tags=(("project", "web"),))
    assert answers(TAG_DAILY_TOTALS, one)
    assert not answers(TAG_DAILY_TOTALS, msgspec.structs.replace(one, tags=(("project", "web"), ("team", "a"))))
    assert not answers(TAG_DAILY_TOTALS, BuildFilter(create_from_us=0))


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (0, None, (0, None)),
        (1, None, (US_PER_DAY, None)),
        (1, 2 * US_PER_DAY + 5, (US_PER_DAY, 2 * US_PER_DAY)),
        (1, US_PER_DAY + 5, None),
        (US_PER_DAY, US_PER_DAY, None),
    ],
)
def test_whole_periods_are_the_days_wholly_inside_the_window(low, high, expected):
    assert whole_periods(DAILY_TOTALS, low, high) == expected
