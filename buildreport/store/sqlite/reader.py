"""SQLite reads: one aiosqlite connection for range queries, a plain one for lookups by key."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import aiosqlite

from buildreport.filters import BuildFilter, Cursor
from buildreport.store import queries, stats_queries
from buildreport.store.dialect import SQLITE
from buildreport.store.reader import KeptBuilds, Reader
from buildreport.store.sqlite.schema import CONNECTION_PRAGMAS, attach_auth, auth_path, connect_existing, rw_uri

log = logging.getLogger("buildreport.store")

# Each schema's data version, by the schema's fixed name.
_DATA_VERSION = {"main": "PRAGMA main.data_version", "auth": "PRAGMA auth.data_version"}

# The second range connection serves only the second half of a statistics query: a smaller page cache.
_SIDE_PRAGMAS = (*CONNECTION_PRAGMAS, "PRAGMA cache_size = -8192")


async def _connect(path: Path | str, pragmas: tuple[str, ...] = CONNECTION_PRAGMAS) -> aiosqlite.Connection:
    # mode=rw: a database file that is gone is an error, never a new empty file.
    conn = await aiosqlite.connect(rw_uri(path), uri=True, isolation_level=None)
    try:
        for pragma in pragmas:
            await conn.execute(pragma)
    except BaseException:
        await conn.close()
        raise
    return conn


def _connect_local(path: Path | str) -> sqlite3.Connection:
    conn = connect_existing(path)
    attach_auth(conn, path)
    return conn


def _identity(path: str) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_dev, info.st_ino


class SqliteReader(Reader):
    """The queries that serve requests, on the thread their class says (see Reader):

    - lookups by key (`_key`: a token, one build, an account) run on a plain sqlite3 connection in the event
      loop's own thread: each reads a few rows through an index in microseconds, less than handing it to
      aiosqlite's thread and back (about 70 µs), and none can grow with the data;
    - every other query (`_rows`: pages, summaries, usage, statistics, exports, logs) runs on an aiosqlite
      connection, off the event loop, which serves other requests meanwhile however long the query takes; a
      statistics query read in two parts runs its second part on another such connection at the same time, so
      that the two use both cores.
    Tokens are written by the server's one writer (store/writer.py).
    """

    dialect = SQLITE

    def __init__(self, conn: aiosqlite.Connection, side: aiosqlite.Connection, path: Path | str) -> None:
        self._conn = conn
        self._side = side
        self._path = str(path)
        self._local = _connect_local(path)
        self._auth_path = str(auth_path(path))
        # Which files were opened: a file deleted or replaced under the server is told apart by its inode.
        self._identities = {self._path: _identity(self._path), self._auth_path: _identity(self._auth_path)}
        self.kept = KeptBuilds()
        self._pending: set[asyncio.Task[None]] = set()
        self._versions: dict[str, bytes] = {}  # this turn's data versions, by schema (see _version)

    @classmethod
    async def open(cls, path: Path | str) -> SqliteReader:
        conn = await _connect(path)
        side = None
        try:
            side = await _connect(path, _SIDE_PRAGMAS)
            return cls(conn, side, path)
        except BaseException:
            for opened in (side, conn):
                if opened is not None:
                    await opened.close()
            raise

    async def close(self) -> None:
        if self._pending:
            await asyncio.wait(self._pending, timeout=5)
        await self._conn.close()
        await self._side.close()
        self._local.close()

    async def data_version(self) -> bytes | None:
        """A value that differs after any other connection's commit to the database or its tokens file; None
        when it cannot be told.

        SQLite's `PRAGMA data_version` (documented to change when another connection, of any process, commits),
        so data derived from the database (the token cache, kept builds) is checked on every request and sees a
        change at once. This reader's own connections never commit (the server's writer does)."""
        builds, tokens = self._version("main"), self._version("auth")
        return None if builds is None or tokens is None else builds + tokens

    async def builds_version(self) -> bytes | None:
        return self._version("main")

    def _version(self, schema: str) -> bytes | None:
        """A schema's data version, read once per turn of the event loop.

        Every request served in one turn was received before the turn began, so a version read during the
        turn is as new as each of them needs; the next turn reads it again. The forgetting is queued behind
        whatever is already queued, so it runs before any query result or write outcome that completed
        after the version was read."""
        version = self._versions.get(schema)
        if version is None:
            try:
                ((number,),) = self._local.execute(_DATA_VERSION[schema]).fetchall()
            except sqlite3.Error:  # the file went away under the server: nothing may be trusted as unchanged
                return None
            version = number.to_bytes(8, "little", signed=True)
            if not self._versions:
                asyncio.get_running_loop().call_soon(self._versions.clear)
            self._versions[schema] = version
        return version

    def file_problem(self) -> str | None:
        """What is wrong with the files this process reads, when one was deleted or replaced since it opened it."""
        for path, opened in self._identities.items():
            try:
                now = _identity(path)
            except FileNotFoundError:
                return f"{path} was deleted while the service ran; restore it and restart the service"
            except OSError as exc:
                return f"{path} cannot be checked: {exc.strerror}"
            if now != opened:
                return f"{path} was replaced while the service ran; restart the service to read the new file"
        return None

    async def _rows(self, query: queries.Query) -> list[tuple]:
        sql, params = query
        return list(await self._conn.execute_fetchall(sql, params))

    async def _rows_together(self, parts: Sequence[queries.Query]) -> list[list[tuple]]:
        connections = itertools.cycle((self._conn, self._side))
        results = await asyncio.gather(*(next(connections).execute_fetchall(*part) for part in parts))
        return [list(rows) for rows in results]

    async def _key(self, query: queries.Query) -> list[tuple]:
        sql, params = query
        return self._local.execute(sql, params).fetchall()

    async def _export_page(
        self, account_id: int, build_filter: BuildFilter, cursor: Cursor | None, size: int
    ) -> tuple[list[tuple], list[bytes]]:
        """The page's keys from the index, then their JSON in id order, two halves at once (body_parts): a file
        the kernel no longer caches is then read forwards, which it reads ahead."""
        keys = await self._rows(stats_queries.export_keys(account_id, build_filter, cursor, size))
        if not keys:
            return keys, []
        parts = await self._rows_together(stats_queries.body_parts([key[1] for key in keys]))
        return keys, stats_queries.joined_in_key_order(keys, [row for rows in parts for row in rows])

    async def size_bytes(self) -> int:
        total = 0
        for name in (self._path, self._path + "-wal"):
            with contextlib.suppress(OSError):  # no write-ahead log right now
                total += Path(name).stat().st_size
        return total

