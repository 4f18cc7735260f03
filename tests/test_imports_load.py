"""Import of JSON Lines: validated whole, written in one transaction, idempotent, restart links kept two-way."""

from __future__ import annotations

import gc
import gzip
import hashlib
import json
from pathlib import Path

import msgspec
import pytest
from conftest import NOW, query, record, write_jsonl

from buildreport.imports.files import ImportFailed, Location
from buildreport.imports.load import import_files
from buildreport.models import Build
from buildreport.store import open_database
from buildreport.times import to_us


def run_import(db: Path, *files: Path):
    conn = open_database(db)
    try:
        return import_files(conn, list(files), to_us(NOW))
    finally:
        conn.close()


TABLES = ("accounts", "builds", "build_tags", "build_logs", "hourly_totals", "daily_totals", "daily_usage",
          "tag_pairs", "tag_hourly_totals", "tag_daily_totals")


def db_digest(db: Path) -> str:
    """A digest of every row of every table, to show a failed import left nothing behind."""
    digest = hashlib.sha256()
    for table in TABLES:
        for row in query(db, f"SELECT * FROM {table} ORDER BY 1"):
            digest.update(repr(row).encode())
    return digest.hexdigest()


def stored(db: Path, build_id: int) -> Build:
    ((body,),) = query(db, "SELECT body FROM builds WHERE build_id = ?", (build_id,))
    return msgspec.json.decode(body, type=Build)


@pytest.fixture
def db(fresh_db, tmp_path):
    """A new database of each engine."""
    return fresh_db(tmp_path)


def test_import_writes_builds_tags_and_logs(tmp_path, db):
    path = write_jsonl(tmp_path / "a.jsonl", [record(1, tags={"project": "web"}, log="hello\n"), record(2)])
    result = run_import(db, path)
    assert (result.records, result.stats.created) == (2, 2)
    assert query(db, "SELECT key, value, build_id FROM build_tags") == [("project", "web", 1)]
    assert query(db, "SELECT build_id, size_bytes FROM build_logs") == [(1, 6)]


def test_gzip_files_import_like_plain_ones(tmp_path, db):
    path = tmp_path / "a.jsonl.gz"
    path.write_bytes(gzip.compress((json.dumps(record(7)) + "\n").encode()))
    assert run_import(db, path).stats.created == 1
    assert stored(db, 7).build_id == 7


def test_reimporting_the_same_file_changes_nothing(tmp_path, db):
    records = [
        record(1, log="x\n"),
        record(2, build_status="internal_error", restarted_as_build_id=3),
        record(3, restart_of_build_id=2, tags={"a": "b"}),
    ]
    path = write_jsonl(tmp_path / "a.jsonl", records)
    run_import(db, path)
    before = db_digest(db)
    result = run_import(db, path)
    assert (result.stats.created, result.stats.updated, result.stats.unchanged) == (0, 0, 3)
    assert db_digest(db) == before


def test_an_import_never_takes_a_finished_build_back_to_running(tmp_path, db):
    run_import(db, write_jsonl(tmp_path / "done.jsonl", [record(1, build_status="built")]))
    before = db_digest(db)
    result = run_import(db, write_jsonl(tmp_path / "late.jsonl", [record(1, build_status="running")]))
    assert (result.stats.updated, result.stats.unchanged) == (0, 1)
    assert db_digest(db) == before


def test_upsert_replaces_a_build_and_its_tags(tmp_path, db):
    run_import(db, write_jsonl(tmp_path / "a.jsonl", [record(1, build_status="running", tags={"old": "1"})]))
    result = run_import(db, write_jsonl(tmp_path / "b.jsonl", [record(1, tags={"new": "2"})]))
    assert result.stats.updated == 1
    assert stored(db, 1).build_status == "built"
    assert query(db, "SELECT key FROM build_tags") == [("new",)]


BAD_RECORDS = [
    ({"build_id": "x"}, "build_id", "expected `int`, got `str`"),
    ({"build_id": 0}, "build_id", ">= 1"),
    ({"build_status": "exploded"}, "build_status", "invalid enum value 'exploded'"),
    ({"create_time": "yesterday"}, "create_time", "invalid rfc3339"),
    ({"create_time": "2026-11-21T07:33:16"}, "create_time", "timezone"),
    ({"cpu_seconds": -1}, "cpu_seconds", ">= 0"),
    ({"account": "Not An Account"}, "account", "match"),
    ({"surprise": 1}, "(record)", "unknown field `surprise`"),
    ({"duration_seconds": None}, "duration_seconds", "required for a finished build"),
    ({"build_status": "running", "duration_seconds": 5.0}, "duration_seconds", "must be null"),
    ({"outputs": [{"name": "out"}]}, "outputs[0]", "missing required field"),
]


