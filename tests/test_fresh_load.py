"""An import into a database with no builds through store.fresh_load stores exactly what the writer would:
every table, row for row, or the same refusal. The reading half runs in this process here (import_reader.take
over import_reader.messages), so that small thresholds can be set; test_imports_reader runs it as a process."""

from __future__ import annotations

import sqlite3
import tempfile
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import query, record, write_jsonl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_totals import daily_from_builds, stored_totals, totals_from_builds

from buildreport.imports import load as ingest
from buildreport.imports import reader as import_reader
from buildreport.imports.files import ImportFailed
from buildreport.imports.load import import_files
from buildreport.models import MAX_DURATION_SECONDS, MAX_NAR_SIZE_BYTES, MAX_OUTPUTS, BuildStatus
from buildreport.store import build_writer, fresh_load, open_database, tag_totals
from buildreport.store.totals import MAX_ACCOUNT_TOTAL, OVERSIZED, US_PER_DAY, US_PER_HOUR

ORIGIN = datetime(2026, 10, 1, tzinfo=UTC)
STATUSES = [s.value for s in BuildStatus]
NOW_US = 1_790_000_000_000_000
TABLES = ("accounts", "builds", "build_tags", "build_logs", "hourly_totals", "daily_totals", "daily_usage",
          "day_figures", "day_summaries", "tag_pairs", "tag_hourly_totals", "tag_daily_totals")


def in_process(load, paths, errors, on_progress):  # type: ignore[no-untyped-def]
    return import_reader.take(load, import_reader.messages(paths, load.accounts), errors, on_progress)


@contextmanager
def fresh_path(*, promote_at: int = tag_totals.PROMOTE_AT, max_tag_slots: int = fresh_load.MAX_TAG_SLOTS,
               batch_size: int = import_reader.BATCH_SIZE):
    """Imports into databases with no builds go through fresh_load, read in this process."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(import_reader, "BATCH_SIZE", batch_size)
        patch.setattr(ingest, "TWO_PROCESS_BYTES", 0)
        patch.setattr(import_reader, "load", in_process)
        patch.setattr(tag_totals, "PROMOTE_AT", promote_at)
        patch.setattr(fresh_load, "MAX_TAG_SLOTS", max_tag_slots)
        yield


@contextmanager
def writer_path(*, promote_at: int = tag_totals.PROMOTE_AT, batch_size: int = build_writer.BATCH_SIZE):
    """Imports go through the writer, `batch_size` records at a time."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(build_writer, "BATCH_SIZE", batch_size)
        patch.setattr(ingest, "TWO_PROCESS_BYTES", 1 << 62)
        patch.setattr(tag_totals, "PROMOTE_AT", promote_at)
        yield


def contents(db: Path) -> dict[str, list[tuple]]:
    conn = sqlite3.connect(db)
    try:
        return {table: sorted(conn.execute(f"SELECT * FROM {table}").fetchall(), key=repr) for table in TABLES}
    finally:
        conn.close()


def outcome(db: Path, paths: list[Path]) -> list[str] | dict[str, list[tuple]]:
    """The refusal's errors, or every table after the import."""
    conn = open_database(db)
    try:
        import_files(conn, paths, NOW_US)
    except ImportFailed as exc:
        assert conn.execute("SELECT count(*) FROM builds").fetchone() == (0,)
        return [str(error) for error in exc.errors] + [f"total {exc.total}"]
    finally:
        conn.close()
    return contents(db)


spec_strategy = st.fixed_dictionaries(
    {
        "account": st.sampled_from(["acme", "globex", "initech"]),
        "minutes": st.integers(0, 60 * 30),  # builds often share an hour, a day and a status
        "status": st.sampled_from(["built", "built", "build_failed", *STATUSES]),
        "duration": st.integers(0, 60 * 60 * 30),
        "queue": st.floats(0, 1000, allow_nan=False),
        "cpu": st.integers(0, 10_000),
        "nar": st.lists(st.integers(0, 10**9), max_size=2),
        "tags": st.dictionaries(st.sampled_from(["project", "run", "os"]), st.sampled_from(["a", "b", "c"]),
                                max_size=3),
        "restarts": st.booleans(),  # the build before it
        "log": st.none() | st.text(max_size=20),
    }
)


