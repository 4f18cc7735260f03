"""Totals per tag pair stay exact, and summaries over tags equal the computation from the builds alone."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from conftest import write_jsonl
from hypothesis import given, settings
from hypothesis import strategies as st
from litestar.testing import TestClient
from records import WITHOUT_STATS_COLUMNS
from test_day_figures import kept_days, merged_parts, plain_days, plain_figures
from test_totals import ORIGIN, SLOW_AND_FIXTURE, build_strategy, to_record, to_write_record, write_strategy

from buildreport.filters import BuildFilter, GroupBy, StatsQuery
from buildreport.http.app import create_app
from buildreport.imports.load import import_files
from buildreport.insights.stats import build_stats
from buildreport.models import BuildStatus
from buildreport.store import day_figures, open_database, queries, stats_queries, tag_totals
from buildreport.store.postgres import stats_queries as postgres_stats_queries
from buildreport.store.reader import merge_summary_rows
from buildreport.store.transaction import WriteSession
from buildreport.times import now_us, to_us

KEYS = ("project", "run")
VALUES = ("a", "b", "c")
TAG_PAIRS = [(k, v) for k in KEYS for v in VALUES]


@contextlib.contextmanager
def patched(**values: int) -> Iterator[None]:
    """Small thresholds, so that a few builds promote a pair and a few pairs overflow the tracking, and a few
    builds fill a part of a day's figures (PART_BUILDS)."""
    modules = {name: day_figures if name == "PART_BUILDS" else tag_totals for name in values}
    saved = {name: getattr(modules[name], name) for name in values}
    for name, value in values.items():
        setattr(modules[name], name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(modules[name], name, value)


def tag_totals_from_builds(conn: sqlite3.Connection, period: int) -> list[tuple]:
    return conn.execute(
        f"SELECT p.account_id, p.key, p.value, t.create_us - t.create_us % {period}, b.status,"
        " count(*), sum(b.cpu_seconds), coalesce(sum(b.duration_us), 0), sum(b.nar_size_bytes), min(b.start_us),"
        " max(b.stop_us) FROM tag_pairs p JOIN build_tags t USING (account_id, key, value)"
        " JOIN builds b ON b.build_id = t.build_id GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5"
    ).fetchall()


def check_kept(conn: sqlite3.Connection, promote_at: int) -> None:
    """Every promoted pair's totals, hourly and daily, equal a fresh computation, and every pair that reached the
    threshold has them."""
    for table, period in (("tag_hourly_totals", queries.US_PER_HOUR), ("tag_daily_totals", queries.US_PER_DAY)):
        stored = conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2, 3, 4, 5").fetchall()
        assert stored == tag_totals_from_builds(conn, period), table
    promoted = set(conn.execute("SELECT account_id, key, value FROM tag_pairs").fetchall())
    assert tag_day_figures(conn) == tag_day_figures_from_builds(conn)
    assert kept_days(conn) == plain_days(conn)
    reached = set(
        conn.execute(
            "SELECT account_id, key, value FROM build_tags GROUP BY 1, 2, 3 HAVING count(*) >= ?", (promote_at,)
        ).fetchall()
    )
    assert reached <= promoted


def tag_day_figures(conn: sqlite3.Connection) -> dict[tuple, tuple]:
    """The kept day figures of the promoted pairs, unpacked: (pair, day, status) -> (builds, CPU, durations,
    queue times)."""
    return merged_parts(conn.execute("SELECT account_id, key, value, day_us, status, figures FROM tag_day_figures"))


def tag_day_figures_from_builds(conn: sqlite3.Connection) -> dict[tuple, tuple]:
    """The same, computed from the promoted pairs' builds."""
    return plain_figures(conn.execute(
        "SELECT p.account_id, p.key, p.value, b.create_us, b.status, b.cpu_seconds, b.duration_text, b.queue_text"
        " FROM tag_pairs p JOIN build_tags t USING (account_id, key, value) JOIN builds b ON b.build_id = t.build_id"
    ))


def tag_stats_equal_raw(conn, account_id: int, build_filter: BuildFilter) -> None:
    """Statistics by each tag, read as the reader reads them (the promoted values' whole days from their kept
    figures), equal those read from the tag rows alone in one query."""
    engine = postgres_stats_queries if getattr(conn, "engine", None) == "postgresql" else stats_queries
    untagged = msgspec.structs.replace(build_filter, tags=())
    for key in KEYS:
        query = StatsQuery(untagged, GroupBy("tag", key), end_us=0, limit=100)
        parts = engine.stats_parts(account_id, untagged, query.group_by)
        read = build_stats([row for part in parts for row in conn.execute(*part).fetchall()], query)
        raw = build_stats(conn.execute(*engine.stats_rows(account_id, untagged, query.group_by)).fetchall(), query)
        assert read == raw, key


def day_stats_equal_raw(conn, account_id: int, build_filter: BuildFilter) -> None:
    """Statistics by day with the statuses named, read as the reader reads them (whole days from the parts kept in
    day_figures), equal those of one pass over the builds."""
    named = msgspec.structs.replace(build_filter, tags=(), statuses=build_filter.statuses or tuple(BuildStatus))
    query = StatsQuery(named, GroupBy("day"), end_us=named.create_to_us or now_us(), limit=100)
    if getattr(conn, "engine", None) == "postgresql":
        parts, raw = postgres_stats_queries.stats_parts, postgres_stats_queries.stats_rows
    else:
        parts, raw = stats_queries.stats_parts, stats_queries._grouped_in_one_pass
    read = [row for part in parts(account_id, named, query.group_by) for row in conn.execute(*part).fetchall()]
    plain = conn.execute(*raw(account_id, named, query.group_by, True)).fetchall()
    assert build_stats(read, query) == build_stats(plain, query)


def order_tags(lookup, account_id: int, build_filter: BuildFilter) -> tuple[BuildFilter, bool]:
    """The filter ranked as the reader ranks it, with the pairs' sizes read through `lookup`."""
    (sizes,) = lookup(tag_totals.pair_sizes(account_id, build_filter))
    return tag_totals.ranked(build_filter, list(sizes))


def summary_equals_raw(conn: sqlite3.Connection, account_id: int, build_filter: BuildFilter) -> None:
    def lookup(query: queries.Query) -> list[tuple]:
        return conn.execute(*query).fetchall()

    ordered, promoted = order_tags(lookup, account_id, build_filter)
    assert sorted(ordered.tags) == sorted(build_filter.tags)
    sql, params = queries.summary(account_id, ordered, promoted)
    combined = merge_summary_rows(conn.execute(sql, params).fetchall())
    (raw,) = conn.execute(*queries._raw_summary(account_id, build_filter)).fetchall()
    assert combined == raw


tags_strategy = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2)
tagged_build = st.tuples(build_strategy, tags_strategy)
window_strategy = st.fixed_dictionaries(
    {
        "start": st.integers(-60 * 26, 60 * 24 * 3 + 120),
        "length": st.one_of(st.none(), st.integers(0, 60 * 24 * 5)),
        "seconds": st.integers(0, 59),
        "tags": st.lists(st.sampled_from(TAG_PAIRS), min_size=1, max_size=3, unique_by=lambda p: p[0]),
        "statuses": st.lists(st.sampled_from(list(BuildStatus)), max_size=2, unique=True),
        "account_id": st.sampled_from([1, 2]),
    }
)


