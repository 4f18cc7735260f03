"""Where a recorder's build records go: a spool folder (sent on by `buildreport push`) or a local database.

A local database takes them through the same writer as `POST /builds`: one transaction a record (or a
batch, with `write_all`), named by its `source_id`, so a build's `running` record and its final one are
one build.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from buildreport.models import BuildRecord
from buildreport.record.records import encode
from buildreport.record.spool import write_spool_file
from buildreport.times import now_us


class SpoolSink:
    """Each record in a spool file of its own, put in place atomically; a batch in one file."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def __call__(self, record: BuildRecord) -> None:
        write_spool_file(self.directory, [encode(record)])

    def write_all(self, records: list[BuildRecord]) -> None:
        write_spool_file(self.directory, [encode(record) for record in records])


class DatabaseSink:
    """Each record written to `account` in a local database, in a transaction of its own; a batch in one."""

    def __init__(self, db: Path | str, account: str) -> None:
        # The storage layer is imported here and the writer in `write_all`, not above: a spool needs neither,
        # and a runner session starts for every ssh-ng:// connection (bench/NOTES.md).
        from buildreport.store import open_database

        self.conn = open_database(db)
        self.account = account
        self.lock = threading.Lock()

    def __call__(self, record: BuildRecord) -> None:
        self.write_all([record])

    def write_all(self, records: list[BuildRecord]) -> None:
        from buildreport.store import engine_errors, engine_message
        from buildreport.store.transaction import WriteConflicts, write_records

        with self.lock:
            try:
                write_records(self.conn, self.account, records, now_us())
            except WriteConflicts as exc:
                first = exc.invalid[0]
                raise ValueError(f"the database refused it: {first.field}: {first.reason}") from exc
            except engine_errors() as exc:
                raise ValueError(f"the database refused it: {engine_message(exc)}") from exc

    def close(self) -> None:
        self.conn.close()


class UnusableDatabase:
    """Stands in for a database that cannot be opened: the session is served, its records are refused."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __call__(self, record: BuildRecord) -> None:
        raise ValueError(self.reason)


def database_sink(db: str, account: str) -> Callable[[BuildRecord], None]:
    """A sink for `account` in `db`; one that refuses every record when the database cannot be opened."""
    from buildreport.store import DatabaseError

    try:
        return DatabaseSink(db, account)
    except DatabaseError as exc:
        return UnusableDatabase(str(exc))
