"""What tells a PostgreSQL server that tokens changed (store/postgres/listener.py): the schema's triggers and
the listening connection, and the token cache that relies on them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Env, query, record

from buildreport.http.auth import TokenCache
from buildreport.store import open_reader
from buildreport.store.postgres import listener
from buildreport.store.postgres.listener import TRUST_SECONDS, TokenChanges
from buildreport.tokens import digest as token_digest


@pytest.fixture
def pg_env(pg_url: str, tmp_path: Path) -> Env:
    env = Env(tmp_path, pg_url)
    env.load([record(1)])
    return env


async def _listening(env: Env) -> TokenChanges:
    changes = TokenChanges(str(env.db))
    await changes.open()
    return changes


async def _heard(changes: TokenChanges, before: bytes | None) -> bytes | None:
    """The version once it differs from `before`, or after a second: a notification travels as the commit
    returns, but the committer here is another connection."""
    for _ in range(100):
        version = changes.version()
        if version != before:
            return version
        await asyncio.sleep(0.01)
    return changes.version()


def _versions_around(env: Env, commit: Callable[[], None]) -> tuple[bytes | None, bytes | None]:
    async def run() -> tuple[bytes | None, bytes | None]:
        changes = await _listening(env)
        try:
            before = changes.version()
            await asyncio.to_thread(commit)
            return before, await _heard(changes, before)
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

    # The version also moves when a trust period ends (TRUST_SECONDS): measured again if one ended meanwhile.
    for _ in range(3):
        period = time.monotonic() // TRUST_SECONDS
        before, after = _versions_around(pg_env, commits)
        if time.monotonic() // TRUST_SECONDS == period:
            break
    assert before is not None and after == before


def test_without_its_connection_nothing_is_trusted_and_a_new_one_is_opened(
    pg_env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listener, "RETRY_SECONDS", 0.0)

    async def run() -> list[bytes | None]:
        changes = await _listening(pg_env)
        try:
            first = changes.version()
            pid = changes._conn.info.backend_pid  # type: ignore[union-attr]
            await asyncio.to_thread(query, pg_env.db, "SELECT pg_terminate_backend(?)", (pid,))
            lost = await _heard(changes, first)
            for _ in range(100):  # a new connection is opened in the background
                await asyncio.sleep(0.01)
                if (again := changes.version()) is not None:
                    break
            return [first, lost, again]
        finally:
            await changes.close()

    first, lost, again = asyncio.run(run())
    assert first is not None and lost is None
    assert again is not None and again != first


def test_no_version_outlasts_its_period(pg_env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listener, "TRUST_SECONDS", 0.05)

    async def run() -> tuple[bytes | None, bytes | None]:
        changes = await _listening(pg_env)
        try:
            first = changes.version()
            await asyncio.sleep(0.1)
            return first, changes.version()
        finally:
            await changes.close()

    first, later = asyncio.run(run())
    assert first is not None and later is not None and later != first


def test_an_unreachable_database_leaves_nothing_trusted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listener, "KEEPALIVES", {**listener.KEEPALIVES, "connect_timeout": 1})

    async def run() -> bytes | None:
        changes = TokenChanges("postgresql://postgres@127.0.0.1:1/none")
        await changes.open()
        try:
            return changes.version()
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
            # The command line's revocation returns once committed; the primary then sends the notification,
            # which reaches the listener moments later. Well before the 30 s bound, the cache reads it again.
            await asyncio.to_thread(query, pg_env.db, "UPDATE tokens SET revoked_us = 7", tokens=True)
            deadline = time.monotonic() + 5
            revoked = await cache.lookup(reader, digest)
            while revoked is not None and revoked.revoked_us is None and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
                revoked = await cache.lookup(reader, digest)
            return [first, again, reads, revoked]
        finally:
            await reader.close()

    first, again, reads, revoked = asyncio.run(run())
    assert first is not None and again == first and reads == 1
    assert revoked is not None and revoked.revoked_us == 7