@pytest.mark.parametrize(("fields", "field", "reason"), BAD_RECORDS)
def test_a_bad_record_is_reported_with_file_line_and_field(tmp_path, fields, field, reason, db):
    bad = {**record(2), **fields}
    path = write_jsonl(tmp_path / "bad.jsonl", [record(1), bad])
    with pytest.raises(ImportFailed) as failure:
        run_import(db, path)
    (error,) = failure.value.errors
    text = str(error)
    assert text.startswith(f"{path}:2: {field}: "), text
    assert reason.lower() in text.lower()


def test_malformed_json_names_its_line(tmp_path, db):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(record(1)) + "\n{not json\n")
    with pytest.raises(ImportFailed) as failure:
        run_import(db, path)
    assert str(failure.value.errors[0]).startswith(f"{path}:2: (line): not valid JSON")


def test_every_bad_record_is_reported_and_nothing_is_written(tmp_path, db):
    run_import(db, write_jsonl(tmp_path / "first.jsonl", [record(1)]))
    before = db_digest(db)
    path = write_jsonl(
        tmp_path / "bad.jsonl", [record(2), record(3, cpu_count=0), record(4), {**record(5), "build_id": -5}]
    )
    with pytest.raises(ImportFailed) as failure:
        run_import(db, path)
    assert [e.location.line for e in failure.value.errors] == [2, 4]
    assert db_digest(db) == before


def test_a_bad_record_in_a_second_file_rejects_the_first_file_too(tmp_path, db):
    good = write_jsonl(tmp_path / "good.jsonl", [record(1)])
    bad = write_jsonl(tmp_path / "bad.jsonl", [record(2, system="")])
    with pytest.raises(ImportFailed):
        run_import(db, good, bad)
    assert query(db, "SELECT count(*) FROM builds") == [(0,)]


def test_a_build_id_twice_in_one_import_is_an_error(tmp_path, db):
    path = write_jsonl(tmp_path / "dup.jsonl", [record(1), record(1, cpu_seconds=5)])
    with pytest.raises(ImportFailed) as failure:
        run_import(db, path)
    assert "appears again (first at" in str(failure.value.errors[0])


def test_a_build_id_of_another_account_is_an_error(tmp_path, db):
    run_import(db, write_jsonl(tmp_path / "a.jsonl", [record(1, account="acme")]))
    with pytest.raises(ImportFailed) as failure:
        run_import(db, write_jsonl(tmp_path / "b.jsonl", [record(1, account="globex")]))
    assert "belongs to another account" in str(failure.value.errors[0])
    assert stored(db, 1).build_id == 1


def test_restart_links_are_completed_in_both_directions(tmp_path, db):
    run_import(db, write_jsonl(tmp_path / "a.jsonl", [record(10, build_status="out_of_memory")]))
    run_import(db, write_jsonl(tmp_path / "b.jsonl", [record(11, restart_of_build_id=10)]))
    assert stored(db, 10).restarted_as_build_id == 11
    assert stored(db, 11).restart_of_build_id == 10


def test_a_restart_imported_before_its_original_links_up_later(tmp_path, db):
    run_import(db, write_jsonl(tmp_path / "a.jsonl", [record(11, restart_of_build_id=10)]))
    run_import(db, write_jsonl(tmp_path / "b.jsonl", [record(10, build_status="internal_error")]))
    assert stored(db, 10).restarted_as_build_id == 11


def test_a_link_stated_only_on_the_original_reaches_the_restart(tmp_path, db):
    run_import(db, write_jsonl(tmp_path / "a.jsonl", [record(11)]))
    run_import(
        db, write_jsonl(tmp_path / "b.jsonl", [record(10, build_status="internal_error", restarted_as_build_id=11)])
    )
    assert stored(db, 11).restart_of_build_id == 10


def test_a_second_restart_of_the_same_build_is_a_conflict(tmp_path, db):
    run_import(
        db,
        write_jsonl(
            tmp_path / "a.jsonl", [record(10, build_status="internal_error"), record(11, restart_of_build_id=10)]
        ),
    )
    with pytest.raises(ImportFailed) as failure:
        run_import(db, write_jsonl(tmp_path / "b.jsonl", [record(12, restart_of_build_id=10)]))
    assert "already has restarted_as_build_id 11" in str(failure.value.errors[0])


def test_a_restart_named_by_a_stored_build_that_names_another_original_is_a_conflict(tmp_path, db):
    run_import(
        db,
        write_jsonl(
            tmp_path / "a.jsonl",
            [record(11, build_status="internal_error", restarted_as_build_id=13),
             record(12, build_status="internal_error")],
        ),
    )
    with pytest.raises(ImportFailed) as failure:
        run_import(db, write_jsonl(tmp_path / "b.jsonl", [record(13, restart_of_build_id=12)]))
    assert [str(error) for error in failure.value.errors] == [
        f"{tmp_path / 'b.jsonl'}:1: restart_of_build_id: build 11 already has restarted_as_build_id 13"
    ]
    assert stored(db, 12).restarted_as_build_id is None


