"""Storage: one interface over two engines.

The HTTP layer and the commands call only what this module offers; `db` is a SQLite file path or a
`postgresql://` URL, and nothing above the store asks which. The engines live in store/sqlite/ and
store/postgres/; the queries, the writer and the totals above them are shared.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from buildreport.store.engines import (
    Connection,
    connect,
    describe,
    engine_errors,
    engine_message,
    is_postgres,
    postgres_opened,
)
from buildreport.store.errors import QUEUE_LENGTH, QUEUE_WAIT, DatabaseError
from buildreport.store.reader import Reader


def open_database(db: str, *, create: bool = True) -> Any:
    """A synchronous connection to an up-to-date database (created or migrated as needed), for the commands."""
    if is_postgres(db):
        from buildreport.store.postgres.schema import open_database as open_postgres

        return postgres_opened(lambda: open_postgres(str(db)), db)
    from buildreport.store.sqlite.schema import open_database as open_sqlite

    return open_sqlite(db, create=create)


def open_auth(db: str) -> Any:
    """A synchronous connection on which the tokens are managed (SQLite keeps them in a file of their own)."""
    if is_postgres(db):
        return open_database(db)
    from buildreport.store.sqlite.schema import open_auth as open_sqlite_auth

    return open_sqlite_auth(db)


def bulk_write(conn: Any) -> AbstractContextManager[None]:
    """Around one large write transaction: SQLite's settings for it (sqlite.bulk.bulk_write); PostgreSQL
    commits it synchronously (postgres.bulk.synchronous_commit)."""
    if getattr(conn, "engine", None) == "postgresql":
        from buildreport.store.postgres.bulk import synchronous_commit

        return synchronous_commit(conn.raw)
    from buildreport.store.sqlite.bulk import bulk_write as sqlite_bulk_write

    return sqlite_bulk_write(conn)


def deferred_indexes(conn: Any, *, beside_reader: bool = False) -> AbstractContextManager[None]:
    """Inside a large write's transaction: indexes the writes do not read are made once, after them, when the
    database had no builds (sqlite.bulk.deferred_indexes); PostgreSQL keeps its indexes up as it writes.
    `beside_reader`: the rows come from a reading process (store.fresh_load), and fewer indexes wait."""
    if getattr(conn, "engine", None) == "postgresql":
        return nullcontext()
    from buildreport.store.sqlite import bulk

    return bulk.deferred_indexes(conn, bulk.DEFERRED_BESIDE_READER if beside_reader else bulk.DEFERRED_INDEXES)


def loads_fresh(conn: Any) -> bool:
    """Inside a large write's transaction: whether it may go through store.fresh_load, which inserts prepared
    rows into a database with no builds (SQLite's statements, PostgreSQL's COPY)."""
    if getattr(conn, "engine", None) == "postgresql":
        from buildreport.store.postgres.bulk import holds_builds
    else:
        from buildreport.store.sqlite.bulk import holds_builds

    return not holds_builds(conn)


def after_bulk_write(conn: Any, builds_written: int) -> None:
    """The engine's upkeep after a large committed write: PostgreSQL vacuums the new pages and brings its
    planner statistics up to date (postgres.schema.refresh_statistics); SQLite plans from its indexes alone
    and needs nothing."""
    if getattr(conn, "engine", None) == "postgresql":
        from buildreport.store.postgres.schema import refresh_statistics

        refresh_statistics(conn, builds_written)


async def open_reader(
    db: str, read_dbs: Sequence[str] = (), queue_length: int = QUEUE_LENGTH, queue_wait: float = QUEUE_WAIT
) -> Reader:
    """The server's reader; `read_dbs` are replicas that range queries are sent to (PostgreSQL only). Reads
    that wait for a PostgreSQL connection are refused as busy past `queue_length` waiting or `queue_wait` s."""
    if is_postgres(db):
        from buildreport.store.postgres.reader import PgReader

        return await PgReader.open(str(db), read_dbs, queue_length, queue_wait)
    if read_dbs:
        raise DatabaseError("--read-db names PostgreSQL replicas; a SQLite database is read from its file")
    from buildreport.store.sqlite.reader import SqliteReader

    return await SqliteReader.open(db)


def backup(db: str | Path, to: Path, *, gzip: bool = False) -> Any:
    """Copy a live SQLite database with its tokens and signing key into one checked archive (sqlite.backup)."""
    from buildreport.store.sqlite.backup import backup as sqlite_backup

    return sqlite_backup(Path(db), to, gzip=gzip)


def restore(source: Path, db: str | Path, *, force: bool = False) -> Any:
    """Put a backup archive in place as the SQLite database `db`, checked first (sqlite.backup)."""
    from buildreport.store.sqlite.backup import restore as sqlite_restore

    return sqlite_restore(source, Path(db), force=force)


def exists(db: str) -> bool:
    """Whether a buildreport database is there already (a file, or buildreport's tables in PostgreSQL)."""
    if is_postgres(db):
        from buildreport.store.postgres.schema import holds_buildreport

        return bool(postgres_opened(lambda: holds_buildreport(str(db)), db))
    return Path(db).exists()


def remove(db: str) -> None:
    """Take a database away whole: its files, or buildreport's tables in PostgreSQL."""
    if is_postgres(db):
        from buildreport.store.postgres.schema import drop_all

        postgres_opened(lambda: drop_all(str(db)), db)
        return
    from buildreport.store.sqlite.schema import remove_files

    remove_files(db)


def stored_signing_key(db: str) -> str | None:
    """The signing key kept in a PostgreSQL database for all its servers; None for SQLite (a file beside it)."""
    if not is_postgres(db):
        return None
    from buildreport.store.postgres.schema import signing_key

    return postgres_opened(lambda: signing_key(str(db)), db)


__all__ = ["Connection", "DatabaseError", "Reader", "connect", "describe", "engine_errors", "engine_message",
           "is_postgres"]
