"""Read access for the server: the queries that serve requests, the same for both engines.

Every query belongs to one of two classes, fixed here and nowhere else:
- `_key`: a lookup by key (a primary key or a unique index: a token, one build, an account, a feed's next
  events), a few rows whatever the data's size, as of the latest commit;
- `_rows`: every other query (pages, summaries, usage, statistics, exports, logs), whose work may grow with
  the data.
An engine's reader (store/sqlite/reader.py, store/postgres/reader.py) says where each class runs, and what
the engine can tell about itself (whether data changed, how large it is).
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from buildreport.filters import BadgeSeries, BuildFilter, Cursor, GroupBy, ListQuery, UsageQuery
from buildreport.models import BuildSummary, Usage
from buildreport.store import badges, event_reads, queries, stats_queries, tag_totals, trust
from buildreport.store.dialect import Dialect
from buildreport.store.errors import DatabaseUnavailable
from buildreport.times import US_PER_SECOND

if TYPE_CHECKING:
    from buildreport.store.writer import Writes
    from buildreport.store.writer_jobs import Job

log = logging.getLogger("buildreport.store")

# Builds an export reads at a time.
EXPORT_PAGE = 5_000
# Derivation paths one lookup of newest builds names at most (SQLite takes 32,766 parameters a statement).
NEWEST_CHUNK = 5_000


class TokenRow(msgspec.Struct, frozen=True):
    token_id: str
    account_id: int
    account: str
    scopes: frozenset[str]
    expires_us: int
    revoked_us: int | None
    last_used_us: int | None
    claims: str | None = None  # the verified OIDC claims (JSON) of a token got by exchanging an ID token


class BuildPage(msgspec.Struct):
    """A JSON array of builds in list order, a digest that changes whenever it does, and, when more
    builds match, where the next page starts."""

    body: bytes
    digest: bytes
    next_cursor: Cursor | None


def _abandon(task: asyncio.Future[Any]) -> None:
    """Stop a read nobody will take (the client left); if it already failed, its error is taken here so that it
    is not reported as never retrieved."""
    if not task.done():
        task.cancel()
    elif not task.cancelled():
        task.exception()


class KeptBuilds:
    """The JSON of builds read lately, by (account id, build id), trusted only while the builds have not changed
    since they were read: a client following a build asks for it again and again, and a hit costs no query."""

    MAX_BYTES = 4 * 1024 * 1024
    MAX_BODY = 64 * 1024

    def __init__(self) -> None:
        self._version: bytes | None = None
        self._bodies: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self._bytes = 0

    def get(self, version: bytes | None, key: tuple[int, int]) -> bytes | None:
        if version is None or version != self._version:
            return None
        body = self._bodies.get(key)
        if body is not None:
            self._bodies.move_to_end(key)
        return body

    def put(self, version: bytes | None, key: tuple[int, int], body: bytes) -> None:
        """Keep `body`, read as of `version` (taken before the query, so a commit in between discards it)."""
        if version is None or len(body) > self.MAX_BODY:
            return
        if version != self._version:
            self._bodies.clear()
            self._version, self._bytes = version, 0
        old = self._bodies.pop(key, None)
        self._bytes += len(body) - (len(old) if old is not None else 0)
        self._bodies[key] = body
        while self._bytes > self.MAX_BYTES:
            _, dropped = self._bodies.popitem(last=False)
            self._bytes -= len(dropped)


class Reader(abc.ABC):
    """The queries that serve requests, on the connections of one engine."""

    dialect: Dialect
    # The queries that differ between the engines: stats_parts and newest_of_paths.
    engine_stats: Any = stats_queries
    kept: KeptBuilds  # set by each engine; trusted while builds_version() is unchanged
    _pending: set[asyncio.Task[None]]  # token writes under way, waited for on close (set by each engine)
    _writes: Writes | None = None

    def write_tokens_with(self, writes: Writes) -> None:
        """Token writes (last use, issued tokens) go to the server's one writer (store/writer.py)."""
        self._writes = writes

    async def _write_token(self, job: Job) -> None:
        if self._writes is None:
            raise DatabaseUnavailable("tokens cannot be written: this reader has no writer")
        await self._writes.run(job)

    def touch_token(self, token_id: str, now_us: int) -> None:
        """Record a token's last use in the background, by the server's writer: no request waits for it."""
        from buildreport.store.writer_jobs import TouchToken  # it names this package's modules: not at its start

        task = asyncio.create_task(self._write_token(TouchToken(token_id, now_us)))
        self._pending.add(task)
        task.add_done_callback(self._touched)

    def _touched(self, task: asyncio.Task[None]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("could not record a token's last use: %s", task.exception())

    @abc.abstractmethod
    async def _rows(self, query: queries.Query) -> list[tuple]:
        """Rows of any query that is not a lookup by key: off the event loop's thread, since its work may grow
        with the data (may be served by a replica)."""

    async def _rows_together(self, parts: Sequence[queries.Query]) -> list[list[tuple]]:
        """Rows of range queries run at the same time where the engine can (see stats_queries.stats_parts)."""
        return list(await asyncio.gather(*(self._rows(part) for part in parts)))

    @abc.abstractmethod
    async def _key(self, query: queries.Query) -> list[tuple]:
        """Rows of a lookup by key (a primary key or a unique index, a few rows at most), as of the latest commit:
        an engine may run it in the event loop's own thread, where it costs less than a hand-off."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def data_version(self) -> bytes | None:
        """A value that differs after any commit made before this call that may change a token or the account it
        names (an engine may change it more often); None when the engine cannot tell it cheaply."""

    @abc.abstractmethod
    async def builds_version(self) -> bytes | None:
        """A value that differs after any commit made before this call that may change a build; None when it
        cannot be told (then no build is kept)."""

    @abc.abstractmethod
    def file_problem(self) -> str | None:
        """What is wrong with the storage under a running server (a file deleted or replaced), if anything."""

    @abc.abstractmethod
    async def size_bytes(self) -> int:
        """The size of the stored data, for /metrics."""

    async def ping(self) -> bool:
        return bool(await self._rows(("SELECT count(*) FROM (SELECT 1 FROM accounts LIMIT 1) AS one", [])))

    async def token(self, digest: bytes) -> TokenRow | None:
        rows = await self._key(queries.token_by_digest(digest))
        if not rows:
            return None
        token_id, account_id, account, scopes, expires_us, revoked_us, last_used_us, claims = rows[0]
        return TokenRow(
            token_id, account_id, account, frozenset(scopes.split()), expires_us, revoked_us, last_used_us, claims
        )

    async def trust_policies(self, issuer: str) -> list[tuple]:
        """(policy id, account, claim patterns as JSON, scopes, lifetime in seconds) of the issuer's policies."""
        return await self._key(trust.policies_of(issuer))

    async def newest_finished(self, account_id: int, series: BadgeSeries) -> tuple[str, int | None] | None:
        """(status, duration in µs) of the series' newest finished build, or None when it has none."""
        rows = await self._key(badges.newest_finished(account_id, series, self.dialect))
        return (rows[0][0], rows[0][1]) if rows else None

    async def add_token(self, token: trust.NewToken) -> None:
        """Store a token the server issued (an exchange), committed before it is handed out."""
        from buildreport.store.writer_jobs import IssueToken

        await self._write_token(IssueToken(token))

    async def token_life(self, token_id: str) -> tuple[int, int | None] | None:
        """(expires_us, revoked_us) of the token `token_id`, as of the latest commit; None when it is not known."""
        rows = await self._key(queries.token_by_id(token_id))
        return (rows[0][0], rows[0][1]) if rows else None

    async def list_builds(self, account_id: int, query: ListQuery) -> BuildPage:
        rows = await self._rows(queries.list_builds(account_id, query))
        if not rows:
            return BuildPage(body=b"[]", digest=b"", next_cursor=None)
        next_cursor = None
        if len(rows) > query.limit:  # more match: the next page starts after this page's last build
            del rows[query.limit :]
            next_cursor = Cursor(create_us=rows[-1][2], build_id=rows[-1][3])
        digest = ",".join(str(row[1]) for row in rows).encode()
        return BuildPage(body=page_json(rows), digest=digest, next_cursor=next_cursor)

    async def build(self, account_id: int, build_id: int) -> bytes | None:
        version, key = await self.builds_version(), (account_id, build_id)
        body = self.kept.get(version, key) if version is not None else None
        if body is None:
            rows = await self._key(queries.get_build(account_id, build_id))
            if not rows:
                return None
            body = rows[0][0]
            if version is not None:
                self.kept.put(version, key, body)
        return body

    async def summary(self, account_id: int, build_filter: BuildFilter, now_us: int) -> BuildSummary:
        promoted = False
        if build_filter.tags:
            (sizes,) = await self._key(tag_totals.pair_sizes(account_id, build_filter))
            build_filter, promoted = tag_totals.ranked(build_filter, list(sizes))
        rows = await self._rows(queries.summary(account_id, build_filter, promoted))
        return summary_from_row(merge_summary_rows(rows), now_us)

    async def usage(self, account_id: int, query: UsageQuery) -> Usage:
        (row,) = await self._rows(queries.usage(account_id, query))
        return Usage(billable_cpu_seconds=row[0], billable_build_count=row[1])

    async def events(self, account_id: int, after: int, types: Sequence[str], limit: int) -> list[tuple]:
        """(position, build id, stored JSON) of an account's events after `after`, oldest first, as of the latest
        commit."""
        return await self._key(event_reads.feed(account_id, after, types, limit))

    async def account_id(self, name: str) -> int:
        """An account's id, 0 for one that has none yet."""
        rows = await self._key(("SELECT account_id FROM accounts WHERE name = ?", [name]))
        return int(rows[0][0]) if rows else 0

    async def recent_events(self, account_id: int, types: Sequence[str], limit: int) -> list[tuple]:
        return await self._key(event_reads.recent_events(account_id, types, limit))

    async def log(self, account_id: int, build_id: int) -> tuple[int, bytes] | None:
        rows = await self._rows(queries.get_log(account_id, build_id))
        return (rows[0][0], rows[0][1]) if rows else None

    # --- insights (statistics, usage by group, export) -------------------------------------------

    async def stats_rows(
        self, account_id: int, build_filter: BuildFilter, group_by: GroupBy, queue_times: bool = True
    ) -> list[tuple]:
        parts = self.engine_stats.stats_parts(account_id, build_filter, group_by, queue_times)
        return [row for rows in await self._rows_together(parts) for row in rows]

    async def newest_of_paths(
        self, account_id: int, build_filter: BuildFilter, paths: Sequence[str], failed_paths: Sequence[str]
    ) -> tuple[dict[str, str], dict[str, str]]:
        """The newest matching build of each of `paths` and the newest failed one of each of `failed_paths`, as
        `create_us build_id status` text (see stats_queries.py); a path without such builds is left out. The
        lookups run at once, NEWEST_CHUNK paths each."""
        parts, failed_parts = [], []
        for chosen, failed in ((paths, False), (failed_paths, True)):
            for start in range(0, len(chosen), NEWEST_CHUNK):
                piece = chosen[start : start + NEWEST_CHUNK]
                parts.append(self.engine_stats.newest_of_paths(account_id, build_filter, piece, failed))
                failed_parts.append(failed)
        marks: tuple[dict[str, str], dict[str, str]] = ({}, {})
        for failed, rows in zip(failed_parts, await self._rows_together(parts), strict=True):
            marks[int(failed)].update((path, mark) for path, mark in rows if mark is not None)
        return marks

    async def usage_rows(self, account_id: int, query: UsageQuery, group_by: GroupBy) -> list[tuple]:
        """Usage rows for a breakdown, summed in SQL: (day, CPU seconds, builds), or the same by system or tag value."""
        if group_by.kind == "day":
            return await self._rows(stats_queries.usage_by_day(account_id, query))
        if group_by.kind == "system":
            return await self._rows(stats_queries.usage_by_system(account_id, query))
        return await self._rows(stats_queries.usage_by_tag(account_id, query, group_by.tag_key or ""))

    async def export_pages(
        self, account_id: int, build_filter: BuildFilter, size: int = EXPORT_PAGE
    ) -> AsyncIterator[list[bytes]]:
        """Every matching build's JSON in list order, `size` at a time; other requests are served between pages.

        The next page is read while the caller sends the one before it: on a file the kernel no longer caches,
        reading is mostly waiting on the disk, which then overlaps the sending. At most two pages are held,
        whatever the number of builds."""
        pending = asyncio.ensure_future(self._export_page(account_id, build_filter, None, size))
        try:
            while True:
                keys, bodies = await pending
                full = len(keys) == size
                if full:
                    cursor = Cursor(create_us=keys[-1][0], build_id=keys[-1][1])
                    pending = asyncio.ensure_future(self._export_page(account_id, build_filter, cursor, size))
                if bodies:
                    yield bodies
                if not full:
                    return
        finally:
            _abandon(pending)

    @abc.abstractmethod
    async def _export_page(
        self, account_id: int, build_filter: BuildFilter, cursor: Cursor | None, size: int
    ) -> tuple[list[tuple], list[bytes]]:
        """One page of an export: its keys (create time, build id) in list order and its builds' JSON in the same
        order. The engines read a page differently (see each engine's reader)."""

    async def account_figures(self, since_us: int) -> tuple[list[tuple], list[tuple]]:
        """For /metrics: per account and status the builds and CPU seconds since `since_us` (whole hours),
        and per account the builds stored."""
        recent = await self._rows(stats_queries.account_totals_since(since_us))
        stored = await self._rows(stats_queries.account_build_counts())
        return recent, stored



def page_json(rows: list[tuple]) -> bytes:
    """The JSON array of a page from its rows (stored JSON first, at least one row), in the rows' order.

    The brackets go onto the first and last build so that the page is copied once: each further copy of a
    full page (450 KB) costs fresh memory pages (bench/store.md)."""
    parts = [bytes(row[0]) for row in rows]
    parts[0] = b"[" + parts[0]
    parts[-1] += b"]"
    return b",".join(parts)


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