def to_records(specs: list[dict], conflict: tuple[int, int] | None) -> list[dict]:
    """Builds 1, 2, ...; a restart is of the build before it, in its account. `conflict`: (build, link target),
    a restarted_as link that holds only if the target is the build after it and not a restart already."""
    records: list[dict] = []
    for build_id, spec in enumerate(specs, start=1):
        restart_of = build_id - 1 if spec["restarts"] and build_id > 1 else None
        account = records[-1]["account"] if restart_of else spec["account"]
        records.append(to_record(build_id, {**spec, "account": account, "restart_of": restart_of}))
    if conflict is not None:
        build_id, target = conflict
        records[(build_id - 1) % len(records)]["restarted_as_build_id"] = target
    return records


def to_record(build_id: int, spec: dict) -> dict:
    create = ORIGIN + timedelta(minutes=spec["minutes"])
    status = spec["status"]
    fields = dict(
        account=spec["account"],
        create_time=create,
        start_time=(create + timedelta(seconds=3)).isoformat(),
        build_status=status,
        duration_seconds=None if status in ("pending", "running") else spec["duration"] + 0.5,
        queue_time_seconds=spec["queue"],
        cpu_seconds=spec["cpu"],
        outputs=[{"name": f"o{i}", "path": "/nix/store/x", "nar_hash": "h", "nar_size_bytes": n}
                 for i, n in enumerate(spec["nar"])],
        tags=spec["tags"],
        restart_of_build_id=spec.get("restart_of"),
    )
    if spec["log"] is not None:
        fields["log"] = spec["log"]
    return record(build_id, **fields)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(spec_strategy, min_size=4, max_size=16),
    files=st.integers(1, 2),
    max_tag_slots=st.sampled_from([2, fresh_load.MAX_TAG_SLOTS]),
    batch_size=st.sampled_from([3, import_reader.BATCH_SIZE]),
    conflict=st.none() | st.tuples(st.integers(1, 16), st.integers(1, 17)),
)
def test_a_fresh_load_stores_what_the_writer_stores_or_refuses_alike(specs, files, max_tag_slots, batch_size,
                                                                     conflict):
    """Random builds of three accounts, restart links within them (in some examples one that conflicts, or that
    names a build not there), tags common enough to get totals, logs; read and written in batches of the usual size
    or of a few builds (links between batches), the hourly figures of tag pairs sent in one part or, past the slot
    limit, in several, one pair's hour in more than one."""
    records = to_records(specs, conflict)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        half = (len(records) + 1) // files
        paths = [write_jsonl(folder / f"{i}.jsonl", records[i * half:(i + 1) * half]) for i in range(files)]
        with writer_path(promote_at=2, batch_size=batch_size):
            expected = outcome(folder / "writer.db", paths)
        with fresh_path(promote_at=2, max_tag_slots=max_tag_slots, batch_size=batch_size):
            got = outcome(folder / "fresh.db", paths)
    assert got == expected


def test_a_build_that_names_a_restart_in_a_later_batch_which_names_another_original_is_refused_alike(tmp_path):
    records = [record(i) for i in range(1, 10)]
    records[0] = record(1, build_status="internal_error", restarted_as_build_id=9)
    records[7] = record(8, build_status="internal_error", restarted_as_build_id=9)
    records[8] = record(9, restart_of_build_id=8)
    paths = [write_jsonl(tmp_path / "a.jsonl", records)]
    with writer_path(batch_size=3):
        by_writer = outcome(tmp_path / "writer.db", paths)
    with fresh_path(batch_size=3):
        by_fresh_load = outcome(tmp_path / "fresh.db", paths)
    assert by_writer == by_fresh_load == [
        f"{paths[0]}:9: restart_of_build_id: build 1 already has restarted_as_build_id 9", "total 1"
    ]


def test_the_totals_of_a_fresh_load_equal_a_computation_from_its_builds(tmp_path):
    records = [
        to_record(i, {"account": ("acme", "globex")[i % 2], "minutes": i * 37, "status": STATUSES[i % len(STATUSES)],
                      "duration": i * 11, "queue": 0.25, "cpu": i, "nar": [i * 1000], "tags": {"project": "web"},
                      "restarts": False, "log": None})
        for i in range(1, 301)
    ]
    db = tmp_path / "t.db"
    with fresh_path(promote_at=50):
        conn = open_database(db)
        import_files(conn, [write_jsonl(tmp_path / "a.jsonl", records)], NOW_US)
    hourly, daily, usage = stored_totals(conn)
    assert hourly == totals_from_builds(conn, US_PER_HOUR)
    assert daily == totals_from_builds(conn, US_PER_DAY)
    assert usage == daily_from_builds(conn)
    assert conn.execute("SELECT account_id, key, value FROM tag_pairs ORDER BY 1").fetchall() == [
        (1, "project", "web"), (2, "project", "web")
    ]
    conn.close()


