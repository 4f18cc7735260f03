"""Where a recorder's build records go: a spool folder (sent on by `buildreport push`) or a local database.

A local database takes them through the same writer as `POST /builds`: one transaction a call, each build
named by its `source_id`, so a build's `running` record and its final one are one build.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from buildreport.models import BuildRecord
from buildreport.record.records import encode
from buildreport.spool import write_spool_file
from buildreport.store.admin import ensure_account
from buildreport.store.schema import open_database
from buildreport.store.writes import WriteConflicts, write_records
from buildreport.times import now_us


class SpoolSink:
    """The records of each call in one spool file, put in place atomically."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def __call__(self, records: list[BuildRecord]) -> None:
        write_spool_file(self.directory, [encode(record) for record in records])


class DatabaseSink:
    """The records of each call written to `account` in a local database, in one transaction."""

    def __init__(self, db: Path | str, account: str) -> None:
        self.conn = open_database(db)
        with self.conn:
            self.account_id = ensure_account(self.conn, account, now_us())
        self.lock = threading.Lock()

    def __call__(self, records: list[BuildRecord]) -> None:
        with self.lock:
            try:
                write_records(self.conn, self.account_id, records, now_us())
            except WriteConflicts as exc:
                first = exc.invalid[0]
                raise ValueError(f"the database refused it: {first.field}: {first.reason}") from exc
            except sqlite3.Error as exc:
                raise ValueError(f"the database refused it: {exc}") from exc

    def close(self) -> None:
        self.conn.close()
