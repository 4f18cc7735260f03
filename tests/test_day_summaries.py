"""Each day's kept summary over every status: exact figures, and always those of the builds stored."""

from __future__ import annotations

import sqlite3

import pytest
from conftest import record, write_jsonl
from hypothesis import given
from hypothesis import strategies as st
from records import WITHOUT_SYSTEM_COLUMN, version_before
from test_day_figures import at

from buildreport.figures import BILLABLE_STATUSES, KIND_INDEX, PERCENTS, nearest_rank
from buildreport.filters import BuildFilter, GroupBy, StatsQuery
from buildreport.imports.load import import_files
from buildreport.insights.stats import build_stats
from buildreport.models import UNFINISHED, BuildStatus, Percentiles
from buildreport.store import day_summaries
from buildreport.store import open_database as store_database
from buildreport.store.sqlite.schema import open_database
from buildreport.times import US_PER_DAY

numbers = st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False)
STATUSES = [status.value for status in BuildStatus]
UNFINISHED_STATUSES = {status.value for status in UNFINISHED}


def ranked(values: list[float]) -> Percentiles | None:
    ordered = sorted(values)
    return Percentiles(*(nearest_rank(ordered, p) for p in PERCENTS), ordered[-1]) if ordered else None


def plain_summary(builds: list[tuple[str, int, float | None, float | None]]) -> day_summaries.Summary:
    """The summary of builds given as (status, CPU seconds, duration, queue time), in plain Python."""
    counts = [0, 0, 0, 0]
    for status, *_ in builds:
        counts[KIND_INDEX[status]] += 1
    return day_summaries.Summary(
        tuple(counts),  # type: ignore[arg-type]
        sum(cpu for _, cpu, _, _ in builds),
        sum(cpu for status, cpu, _, _ in builds if status in BILLABLE_STATUSES),
        ranked([d for _, _, d, _ in builds if d is not None]),
        ranked([q for _, _, _, q in builds if q is not None]),
    )


def plain_summaries(conn) -> dict[tuple[int, int], day_summaries.Summary]:
    days: dict[tuple[int, int], list] = {}
    for account_id, create_us, status, cpu, duration, queue in conn.execute(
        "SELECT account_id, create_us, status, cpu_seconds, duration_text, queue_text FROM builds"
    ):
        days.setdefault((account_id, create_us - create_us % US_PER_DAY), []).append(
            (status, cpu, None if duration is None else float(duration), None if queue is None else float(queue))
        )
    return {key: plain_summary(builds) for key, builds in days.items()}


def kept_summaries(conn) -> dict[tuple[int, int], day_summaries.Summary]:
    rows = conn.execute("SELECT account_id, day_us, figures FROM day_summaries").fetchall()
    return {(a, d): day_summaries.unpack(bytes(f)) for a, d, f in rows}


builds_of_a_day = st.lists(
    st.tuples(st.sampled_from(STATUSES), st.integers(0, 2**40), st.none() | numbers, st.none() | numbers),
    min_size=1,
)


@given(builds_of_a_day)
def test_a_summary_of_a_days_parts_equals_a_plain_computation(builds):
    parts = []
    for status in sorted({b[0] for b in builds}):
        own = [b for b in builds if b[0] == status]
        parts.append(day_summaries.Part(
            status, len(own), sum(b[1] for b in own),
            sorted(b[2] for b in own if b[2] is not None), sorted(b[3] for b in own if b[3] is not None),
        ))
    value = day_summaries.summarize(parts)
    assert value is not None
    assert day_summaries.unpack(value) == plain_summary(builds)


def test_a_day_without_builds_has_no_summary():
    assert day_summaries.summarize([]) is None
    assert day_summaries.summarize([day_summaries.Part("built", 0, 0, [], [])]) is None


def test_a_day_whose_last_build_moves_away_loses_its_summary(env):
    env.load([record(1, create_time=at(0, 1)), record(2, create_time=at(1, 1))])
    env.load([record(1, create_time=at(1, 2))])
    conn = store_database(env.db)
    try:
        assert kept_summaries(conn) == plain_summaries(conn)
        assert len(kept_summaries(conn)) == 1
    finally:
        conn.close()


def test_many_small_writes_into_one_day_keep_its_summary_exact(env):
    """Runners send a few builds at a time, all into today: each write derives the day's summary again."""
    for batch in range(8):
        statuses = [STATUSES[(batch + n) % len(STATUSES)] for n in range(5)]
        env.load([
            record(100 * batch + n + 1, create_time=at(0, n % 24), build_status=status, queue_time_seconds=n / 10,
                   duration_seconds=None if status in UNFINISHED_STATUSES else (batch * 7 + n) % 13 + 0.125)
            for n, status in enumerate(statuses)
        ])
        conn = store_database(env.db)
        try:
            assert kept_summaries(conn) == plain_summaries(conn)
        finally:
            conn.close()


def test_the_migration_gives_each_day_the_summary_a_fresh_import_writes(tmp_path):
    records = [
        record(1, create_time=at(0, 1), duration_seconds=0.1 + 0.2, queue_time_seconds=1e-7, cpu_seconds=7),
        record(2, create_time=at(0, 2), build_status="build_failed", duration_seconds=4.0),
        record(3, create_time=at(0, 3), build_status="running", duration_seconds=None),
        record(4, create_time=at(2, 3), account="other"),
    ]
    conn = open_database(tmp_path / "t.db")
    import_files(conn, [write_jsonl(tmp_path / "a.jsonl", records)], 0)
    fresh = kept_summaries(conn)
    conn.close()
    assert len(fresh) == 2

    old = sqlite3.connect(tmp_path / "t.db")
    old.executescript(WITHOUT_SYSTEM_COLUMN + "DROP TABLE day_summaries;")
    old.execute(f"PRAGMA user_version = {version_before('_keep_day_summaries')}")
    old.commit()
    old.close()

    conn = open_database(tmp_path / "t.db")
    assert kept_summaries(conn) == fresh == plain_summaries(conn)
    conn.close()


def test_a_days_summary_joins_no_other_figures_of_its_group():
    """A whole day's kept percentiles stand for all of its values: a row of the same day's builds beside it is
    refused, never ranked wrongly."""
    day = 20_000 * US_PER_DAY
    summary = day_summaries.summarize([day_summaries.Part("built", 1, 5, [2.0], [0.5])])
    query = StatsQuery(BuildFilter(create_from_us=day, create_to_us=day + US_PER_DAY), GroupBy("day"),
                       end_us=day + US_PER_DAY)
    [alone] = build_stats([(day, None, summary)], query)
    assert alone.duration_seconds == Percentiles(2.0, 2.0, 2.0, 2.0, 2.0)
    with pytest.raises(ValueError, match="cannot be joined"):
        build_stats([(day, None, summary), (day, "built", "[1,5,[3.0],[0.25]]")], query)
    with pytest.raises(ValueError, match="cannot be joined"):
        build_stats([(day, "built", "[1,5,[3.0],[0.25]]"), (day, None, summary)], query)