def test_a_fresh_load_into_a_database_with_accounts_gives_new_accounts_the_next_ids(tmp_path):
    conn = open_database(tmp_path / "t.db")
    conn.execute("INSERT INTO accounts (name, created_us) VALUES ('zeta', 5), ('acme', 6)")
    conn.commit()
    with fresh_path():
        import_files(conn, [write_jsonl(tmp_path / "a.jsonl", [record(1, account="new"), record(2)])], NOW_US)
    assert conn.execute("SELECT account_id, name, created_us FROM accounts ORDER BY 1").fetchall() == [
        (1, "zeta", 5), (2, "acme", 6), (3, "new", NOW_US)
    ]
    assert conn.execute("SELECT build_id, account_id FROM builds ORDER BY 1").fetchall() == [(1, 3), (2, 2)]
    conn.close()


def test_totals_left_in_a_database_with_no_builds_are_replaced(tmp_path):
    """No builds means no totals: rows left behind (out of step) would otherwise be added to."""
    conn = open_database(tmp_path / "t.db")
    conn.execute("INSERT INTO accounts (name, created_us) VALUES ('acme', 0)")
    conn.execute("INSERT INTO daily_usage VALUES (1, 0, 99, 99)")
    conn.execute("INSERT INTO hourly_totals VALUES (1, 0, 'built', 9, 9, 9, 9, 0, 0)")
    conn.commit()
    with fresh_path():
        import_files(conn, [write_jsonl(tmp_path / "a.jsonl", [record(1, create_time=ORIGIN)])], NOW_US)
    assert stored_totals(conn)[0] == totals_from_builds(conn, US_PER_HOUR)
    assert stored_totals(conn)[2] == daily_from_builds(conn)
    conn.close()


