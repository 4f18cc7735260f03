"""The schema's migrations: a database written by an older buildreport is brought up to date in place."""

from __future__ import annotations

import sqlite3

import msgspec
from conftest import record, write_jsonl
from records import WITHOUT_STATS_COLUMNS, WITHOUT_TAG_FIGURES

from buildreport.ingest import import_files
from buildreport.models import Build
from buildreport.store.sqlite.schema import SCHEMA_VERSION, open_database
from buildreport.store.writer import body_hash

STATUS_MIGRATION = 2  # the version whose builds carry `status` beside `build_status`


def _rows(db) -> list[tuple]:
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT build_id, body, body_hash FROM builds ORDER BY build_id").fetchall()
    conn.close()
    return rows


def _stats_columns(db) -> list[tuple]:
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT build_id, duration_text, queue_text FROM builds ORDER BY build_id").fetchall()
    conn.close()
    return rows


def test_migration_gives_stored_builds_the_numbers_statistics_read_exactly_as_a_fresh_import_writes_them(tmp_path):
    records = [
        record(1, duration_seconds=0.1 + 0.2, queue_time_seconds=1e-7),
        record(2, duration_seconds=12.0, queue_time_seconds=0.0),
        record(3, build_status="running", duration_seconds=None, queue_time_seconds=1234567.891011),
    ]
    conn = open_database(tmp_path / "t.db")
    import_files(conn, [write_jsonl(tmp_path / "a.jsonl", records)], 0)
    conn.close()
    fresh = _stats_columns(tmp_path / "t.db")
    assert fresh == [(1, "0.30000000000000004", "1e-7"), (2, "12.0", "0.0"), (3, None, "1234567.891011")]

    old = sqlite3.connect(tmp_path / "t.db")
    old.executescript(WITHOUT_STATS_COLUMNS)
    old.execute(f"PRAGMA user_version = {SCHEMA_VERSION - 2}")
    old.commit()
    old.close()

    open_database(tmp_path / "t.db").close()
    assert _stats_columns(tmp_path / "t.db") == fresh


def _tag_figures(db) -> list[tuple]:
    conn = sqlite3.connect(db)
    rows = conn.execute(
        "SELECT t.build_id, t.key, t.status, t.cpu_seconds, t.duration_text, t.queue_text, b.status, b.cpu_seconds,"
        " b.duration_text, b.queue_text FROM build_tags t JOIN builds b USING (build_id) ORDER BY 1, 2"
    ).fetchall()
    conn.close()
    return rows


def _day_figures(db) -> list[tuple]:
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT account_id, day_us, status, figures FROM day_figures ORDER BY 1, 2, 3").fetchall()
    conn.close()
    return rows


def test_migration_gives_tag_rows_and_days_their_figures_as_a_fresh_import_writes_them(tmp_path):
    records = [
        record(1, duration_seconds=0.1 + 0.2, queue_time_seconds=1e-7, cpu_seconds=7, tags={"project": "web"}),
        record(2, build_status="build_failed", tags={"project": "ml", "run": "r2"}),
        record(3, build_status="running", duration_seconds=None, tags={"project": "web"}),
        record(4),
    ]
    conn = open_database(tmp_path / "t.db")
    import_files(conn, [write_jsonl(tmp_path / "a.jsonl", records)], 0)
    conn.close()
    fresh = _tag_figures(tmp_path / "t.db")
    fresh_days = _day_figures(tmp_path / "t.db")
    assert len(fresh_days) == 3  # one day, three statuses
    assert [row[0] for row in fresh] == [1, 2, 2, 3]
    assert all(row[2:6] == row[6:] for row in fresh)
    assert fresh[0][2:6] == ("built", 7, "0.30000000000000004", "1e-7")

    old = sqlite3.connect(tmp_path / "t.db")
    old.executescript(WITHOUT_TAG_FIGURES)
    old.execute(f"PRAGMA user_version = {SCHEMA_VERSION - 1}")
    old.commit()
    old.close()

    open_database(tmp_path / "t.db").close()
    assert _tag_figures(tmp_path / "t.db") == fresh
    assert _day_figures(tmp_path / "t.db") == fresh_days


def test_migration_adds_status_to_stored_builds_exactly_as_a_fresh_import_writes_them(tmp_path):
    records = [
        record(1, build_status="built", tags={"build_status": "built", "status": "x"}),
        record(2, build_status="timeout", status_message='"build_status":"timeout"'),
        record(3, build_status="running"),
    ]
    path = write_jsonl(tmp_path / "a.jsonl", records)
    conn = open_database(tmp_path / "t.db")
    import_files(conn, [path], 0)
    conn.close()
    fresh = _rows(tmp_path / "t.db")

    # What an older buildreport stored: the same JSON without `status`, at the schema version before it.
    old = sqlite3.connect(tmp_path / "t.db")
    for build_id, body, _ in fresh:
        document = msgspec.json.decode(body)
        del document["status"]
        stale = msgspec.json.encode(document)
        old.execute("UPDATE builds SET body = ?, body_hash = ? WHERE build_id = ?", (stale, body_hash(stale), build_id))
    # Later migrations' additions did not exist yet either.
    old.execute("DROP INDEX builds_by_source")
    old.execute("ALTER TABLE builds DROP COLUMN source_id")
    old.execute("DROP TABLE tag_pairs")
    old.execute("DROP TABLE tag_daily_totals")
    old.executescript(WITHOUT_STATS_COLUMNS)
    old.execute(f"PRAGMA user_version = {STATUS_MIGRATION - 1}")
    old.commit()
    old.close()

    open_database(tmp_path / "t.db").close()
    migrated = _rows(tmp_path / "t.db")
    assert migrated == fresh
    for _, body, digest in migrated:
        build = msgspec.json.decode(body, type=Build)
        assert build.status == build.build_status
        assert digest == body_hash(body)
    conn = sqlite3.connect(tmp_path / "t.db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()