def to_filter(window: dict) -> BuildFilter:
    low = to_us(ORIGIN) + (window["start"] * 60 + window["seconds"]) * 1_000_000
    high = None if window["length"] is None else low + window["length"] * 60 * 1_000_000
    return BuildFilter(
        create_from_us=low, create_to_us=high, tags=tuple(window["tags"]), statuses=tuple(window["statuses"])
    )


@settings(max_examples=40, deadline=None, suppress_health_check=SLOW_AND_FIXTURE)
@given(
    batches=st.lists(st.lists(tagged_build, min_size=1, max_size=15), min_size=1, max_size=4),
    promote_at=st.integers(1, 6),
    track_limit=st.sampled_from([2, 20_000]),
    part_builds=st.sampled_from([1, 3, 4096]),
    windows=st.lists(window_strategy, min_size=1, max_size=8),
)
def test_tag_totals_and_summaries_stay_exact_after_any_imports(fresh_db, batches, promote_at, track_limit,
                                                               part_builds, windows):
    thresholds = {"PROMOTE_AT": promote_at, "TRACK_LIMIT": track_limit, "PART_BUILDS": part_builds}
    with patched(**thresholds), tempfile.TemporaryDirectory() as tmp:
        conn = open_database(fresh_db(Path(tmp)))
        for number, batch in enumerate(batches):
            unique = {spec["build_id"]: {**to_record(spec), "tags": tags} for spec, tags in batch}
            path = write_jsonl(Path(tmp) / f"{number}.jsonl", list(unique.values()))
            import_files(conn, [path], 0)
            check_kept(conn, promote_at)
        for window in windows:
            summary_equals_raw(conn, window["account_id"], to_filter(window))
            tag_stats_equal_raw(conn, window["account_id"], to_filter(window))
            day_stats_equal_raw(conn, window["account_id"], to_filter(window))
        conn.close()


