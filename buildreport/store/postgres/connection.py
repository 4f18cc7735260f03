"""Connections to PostgreSQL that take the store's SQL as written for both engines.

The shared store code speaks the DB-API as sqlite3 offers it: `?` placeholders, `execute(...).fetchall()`,
`executemany`, `BEGIN IMMEDIATE` before a write. These wrappers turn that into psycopg calls, in one place:
placeholders become `%s`, `BEGIN IMMEDIATE` takes the write lock every buildreport process shares (a
transaction-level advisory lock, so writers from several machines follow one another as SQLite's writers
do), a plain `BEGIN` reads one snapshot (repeatable read), and `PRAGMA` tuning, which means nothing to
PostgreSQL, is skipped.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
from psycopg.adapt import Loader
from psycopg.types.string import TextLoader

# Key of the advisory lock every buildreport write transaction holds; the schema migration has its own.
WRITE_LOCK = 0x62726570_00000001
MIGRATION_LOCK = 0x62726570_00000002
# The channel on which the schema's triggers announce a commit that changes what a token grants.
TOKENS_CHANNEL = "buildreport_tokens"
# The channel on which the schema's trigger announces a commit that writes builds.
BUILDS_CHANNEL = "buildreport_builds"
SEARCH_PATH = "public, auth"  # tokens live in schema `auth`, as the tokens file is attached as `auth` in SQLite


# The memory a grouping of a window's builds by derivation path may hash in (SET LOCAL, its transaction only).
# The planner prices a group of comma-joined figures at 8 kB, so below this it sorts a month of 10M builds' rows
# on disk instead, and took twice as long (bench/notes.md); the hash table it then builds takes some 36 MB.
GROUPING_WORK_MEM = "SET LOCAL work_mem = '128MB'"


class HashedGrouping(str):
    """SQL that groups every matching build of one table's index range by derivation path in one pass, which the
    reader runs with GROUPING_WORK_MEM. Only for a read of builds alone: more memory also makes hash joins look
    cheaper."""


@functools.lru_cache(maxsize=1024)
def translate(sql: str) -> str:
    """`?` placeholders as psycopg's `%s`; a literal `%` doubled. The store's SQL holds no `?` in literals."""
    return sql.replace("%", "%%").replace("?", "%s")


class _WholeNumeric(Loader):
    """`sum()` of integers is `numeric` in PostgreSQL; the store's figures are whole numbers, as in SQLite."""

    def load(self, data: Any) -> int | float:
        text = bytes(data).decode()
        if "." in text or "e" in text or "N" in text:
            return float(text)
        return int(text)


def configure(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """Numbers and JSON come back as SQLite gives them: sums as int, JSON as its text."""
    conn.adapters.register_loader("numeric", _WholeNumeric)
    conn.adapters.register_loader("json", TextLoader)
    conn.adapters.register_loader("jsonb", TextLoader)


def connect_kwargs() -> dict[str, Any]:
    """Every connection's settings. JIT compilation is off: PostgreSQL starts it for queries its planner prices
    high, and on the statistics a request asks for it costs more than it saves (bench/notes.md)."""
    return {"autocommit": True, "options": f"-c search_path={SEARCH_PATH.replace(' ', '')} -c jit=off"}


class PgCursor:
    """What a statement returned, with sqlite3's cursor calls."""

    def __init__(self, cursor: psycopg.Cursor[Any] | None) -> None:
        self._cursor = cursor

    def fetchall(self) -> list[tuple]:
        if self._cursor is None or self._cursor.description is None:
            return []
        return self._cursor.fetchall()

    def fetchone(self) -> tuple | None:
        if self._cursor is None or self._cursor.description is None:
            return None
        return self._cursor.fetchone()

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.fetchall())

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount if self._cursor is not None else 0


class PgConnection:
    """A synchronous PostgreSQL connection used by the write path and the commands, in autocommit mode with
    explicit transactions, as the SQLite connections are."""

    engine = "postgresql"

    def __init__(self, conn: psycopg.Connection[Any], url: str) -> None:
        self._conn = conn
        self.url = url

    @classmethod
    def open(cls, url: str) -> PgConnection:
        conn = psycopg.connect(url, **connect_kwargs())
        configure(conn)
        return cls(conn, url)

    def execute(self, sql: str, params: Sequence[object] = ()) -> PgCursor:
        statement = sql.strip().rstrip(";").upper()
        if statement.startswith("PRAGMA"):
            return PgCursor(None)
        if statement == "BEGIN IMMEDIATE":
            self._begin("BEGIN")
            self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
            return PgCursor(None)
        if statement == "BEGIN":  # a read of several statements sees one snapshot, as a SQLite read transaction
            self._begin("BEGIN ISOLATION LEVEL REPEATABLE READ")
            return PgCursor(None)
        return PgCursor(self._conn.execute(translate(sql), tuple(params)))

    def _begin(self, statement: str) -> None:
        """Begin a transaction; a connection that died while idle (a server restart, a failover) is replaced
        first, as nothing of the transaction has been sent yet."""
        try:
            self._conn.execute(statement)
        except psycopg.OperationalError:
            if not self._conn.broken:
                raise
            self._conn.close()
            self._conn = psycopg.connect(self.url, **connect_kwargs())
            configure(self._conn)
            self._conn.execute(statement)

    def executemany(self, sql: str, rows: Iterable[Sequence[object]]) -> PgCursor:
        """psycopg sends every row's statement at once (libpq's pipeline mode) and the server answers them all.
        No rows send nothing: psycopg would still enter the pipeline and wait for the server's answer."""
        params = [tuple(row) for row in rows]
        if not params:
            return PgCursor(None)
        cursor = self._conn.cursor()
        cursor.executemany(translate(sql), params)
        return PgCursor(cursor)

    def commit(self) -> None:
        if self._conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            self._conn.execute("COMMIT")

    def rollback(self) -> None:
        if self._conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            self._conn.execute("ROLLBACK")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> PgConnection:
        return self

    def __exit__(self, kind: object, value: object, traceback: object) -> None:
        """As sqlite3's: commit what the block did, or roll it back when it raised; the connection stays open."""
        if kind is None:
            self.commit()
        else:
            self.rollback()

    @property
    def broken(self) -> bool:
        """The server closed the connection (a restart, a failover): a new one is needed."""
        return self._conn.closed or self._conn.broken

    @property
    def raw(self) -> psycopg.Connection[Any]:
        """The psycopg connection, for the PostgreSQL folder's own statements."""
        return self._conn

    @property
    def in_transaction(self) -> bool:
        return self._conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
