"""Where a recorder's records go: files in a spool folder for `buildreport push`, or a local database.

Both take the same validated `BuildRecord`; the database is written through the same call as
`POST /builds` (one transaction per record, upserted by `source_id`), so a running build is completed
by its final record exactly as over HTTP.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Protocol

import msgspec

from buildreport.models import BuildRecord
from buildreport.spool import write_spool_file


class SinkError(Exception):
    """A record could not be kept; the message says why in one line."""


class Sink(Protocol):
    def put(self, record: BuildRecord) -> str:
        """Keep one record; a short description of where it went. SinkError when it could not be kept."""
        ...


class SpoolSink:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def put(self, record: BuildRecord) -> str:
        try:
            return write_spool_file(self.directory, [msgspec.json.encode(record)]).name
        except OSError as exc:
            raise SinkError(f"cannot write to the spool {self.directory}: {exc}") from exc


class DatabaseSink:
    """A local buildreport database, opened on first use (from the thread that writes)."""

    def __init__(self, path: Path, account: str) -> None:
        self.path = path
        self.account = account
        self._conn: sqlite3.Connection | None = None
        self._account_id = 0

    def put(self, record: BuildRecord) -> str:
        # Imported here: the storage layer costs a runner session about half a second to load, and only
        # runners that write to a database need it.
        from buildreport.store.admin import ensure_account
        from buildreport.store.schema import DatabaseError, open_database
        from buildreport.store.writes import WriteConflicts, write_records
        from buildreport.times import now_us

        try:
            if self._conn is None:
                conn = open_database(self.path)
                with conn:
                    self._account_id = ensure_account(conn, self.account, now_us())
                self._conn = conn
            result = write_records(self._conn, self._account_id, [record], now_us())
        except WriteConflicts as exc:
            raise SinkError(f"{self.path} refused the record: {exc.invalid[0].field}: {exc.invalid[0].reason}") from exc
        except (DatabaseError, sqlite3.Error) as exc:
            raise SinkError(f"cannot write to {self.path}: {exc}") from exc
        return f"build {result.build_ids[0]} in {self.path}" if result.build_ids else str(self.path)
