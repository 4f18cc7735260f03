"""The reader: builds kept until the next commit; lookups by key in the event loop's thread, other queries off it."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import threading
from datetime import timedelta
from typing import Any

import msgspec
import pytest
from conftest import Env, auth, record
from records import NOW

from buildreport import filters
from buildreport.http.auth import TokenCache
from buildreport.store import open_reader
from buildreport.store.reader import KeptBuilds
from buildreport.times import to_us
from buildreport.tokens import digest as token_digest


def test_kept_builds_need_the_version_they_were_read_at() -> None:
    kept = KeptBuilds()
    kept.put(None, (1, 1), b"{}")
    assert kept.get(None, (1, 1)) is None  # an engine that cannot tell a version keeps nothing
    kept.put(b"v1", (1, 1), b'{"a":1}')
    assert kept.get(b"v1", (1, 1)) == b'{"a":1}'
    assert kept.get(b"v1", (2, 1)) is None  # another account's key
    assert kept.get(b"v2", (1, 1)) is None
    kept.put(b"v2", (1, 2), b'{"b":2}')
    assert kept.get(b"v1", (1, 1)) is None  # a new version drops everything read before it
    assert kept.get(b"v2", (1, 2)) == b'{"b":2}'


def test_kept_builds_stay_within_their_bytes_dropping_the_least_recently_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(KeptBuilds, "MAX_BYTES", 30)
    monkeypatch.setattr(KeptBuilds, "MAX_BODY", 12)
    kept = KeptBuilds()
    for build_id in range(1, 4):
        kept.put(b"v", (1, build_id), b"x" * 10)
    assert kept.get(b"v", (1, 1)) == b"x" * 10  # now the most recently used
    kept.put(b"v", (1, 4), b"y" * 10)
    assert kept.get(b"v", (1, 2)) is None
    assert [kept.get(b"v", (1, i)) is not None for i in (1, 3, 4)] == [True, True, True]
    kept.put(b"v", (1, 5), b"z" * 13)  # larger than a body is kept
    assert kept.get(b"v", (1, 5)) is None
    kept.put(b"v", (1, 3), b"w" * 12)  # a body read again replaces the one kept, in the count too
    assert kept.get(b"v", (1, 3)) == b"w" * 12
    assert kept.get(b"v", (1, 4)) is not None and kept.get(b"v", (1, 1)) is None


def _counted(reader: Any, method: str) -> list[object]:
    """The queries the reader's `method` (_key, _rows) is asked from now on, in order."""
    queries: list[object] = []
    run = getattr(reader, method)

    async def counted(query: Any) -> list[tuple]:
        queries.append(query)
        return await run(query)

    setattr(reader, method, counted)
    return queries


def _reading(env: Env, steps: Any) -> list[Any]:
    """Run `steps(reader, queries)` on a reader of env's database; `queries` counts the lookups by key it ran."""

    async def run() -> list[Any]:
        reader = await open_reader(env.db)
        queries = _counted(reader, "_key")
        try:
            return await steps(reader, queries)
        finally:
            await reader.close()

    return asyncio.run(run())


@pytest.mark.sqlite_only
def test_a_build_read_again_costs_no_query_until_something_is_committed(env: Env) -> None:
    env.load([record(1, cpu_seconds=5), record(2, account="globex")])

    async def steps(reader: Any, queries: list[object]) -> list[Any]:
        first = await reader.build(1, 1)
        again = await reader.build(1, 1)
        other = await reader.build(2, 1)  # the same build id asked for by another account
        counted = len(queries)
        env.load([record(1, cpu_seconds=7)])  # another connection rewrites the build
        await asyncio.sleep(0)  # the next request is served in a later turn of the event loop
        changed = await reader.build(1, 1)
        return [first, again, other, counted, changed, len(queries)]

    first, again, other, counted, changed, total = _reading(env, steps)
    assert first == again and json.loads(first)["cpu_seconds"] == 5
    assert other is None
    assert counted == 2  # the first read and the other account's; the second read was kept
    assert json.loads(changed)["cpu_seconds"] == 7
    assert total == 3


