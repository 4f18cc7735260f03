"""Writing builds: one request's records in one transaction, named by build_id or by the sender's source_id."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import record

from buildreport.models import MAX_DURATION_SECONDS, BuildRecord, ImportRecord
from buildreport.store import open_database
from buildreport.store.build_writer import BuildWriter
from buildreport.store.totals import MAX_ACCOUNT_TOTAL, OVERSIZED
from buildreport.store.transaction import WriteConflicts, write_records


def write_record(source_id: str | None = None, **fields: Any) -> dict[str, Any]:
    """A valid record of POST /builds: an import record without account (and without build_id unless given)."""
    base = record(fields.pop("build_id", 0), **fields)
    base.pop("account")
    if not base["build_id"]:
        base.pop("build_id")
    if source_id is not None:
        base["source_id"] = source_id
    return base


def records(*dicts: dict[str, Any]) -> list[BuildRecord]:
    return msgspec.json.decode(msgspec.json.encode(list(dicts)), type=list[BuildRecord])


@pytest.fixture
def conn(fresh_db, tmp_path: Path):
    conn = open_database(fresh_db(tmp_path))
    conn.execute("INSERT INTO accounts (name, created_us) VALUES ('acme', 0), ('globex', 0)")
    yield conn
    conn.close()


ACME, GLOBEX = "acme", "globex"


def test_first_write_of_a_new_account_creates_it(conn: sqlite3.Connection) -> None:
    result = write_records(conn, "initech", records(write_record("i:1")), 0)
    assert stored(conn) == [(result.build_ids[0], "initech", "i:1", "built")]


def stored(conn: sqlite3.Connection) -> list[tuple]:
    return conn.execute(
        "SELECT b.build_id, a.name, b.source_id, b.status FROM builds b JOIN accounts a USING (account_id)"
        " ORDER BY b.build_id"
    ).fetchall()


def test_source_id_gets_a_new_build_id_and_a_retry_changes_nothing(conn):
    first = write_records(conn, ACME, records(write_record("r:1"), write_record("r:2")), 0)
    assert (first.created, first.updated, first.unchanged, first.build_ids) == (2, 0, 0, [1, 2])
    again = write_records(conn, ACME, records(write_record("r:1"), write_record("r:2")), 0)
    assert (again.created, again.updated, again.unchanged, again.build_ids) == (0, 0, 2, [1, 2])
    assert stored(conn) == [(1, ACME, "r:1", "built"), (2, ACME, "r:2", "built")]


def test_running_then_built_completes_the_same_build(conn):
    write_records(conn, ACME, records(write_record("r:1", build_status="running")), 0)
    done = write_records(conn, ACME, records(write_record("r:1", build_status="built")), 0)
    assert (done.updated, done.build_ids) == (1, [1])
    assert stored(conn) == [(1, ACME, "r:1", "built")]


def test_a_finished_build_never_goes_back_to_running(conn):
    write_records(conn, ACME, records(write_record("r:1", build_status="build_failed")), 0)
    late = write_records(conn, ACME, records(write_record("r:1", build_status="running")), 0)
    assert (late.unchanged, late.updated, late.build_ids) == (1, 0, [1])
    assert stored(conn) == [(1, ACME, "r:1", "build_failed")]


def test_records_of_one_build_in_one_request_apply_in_order(conn):
    result = write_records(
        conn,
        ACME,
        records(
            write_record("r:1", build_status="pending"),
            write_record("r:1", build_status="running"),
            write_record("r:1", build_status="built"),
            write_record("r:1", build_status="running"),
        ),
        0,
    )
    assert (result.created, result.updated, result.unchanged, result.build_ids) == (1, 2, 1, [1, 1, 1, 1])
    assert stored(conn) == [(1, ACME, "r:1", "built")]


def test_source_ids_are_per_account(conn):
    write_records(conn, ACME, records(write_record("r:1")), 0)
    other = write_records(conn, GLOBEX, records(write_record("r:1", cpu_seconds=7)), 0)
    assert (other.created, other.build_ids) == (1, [2])
    assert stored(conn) == [(1, ACME, "r:1", "built"), (2, GLOBEX, "r:1", "built")]


def test_build_id_of_another_account_is_refused_and_nothing_is_written(conn):
    write_records(conn, ACME, records(write_record(build_id=5)), 0)
    before = stored(conn)
    with pytest.raises(WriteConflicts) as caught:
        write_records(conn, GLOBEX, records(write_record("g:1"), write_record(build_id=5, cpu_seconds=1)), 0)
    assert [(r.index, r.field) for r in caught.value.invalid] == [(1, "build_id")]
    assert stored(conn) == before


def test_build_id_and_source_id_must_agree_with_what_is_stored(conn):
    write_records(conn, ACME, records(write_record("r:1"), write_record("r:2")), 0)
    with pytest.raises(WriteConflicts) as caught:
        write_records(conn, ACME, records(write_record("r:2", build_id=1)), 0)
    assert caught.value.invalid[0].field == "source_id"
    assert "already names build 2" in caught.value.invalid[0].reason


def test_a_named_build_takes_its_source_id(conn):
    result = write_records(conn, ACME, records(write_record("r:9", build_id=40), write_record("r:10")), 0)
    assert result.build_ids == [40, 41]  # an assigned id never collides with one the request names
    assert write_records(conn, ACME, records(write_record("r:9")), 0).build_ids == [40]


def test_restart_of_source_id_links_both_ways(conn):
    result = write_records(
        conn,
        ACME,
        records(write_record("r:1", build_status="internal_error"), write_record("r:2", restart_of_source_id="r:1")),
        0,
    )
    assert result.build_ids == [1, 2]
    links = conn.execute("SELECT build_id, restart_of_build_id, restarted_as_build_id FROM builds ORDER BY 1")
    assert links.fetchall() == [(1, None, 2), (2, 1, None)]


def test_restart_of_an_unknown_source_is_refused(conn):
    with pytest.raises(WriteConflicts) as caught:
        write_records(conn, ACME, records(write_record("r:2", restart_of_source_id="r:1")), 0)
    assert (caught.value.invalid[0].field, caught.value.invalid[0].reason) == (
        "restart_of_source_id",
        "no build 'r:1' in this account",
    )
    assert stored(conn) == []


def test_restart_of_another_accounts_source_is_unknown(conn):
    write_records(conn, GLOBEX, records(write_record("r:1")), 0)
    with pytest.raises(WriteConflicts):
        write_records(conn, ACME, records(write_record("r:2", restart_of_source_id="r:1")), 0)


def test_a_build_named_by_id_and_by_source_in_one_request_is_written_in_order(conn):
    write_records(conn, ACME, records(write_record("r:1", build_status="running")), 0)
    result = write_records(
        conn,
        ACME,
        records(write_record(build_id=1, build_status="build_failed", cpu_seconds=5), write_record("r:1")),
        0,
    )
    assert (result.updated, result.build_ids) == (2, [1, 1])
    assert stored(conn) == [(1, ACME, "r:1", "built")]
    hourly = conn.execute("SELECT status, builds FROM hourly_totals").fetchall()
    assert hourly == [("built", 1)]


def test_ids_are_assigned_below_the_lowest_once_the_highest_is_taken(conn):
    top = 2**63 - 1
    write_records(conn, ACME, records(write_record("low:0", build_id=5), write_record("low:1", build_id=top)), 0)
    result = write_records(conn, ACME, records(write_record("low:2"), write_record("low:3")), 0)
    assert result.build_ids == [4, 3]
    again = write_records(conn, ACME, records(write_record("low:4", build_id=2), write_record("low:5")), 0)
    assert again.build_ids == [2, 1]
    with pytest.raises(WriteConflicts) as refused:
        write_records(conn, ACME, records(write_record("low:6")), 0)
    assert refused.value.invalid[0].field == "source_id"


def test_a_write_that_would_take_an_hours_sums_past_64_bits_is_refused_and_writes_nothing(conn):
    """Twice as many builds of the longest duration as 2^62 allows, in one hour: a conflict, not a fault."""
    builds = 2 * -(-MAX_ACCOUNT_TOTAL // (MAX_DURATION_SECONDS * 1_000_000))
    write_records(conn, ACME, records(write_record("first")), 0)
    batch = records(*(write_record(f"s:{i}", duration_seconds=MAX_DURATION_SECONDS) for i in range(builds)))
    with pytest.raises(WriteConflicts) as refused:
        write_records(conn, ACME, batch, 0)
    invalid = [(r.index, r.field, r.reason) for r in refused.value.invalid]
    assert invalid == [(builds - 1, "duration_seconds", OVERSIZED)]
    assert [row[2] for row in stored(conn)] == ["first"]


def test_restart_links_to_free_ids_are_refused_without_naming_other_accounts_builds(conn):
    write_records(conn, ACME, records(write_record("a:0")), 0)
    globex = write_records(conn, GLOBEX, records(write_record("g:0")), 0).build_ids[0]
    dangling = [write_record(f"g:{i}", restart_of_build_id=globex + 50 + i) for i in range(1, 51)]
    with pytest.raises(WriteConflicts) as caught:
        write_records(conn, GLOBEX, records(*dangling, write_record("g:x", restart_of_build_id=1)), 0)
    reasons = {(r.field, r.reason.split(" (")[0]) for r in caught.value.invalid}
    assert ("restart_of_build_id", "no build 1 in this account") in reasons  # as for an id still free
    assert len(caught.value.invalid) == 51
    result = write_records(conn, ACME, records(*(write_record(f"a:{i}") for i in range(1, 101))), 0)
    assert result.created == 100
    assert conn.execute("SELECT count(*) FROM builds WHERE restart_of_build_id IS NOT NULL").fetchone() == (0,)


def test_restart_links_within_one_request_and_to_stored_builds_are_kept(conn):
    first = write_records(conn, ACME, records(write_record("r:1", build_status="internal_error")), 0).build_ids[0]
    result = write_records(
        conn,
        ACME,
        records(write_record("r:2", restart_of_build_id=first, build_status="internal_error",
                             restarted_as_build_id=900), write_record("r:3", build_id=900)),
        0,
    )
    assert result.build_ids == [901, 900]  # assigned after the ids the request names
    links = conn.execute("SELECT build_id, restart_of_build_id, restarted_as_build_id FROM builds ORDER BY 1")
    assert links.fetchall() == [(1, None, 901), (900, 901, None), (901, 1, 900)]
    again = write_records(conn, ACME, records(write_record("r:2", restart_of_build_id=first,
                                                           build_status="internal_error")), 0)
    assert again.unchanged == 1


def import_records(conn, *dicts: dict[str, Any]) -> None:
    """Records as `import` writes them: an operator's, whose links may name builds not imported yet."""
    errors: list[tuple] = []
    writer = BuildWriter(conn, lambda *error: errors.append(error), 0)
    for index, fields in enumerate(dicts):
        writer.add(f"line {index}", msgspec.convert(fields, ImportRecord))
    writer.finish()
    assert errors == []
    conn.commit()


def test_imported_links_to_free_ids_never_block_or_join_another_accounts_new_builds(conn):
    import_records(conn, *(record(i, account=GLOBEX, restart_of_build_id=100 + i) for i in range(1, 51)))
    result = write_records(conn, ACME, records(*(write_record(f"a:{i}") for i in range(60))), 0)
    assert result.created == 60
    assert not set(result.build_ids) & set(range(101, 151))  # the ids globex's builds wait for are never assigned
    acme_links = conn.execute(
        "SELECT count(*) FROM builds WHERE account_id = (SELECT account_id FROM accounts WHERE name = 'acme')"
        " AND restarted_as_build_id IS NULL AND restart_of_build_id IS NULL"
    )
    assert acme_links.fetchone() == (60,)
    with pytest.raises(WriteConflicts) as caught:  # naming such an id outright is refused, naming no build
        write_records(conn, ACME, records(write_record("a:x", build_id=101)), 0)
    assert caught.value.invalid[0].reason == "a build of another account links to build 101; name another"
