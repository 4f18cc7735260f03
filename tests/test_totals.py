"""Hourly totals and daily usage stay exactly in step with the builds, whatever imports do to them."""

from __future__ import annotations

import sqlite3
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import ENGINES, new_database, record, write_jsonl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_day_figures import kept_days, plain_days
from test_day_summaries import kept_summaries, plain_summaries

from buildreport.filters import BuildFilter
from buildreport.imports.files import ImportFailed
from buildreport.imports.load import import_files
from buildreport.models import BuildStatus
from buildreport.store import open_database, queries
from buildreport.store.reader import merge_summary_rows
from buildreport.store.totals import FULL_RECOMPUTE_THRESHOLD, US_PER_DAY, US_PER_HOUR
from buildreport.times import to_us

ORIGIN = datetime(2026, 10, 1, tzinfo=UTC)
# Each example takes a new database of its own from the `fresh_db` factory, never shared state.
SLOW_AND_FIXTURE = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
ACCOUNT_OF = ("acme", "globex")
FINISHED = [s.value for s in BuildStatus if s.value not in ("pending", "running")]


def totals_from_builds(conn: sqlite3.Connection, period: int) -> list[tuple]:
    return conn.execute(
        f"SELECT account_id, create_us - create_us % {period}, status, count(*), sum(cpu_seconds),"
        " coalesce(sum(duration_us), 0), sum(nar_size_bytes), min(start_us), max(stop_us)"
        " FROM builds GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
    ).fetchall()


def daily_from_builds(conn: sqlite3.Connection) -> list[tuple]:
    billable = ",".join(f"'{s}'" for s in FINISHED if s not in ("internal_error", "out_of_memory"))
    return conn.execute(
        f"SELECT account_id, stop_us - stop_us % {US_PER_DAY}, count(*), sum(cpu_seconds) FROM builds"
        f" WHERE stop_us IS NOT NULL AND status IN ({billable}) GROUP BY 1, 2 ORDER BY 1, 2"
    ).fetchall()


def stored_totals(conn: sqlite3.Connection) -> tuple[list[tuple], list[tuple], list[tuple]]:
    hourly = conn.execute("SELECT * FROM hourly_totals ORDER BY 1, 2, 3").fetchall()
    daily = conn.execute("SELECT * FROM daily_totals ORDER BY 1, 2, 3").fetchall()
    usage = conn.execute("SELECT * FROM daily_usage ORDER BY 1, 2").fetchall()
    return hourly, daily, usage


build_strategy = st.fixed_dictionaries(
    {
        "build_id": st.integers(1, 40),
        "minutes": st.integers(0, 60 * 24 * 3),
        "status": st.sampled_from([s.value for s in BuildStatus]),
        "duration": st.integers(0, 60 * 60 * 30),
        "cpu": st.integers(0, 10_000),
        "nar": st.integers(0, 10**9),
    }
)


def to_record(spec: dict) -> dict:
    status = spec["status"]
    create = ORIGIN + timedelta(minutes=spec["minutes"])
    return record(
        spec["build_id"],
        account=ACCOUNT_OF[spec["build_id"] % 2],  # a build never moves between accounts: every batch is valid
        create_time=create,
        start_time=(create + timedelta(seconds=7)).isoformat(),
        build_status=status,
        duration_seconds=None if status in ("pending", "running") else spec["duration"] + 0.25,
        cpu_seconds=spec["cpu"],
        outputs=[{"name": "out", "path": "/nix/store/x", "nar_hash": "sha256-x", "nar_size_bytes": spec["nar"]}],
    )


@settings(max_examples=30, deadline=None, suppress_health_check=SLOW_AND_FIXTURE)
@given(batches=st.lists(st.lists(build_strategy, min_size=1, max_size=15), min_size=1, max_size=4))
def test_totals_equal_a_fresh_computation_after_any_imports(fresh_db, batches):
    with tempfile.TemporaryDirectory() as tmp:
        conn = open_database(fresh_db(Path(tmp)))
        for number, batch in enumerate(batches):
            unique = {spec["build_id"]: spec for spec in batch}  # one record per build id and import
            path = write_jsonl(Path(tmp) / f"{number}.jsonl", [to_record(spec) for spec in unique.values()])
            result = import_files(conn, [path], 0)
            assert result.records == len(unique)
        # A refused import (a build moving to another account) changes no total either.
        before = stored_totals(conn)
        moved = {**to_record(batches[0][0]), "account": ACCOUNT_OF[(batches[0][0]["build_id"] + 1) % 2]}
        with pytest.raises(ImportFailed) as refused:
            import_files(conn, [write_jsonl(Path(tmp) / "moved.jsonl", [moved])], 0)
        assert [error.field for error in refused.value.errors] == ["build_id"]
        assert stored_totals(conn) == before
        hourly, daily, usage = stored_totals(conn)
        assert hourly == totals_from_builds(conn, US_PER_HOUR)
        assert daily == totals_from_builds(conn, US_PER_DAY)
        assert usage == daily_from_builds(conn)
        assert kept_days(conn) == plain_days(conn)
        assert kept_summaries(conn) == plain_summaries(conn)
        conn.close()