@pytest.mark.sqlite_only
def test_the_data_versions_are_read_once_per_turn_of_the_event_loop(env: Env) -> None:
    env.load([record(1, cpu_seconds=5)])

    async def steps(reader: Any, _queries: list[object]) -> list[Any]:
        before = await reader.data_version()
        env.load([record(1, cpu_seconds=7)])  # another connection commits during this turn
        same_turn = await reader.data_version()  # every request of this turn arrived before that commit
        await asyncio.sleep(0)
        return [before, same_turn, await reader.data_version()]

    before, same_turn, next_turn = _reading(env, steps)
    assert None not in (before, next_turn)
    assert same_turn == before
    assert next_turn != before


def test_an_answer_follows_each_write_at_once(env: Env) -> None:
    env.load([record(1, cpu_seconds=5)])
    read = auth(env.token())
    write = auth(env.token(scopes=("build:write",)))
    with env.client() as client:
        for cpu in (6, 7, 8):
            assert client.get("/builds/1", headers=read).status_code == 200
            sent = record(1, cpu_seconds=cpu)
            sent.pop("account")
            response = client.post("/builds", headers={**write, "Content-Type": "application/json"}, json=[sent])
            assert response.status_code in (200, 201), response.text
            assert client.get("/builds/1", headers=read).json()["cpu_seconds"] == cpu
            assert client.get("/builds/1/url", headers=read).status_code == 200


def _short_answers(env: Env, rounds: int = 1) -> tuple[list[Any], list[int]]:
    """A page, a summary by tag, usage, a breakdown by day and a lookup, read `rounds` times by one reader: the
    last round's answers, and how many queries each round handed to aiosqlite's thread."""

    async def run() -> tuple[list[Any], list[int]]:
        reader = await open_reader(env.db)
        handed = _counted(reader, "_rows")
        now = to_us(NOW)
        usage_query = filters.parse_usage_query([("from", "2000-01-01"), ("to", "2100-01-01")], now)
        per_round, answers = [], []
        try:
            for _ in range(rounds):
                handed.clear()
                page = await reader.list_builds(1, filters.parse_list_query([("limit", "50")], now))
                summary = await reader.summary(1, filters.parse_summary_query([("tags", "project:web")], now), now)
                usage = await reader.usage(1, usage_query)
                by_day = await reader.usage_rows(1, usage_query, filters.GroupBy("day"))
                after = await reader.build(1, 7)  # a lookup by key after them, never limited
                answers = [page.body, page.next_cursor, summary, usage, by_day, after, await reader.ping()]
                per_round.append(len(handed))
            return answers, per_round
        finally:
            await reader.close()

    return asyncio.run(run())


def _many_builds(env: Env) -> None:
    env.load([record(i, create_time=NOW - timedelta(minutes=i), cpu_seconds=i,
                     tags={"project": "web" if i % 3 else "api"}) for i in range(1, 401)])


RANGE_QUERIES = 5  # a round of _short_answers: the page, the summary, usage, the breakdown and the ping


@pytest.mark.sqlite_only
def test_lookups_by_key_run_in_the_event_loops_thread_and_every_other_query_in_aiosqlites(env: Env) -> None:
    _many_builds(env)
    answers, handed = _short_answers(env, rounds=2)
    assert handed == [RANGE_QUERIES, RANGE_QUERIES]
    page, cursor, summary, usage, _by_day, after, alive = answers
    assert len(json.loads(page)) == 50 and cursor is not None
    assert summary.build_count == sum(1 for i in range(1, 401) if i % 3)
    assert usage.billable_cpu_seconds == sum(range(1, 401))
    assert json.loads(after)["build_id"] == 7 and alive

    async def lookup_thread() -> tuple[int, int]:
        reader = await open_reader(env.db)
        threads: list[int] = []
        run = reader._local.execute

        def execute(*args: Any) -> Any:
            threads.append(threading.get_ident())
            return run(*args)

        reader._local = _Recorded(reader._local, execute)
        try:
            await reader.build(1, 7)
            return threads[-1], threading.get_ident()
        finally:
            reader._local = reader._local.conn
            await reader.close()

    looked_up_in, loop_thread = asyncio.run(lookup_thread())
    assert looked_up_in == loop_thread


