"""The writers of several server processes on one SQLite file take turns through a lock file."""

from __future__ import annotations

import asyncio
import multiprocessing
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from test_transaction import records, write_record

from buildreport.store import open_database, remove
from buildreport.store.sqlite.writelock import WriterLock, lock_path
from buildreport.store.writer import Writes


def test_a_second_writer_waits_for_the_first_and_gets_the_turn_when_it_is_done(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    first, second = WriterLock(db), WriterLock(db)  # two open files: as two processes would hold it
    order: list[str] = []
    holding = threading.Event()

    def hold() -> None:
        with first.held():
            order.append("first in")
            holding.set()
            time.sleep(0.3)
            order.append("first out")

    thread = threading.Thread(target=hold)
    thread.start()
    assert holding.wait(5)
    with second.held():
        order.append("second in")
    thread.join()
    assert order == ["first in", "first out", "second in"]
    assert lock_path(db).stat().st_mode & 0o777 == 0o600
    first.close()
    second.close()


def test_a_turn_kept_past_the_busy_timeout_is_database_is_locked(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    keeper, waiter = WriterLock(db), WriterLock(db, wait_seconds=0.2)
    with keeper.held():
        started = time.monotonic()
        with pytest.raises(sqlite3.OperationalError, match="database is locked"), waiter.held():
            pytest.fail("the turn was given while another writer held it")
        assert time.monotonic() - started >= 0.2
    with waiter.held():  # free again once released
        pass
    keeper.close()
    waiter.close()


def _hold_in_child(db: str, ready: multiprocessing.synchronize.Event, seconds: float) -> None:
    lock = WriterLock(db)
    with lock.held():
        ready.set()
        time.sleep(seconds)


def test_the_turn_is_shared_across_processes_and_freed_when_a_holder_dies(tmp_path: Path) -> None:
    db = str(tmp_path / "b.db")
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    child = context.Process(target=_hold_in_child, args=(db, ready, 60))
    child.start()
    try:
        assert ready.wait(30)
        with pytest.raises(sqlite3.OperationalError), WriterLock(db, wait_seconds=0.2).held():
            pass
        child.kill()  # a server killed while writing: the kernel lets the lock go with the process
        child.join(10)
        with WriterLock(db, wait_seconds=5).held():
            pass
    finally:
        child.kill()
        child.join(10)


def test_without_a_lock_file_writes_go_on_under_sqlites_own_lock(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    lock_path(db).mkdir()  # cannot be opened as a file
    lock = WriterLock(db)
    with lock.held():
        pass
    lock.close()


@pytest.mark.sqlite_only
def test_server_writes_in_two_processes_lose_nothing(fresh_db, tmp_path: Path) -> None:
    """Two write connections, as two server processes have, writing at once: every record is stored once."""
    db = fresh_db(tmp_path)
    open_database(db).close()

    async def send(writes: Writes, prefix: str) -> None:
        for batch in range(10):
            await writes.write("acme", records(*(write_record(f"{prefix}:{batch}:{i}") for i in range(20))), 0)

    async def both() -> None:
        one, two = Writes(db), Writes(db)
        try:
            await asyncio.gather(send(one, "a"), send(two, "b"))
        finally:
            await one.close()
            await two.close()

    asyncio.run(both())
    conn = open_database(db)
    try:
        assert conn.execute("SELECT count(*), count(DISTINCT source_id) FROM builds").fetchone() == (400, 400)
    finally:
        conn.close()
    assert lock_path(db).exists()
    remove(db)
    assert not lock_path(db).exists()