@pytest.mark.parametrize(("field", "times"), [("duration_seconds", 1), ("duration_seconds", 2), ("outputs", 1)])
def test_an_account_whose_total_would_reach_two_to_the_62_is_refused_as_by_the_writer(tmp_path, field, times):
    """At the limit; and twice past it, within one hour, whose sums would not fit 64 bits (refused, not a fault)."""
    if field == "duration_seconds":
        builds = times * -(-MAX_ACCOUNT_TOTAL // (MAX_DURATION_SECONDS * 1_000_000))
        fields = {"duration_seconds": MAX_DURATION_SECONDS}
    else:
        builds = MAX_ACCOUNT_TOTAL // (MAX_OUTPUTS * MAX_NAR_SIZE_BYTES)
        fields = {"outputs": [{"name": f"o{i}", "path": "/nix/store/x", "nar_hash": "h",
                               "nar_size_bytes": MAX_NAR_SIZE_BYTES} for i in range(MAX_OUTPUTS)]}
    path = write_jsonl(tmp_path / "a.jsonl", [record(i, **fields) for i in range(1, builds + 1)])
    with writer_path():
        expected = outcome(tmp_path / "writer.db", [path])
    with fresh_path():
        got = outcome(tmp_path / "fresh.db", [path])
    assert got == expected == [f"{path}:{builds}: {field}: {OVERSIZED}", "total 1"]


# --- PostgreSQL: the rows go in through COPY, the totals are computed in the database -------------------------


@contextmanager
def pg_database(cluster):  # type: ignore[no-untyped-def]
    name = cluster.create_database()
    try:
        yield cluster.url(name)
    finally:
        cluster.drop_database(name)


def pg_contents(url: str) -> dict[str, list[tuple]]:
    return {table: sorted(query(url, f"SELECT * FROM {table}"), key=repr) for table in TABLES}


def pg_outcome(url: str, paths: list[Path]) -> list[str] | dict[str, list[tuple]]:
    conn = open_database(url)
    try:
        import_files(conn, paths, NOW_US)
    except ImportFailed as exc:
        assert conn.execute("SELECT count(*) FROM builds").fetchone() == (0,)
        return [str(error) for error in exc.errors] + [f"total {exc.total}"]
    finally:
        conn.close()
    return pg_contents(url)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(
    specs=st.lists(spec_strategy, min_size=4, max_size=16),
    max_tag_slots=st.sampled_from([2, fresh_load.MAX_TAG_SLOTS]),
    batch_size=st.sampled_from([3, import_reader.BATCH_SIZE]),
    conflict=st.none() | st.tuples(st.integers(1, 16), st.integers(1, 17)),
)
def test_a_fresh_load_into_postgresql_stores_what_the_writer_stores_or_refuses_alike(
    pg_cluster, tmp_path, specs, max_tag_slots, batch_size, conflict
):
    records = to_records(specs, conflict)
    paths = [write_jsonl(tmp_path / "a.jsonl", records)]
    with pg_database(pg_cluster) as by_writer, pg_database(pg_cluster) as by_copy:
        with writer_path(promote_at=2, batch_size=batch_size):
            expected = pg_outcome(by_writer, paths)
        with fresh_path(promote_at=2, max_tag_slots=max_tag_slots, batch_size=batch_size):
            got = pg_outcome(by_copy, paths)
    assert got == expected


def test_a_fresh_load_into_postgresql_stores_what_sqlite_stores(pg_url, tmp_path, monkeypatch):
    """Builds of two accounts over many hours, days and statuses, tags (some promoted), logs, restart links; the
    day figures read and written a few days at a time."""
    from buildreport.store.postgres import bulk

    monkeypatch.setattr(bulk, "DAYS_AT_ONCE", 3)
    records = [
        to_record(i, {"account": ("acme", "globex")[i % 2], "minutes": i * 37, "status": STATUSES[i % len(STATUSES)],
                      "duration": i * 11, "queue": i / 8, "cpu": i, "nar": [i * 1000, 7], "restarts": False,
                      "tags": {"project": "web", "run": str(i % 7)} if i % 3 else {}, "log": f"log {i}" * (i % 2)})
        for i in range(1, 401)
    ]
    records[9]["restarted_as_build_id"] = 12  # both of acme; 12 links back once both are in
    for i in range(0, 400, 50):  # values that JSON escapes, read back from the stored JSON by each engine
        records[i]["tags"] |= {'say "hi"': 'a\\b\n\t\u2028 é 😀 \x7f', "colon:key": ":"}
    path = write_jsonl(tmp_path / "a.jsonl", records)
    with fresh_path(promote_at=20):
        expected = outcome(tmp_path / "fresh.db", [path])
        got = pg_outcome(pg_url, [path])
    assert isinstance(got, dict) and got["tag_pairs"]
    assert got == expected


def test_accounts_made_after_a_fresh_load_into_postgresql_get_the_next_ids(pg_url, tmp_path):
    with fresh_path():
        pg_outcome(pg_url, [write_jsonl(tmp_path / "a.jsonl", [record(1, account="new"), record(2)])])
    with writer_path():
        pg_outcome(pg_url, [write_jsonl(tmp_path / "b.jsonl", [record(3, account="later")])])
    assert query(pg_url, "SELECT account_id, name FROM accounts ORDER BY 1") == [(1, "new"), (2, "acme"), (3, "later")]


def test_a_fresh_load_into_postgresql_that_fails_at_the_end_writes_nothing(pg_url, tmp_path, monkeypatch):
    from buildreport.store.postgres import bulk

    def fail(conn):  # type: ignore[no-untyped-def]
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(bulk, "fill_totals", fail)
    with fresh_path(), pytest.raises(RuntimeError, match="the disk is full"):
        pg_outcome(pg_url, [write_jsonl(tmp_path / "a.jsonl", [record(1, log="a log"), record(2, account="new")])])
    for table in TABLES:
        assert query(pg_url, f"SELECT count(*) FROM {table}") == [(0,)], table


@pytest.mark.parametrize(("field", "times"), [("duration_seconds", 2), ("outputs", 1)])
def test_an_account_whose_total_would_reach_two_to_the_62_is_refused_by_a_fresh_load_into_postgresql(
    pg_url, tmp_path, field, times
):
    """Twice past the limit, whose sums would not fit 64 bits, is refused before any total is written."""
    if field == "duration_seconds":
        builds = times * -(-MAX_ACCOUNT_TOTAL // (MAX_DURATION_SECONDS * 1_000_000))
        fields = {"duration_seconds": MAX_DURATION_SECONDS}
    else:
        builds = MAX_ACCOUNT_TOTAL // (MAX_OUTPUTS * MAX_NAR_SIZE_BYTES)
        fields = {"outputs": [{"name": f"o{i}", "path": "/nix/store/x", "nar_hash": "h",
                               "nar_size_bytes": MAX_NAR_SIZE_BYTES} for i in range(MAX_OUTPUTS)]}
    path = write_jsonl(tmp_path / "a.jsonl", [record(i, **fields) for i in range(1, builds + 1)])
    with fresh_path():
        got = pg_outcome(pg_url, [path])
    assert got == [f"{path}:{builds}: {field}: {OVERSIZED}", "total 1"]