class WritesInThisProcess:
    """The server's writes done in this process (a write process would not see the patched thresholds); what
    they write is the same, see test_writer.py for the process itself."""

    def __init__(self, db: object) -> None:
        self.session = WriteSession(db)

    async def write(self, account: str, records: list, now_us: int) -> object:
        return await asyncio.to_thread(self.session.write, account, records, now_us)

    async def close(self) -> None:
        self.session.close()


@settings(max_examples=15, deadline=None, suppress_health_check=SLOW_AND_FIXTURE)
@given(
    requests=st.lists(st.lists(st.tuples(write_strategy, tags_strategy), min_size=1, max_size=12), max_size=4),
    promote_at=st.integers(1, 4),
    part_builds=st.sampled_from([1, 3, 4096]),
    windows=st.lists(window_strategy, min_size=1, max_size=6),
)
def test_tag_totals_and_summaries_stay_exact_after_any_http_writes(fresh_db, requests, promote_at, part_builds,
                                                                   windows):
    from conftest import Env, auth

    with patched(PROMOTE_AT=promote_at, PART_BUILDS=part_builds), tempfile.TemporaryDirectory() as tmp:
        env = Env(Path(tmp), fresh_db(Path(tmp)))
        tokens = {name: env.token(name, ("build:write",)) for name in ("acme", "globex")}
        served = create_app(env.settings())
        with TestClient(served, base_url="http://testserver.local") as client:
            server_writes = served.app.state.writes  # still the token writes' and the deliverer's
            served.app.state.writes = WritesInThisProcess(env.db)  # the envelope's app: Litestar's
            for batch in requests:
                for account in ("acme", "globex"):
                    body = [
                        {**to_write_record(spec), "tags": tags} for spec, tags in batch if spec["account"] == account
                    ]
                    if body:
                        response = client.post("/builds", json=body, headers=auth(tokens[account]))
                        assert response.status_code == 200, response.text
        asyncio.run(server_writes.close())
        conn = open_database(env.db)
        check_kept(conn, promote_at)
        for window in windows:
            summary_equals_raw(conn, window["account_id"], to_filter(window))
            tag_stats_equal_raw(conn, window["account_id"], to_filter(window))
            day_stats_equal_raw(conn, window["account_id"], to_filter(window))
        conn.close()


