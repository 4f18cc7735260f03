"""The schema's migrations: a database written by an older buildreport is brought up to date in place."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time

import msgspec
import pytest
from conftest import buildreport_command, record, write_jsonl
from records import (
    WITHOUT_FIGURE_PARTS,
    WITHOUT_STATS_COLUMNS,
    WITHOUT_SYSTEM_COLUMN,
    WITHOUT_TAG_FIGURES,
    WITHOUT_TAG_STOPS,
    version_before,
)

from buildreport.imports.files import ImportFailed
from buildreport.imports.load import import_files
from buildreport.models import Build
from buildreport.store import tag_totals
from buildreport.store.build_rows import BILLABLE_TAG_ROWS, body_hash
from buildreport.store.sqlite.bulk import DEFERRED_INDEXES
from buildreport.store.sqlite.schema import SCHEMA_VERSION, open_database

STATUS_MIGRATION = 2  # the version whose builds carry `status` beside `build_status`


def _rows(db) -> list[tuple]:
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT build_id, body, body_hash FROM builds ORDER BY build_id").fetchall()
    conn.close()
    return rows


def _columns(db, *columns: str) -> list[tuple]:
    """Each build's id and the given columns, in id order."""
    conn = sqlite3.connect(db)
    rows = conn.execute(f"SELECT build_id, {', '.join(columns)} FROM builds ORDER BY build_id").fetchall()
    conn.close()
    return rows


def _stats_columns(db) -> list[tuple]:
    return _columns(db, "duration_text", "queue_text")


def _migrated_from(db, script: str, marker: str) -> None:
    """Take the database back to before the schema step that holds `marker` (`script` undoes it and any later
    step it needs to), then open it, which migrates it again."""
    old = sqlite3.connect(db)
    old.executescript(script)
    old.execute(f"PRAGMA user_version = {version_before(marker)}")
    old.commit()
    old.close()
    open_database(db).close()


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

    _migrated_from(tmp_path / "t.db", WITHOUT_STATS_COLUMNS, "duration and queue time as its JSON writes them")
    assert _stats_columns(tmp_path / "t.db") == fresh


def test_migration_gives_stored_builds_their_system_as_a_fresh_import_writes_it(tmp_path):
    records = [record(1, system="x86_64-linux"), record(2, system="aarch64-darwin"), record(3, system="riscv64-linux")]
    conn = open_database(tmp_path / "t.db")
    import_files(conn, [write_jsonl(tmp_path / "a.jsonl", records)], 0)
    conn.close()
    fresh = _columns(tmp_path / "t.db", "system")
    assert fresh == [(1, "x86_64-linux"), (2, "aarch64-darwin"), (3, "riscv64-linux")]

    _migrated_from(tmp_path / "t.db", WITHOUT_SYSTEM_COLUMN, "ADD COLUMN system")
    assert _columns(tmp_path / "t.db", "system") == fresh


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

    _migrated_from(tmp_path / "t.db", WITHOUT_TAG_FIGURES, "Each tag row carries its build")
    assert _tag_figures(tmp_path / "t.db") == fresh
    assert _day_figures(tmp_path / "t.db") == fresh_days


def _tag_stops(db) -> list[tuple]:
    """Each tag row's build, key and stop time, and the billable ones as the index of usage by tag holds them."""
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT build_id, key, stop_us FROM build_tags ORDER BY 1, 2").fetchall()
    indexed = conn.execute(
        "SELECT account_id, key, stop_us, status, value, cpu_seconds FROM build_tags INDEXED BY build_tags_by_stop"
        f" WHERE account_id = 1 AND key > '' AND {BILLABLE_TAG_ROWS}"
    ).fetchall()
    conn.close()
    return rows + indexed


def test_migration_gives_tag_rows_their_builds_stop_time_as_a_fresh_import_writes_it(tmp_path):
    records = [
        record(1, cpu_seconds=7, tags={"project": "web"}),
        record(2, build_status="build_failed", duration_seconds=30.5, tags={"project": "ml", "run": "r2"}),
        record(3, build_status="running", tags={"project": "web"}),
        record(4, build_status="internal_error", tags={"project": "web"}),
        record(5),
    ]
    conn = open_database(tmp_path / "t.db")
    import_files(conn, [write_jsonl(tmp_path / "a.jsonl", records)], 0)
    conn.close()
    fresh = _tag_stops(tmp_path / "t.db")
    assert [row[:2] for row in fresh[:5]] == [(1, "project"), (2, "project"), (2, "run"), (3, "project"),
                                              (4, "project")]
    assert fresh[3][2] is None and None not in (fresh[0][2], fresh[1][2], fresh[4][2])
    assert sorted(row[4] for row in fresh[5:]) == ["ml", "r2", "web"]  # builds 1 and 2: billable and stopped

    _migrated_from(tmp_path / "t.db", WITHOUT_TAG_STOPS, "ADD COLUMN stop_us")
    assert _tag_stops(tmp_path / "t.db") == fresh


