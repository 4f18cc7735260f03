"""Read access for the server: one aiosqlite connection per process, one query per request."""

from __future__ import annotations

from pathlib import Path

import aiosqlite
import msgspec

from buildreport.filters import BuildFilter, Cursor, ListQuery, UsageQuery
from buildreport.models import BuildSummary, Usage
from buildreport.store import queries
from buildreport.store.schema import CONNECTION_PRAGMAS
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
    """Encoded builds in list order and, when more match, where the next page starts."""

    bodies: list[bytes]
    next_cursor: Cursor | None


class Reader:
    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    @classmethod
    async def open(cls, path: Path | str) -> Reader:
        conn = await aiosqlite.connect(path, isolation_level=None)
        for pragma in CONNECTION_PRAGMAS:
            await conn.execute(pragma)
        return cls(conn)

    async def close(self) -> None:
        await self._conn.close()

    async def _rows(self, query: queries.Query) -> list[tuple]:
        sql, params = query
        return list(await self._conn.execute_fetchall(sql, params))

    async def ping(self) -> bool:
        return bool(await self._rows(("SELECT 1", [])))

    async def token(self, digest: bytes) -> TokenRow | None:
        rows = await self._rows(queries.token_by_digest(digest))
        if not rows:
            return None
        token_id, account_id, account, scopes, expires_us, revoked_us, last_used_us = rows[0]
        return TokenRow(token_id, account_id, account, frozenset(scopes.split()), expires_us, revoked_us, last_used_us)

    async def touch_token(self, token_id: str, now_us: int) -> None:
        await self._rows(queries.touch_token(token_id, now_us))

    async def list_builds(self, account_id: int, query: ListQuery) -> BuildPage:
        rows = await self._rows(queries.list_builds(account_id, query))
        page = rows[: query.limit]
        next_cursor = Cursor(create_us=page[-1][0], build_id=page[-1][1]) if len(rows) > query.limit else None
        return BuildPage(bodies=[row[2] for row in page], next_cursor=next_cursor)

    async def build(self, account_id: int, build_id: int) -> bytes | None:
        rows = await self._rows(queries.get_build(account_id, build_id))
        return rows[0][0] if rows else None

    async def summary(self, account_id: int, build_filter: BuildFilter, now_us: int) -> BuildSummary:
        (row,) = await self._rows(queries.summary(account_id, build_filter))
        return summary_from_row(row, now_us)

    async def usage(self, account_id: int, query: UsageQuery) -> Usage:
        (row,) = await self._rows(queries.usage(account_id, query))
        return Usage(billable_cpu_seconds=row[0], billable_build_count=row[1])

    async def log(self, account_id: int, build_id: int) -> tuple[int, bytes] | None:
        rows = await self._rows(queries.get_log(account_id, build_id))
        return (rows[0][0], rows[0][1]) if rows else None


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
