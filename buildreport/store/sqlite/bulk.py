"""Large writes into a SQLite file (an import): the journal, page cache and indexes that suit them."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator

from buildreport.store.sqlite.schema import BUSY_TIMEOUT_MS, configure, set_journal

# A large write touches every index page; a page cache of up to 1 GiB keeps them in memory for its connection.
BULK_CACHE_KIB = 1024 * 1024


@contextlib.contextmanager
def bulk_write(conn: sqlite3.Connection) -> Iterator[None]:
    """Around one large write transaction (an import).

    Into a database that holds no builds yet and that no other connection has open, the transaction goes
    through a rollback journal (synchronous FULL) instead of the write-ahead log. A rollback journal keeps
    the old content of the pages a transaction changes, and a database with no builds has next to none: the
    new pages are written once, into the database file, where the log writes them all and a checkpoint then
    copies them into the database (bench/store.md). A database with builds keeps the log, whose readers go on
    reading while the import writes. WAL is set again after.
    """
    conn.execute(f"PRAGMA cache_size = -{BULK_CACHE_KIB}")
    journal = not holds_builds(conn) and set_journal(conn, "delete", 0)
    if journal:
        conn.execute("PRAGMA synchronous = FULL")  # a power cut leaves the database whole, as with the log
    try:
        yield
    finally:
        configure(conn)
        if journal:
            # A connection that opened the file since may hold it for a moment. Should the switch not take,
            # the database is whole all the same, and the next open_database sets WAL.
            set_journal(conn, "wal", BUSY_TIMEOUT_MS)


# Indexes that an import's writes never read (they look builds up by id and source id, tag rows by their key):
# made once, from the sorted rows, after the last build is in, which costs less than keeping them up row by row
# (bench/store.md).
DEFERRED_INDEXES = ("builds_by_time", "builds_by_derivation", "builds_by_stop", "builds_for_stats", "builds_by_name",
                    "build_tags_by_stop")
# When a reading process prepares the rows (store.fresh_load), the inserting process has time to spare while it
# waits for them: it keeps up the indexes whose keys arrive in about the order they sort (times of creation and
# stop) as it goes, and makes only the ones in derivation order at the end (bench/store.md).
DEFERRED_BESIDE_READER = ("builds_by_derivation", "builds_by_name")  # the name index is in name order too


@contextlib.contextmanager
def deferred_indexes(conn: sqlite3.Connection, names: tuple[str, ...] = DEFERRED_INDEXES) -> Iterator[None]:
    """Inside an import's transaction into a database with no builds: the block writes its builds without the
    indexes `names`, which are made again when it ends. A block that raises leaves them to the rollback."""
    if holds_builds(conn):
        yield
        return
    marks = ",".join("?" * len(names))
    made = conn.execute(
        f"SELECT name, sql FROM sqlite_master WHERE type = 'index' AND name IN ({marks})", names
    ).fetchall()
    for name, _ in made:
        conn.execute(f'DROP INDEX "{name}"')  # a name from the lists above, never from input
    yield
    for _, sql in made:
        conn.execute(sql)


def holds_builds(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM builds LIMIT 1").fetchone() is not None