def _kept_figures(db) -> dict[str, list[tuple]]:
    """Every row of both tables of kept day figures, their part numbers included."""
    conn = sqlite3.connect(db)
    rows = {
        table: conn.execute(f"SELECT * FROM {table} ORDER BY {', '.join(columns)}").fetchall()
        for table, columns in (("day_figures", "1234"), ("tag_day_figures", "123456"))
    }
    conn.close()
    return rows


def test_migration_keeps_each_days_figures_as_its_first_part(tmp_path, monkeypatch):
    monkeypatch.setattr(tag_totals, "PROMOTE_AT", 2)  # so that a pair has kept figures too
    records = [
        record(1, duration_seconds=0.1 + 0.2, tags={"project": "web"}),
        record(2, build_status="build_failed", tags={"project": "web"}),
        record(3, create_time="2026-10-02T08:00:00Z", tags={"project": "web", "run": "r3"}),
    ]
    conn = open_database(tmp_path / "t.db")
    import_files(conn, [write_jsonl(tmp_path / "a.jsonl", records)], 0)
    conn.close()
    fresh = _kept_figures(tmp_path / "t.db")
    assert len(fresh["day_figures"]) == 3 and len(fresh["tag_day_figures"]) == 3
    assert all(row[-2] == 0 for rows in fresh.values() for row in rows)  # one part each

    _migrated_from(tmp_path / "t.db", WITHOUT_FIGURE_PARTS, "_keep_figures_in_parts")
    assert _kept_figures(tmp_path / "t.db") == fresh
    conn = sqlite3.connect(tmp_path / "t.db")
    for table in fresh:
        key = [name for _, name, *_, place in sorted(conn.execute(f"PRAGMA table_info({table})"), key=lambda c: c[-1])
               if place]
        assert key[-1] == "part", table
    conn.close()


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


# --- a large write into a database with no builds -----------------------------------------------------

FULL, NORMAL = 2, 1  # PRAGMA synchronous


def _settings(conn) -> tuple[str, int]:
    return conn.execute("PRAGMA journal_mode").fetchone()[0], conn.execute("PRAGMA synchronous").fetchone()[0]


def _import_watching(conn, path) -> set[tuple[str, int]]:
    """Import `path`; the journal mode and synchronous setting seen as each record was written."""
    seen = set()

    def watch(imported):
        seen.add(_settings(conn))
        return imported

    import_files(conn, [path], 0, transform=watch)
    return seen


def _indexes(conn) -> list[tuple[str, str]]:
    return conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' ORDER BY name").fetchall()


def _indexes_watching(conn, path) -> set[frozenset[str]]:
    """Import `path`; the names of the indexes there were as each record was written."""
    seen = set()

    def watch(imported):
        seen.add(frozenset(name for name, _ in _indexes(conn)))
        return imported

    import_files(conn, [path], 0, transform=watch)
    return seen


def _count(db) -> int:
    conn = sqlite3.connect(db)
    (count,) = conn.execute("SELECT count(*) FROM builds").fetchone()
    conn.close()
    return count


def test_an_import_into_a_database_with_no_builds_goes_through_a_rollback_journal_then_wal_again(tmp_path):
    db = tmp_path / "t.db"
    conn = open_database(db)
    seen = _import_watching(conn, write_jsonl(tmp_path / "a.jsonl", [record(i) for i in range(1, 4)]))
    assert seen == {("delete", FULL)}
    assert _settings(conn) == ("wal", NORMAL)
    assert conn.execute("PRAGMA cache_size").fetchone()[0] == -32768
    assert not (tmp_path / "t.db-journal").exists()
    conn.close()
    assert _count(db) == 3


def test_an_import_into_a_database_with_builds_keeps_the_log(tmp_path):
    conn = open_database(tmp_path / "t.db")
    import_files(conn, [write_jsonl(tmp_path / "a.jsonl", [record(1)])], 0)
    assert _import_watching(conn, write_jsonl(tmp_path / "b.jsonl", [record(2)])) == {("wal", NORMAL)}
    conn.close()


def test_an_import_while_another_connection_has_the_database_open_keeps_the_log(tmp_path):
    db = tmp_path / "t.db"
    conn = open_database(db)
    reader = sqlite3.connect(db)
    assert reader.execute("SELECT count(*) FROM builds").fetchone() == (0,)
    assert _import_watching(conn, write_jsonl(tmp_path / "a.jsonl", [record(1), record(2)])) == {("wal", NORMAL)}
    assert reader.execute("SELECT count(*) FROM builds").fetchone() == (2,)
    reader.close()
    conn.close()


def test_a_refused_import_into_a_new_database_writes_nothing_and_leaves_wal(tmp_path):
    db = tmp_path / "t.db"
    conn = open_database(db)
    with pytest.raises(ImportFailed):
        import_files(conn, [write_jsonl(tmp_path / "a.jsonl", [record(1), record(2, build_status="unknown")])], 0)
    assert _settings(conn) == ("wal", NORMAL)
    conn.close()
    assert _count(db) == 0
    assert not (tmp_path / "t.db-journal").exists()


