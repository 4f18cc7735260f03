"""SQLite reads: one aiosqlite connection for range queries, a plain one for lookups by key."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import mmap
import os
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

import aiosqlite

from buildreport.store import queries
from buildreport.store.dialect import SQLITE
from buildreport.store.reader import KeptBuilds, Reader
from buildreport.store.sqlite.schema import CONNECTION_PRAGMAS, attach_auth, auth_path, connect_existing, rw_uri

log = logging.getLogger("buildreport.store")
# The WAL index header (the first 48 bytes of the -shm file) changes with every commit of any process.
_WAL_INDEX_HEADER = 48


# A short query runs in the event loop's thread: handing a query to aiosqlite's thread and back cost about 70 µs
# of CPU here, more than the query itself for most pages, summaries and usage. A longer one is better in that
# thread, where SQLite works while the event loop serves other requests (a year's summary, 1.9 ms, answered 667
# requests a second to 32 clients there and 609 in the event loop's thread, with a p99 of 55 ms against 407 ms).
# So a statement that took longer than SHORT_QUERY_BUDGET_S goes to aiosqlite's thread for its next
# LONG_QUERY_RUNS runs before it is tried in the event loop again; one still running after SHORT_QUERY_LIMIT_S is
# interrupted and run again there at once. (Interrupting costs: SQLite ran that statement about 50% slower
# afterwards on the same connection, so the budget is kept by measuring and the limit is for outliers.)
SHORT_QUERY_BUDGET_S = 0.001
SHORT_QUERY_LIMIT_S = 0.02
LONG_QUERY_RUNS = 16
_LIMIT_CHECK_STEPS = 10_000  # SQLite virtual machine instructions between two looks at the clock
_LONG_QUERIES_KEPT = 256  # statements remembered as long; past that the memory starts afresh

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
    """The queries that serve requests.

    Range queries (statistics, exports, logs) run on one aiosqlite connection, off the event loop; a
    statistics query read in two parts runs its second part on another at the same time, so that the two
    use both cores. Short range queries (pages, summaries, usage) run in the event loop's thread unless they
    took longer than SHORT_QUERY_BUDGET_S when last tried there.
    Lookups by key (a token, one build) take a few microseconds in SQLite, less than handing them to
    aiosqlite's thread and back; they run on a plain connection in the event loop's own thread.
    One more, opened on first use, records when tokens were last used.
    """

    dialect = SQLITE

    def __init__(self, conn: aiosqlite.Connection, side: aiosqlite.Connection, path: Path | str) -> None:
        self._conn = conn
        self._side = side
        self._path = str(path)
        self._local = _connect_local(path)
        self._deadline = math.inf  # of the short query running on _local; lookups by key run without one
        self._interrupted = False
        self._long: dict[str, int] = {}  # statement -> runs left before it is tried in the event loop again
        self._local.set_progress_handler(self._past_deadline, _LIMIT_CHECK_STEPS)
        self._auth_path = str(auth_path(path))
        # Which files were opened: a file deleted or replaced under the server is told apart by its inode.
        self._identities = {self._path: _identity(self._path), self._auth_path: _identity(self._auth_path)}
        self._writer: aiosqlite.Connection | None = None
        self._shm: dict[str, mmap.mmap] = {}
        self._shm_fds: dict[str, int] = {}  # open until the reader closes (see _map_wal_index)
        self.kept = KeptBuilds()
        self._pending: set[asyncio.Task[None]] = set()

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
        if self._writer is not None:
            await self._writer.close()
        await self._conn.close()
        await self._side.close()
        self._local.close()
        for view in self._shm.values():
            view.close()
        for fd in self._shm_fds.values():
            os.close(fd)

    def data_version(self) -> bytes | None:
        """A value that differs after any commit to the database or its tokens file; None when it cannot be told.

        Reading a few bytes of the WAL index costs far less than a query, so data derived from the
        database (the token cache, kept builds) can be checked on every request and still see a change at once.
        """
        builds, tokens = self._wal_header(self._path), self._wal_header(self._auth_path)
        return None if builds is None or tokens is None else builds + tokens

    def builds_version(self) -> bytes | None:
        return self._wal_header(self._path)

    def _wal_header(self, path: str) -> bytes | None:
        """The WAL index header of `path`, read through a memory map, without a system call."""
        view = self._shm.get(path) or self._map_wal_index(path)
        return None if view is None else view[:_WAL_INDEX_HEADER]

    def _map_wal_index(self, path: str) -> mmap.mmap | None:
        """A map of the start of `path`'s -shm file, once SQLite in this process holds that file open.

        A -shm file that no process holds open through SQLite is cut short and rebuilt by the next process that
        opens the database, and a map of it then faults (SIGBUS). SQLite's hold is a POSIX lock, which the kernel
        drops for the whole process when any descriptor of the file closes: the descriptor opened here stays open
        until the reader closes, after its connections. The read on _local makes SQLite open the file first."""
        schema = "auth" if path == self._auth_path else "main"
        try:
            if not os.path.exists(path + "-shm"):
                return None  # not in WAL mode (an import into an empty database runs without it)
            self._local.execute(f"SELECT 1 FROM {schema}.sqlite_schema LIMIT 1").fetchall()  # a fixed name
            fd = self._shm_fds.get(path)
            if fd is None:
                fd = self._shm_fds[path] = os.open(path + "-shm", os.O_RDONLY)
            view = self._shm[path] = mmap.mmap(fd, _WAL_INDEX_HEADER, prot=mmap.PROT_READ)
        except (OSError, ValueError, sqlite3.Error):  # gone, shorter than the header, or the read was refused
            return None
        return view

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

    async def _short(self, query: queries.Query) -> list[tuple]:
        sql, params = query
        if self._still_long(sql):
            return await self._rows(query)
        started = time.perf_counter()
        rows = self._in_event_loop(sql, params, started + SHORT_QUERY_LIMIT_S)
        if rows is None or time.perf_counter() - started > SHORT_QUERY_BUDGET_S:
            if len(self._long) >= _LONG_QUERIES_KEPT:
                self._long.clear()
            self._long[sql] = LONG_QUERY_RUNS
        return rows if rows is not None else await self._rows(query)

    def _still_long(self, sql: str) -> bool:
        """Whether `sql` goes to aiosqlite's thread this time, having taken too long in the event loop's lately."""
        runs_left = self._long.pop(sql, 0)
        if runs_left > 1:
            self._long[sql] = runs_left - 1
        return runs_left > 0

    def _in_event_loop(self, sql: str, params: Sequence[object], deadline: float) -> list[tuple] | None:
        """The rows of `sql` read on _local; None when it was still running at `deadline` and was interrupted."""
        self._deadline, self._interrupted = deadline, False
        try:
            return self._local.execute(sql, params).fetchall()
        except sqlite3.OperationalError:
            if self._interrupted:
                return None
            raise
        finally:
            self._deadline = math.inf

    def _past_deadline(self) -> bool:
        """SQLite's progress handler on _local: True interrupts the statement running."""
        self._interrupted = time.perf_counter() > self._deadline
        return self._interrupted

    async def _rows_together(self, parts: Sequence[queries.Query]) -> list[list[tuple]]:
        connections = itertools.cycle((self._conn, self._side))
        results = await asyncio.gather(*(next(connections).execute_fetchall(*part) for part in parts))
        return [list(rows) for rows in results]

    async def _key(self, query: queries.Query) -> list[tuple]:
        sql, params = query
        return self._local.execute(sql, params).fetchall()

    async def size_bytes(self) -> int:
        total = 0
        for name in (self._path, self._path + "-wal"):
            with contextlib.suppress(OSError):  # no write-ahead log right now
                total += Path(name).stat().st_size
        return total

    def touch_token(self, token_id: str, now_us: int) -> None:
        """Record a token's last use in the background, on a connection of its own: no request waits for it,
        not even while an import holds the write lock."""
        task = asyncio.create_task(self._touch(token_id, now_us))
        self._pending.add(task)
        task.add_done_callback(self._touched)

    async def _touch(self, token_id: str, now_us: int) -> None:
        await self._write_auth(queries.touch_token(token_id, now_us))

    async def _write_auth(self, query: queries.Query) -> None:
        if self._writer is None:
            self._writer = await _connect(self._auth_path)
        sql, params = query
        await self._writer.execute(sql, params)

    def _touched(self, task: asyncio.Task[None]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("could not record a token's last use: %s", task.exception())