def test_near_unique_tag_values_never_get_totals(tmp_path):
    """A run id carried by a build or two stays without totals; a value most builds share gets them."""
    records = [
        {**to_record({**spec, "build_id": i}), "tags": {"run": str(i // 2), "project": "web"}}
        for i, spec in enumerate(
            [{"minutes": i * 7, "status": "built", "duration": 5, "cpu": 1, "nar": 1} for i in range(1, 40)], start=1
        )
    ]
    with patched(PROMOTE_AT=10):
        conn = open_database(tmp_path / "t.db")
        import_files(conn, [write_jsonl(tmp_path / "a.jsonl", records)], 0)
        assert conn.execute("SELECT DISTINCT key, value FROM tag_pairs").fetchall() == [("project", "web")]
        check_kept(conn, 10)
        conn.close()


def test_a_migrated_database_gets_totals_for_its_common_pairs(tmp_path):
    records = [
        {**to_record({"build_id": i, "minutes": i * 61, "status": "built", "duration": 5, "cpu": i, "nar": 1}),
         "tags": {"project": "web" if i % 3 else "ml"}}
        for i in range(2, 4 * tag_totals.PROMOTE_AT, 2)  # one account's
    ]
    conn = open_database(tmp_path / "t.db")
    import_files(conn, [write_jsonl(tmp_path / "a.jsonl", records)], 0)
    kept = ("tag_daily_totals", "tag_hourly_totals")
    expected = {table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2, 3, 4, 5").fetchall() for table in kept}
    assert {row[2] for row in expected["tag_daily_totals"]} == {"web"}  # ml has fewer than PROMOTE_AT builds
    assert len(expected["tag_hourly_totals"]) > len(expected["tag_daily_totals"])
    conn.executescript(WITHOUT_STATS_COLUMNS)
    conn.executescript("DROP TABLE tag_pairs; DROP TABLE tag_daily_totals; PRAGMA user_version = 4;")
    conn.close()
    conn = open_database(tmp_path / "t.db")
    for table in kept:
        assert conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2, 3, 4, 5").fetchall() == expected[table], table
    figures = tag_day_figures(conn)
    assert {key[2] for key in figures} == {"web"}
    assert figures == tag_day_figures_from_builds(conn)
    conn.close()


def test_statistics_by_tag_read_the_whole_days_of_common_values_from_kept_figures(fresh_db, tmp_path):
    """Over a window of whole days and partial ones, a common value's whole days come from its kept figures, its
    partial days and a rare value from the tag rows; the groups are those the tag rows alone give."""
    records = [
        {**to_record({"build_id": i, "minutes": i * 50, "status": "built" if i % 3 else "build_failed",
                      "duration": i, "cpu": i, "nar": 1}), "tags": {"project": "ml" if i == 31 else "web"}}
        for i in range(1, 80, 2)  # one account's, over two days and a half
    ]
    with patched(PROMOTE_AT=5):
        conn = open_database(fresh_db(tmp_path))
        import_files(conn, [write_jsonl(tmp_path / "a.jsonl", records)], 0)
        ((account_id,),) = conn.execute("SELECT account_id FROM accounts WHERE name = 'globex'").fetchall()
        low = to_us(ORIGIN) + 12 * 3_600 * 1_000_000
        build_filter = BuildFilter(create_from_us=low, create_to_us=low + 2 * 86_400 * 1_000_000)
        engine = postgres_stats_queries if getattr(conn, "engine", None) == "postgresql" else stats_queries
        parts = engine.stats_parts(account_id, build_filter, GroupBy("tag", "project"))
        kept, rare, *edges = (conn.execute(*part).fetchall() for part in parts)
        assert {(value, status) for value, status, _ in kept} == {("web", "built"), ("web", "build_failed")}
        assert all(isinstance(figures, bytes | memoryview) for *_, figures in kept)  # binary values
        assert [row[0] for row in rare] == ["ml"]
        assert len(edges) == 2 and all(row[0] == "web" for edge in edges for row in edge)
        tag_stats_equal_raw(conn, account_id, build_filter)
        conn.close()


@pytest.mark.parametrize(
    ("tags", "first"),
    [((("project", "a"),), ("project", "a")), ((("project", "a"), ("run", "b")), ("run", "b"))],
)
def test_tag_order_puts_the_rarest_pair_first(tmp_path, tags, first):
    records = [
        {**to_record({"build_id": i, "minutes": i, "status": "built", "duration": 5, "cpu": 1, "nar": 1}),
         "tags": {"project": "a", **({"run": "b"} if i < 3 else {})}}
        for i in range(2, 40, 2)
    ]
    with patched(PROMOTE_AT=5):
        conn = open_database(tmp_path / "t.db")
        import_files(conn, [write_jsonl(tmp_path / "a.jsonl", records)], 0)
        build_filter = BuildFilter(create_from_us=0, tags=tags)
        # One row, a column per pair in the filter's order: -1 for the promoted pair, else its builds.
        (sizes,) = conn.execute(*tag_totals.pair_sizes(1, build_filter)).fetchall()
        assert sizes == tuple({"project": -1, "run": 1}[key] for key, _ in tags)
        ordered, promoted = order_tags(lambda q: conn.execute(*q).fetchall(), 1, build_filter)
        assert ordered.tags[0] == first
        assert promoted == (len(tags) == 1)
        conn.close()


@pytest.mark.parametrize("minutes_past_midnight", [30, 12 * 60, 23 * 60 + 30])
def test_a_promoted_pairs_summary_reads_at_most_an_hour_of_builds_at_its_start(minutes_past_midnight):
    low = to_us(ORIGIN) + minutes_past_midnight * 60 * 1_000_000 + 17
    sql, params = queries.summary(1, BuildFilter(create_from_us=low, tags=(("project", "web"),)), promoted=True)
    first_hour = low - low % queries.US_PER_HOUR + queries.US_PER_HOUR
    first_day = low - low % queries.US_PER_DAY + queries.US_PER_DAY
    pair = [1, "project", "web"]
    # Its builds up to the first whole hour, the pair's hours up to the first whole day, its days from there on.
    assert params == [*pair, low, first_hour, *pair, first_hour, first_day, *pair, first_day]
    parts = sql.split(" UNION ALL ")
    read = [("build_tags" in part, "FROM tag_hourly_totals" in part, "FROM tag_daily_totals" in part) for part in parts]
    assert read == [
        (True, False, False), (False, True, False), (False, False, True)
    ]