def test_an_import_into_a_database_with_no_builds_makes_the_indexes_it_does_not_read_once_its_builds_are_in(
    tmp_path,
):
    conn = open_database(tmp_path / "t.db")
    fresh = _indexes(conn)
    assert set(DEFERRED_INDEXES) <= {name for name, _ in fresh}
    records = [record(i, derivation_path=f"/nix/store/{i:032d}-p.drv", tags={"run": str(i % 7)}) for i in range(1, 51)]
    seen = _indexes_watching(conn, write_jsonl(tmp_path / "a.jsonl", records))
    assert seen == {frozenset(name for name, _ in fresh) - set(DEFERRED_INDEXES)}
    assert _indexes(conn) == fresh  # the same definitions, as a fresh database has them
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)  # every index holds every build
    conn.close()


def test_an_import_into_a_database_with_builds_keeps_every_index_up_as_it_writes(tmp_path):
    conn = open_database(tmp_path / "t.db")
    import_files(conn, [write_jsonl(tmp_path / "a.jsonl", [record(1)])], 0)
    fresh = _indexes(conn)
    assert _indexes_watching(conn, write_jsonl(tmp_path / "b.jsonl", [record(2), record(3)])) == {
        frozenset(name for name, _ in fresh)
    }
    assert _indexes(conn) == fresh
    conn.close()


def test_a_refused_import_into_a_new_database_leaves_every_index_in_place(tmp_path):
    conn = open_database(tmp_path / "t.db")
    fresh = _indexes(conn)
    late_error = [*(record(i) for i in range(1, 2501)), record(2501, build_status="unknown")]  # after a batch is in
    with pytest.raises(ImportFailed):
        import_files(conn, [write_jsonl(tmp_path / "a.jsonl", late_error)], 0)
    assert _indexes(conn) == fresh
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


def test_a_database_left_with_a_rollback_journal_is_set_to_wal_when_opened(tmp_path):
    db = tmp_path / "t.db"
    open_database(db).close()
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode = DELETE").fetchone() == ("delete",)
    conn.close()
    conn = open_database(db)
    assert _settings(conn) == ("wal", NORMAL)
    conn.close()


def test_an_import_killed_half_way_into_a_new_database_leaves_it_whole_and_empty(tmp_path):
    db = tmp_path / "t.db"
    path = write_jsonl(tmp_path / "big.jsonl", [record(i, tags={"run": str(i)}) for i in range(1, 100_001)])
    process = subprocess.Popen([*buildreport_command(), "import", "--db", str(db), str(path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "t.db-journal").exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.5)  # well into the writes
        assert process.poll() is None, "the import ended before it could be killed"
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait(timeout=10)
    conn = sqlite3.connect(db)  # the first reader rolls back what the journal holds
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert conn.execute("SELECT count(*) FROM builds").fetchone() == (0,)
    assert set(DEFERRED_INDEXES) <= {name for name, _ in _indexes(conn)}  # dropped by the lost transaction alone
    conn.close()
    conn = open_database(db)
    assert _settings(conn) == ("wal", NORMAL)
    import_files(conn, [write_jsonl(tmp_path / "small.jsonl", [record(1)])], 0)
    conn.close()
    assert _count(db) == 1


# The name index as an earlier schema made it: the same name, over a longer spelling of the expression.
_EARLIER_BASE = "substr(derivation_path, length(rtrim(derivation_path, replace(derivation_path, '/', ''))) + 1)"
_EARLIER_STEM = f"(CASE WHEN substr({_EARLIER_BASE}, -4) = '.drv' THEN substr({_EARLIER_BASE}, 1, length({_EARLIER_BASE}) - 4) ELSE {_EARLIER_BASE} END)"  # noqa: E501
_EARLIER_NAME = (
    f"(CASE WHEN instr({_EARLIER_STEM}, '-') BETWEEN 1 AND length({_EARLIER_STEM}) - 1"
    f" THEN substr({_EARLIER_STEM}, instr({_EARLIER_STEM}, '-') + 1) ELSE {_EARLIER_STEM} END)"
)


def test_migration_makes_the_name_index_again_over_the_expression_badges_ask_for(tmp_path):
    from buildreport.store.dialect import SQLITE

    records = [record(1, derivation_path="/nix/store/aaa-hello-2.12.drv"), record(2, derivation_path="/x/bbb-hello")]
    conn = open_database(tmp_path / "t.db")
    import_files(conn, [write_jsonl(tmp_path / "a.jsonl", records)], 0)
    conn.execute("DROP INDEX builds_by_name")
    conn.executescript(WITHOUT_SYSTEM_COLUMN)
    conn.execute(f"CREATE INDEX builds_by_name ON builds (account_id, ({_EARLIER_NAME}), create_us, build_id,"
                 " status, duration_us)")
    conn.execute(f"PRAGMA user_version = {version_before('DROP INDEX IF EXISTS builds_by_name')}")
    conn.commit()
    conn.close()

    conn = open_database(tmp_path / "t.db")
    (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'builds_by_name'").fetchone()
    assert SQLITE.derivation_name in sql and _EARLIER_NAME not in sql
    names = conn.execute(f"SELECT {SQLITE.derivation_name} FROM builds INDEXED BY builds_by_name").fetchall()
    assert sorted(names) == [("hello",), ("hello-2.12",)]
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()
