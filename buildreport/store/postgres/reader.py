"""PostgreSQL reads: a pool on the primary and one on each replica.

Range queries (lists, summaries, statistics, exports) go to the replicas in turn, or to the primary when
there are none. Lookups by key that must see the latest commit (a token, so that a revocation through any
server is refused at once; one build) and the record of a token's last use go to the primary. A token read
is kept until the primary announces a change to tokens, a build until it announces a write of builds
(listener.py). Reads beyond a pool's connections wait for one in its queue (queue.py).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from buildreport.filters import BuildFilter, Cursor
from buildreport.store import queries, stats_queries
from buildreport.store.dialect import POSTGRESQL
from buildreport.store.errors import QUEUE_LENGTH, QUEUE_WAIT
from buildreport.store.filter_sql import BinaryResults
from buildreport.store.postgres import stats_queries as postgres_stats
from buildreport.store.postgres.connection import (
    BUILDS_CHANNEL,
    GROUPING_WORK_MEM,
    TOKENS_CHANNEL,
    HashedGrouping,
    configure,
    connect_kwargs,
    translate,
)
from buildreport.store.postgres.listener import Changes
from buildreport.store.queue import Turns
from buildreport.store.reader import KeptBuilds, Reader

log = logging.getLogger("buildreport.store")
POOL_SIZE = 4  # connections per server process and database
# Seconds a read that holds a turn (queue.py), so that a connection is free or opening, waits for it before it is
# told the database is away.
OPEN_TIMEOUT = 5.0


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    configure(conn)


async def _pool(url: str) -> AsyncConnectionPool:
    pool = AsyncConnectionPool(
        url, kwargs=connect_kwargs(), configure=_configure, min_size=1, max_size=POOL_SIZE, open=False,
        timeout=OPEN_TIMEOUT, name="buildreport",
    )  # fmt: skip
    await pool.open(wait=True, timeout=OPEN_TIMEOUT)
    return pool


class _Database:
    """One database's pool and the queue of reads waiting for its connections."""

    def __init__(self, pool: AsyncConnectionPool, turns: Turns) -> None:
        self.pool = pool
        self.turns = turns


async def _fetch(database: _Database, query: queries.Query) -> list[tuple]:
    """Rows of one statement, once its turn comes. Idle connections die with a server restart or failover and
    the pool learns it only by using them: a read that fails on a broken connection is tried once more on
    another."""
    async with database.turns:
        return await _fetch_now(database.pool, query)


async def _fetch_now(pool: AsyncConnectionPool, query: queries.Query) -> list[tuple]:
    sql, params = query
    for attempt in (1, 2):
        async with pool.connection() as conn:
            try:
                if isinstance(sql, HashedGrouping):
                    async with conn.transaction():
                        await conn.execute(GROUPING_WORK_MEM)
                        return await (await conn.execute(translate(sql), tuple(params))).fetchall()
                cursor = await conn.execute(translate(sql), tuple(params), binary=isinstance(sql, BinaryResults))
                return await cursor.fetchall() if cursor.description is not None else []
            except psycopg.OperationalError:
                if attempt == 2 or not conn.broken:
                    raise
    raise AssertionError("unreachable")


class PgReader(Reader):
    dialect = POSTGRESQL
    engine_stats = postgres_stats

    def __init__(self, primary: _Database, replicas: Sequence[_Database], changes: Changes) -> None:
        self._primary = primary
        self._changes = changes
        self.kept = KeptBuilds()
        self._replicas = list(replicas)
        self._turn = itertools.cycle(self._replicas or [primary])
        self._pending: set[asyncio.Task[None]] = set()

    @classmethod
    async def open(
        cls, url: str, read_urls: Sequence[str] = (), queue_length: int = QUEUE_LENGTH, queue_wait: float = QUEUE_WAIT
    ) -> PgReader:
        """Pools on the primary and the replicas; past `queue_length` reads waiting for one database's
        connections, or `queue_wait` seconds waited, a read is refused with DatabaseBusy."""
        pools = [await _pool(url)]
        try:
            for read_url in read_urls:
                pools.append(await _pool(read_url))
        except BaseException:
            for pool in pools:
                await pool.close()
            raise
        primary, *replicas = (_Database(pool, Turns(POOL_SIZE, queue_length, queue_wait)) for pool in pools)
        changes = Changes(url)
        await changes.open()
        return cls(primary, replicas, changes)

    async def close(self) -> None:
        if self._pending:
            await asyncio.wait(self._pending, timeout=5)
        await self._changes.close()
        for database in (self._primary, *self._replicas):
            await database.pool.close()

    async def _rows(self, query: queries.Query) -> list[tuple]:
        return await _fetch(next(self._turn), query)

    async def _key(self, query: queries.Query) -> list[tuple]:
        return await _fetch(self._primary, query)

    async def _export_page(
        self, account_id: int, build_filter: BuildFilter, cursor: Cursor | None, size: int
    ) -> tuple[list[tuple], list[bytes]]:
        """The page's keys and JSON together, in list order, from one walk of the index. Taking the ids first and
        their rows by id after (SQLite's way) looked each build up again in the primary key and sorted the page:
        PostgreSQL worked three times as long for an export (bench/notes.md)."""
        rows = await self._rows(stats_queries.export_keys(account_id, build_filter, cursor, size, bodies=True))
        return [(create_us, build_id) for create_us, build_id, _ in rows], [body for _, _, body in rows]

    async def data_version(self) -> bytes | None:
        return await self._changes.version(TOKENS_CHANNEL)

    async def builds_version(self) -> bytes | None:
        return await self._changes.version(BUILDS_CHANNEL)

    def file_problem(self) -> str | None:
        return None

    async def size_bytes(self) -> int:
        ((size,),) = await self._key(("SELECT pg_database_size(current_database())", []))
        return int(size)
