"""Deliveries in the database: written with their events, leased one a hook by one owner at a time, taken over
once a lease expires, retried, given up, redelivered; old events dropped in bounded batches."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import record
from test_transaction import records, write_record

from buildreport.events.models import EventType, HookFormat
from buildreport.store import hooks, open_database
from buildreport.store.transaction import WriteConflicts, write_with_events


@pytest.fixture
def conn(fresh_db, tmp_path: Path):
    conn = open_database(fresh_db(tmp_path))
    yield conn
    conn.close()


def add(conn, url: str = "http://127.0.0.1:9/", types: tuple[EventType, ...] = (), **tags: str) -> str:
    return hooks.add_hook(conn, "acme", url, list(types), tags, HookFormat.json, 0)[0]


def write(conn, *recs: dict) -> int:
    return write_with_events(conn, "acme", records(*recs), 1_000)[1]


def pending(conn) -> list[tuple]:
    return conn.execute("SELECT hook_id, event_id FROM deliveries WHERE state = 'pending' ORDER BY delivery_id"
                        ).fetchall()


def test_each_event_gets_a_delivery_for_each_hook_that_wants_it(conn) -> None:
    every = add(conn)
    failures = add(conn, types=(EventType.failed,))
    web = add(conn, project="web")
    assert write(conn, write_record("a", build_status="build_failed", tags={"project": "web"}),
                 write_record("b", build_status="built", tags={"project": "api"})) == 4  # b recovers the series
    by_hook = {}
    for hook_id, _ in pending(conn):
        by_hook[hook_id] = by_hook.get(hook_id, 0) + 1
    assert by_hook == {every: 4, failures: 1, web: 2}


def test_a_write_that_conflicts_leaves_no_event_and_no_delivery(conn) -> None:
    add(conn)
    write(conn, write_record(build_id=5))
    before = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    with pytest.raises(WriteConflicts):
        write_with_events(conn, "globex", records(write_record("g", build_status="build_failed"),
                                                  write_record(build_id=5)), 2_000)
    assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == before
    assert len(pending(conn)) == before


def test_one_delivery_a_hook_is_leased_at_a_time_and_an_expired_lease_is_taken_over(conn) -> None:
    first, second = add(conn), add(conn)
    write(conn, write_record("a"), write_record("b"))
    mine = hooks.claim(conn, 2_000, 10_000, "one", 10)
    assert sorted(c.hook_id for c in mine) == sorted([first, second])
    assert hooks.claim(conn, 3_000, 10_000, "two", 10) == []  # every hook's first delivery is leased
    taken = hooks.claim(conn, 10_000, 20_000, "two", 10)  # the leases ran out: another owner takes them
    assert sorted(c.delivery_id for c in taken) == sorted(c.delivery_id for c in mine)
    assert all(c.attempts == 2 for c in taken)


def test_deliveries_of_a_hook_go_in_event_order(conn) -> None:
    add(conn)
    write(conn, write_record("a", build_status="running"))
    write(conn, write_record("a", build_status="built"))
    order = [row[1] for row in pending(conn)]
    sent = []
    for now in range(2_000, 2_010):
        for item in hooks.claim(conn, now, now + 1, "me", 10):
            sent.append(item.event_id)
            hooks.delivered(conn, item.delivery_id, 200, now)
    assert sent == order and len(sent) == 2


def test_a_retry_waits_its_turn_and_gone_disables_the_hook(conn) -> None:
    hook_id = add(conn)
    write(conn, write_record("a"), write_record("b"))
    (item,) = hooks.claim(conn, 2_000, 3_000, "me", 10)
    hooks.retry_later(conn, item.delivery_id, 500, "HTTP 500", 5_000)
    assert hooks.claim(conn, 4_000, 6_000, "me", 10) == []  # not due, and the next one waits behind it
    (again,) = hooks.claim(conn, 5_000, 6_000, "me", 10)
    assert again.delivery_id == item.delivery_id
    hooks.give_up(conn, again.delivery_id, 410, "HTTP 410", 5_500, disable=True)
    assert hooks.claim(conn, 9_000, 10_000, "me", 10) == []
    (listed,) = hooks.list_hooks(conn)
    assert listed.hook_id == hook_id and listed.disabled_reason is not None
    new_id = hooks.redeliver(conn, again.delivery_id, 11_000)  # also enables the hook again
    (waiting,) = hooks.claim(conn, 12_000, 13_000, "me", 10)  # the second event was queued before it
    assert waiting.event_id != again.event_id
    hooks.delivered(conn, waiting.delivery_id, 200, 12_500)
    (resent,) = hooks.claim(conn, 14_000, 15_000, "me", 10)
    assert (resent.delivery_id, resent.event_id) == (new_id, again.event_id)


def test_old_events_are_dropped_with_their_deliveries_in_batches(conn) -> None:
    add(conn)
    write(conn, *(write_record(f"s{n}") for n in range(5)))
    assert hooks.drop_old_events(conn, 500, 3) == 0  # none is that old
    assert hooks.drop_old_events(conn, 2_000, 3) == 3
    assert hooks.drop_old_events(conn, 2_000, 3) == 2
    assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 0
    assert pending(conn) == []


def test_an_import_makes_no_events(conn, tmp_path: Path) -> None:
    from conftest import write_jsonl

    from buildreport.imports.load import import_files

    import_files(conn, [write_jsonl(tmp_path / "i.jsonl", [record(1, build_status="build_failed")])], 1_000)
    assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 0


def test_an_import_with_events_makes_them_in_order(conn, tmp_path: Path) -> None:
    from conftest import write_jsonl

    from buildreport.imports.load import import_files

    add(conn)
    lines = [record(1, build_status="built"), record(2, build_status="build_failed"), record(3, account="globex"),
             record(4, build_status="build_failed"), record(5, build_status="built")]
    import_files(conn, [write_jsonl(tmp_path / "i.jsonl", lines)], 1_000, events=True)
    kinds = [row[0] for row in conn.execute("SELECT type FROM events WHERE type <> 'build.finished' ORDER BY seq")]
    assert kinds == ["build.failed", "build.recovered"]
    assert len(pending(conn)) == 4 + 2  # acme's events only: four finished, one failed, one recovered