def test_totals_of_a_large_import_are_computed_in_one_pass(fresh_db, tmp_path):
    hours = FULL_RECOMPUTE_THRESHOLD + 50
    records = [
        record(i + 1, create_time=ORIGIN + timedelta(hours=i), cpu_seconds=i, build_status=FINISHED[i % len(FINISHED)])
        for i in range(hours)
    ]
    conn = open_database(fresh_db(tmp_path))
    import_files(conn, [write_jsonl(tmp_path / "big.jsonl", records)], 0)
    hourly, daily, usage = stored_totals(conn)
    assert len(hourly) == hours
    assert hourly == totals_from_builds(conn, US_PER_HOUR)
    assert daily == totals_from_builds(conn, US_PER_DAY)
    assert usage == daily_from_builds(conn)
    # A second large import moves every other build to another hour and status, and adds as many again.
    again = [
        record(i + 1, create_time=ORIGIN + timedelta(hours=i // 2, minutes=i % 60), cpu_seconds=2 * i,
               build_status=FINISHED[(i + 3) % len(FINISHED)])
        for i in range(0, 2 * hours, 2)
    ]
    import_files(conn, [write_jsonl(tmp_path / "again.jsonl", again)], 0)
    hourly, daily, usage = stored_totals(conn)
    assert hourly == totals_from_builds(conn, US_PER_HOUR)
    assert daily == totals_from_builds(conn, US_PER_DAY)
    assert usage == daily_from_builds(conn)
    assert kept_days(conn) == plain_days(conn)
    assert kept_summaries(conn) == plain_summaries(conn)
    assert conn.execute("SELECT count(*) FROM builds").fetchone()[0] == hours + hours // 2


# --- a summary over any window equals the computation from the builds alone -------------------------

SUMMARY_RECORDS = [
    to_record(
        {
            "build_id": i,
            "account": "acme",
            "minutes": (i * 37) % (60 * 24 * 3),
            "status": [s.value for s in BuildStatus][i % 11],
            "duration": (i * 611) % 5000,
            "cpu": i * 13,
            "nar": i * 1_000_003,
        }
    )
    for i in range(2, 400, 2)
]


@pytest.fixture(scope="module", params=ENGINES)
def summary_db(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("summary")
    conn = open_database(new_database(request, request.param, tmp))
    import_files(conn, [write_jsonl(tmp / "s.jsonl", SUMMARY_RECORDS)], 0)
    yield conn
    conn.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    start=st.integers(-60 * 26, 60 * 24 * 3 + 120),
    length=st.one_of(st.none(), st.integers(0, 60 * 24 * 5)),
    seconds=st.integers(0, 59),
    statuses=st.lists(st.sampled_from(list(BuildStatus)), max_size=3, unique=True),
)
def test_summary_from_totals_equals_summary_from_builds(summary_db, start, length, seconds, statuses):
    low = to_us(ORIGIN) + (start * 60 + seconds) * 1_000_000
    high = None if length is None else low + length * 60 * 1_000_000
    build_filter = BuildFilter(create_from_us=low, create_to_us=high, statuses=tuple(statuses))
    sql, params = queries.summary(1, build_filter)
    combined = merge_summary_rows(summary_db.execute(sql, params).fetchall())
    raw_sql, raw_params = queries._raw_summary(1, build_filter)
    (raw,) = summary_db.execute(raw_sql, raw_params).fetchall()
    assert combined == raw


# --- writes over HTTP keep the totals exact too -----------------------------------------------------

write_strategy = st.fixed_dictionaries(
    {
        "source": st.integers(1, 12),
        "named": st.booleans(),
        "account": st.sampled_from(["acme", "globex"]),
        "minutes": st.integers(0, 60 * 24 * 3),
        "status": st.sampled_from([s.value for s in BuildStatus]),
        "duration": st.integers(0, 60 * 60 * 30),
        "cpu": st.integers(0, 10_000),
        "nar": st.integers(0, 10**9),
    }
)


def to_write_record(spec: dict) -> dict:
    """A POST /builds record: by source id, or by a build id of its account's own range, far from the ids the
    service assigns after it (the next free ones)."""
    body = to_record({**spec, "build_id": 1})
    del body["account"], body["build_id"]
    if spec["named"]:
        body["build_id"] = 10**9 * spec["source"] + 5 * 10**8 * (spec["account"] == "globex")
    else:
        body["source_id"] = f"runner:{spec['source']}"
    return body


@settings(max_examples=20, deadline=None, suppress_health_check=SLOW_AND_FIXTURE)
@given(requests=st.lists(st.lists(write_strategy, min_size=1, max_size=12), min_size=1, max_size=4))
def test_totals_equal_a_fresh_computation_after_any_http_writes(fresh_db, requests):
    from conftest import Env, auth

    with tempfile.TemporaryDirectory() as tmp:
        env = Env(Path(tmp), fresh_db(Path(tmp)))
        tokens = {name: env.token(name, ("build:write",)) for name in ("acme", "globex")}
        with env.client() as client:
            for batch in requests:
                for account in ("acme", "globex"):
                    body = [to_write_record(spec) for spec in batch if spec["account"] == account]
                    if body:
                        response = client.post("/builds", json=body, headers=auth(tokens[account]))
                        assert response.status_code == 200, response.text
                        answer = response.json()
                        assert answer["created"] + answer["updated"] + answer["unchanged"] == len(body)
        conn = open_database(env.db)
        hourly, daily, usage = stored_totals(conn)
        assert hourly == totals_from_builds(conn, US_PER_HOUR)
        assert daily == totals_from_builds(conn, US_PER_DAY)
        assert usage == daily_from_builds(conn)
        assert kept_days(conn) == plain_days(conn)
        assert kept_summaries(conn) == plain_summaries(conn)
        conn.close()
