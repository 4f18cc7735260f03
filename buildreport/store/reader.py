"""Read access for the server: one aiosqlite connection per process, one query per request."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import aiosqlite
import msgspec

from buildreport.filters import BuildFilter, Cursor, GroupBy, ListQuery, UsageQuery
from buildreport.models import BuildSummary, Usage
from buildreport.store import queries, stats_queries, tag_totals
from buildreport.store.schema import CONNECTION_PRAGMAS, attach_auth, auth_path, connect_existing, rw_uri
from buildreport.times import US_PER_SECOND


class TokenRow(msgspec.Struct, frozen=True):
    token_id: str
    account_id: int
    account: str
    scopes: frozenset[str]
    expires_us: int
    revoked_us: int | None
    last_used_us: int | None


class BuildPage(msgspec.Struct):
    """A JSON array of builds in list order, a digest that changes whenever it does, and, when more
    builds match, where the next page starts."""

    body: bytes
    digest: bytes
    next_cursor: Cursor | None



log = logging.getLogger("buildreport.store")
# The WAL index header (the first 48 bytes of the -shm file) changes with every commit of any process.
_WAL_INDEX_HEADER = 48
# Builds an export reads at a time.
EXPORT_PAGE = 2_000


async def _connect(path: Path | str) -> aiosqlite.Connection:
    # mode=rw: a database file that is gone is an error, never a new empty file.
    conn = await aiosqlite.connect(rw_uri(path), uri=True, isolation_level=None)
    for pragma in CONNECTION_PRAGMAS:
        await conn.execute(pragma)
    return conn


def _connect_local(path: Path | str) -> sqlite3.Connection:
    conn = connect_existing(path)
    attach_auth(conn, path)
    return conn


def _identity(path: str) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_dev, info.st_ino


class Reader:
    """The queries that serve requests.

    Range queries (lists, summaries, usage, logs) run on one aiosqlite connection, off the event loop.
    Lookups by key (a token, one build) take a few microseconds in SQLite, less than handing them to
    aiosqlite's thread and back; they run on a plain connection in the event loop's own thread.
    A third connection, opened on first use, records when tokens were last used.
    """

    def __init__(self, conn: aiosqlite.Connection, path: Path | str) -> None:
        self._conn = conn
        self._path = str(path)
        self._local = _connect_local(path)
        self._auth_path = str(auth_path(path))
        # Which files were opened: a file deleted or replaced under the server is told apart by its inode.
        self._identities = {self._path: _identity(self._path), self._auth_path: _identity(self._auth_path)}
        self._writer: aiosqlite.Connection | None = None
        self._shm: dict[str, int] = {}
        self._pending: set[asyncio.Task[None]] = set()

    @classmethod
    async def open(cls, path: Path | str) -> Reader:
        return cls(await _connect(path), path)

    async def close(self) -> None:
        if self._pending:
            await asyncio.wait(self._pending, timeout=5)
        if self._writer is not None:
            await self._writer.close()
        await self._conn.close()
        self._local.close()
        for fd in self._shm.values():
            os.close(fd)

    def data_version(self) -> bytes | None:
        """A value that differs after any commit to the database or its tokens file; None when it cannot be told.

        Reading a few bytes of the WAL index costs far less than a query, so data derived from the
        database (the token cache) can be checked on every request and still see a revocation at once.
        """
        headers = []
        for path in (self._path, self._auth_path):
            try:
                if path not in self._shm:
                    self._shm[path] = os.open(path + "-shm", os.O_RDONLY)
                header = os.pread(self._shm[path], _WAL_INDEX_HEADER, 0)
            except OSError:
                return None
            if len(header) != _WAL_INDEX_HEADER:
                return None
            headers.append(header)
        return b"".join(headers)

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

    def _lookup(self, query: queries.Query) -> list[tuple]:
        sql, params = query
        return self._local.execute(sql, params).fetchall()

    async def ping(self) -> bool:
        return bool(await self._rows(("SELECT count(*) FROM (SELECT 1 FROM accounts LIMIT 1)", [])))

    async def token(self, digest: bytes) -> TokenRow | None:
        rows = self._lookup(queries.token_by_digest(digest))
        if not rows:
            return None
        token_id, account_id, account, scopes, expires_us, revoked_us, last_used_us = rows[0]
        return TokenRow(token_id, account_id, account, frozenset(scopes.split()), expires_us, revoked_us, last_used_us)

    def touch_token(self, token_id: str, now_us: int) -> None:
        """Record a token's last use in the background, on a connection of its own: no request waits for it,
        not even while an import holds the write lock."""
        task = asyncio.create_task(self._touch(token_id, now_us))
        self._pending.add(task)
        task.add_done_callback(self._touched)

    async def _touch(self, token_id: str, now_us: int) -> None:
        if self._writer is None:
            self._writer = await _connect(self._auth_path)
        sql, params = queries.touch_token(token_id, now_us)
        await self._writer.execute(sql, params)

    def _touched(self, task: asyncio.Task[None]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("could not record a token's last use: %s", task.exception())

    async def list_builds(self, account_id: int, query: ListQuery) -> BuildPage:
        ((count, array, hashes),) = await self._rows(queries.list_builds(account_id, query))
        if not count:
            return BuildPage(body=b"[]", digest=b"", next_cursor=None)
        next_cursor = None
        if count == query.limit:
            # A full page: more may match. Reading two positions is cheaper than carrying every build's.
            ends = await self._rows(queries.page_end(account_id, query))
            if len(ends) == 2:
                next_cursor = Cursor(create_us=ends[0][0], build_id=ends[0][1])
        return BuildPage(body=array, digest=hashes.encode(), next_cursor=next_cursor)

    async def build(self, account_id: int, build_id: int) -> bytes | None:
        rows = self._lookup(queries.get_build(account_id, build_id))
        return rows[0][0] if rows else None

    async def summary(self, account_id: int, build_filter: BuildFilter, now_us: int) -> BuildSummary:
        promoted = False
        if build_filter.tags:
            # Lookups by key, like a token's: in the event loop's thread.
            build_filter, promoted = tag_totals.order_tags(self._lookup, account_id, build_filter)
        rows = await self._rows(queries.summary(account_id, build_filter, promoted))
        return summary_from_row(merge_summary_rows(rows), now_us)

    async def usage(self, account_id: int, query: UsageQuery) -> Usage:
        (row,) = await self._rows(queries.usage(account_id, query))
        return Usage(billable_cpu_seconds=row[0], billable_build_count=row[1])

    async def log(self, account_id: int, build_id: int) -> tuple[int, bytes] | None:
        rows = await self._rows(queries.get_log(account_id, build_id))
        return (rows[0][0], rows[0][1]) if rows else None

    # --- insights (statistics, usage by group, export) -------------------------------------------

    async def stats_rows(
        self, account_id: int, build_filter: BuildFilter, group_by: GroupBy, newest: bool = False,
        queue_times: bool = True,
    ) -> list[tuple]:
        return await self._rows(stats_queries.stats_rows(account_id, build_filter, group_by, newest, queue_times))

    async def usage_rows(self, account_id: int, query: UsageQuery, group_by: GroupBy) -> list[tuple]:
        """Usage rows for a breakdown: by day and by system summed in SQL, by tag one row a build."""
        if group_by.kind == "day":
            return await self._rows(stats_queries.usage_by_day(account_id, query))
        if group_by.kind == "system":
            return await self._rows(stats_queries.usage_by_system(account_id, query))
        return await self._rows(stats_queries.usage_tags(account_id, query))

    async def export_pages(
        self, account_id: int, build_filter: BuildFilter, size: int = EXPORT_PAGE
    ) -> AsyncIterator[list[bytes]]:
        """Every matching build's JSON in list order, `size` at a time: memory stays one page whatever
        the number of builds, and other requests are served between pages."""
        cursor: Cursor | None = None
        while True:
            rows = await self._rows(stats_queries.export_page(account_id, build_filter, cursor, size))
            if not rows:
                return
            yield [row[2] for row in rows]
            if len(rows) < size:
                return
            cursor = Cursor(create_us=rows[-1][0], build_id=rows[-1][1])

    async def account_figures(self, since_us: int) -> tuple[list[tuple], list[tuple]]:
        """For /metrics: per account and status the builds and CPU seconds since `since_us` (whole hours),
        and per account the builds stored."""
        recent = await self._rows(stats_queries.account_totals_since(since_us))
        stored = await self._rows(stats_queries.account_build_counts())
        return recent, stored


def _least(values: list[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _most(values: list[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def merge_summary_rows(rows: list[tuple]) -> tuple:
    """One row of `queries.SUMMARY_COLUMNS` from the rows of a summary's parts."""
    columns = list(zip(*rows, strict=True))
    sums = [sum(columns[i]) for i in range(8)]
    return (*sums, _least(list(columns[8])), _most(list(columns[9])), max(columns[10]), sum(columns[11]))


def summary_from_row(row: tuple, now_us: int) -> BuildSummary:
    """A BuildSummary from the columns of `queries.SUMMARY_COLUMNS`."""
    count, ok, failed, discarded, unfinished, cpu, billable_cpu, duration_us, first_start, last_stop, open_, nar = row
    wall_us = 0
    if count:
        stop = max(last_stop if last_stop is not None else first_start, now_us if open_ else first_start)
        wall_us = max(0, stop - first_start)
    return BuildSummary(
        build_count=count,
        running_build_count=unfinished,
        discarded_build_count=discarded,
        failed_build_count=failed,
        successful_build_count=ok,
        total_cpu_seconds=cpu,
        billable_cpu_seconds=billable_cpu,
        total_duration_seconds=duration_us / US_PER_SECOND,
        wall_time_seconds=wall_us / US_PER_SECOND,
        total_output_nar_size_kilobytes=nar // 1024,
    )
