"""The reader: builds kept until the next commit; short range queries in the event loop's thread, within a budget."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import Env, auth, record
from records import NOW

from buildreport import filters
from buildreport.store import open_reader
from buildreport.store.reader import KeptBuilds
from buildreport.store.sqlite import reader as sqlite_reader
from buildreport.store.sqlite.schema import auth_path
from buildreport.times import to_us


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
        changed = await reader.build(1, 1)
        return [first, again, other, counted, changed, len(queries)]

    first, again, other, counted, changed, total = _reading(env, steps)
    assert first == again and json.loads(first)["cpu_seconds"] == 5
    assert other is None
    assert counted == 2  # the first read and the other account's; the second read was kept
    assert json.loads(changed)["cpu_seconds"] == 7
    assert total == 3


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


SHORT_QUERIES = 6  # a round of _short_answers: the page, its end, the summary, usage, the breakdown and the ping


@pytest.mark.sqlite_only
def test_short_queries_run_in_the_event_loops_thread(env: Env) -> None:
    _many_builds(env)
    answers, handed = _short_answers(env, rounds=2)
    assert handed == [0, 0]
    page, cursor, summary, usage, _by_day, after, alive = answers
    assert len(json.loads(page)) == 50 and cursor is not None
    assert summary.build_count == sum(1 for i in range(1, 401) if i % 3)
    assert usage.billable_cpu_seconds == sum(range(1, 401))
    assert json.loads(after)["build_id"] == 7 and alive


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    ("settings", "handed_per_round"),
    [
        # Every run is over the budget: each statement runs in the event loop's thread, then twice in aiosqlite's,
        # then in the event loop's again.
        ({"SHORT_QUERY_BUDGET_S": -1.0, "LONG_QUERY_RUNS": 2}, [0, SHORT_QUERIES, SHORT_QUERIES, 0]),
        # No time at all, and the clock looked at every instruction: each statement is interrupted at once, run
        # again in aiosqlite's thread and remembered as long.
        ({"SHORT_QUERY_LIMIT_S": 0.0, "_LIMIT_CHECK_STEPS": 1}, [SHORT_QUERIES, SHORT_QUERIES]),
    ],
    ids=["over its budget", "past its limit"],
)
def test_a_long_query_runs_in_aiosqlites_thread_with_the_same_answers(
    env: Env, monkeypatch: pytest.MonkeyPatch, settings: dict[str, float], handed_per_round: list[int]
) -> None:
    _many_builds(env)
    within, _ = _short_answers(env)
    for name, value in settings.items():
        monkeypatch.setattr(sqlite_reader, name, value)
    answers, handed = _short_answers(env, rounds=len(handed_per_round))
    assert handed == handed_per_round
    assert answers == within


@pytest.mark.sqlite_only
def test_a_short_query_that_fails_is_an_error_not_run_again(env: Env) -> None:
    env.load([record(1)])

    async def run() -> None:
        reader = await open_reader(env.db)
        handed = _counted(reader, "_rows")
        try:
            with pytest.raises(sqlite3.OperationalError, match="no such column"):
                await reader._short(("SELECT no_such_column FROM builds", []))
            assert await reader._short(("SELECT count(*) FROM builds", [])) == [(1,)]
            assert handed == []
        finally:
            await reader.close()

    asyncio.run(run())


# Who holds a lock on byte `offset` of a file, asked from another process (a process never conflicts with its own
# locks): "unlocked", or the kind of lock and the process id.
_LOCK_HOLDER = """
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDWR)
kind, _, _, _, pid = struct.unpack("hhqqi", fcntl.fcntl(
    fd, fcntl.F_GETLK, struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, int(sys.argv[2]), 1, 0)))
print("unlocked" if kind == fcntl.F_UNLCK else f"{'read' if kind == fcntl.F_RDLCK else 'write'} {pid}")
"""
# SQLite's "dead man switch" byte of a -shm file (os_unix.c: UNIX_SHM_DMS): every process that has the file open
# through SQLite holds a read lock on it; a process that finds it unlocked truncates the file and rebuilds it.
_SHM_DMS_BYTE = 128


@pytest.mark.sqlite_only
def test_reading_the_wal_index_keeps_sqlites_hold_on_the_shm_files(env: Env) -> None:
    """The reader maps each -shm file to tell commits apart; doing so must never drop SQLite's locks on it, or the
    next process to open the database (a write process, a command) rebuilds the file under the server's map."""
    env.load([record(1)])
    env.token()

    def holders() -> list[str]:
        shm_files = [Path(f"{path}-shm") for path in (env.db, auth_path(env.db))]
        return [subprocess.run([sys.executable, "-c", _LOCK_HOLDER, str(shm), str(_SHM_DMS_BYTE)], capture_output=True,
                               text=True, check=True).stdout.strip() if shm.exists() else "gone" for shm in shm_files]

    async def run() -> list[Any]:
        reader = await open_reader(env.db)
        try:
            before = reader.data_version()
            held = holders()
            env.load([record(2)])  # another process commits
            return [before, held, reader.data_version()]
        finally:
            await reader.close()

    before, held, after = asyncio.run(run())
    assert before is not None and after is not None and after != before
    assert held == [f"read {os.getpid()}"] * 2
    assert set(holders()) <= {"unlocked", "gone"}  # a closed reader holds nothing (SQLite removes what it can)
