"""What tells a PostgreSQL server that tokens or builds changed (store/postgres/listener.py): the schema's
triggers and the listening connection, and the token cache and kept builds that rely on them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Env, query, record

from buildreport.http.auth import TokenCache
from buildreport.store import open_reader
from buildreport.store.postgres import listener
from buildreport.store.postgres.connection import BUILDS_CHANNEL, TOKENS_CHANNEL
from buildreport.store.postgres.listener import Changes
from buildreport.tokens import digest as token_digest


@pytest.fixture
def pg_env(pg_url: str, tmp_path: Path) -> Env:
    env = Env(tmp_path, pg_url)
    env.load([record(1)])
    return env


async def _listening(env: Env) -> Changes:
    changes = Changes(str(env.db))
    await changes.open()
    return changes


def _versions_around(
    env: Env, commit: Callable[[], None], channel: str = TOKENS_CHANNEL
) -> tuple[bytes | None, bytes | None]:
    async def run() -> tuple[bytes | None, bytes | None]:
        changes = await _listening(env)
        try:
            before = await changes.version(channel)
            await asyncio.to_thread(commit)
            return before, await changes.version(channel)  # at once: no waiting for the notification
        finally:
            await changes.close()

    return asyncio.run(run())


def test_a_revocation_committed_elsewhere_changes_the_version(pg_env: Env) -> None:
    pg_env.token()
    before, after = _versions_around(pg_env, lambda: query(pg_env.db, "UPDATE tokens SET revoked_us = 1", tokens=True))
    assert before is not None and after is not None and after != before


def test_a_new_token_and_a_new_account_change_the_version(pg_env: Env) -> None:
    before, after = _versions_around(pg_env, lambda: pg_env.token(account="new"))
    assert before is not None and after != before
    before, after = _versions_around(pg_env, lambda: pg_env.load([record(2, account="other")]))
    assert before is not None and after != before


def test_a_tokens_note_of_its_last_use_and_a_build_of_a_known_account_leave_the_version(pg_env: Env) -> None:
    pg_env.token()

    def commits() -> None:
        query(pg_env.db, "UPDATE tokens SET last_used_us = 5", tokens=True)
        pg_env.load([record(3)])

    before, after = _versions_around(pg_env, commits)
    assert before is not None and after == before


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO builds SELECT * FROM builds WHERE false",  # a statement that writes no row still tells
        "UPDATE builds SET body = body",
        "DELETE FROM builds WHERE build_id = -1",
        "TRUNCATE builds CASCADE",
    ],
)
def test_any_write_of_builds_changes_the_builds_version(pg_env: Env, sql: str) -> None:
    before, after = _versions_around(pg_env, lambda: query(pg_env.db, sql), BUILDS_CHANNEL)
    assert before is not None and after is not None and after != before


def test_a_new_build_changes_the_builds_version_and_a_token_leaves_it(pg_env: Env) -> None:
    before, after = _versions_around(pg_env, lambda: pg_env.load([record(2)]), BUILDS_CHANNEL)
    assert before is not None and after != before
    before, after = _versions_around(pg_env, pg_env.token, BUILDS_CHANNEL)
    assert before is not None and after == before


def test_a_table_dropped_or_made_anew_changes_its_channels_version(pg_env: Env) -> None:
    async def run() -> list[bytes | None]:
        changes = await _listening(pg_env)
        try:
            first = await changes.version(BUILDS_CHANNEL)
            tokens = await changes.version(TOKENS_CHANNEL)
            await asyncio.to_thread(query, pg_env.db, "ALTER TABLE builds RENAME TO builds_away")
            dropped = await changes.version(BUILDS_CHANNEL)
            tokens_after = await changes.version(TOKENS_CHANNEL)
            await asyncio.to_thread(query, pg_env.db, "CREATE TABLE builds (LIKE builds_away INCLUDING ALL)")
            return [first, dropped, await changes.version(BUILDS_CHANNEL), tokens, tokens_after]
        finally:
            await changes.close()

    first, dropped, remade, tokens, tokens_after = asyncio.run(run())
    assert first is not None and dropped is None  # DDL notifies nothing; the table's identity tells
    assert remade is not None and remade != first
    assert tokens is not None and tokens_after == tokens


def test_without_its_connection_nothing_is_trusted_and_a_new_one_is_opened(
    pg_env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listener, "RETRY_SECONDS", 0.0)

    async def run() -> list[bytes | None]:
        changes = await _listening(pg_env)
        try:
            first = await changes.version(TOKENS_CHANNEL)
            pid = changes._conn.info.backend_pid  # type: ignore[union-attr]
            await asyncio.to_thread(query, pg_env.db, "SELECT pg_terminate_backend(?)", (pid,))
            lost = await changes.version(TOKENS_CHANNEL)
            for _ in range(100):  # a new connection is opened in the background
                await asyncio.sleep(0.01)
                if (again := await changes.version(TOKENS_CHANNEL)) is not None:
                    break
            return [first, lost, again]
        finally:
            await changes.close()

    first, lost, again = asyncio.run(run())
    assert first is not None and lost is None
    assert again is not None and again != first


def test_callers_that_ask_together_share_round_trips(pg_env: Env) -> None:
    async def run() -> tuple[set[bytes | None], int]:
        changes = await _listening(pg_env)
        try:
            versions = await asyncio.gather(*(changes.version(TOKENS_CHANNEL) for _ in range(50)))
            return set(versions), changes._begun
        finally:
            await changes.close()

    versions, round_trips = asyncio.run(run())
    assert len(versions) == 1 and None not in versions
    assert round_trips == 2  # the first caller's, then one for the 49 that asked while it was under way


def test_a_round_trip_that_hangs_leaves_nothing_trusted(pg_env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listener, "ROUND_TRIP_SECONDS", 0.2)

    async def never(*_args: object) -> None:  # a peer that stopped answering without closing
        await asyncio.sleep(3600)

    async def run() -> list[bytes | None]:
        changes = await _listening(pg_env)
        try:
            first = await changes.version(TOKENS_CHANNEL)
            changes._conn.execute = never  # type: ignore[union-attr, method-assign]
            return [first, await changes.version(TOKENS_CHANNEL)]
        finally:
            await changes.close()

    first, silent = asyncio.run(run())
    assert first is not None and silent is None


def test_an_unreachable_database_leaves_nothing_trusted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listener, "KEEPALIVES", {**listener.KEEPALIVES, "connect_timeout": 1})

    async def run() -> bytes | None:
        changes = Changes("postgresql://postgres@127.0.0.1:1/none")
        await changes.open()
        try:
            return await changes.version(TOKENS_CHANNEL)
        finally:
            await changes.close()

    assert asyncio.run(run()) is None


def _counting(reader: Any) -> list[object]:
    asked: list[object] = []
    key = reader._key

    async def counted(q: Any) -> list[tuple]:
        asked.append(q)
        return await key(q)

    reader._key = counted
    return asked


def test_the_token_cache_keeps_a_token_and_sees_its_revocation_once_notified(pg_env: Env) -> None:
    digest = token_digest(pg_env.token())

    async def run() -> list[Any]:
        reader = await open_reader(pg_env.db)
        cache = TokenCache()
        asked = _counting(reader)
        try:
            first = await cache.lookup(reader, digest)
            again = await cache.lookup(reader, digest)
            reads = len(asked)
            await asyncio.to_thread(query, pg_env.db, "UPDATE tokens SET revoked_us = 7", tokens=True)
            revoked = await cache.lookup(reader, digest)  # the very next lookup, without waiting
            return [first, again, reads, revoked]
        finally:
            await reader.close()

    first, again, reads, revoked = asyncio.run(run())
    assert first is not None and again == first and reads == 1
    assert revoked is not None and revoked.revoked_us == 7


def test_a_kept_build_is_read_once_and_a_write_elsewhere_is_seen_by_the_next_read(pg_env: Env) -> None:
    async def run() -> list[Any]:
        reader = await open_reader(pg_env.db)
        asked = _counting(reader)
        try:
            first = await reader.build(1, 1)
            again = await reader.build(1, 1)
            reads = len(asked)
            body = ('{"changed":1}',)
            await asyncio.to_thread(query, pg_env.db, "UPDATE builds SET body = convert_to(?, 'UTF8')", body)
            changed = await reader.build(1, 1)  # the very next read, without waiting
            return [first, again, reads, changed, len(asked)]
        finally:
            await reader.close()

    first, again, reads, changed, all_reads = asyncio.run(run())
    assert first is not None and again == first and reads == 1
    assert json.loads(changed) == {"changed": 1} and all_reads == 2


def test_without_its_connection_no_build_is_kept(pg_env: Env) -> None:
    async def run() -> list[Any]:
        reader = await open_reader(pg_env.db)
        asked = _counting(reader)
        try:
            await reader._changes.close()  # nothing listens now
            first = await reader.build(1, 1)
            again = await reader.build(1, 1)
            return [first, again, len(asked)]
        finally:
            await reader.close()

    first, again, reads = asyncio.run(run())
    assert first is not None and again == first and reads == 2