def test_a_restart_link_across_accounts_is_a_conflict(tmp_path, db):
    run_import(db, write_jsonl(tmp_path / "a.jsonl", [record(10, build_status="internal_error", account="acme")]))
    with pytest.raises(ImportFailed) as failure:
        run_import(db, write_jsonl(tmp_path / "b.jsonl", [record(11, account="globex", restart_of_build_id=10)]))
    assert "belongs to another account" in str(failure.value.errors[0])


def test_times_with_offsets_are_stored_in_utc(tmp_path, db):
    run_import(
        db,
        write_jsonl(
            tmp_path / "a.jsonl",
            [record(1, create_time="2026-11-21T08:33:16.5+01:00", start_time="2026-11-21T08:33:17+01:00")],
        ),
    )
    body = json.loads(query(db, "SELECT body FROM builds")[0][0])
    assert (body["create_time"], body["start_time"]) == ("2026-11-21T07:33:16.500000Z", "2026-11-21T07:33:17Z")


# --- `status`, the alias of `build_status` -------------------------------------------------------


def test_import_takes_status_in_place_of_build_status(tmp_path, db):
    given = record(5)
    del given["build_status"]
    given["status"] = "built"
    failed = record(6, build_status="timeout")
    del failed["build_status"]
    failed["status"] = "timeout"
    run_import(db, write_jsonl(tmp_path / "a.jsonl", [given, failed]))
    assert (stored(db, 5).build_status, stored(db, 5).status) == ("built", "built")
    assert (stored(db, 6).build_status, stored(db, 6).status) == ("timeout", "timeout")


def test_import_with_both_status_names_equal_is_the_same_build(tmp_path, db):
    run_import(db, write_jsonl(tmp_path / "a.jsonl", [record(5, build_status="timeout")]))
    again = run_import(db, write_jsonl(tmp_path / "b.jsonl", [
        record(5, build_status="timeout", status="timeout"),
    ]))
    assert again.stats.unchanged == 1


@pytest.mark.parametrize(("fields", "field", "reason"), [
    ({"build_status": "built", "status": "timeout"}, "status", "is 'timeout' but build_status is 'built'"),
    ({"build_status": None}, "build_status", "is required (or its alias status)"),
])
def test_import_refuses_a_missing_or_contradicting_status(tmp_path, fields, field, reason, db):
    bad = record(5, **fields)
    if bad["build_status"] is None:
        del bad["build_status"]
    path = write_jsonl(tmp_path / "a.jsonl", [record(4), bad])
    with pytest.raises(ImportFailed) as failure:
        run_import(db, path)
    (error,) = failure.value.errors
    assert str(error).startswith(f"{path}:2: {field}: {reason}")


def test_the_location_kept_per_build_is_not_tracked_by_the_garbage_collector():
    """An import keeps one per build until it ends; tracked, a million of them slow every collection."""
    location = Location(str(Path("builds.jsonl")), 1)
    assert not gc.is_tracked(location)


def test_lines_a_decoder_takes_but_no_record_holds_are_named_and_nothing_is_written(tmp_path, db):
    """Deep nesting, a key given twice (the last would win), a start before creation: each named by its line."""
    run_import(db, write_jsonl(tmp_path / "first.jsonl", [record(1)]))
    before = db_digest(db)
    deep = "[" * 10_000 + "]" * 10_000
    twice = json.dumps(record(3))[:-1] + ', "build_status": "timeout"}'
    lines = [
        json.dumps(record(2)),
        deep,
        twice,
        json.dumps(record(4)).replace('"tags": {}', '"tags": {"a": ' + deep + "}"),
        json.dumps(record(5, create_time="2026-11-21T07:33:16Z", start_time="2026-11-21T07:33:15.999999Z")),
    ]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ImportFailed) as failure:
        run_import(db, path)
    assert [str(e) for e in failure.value.errors] == [
        f"{path}:2: (record): arrays and objects are nested more than 32 deep; no build record is",
        f'{path}:3: (record): the key "build_status" appears twice in one object; each key may appear once',
        f"{path}:4: (record): arrays and objects are nested more than 32 deep; no build record is",
        f"{path}:5: start_time: is before create_time (2026-11-21T07:33:16+00:00); a build starts once created",
    ]
    assert db_digest(db) == before


def test_a_gzip_file_with_data_after_its_compressed_data_is_refused(tmp_path, db):
    path = tmp_path / "trailing.jsonl.gz"
    path.write_bytes(gzip.compress((json.dumps(record(1)) + "\n").encode()) + b"junk")
    with pytest.raises(ImportFailed) as failure:
        run_import(db, path)
    assert "data follows its compressed data" in str(failure.value.errors[0])
    assert query(db, "SELECT count(*) FROM builds") == [(0,)]