class _Recorded:
    """A sqlite3 connection whose `execute` is replaced (sqlite3's own attributes cannot be set)."""

    def __init__(self, conn: sqlite3.Connection, execute: Any) -> None:
        self.conn, self.execute = conn, execute

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


def test_a_page_keeps_list_order_among_builds_created_at_the_same_time(env: Env) -> None:
    """Builds with equal create times come newest id first, on every page, whatever order they were written in."""
    same = NOW - timedelta(hours=1)
    env.load([record(i, create_time=same) for i in (5, 1, 9, 3, 7, 2, 8, 4, 6, 10, 12, 11)])

    async def run() -> list[list[int]]:
        reader = await open_reader(env.db)
        now = to_us(NOW)
        pages: list[list[int]] = []
        try:
            query = filters.parse_list_query([("limit", "5")], now)
            while True:
                page = await reader.list_builds(1, query)
                pages.append([build["build_id"] for build in json.loads(page.body)])
                if page.next_cursor is None:
                    return pages
                query = msgspec.structs.replace(query, cursor=page.next_cursor)
        finally:
            await reader.close()

    assert asyncio.run(run()) == [[12, 11, 10, 9, 8], [7, 6, 5, 4, 3], [2, 1]]


def _commit_elsewhere(db: Any, sql: str, params: tuple, *, tokens: bool) -> None:
    """Run one statement, committed, in another process."""
    script = (
        "import sys\n"
        "from buildreport.store import open_auth, open_database\n"
        "conn = (open_auth if sys.argv[2] == 'tokens' else open_database)(sys.argv[1])\n"
        "with conn:\n"
        "    conn.execute(sys.argv[3], tuple(sys.argv[4:]))\n"
        "conn.close()\n"
    )
    argv = [sys.executable, "-c", script, str(db), "tokens" if tokens else "builds", sql, *map(str, params)]
    subprocess.run(argv, check=True, capture_output=True)


@pytest.mark.sqlite_only
def test_a_commit_by_another_process_is_seen_by_the_token_cache_and_the_next_read(env: Env) -> None:
    env.load([record(1, cpu_seconds=5)])
    secret = env.token()
    digest = token_digest(secret)

    async def run() -> list[Any]:
        reader = await open_reader(env.db)
        cache = TokenCache()
        try:
            first = await cache.lookup(reader, digest)
            body = await reader.build(1, 1)
            versions = [await reader.data_version(), await reader.builds_version()]
            _commit_elsewhere(env.db, "UPDATE tokens SET revoked_us = ?", (1,), tokens=True)
            await asyncio.sleep(0)  # a request sent after the commit is served in a later turn of the event loop
            revoked = await cache.lookup(reader, digest)
            unchanged = await reader.builds_version()
            _commit_elsewhere(env.db, "UPDATE builds SET body = CAST(? AS BLOB)", ('{"changed":1}',), tokens=False)
            await asyncio.sleep(0)
            changed = await reader.build(1, 1)
            return [first, body, versions, revoked, unchanged, changed, await reader.data_version()]
        finally:
            await reader.close()

    first, body, (data_before, builds_before), revoked, unchanged, changed, data_after = asyncio.run(run())
    assert first is not None and first.revoked_us is None
    assert json.loads(body)["cpu_seconds"] == 5
    assert revoked is not None and revoked.revoked_us == 1  # not the row cached before the other process's commit
    assert unchanged == builds_before  # a commit to the tokens alone keeps the builds read
    assert json.loads(changed) == {"changed": 1}
    assert None not in (data_before, data_after) and data_after != data_before
