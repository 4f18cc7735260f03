"""Writes for the server: one request's records in one transaction, on a write connection of their own (the
write process's, see writer.py).

Readers use other connections; SQLite's WAL lets them read the last committed state throughout, so a
write never blocks a read and no reader ever sees half a request. The write lock is taken when the
transaction begins, after the body was read, inflated and validated.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from buildreport.events.derive import Rules
from buildreport.models import BuildRecord, InvalidRecord, WriteResult
from buildreport.store.build_rows import pack_log
from buildreport.store.build_writer import BuildWriter
from buildreport.store.events import record_events

DEFAULT_RULES = Rules()
T = TypeVar("T")


class WriteConflicts(Exception):
    """Records the database refuses (an id of another account, an unknown restart); nothing was written."""

    def __init__(self, invalid: list[InvalidRecord]) -> None:
        super().__init__(f"{len(invalid)} records conflict with stored builds")
        self.invalid = invalid


def write_records(conn: sqlite3.Connection, account: str, records: list[BuildRecord], now_us: int) -> WriteResult:
    """Write one request's records to an account in one transaction; WriteConflicts and no change on conflict."""
    return write_with_events(conn, account, records, now_us)[0]


def write_with_events(
    conn: sqlite3.Connection, account: str, records: list[BuildRecord], now_us: int, rules: Rules = DEFAULT_RULES
) -> tuple[WriteResult, int]:
    """Write one request's records to an account in one transaction, with the events they make (and their
    deliveries); what was written and how many events. WriteConflicts and no change on conflict.

    The account is named, not numbered: a token may belong to an account that has no builds yet, and its
    first write creates it in the same transaction."""
    invalid: list[InvalidRecord] = []

    def conflict(location: object, field: str, reason: str) -> None:
        invalid.append(InvalidRecord(int(location), field, reason))  # type: ignore[call-overload]

    logs = [pack_log(record.log) for record in records]  # the costly part of a write, before the lock
    conn.execute("BEGIN IMMEDIATE")
    try:
        writer = BuildWriter(conn, conflict, now_us, keep_ids=True, keep_changes=True)
        account_id = writer.account_id(account)
        for index, record in enumerate(records):
            writer.add(index, record, account_id, log=logs[index])
        writer.finish()
        if invalid:
            raise WriteConflicts(sorted(invalid, key=lambda r: r.index))
        events = record_events(conn, account, account_id, writer.changes or [], now_us, rules)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    result = WriteResult(
        created=writer.stats.created,
        updated=writer.stats.updated,
        unchanged=writer.stats.unchanged,
        build_ids=[i for i in writer.build_ids or [] if i is not None],
    )
    return result, events


class WriteSession:
    """A connection that writes, with the turn it takes among server processes; used by one thread at a time."""

    def __init__(self, path: Path | str, rules: Rules = DEFAULT_RULES) -> None:  # a file or a postgresql:// URL
        from buildreport.store.engines import is_postgres
        from buildreport.store.sqlite.writelock import WriterLock

        self._path = str(path)
        self._rules = rules
        self._conn: Any = None
        # PostgreSQL orders concurrent writers itself; SQLite's writers take turns (see writelock.py).
        self._lock = None if is_postgres(self._path) else WriterLock(self._path)
        self._turn = self._lock.held if self._lock is not None else contextlib.nullcontext

    def _connection(self) -> Any:
        if self._conn is None:
            from buildreport.store.engines import connect  # the engine's, never creating a database deleted meanwhile

            self._conn = connect(self._path)
        return self._conn

    def write(self, account: str, records: list[BuildRecord], now_us: int) -> WriteResult:
        return self.write_counted(account, records, now_us)[0]

    def write_counted(self, account: str, records: list[BuildRecord], now_us: int) -> tuple[WriteResult, int]:
        """What was written, and how many events it made."""
        return self.run(lambda conn: write_with_events(conn, account, records, now_us, self._rules))

    def run(self, work: Callable[[Any], T]) -> T:
        """`work` on the write connection, in this process's turn to write (the deliverer's small writes too)."""
        try:
            with self._turn():
                return work(self._connection())
        finally:
            if getattr(self._conn, "broken", False):  # a database server that went away: reconnect next time
                self._close_connection()

    def _close_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        self._close_connection()
        if self._lock is not None:
            self._lock.close()
