"""Builds kept by the reader: served without a query only while nothing was committed since they were read."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from conftest import Env, auth, record

from buildreport.store import open_reader
from buildreport.store.reader import KeptBuilds


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


def _reading(env: Env, steps: Any) -> list[Any]:
    """Run `steps(reader, queries)` on a reader of env's database; `queries` counts the lookups by key it ran."""

    async def run() -> list[Any]:
        reader = await open_reader(env.db)
        queries: list[object] = []
        lookup = reader._key

        async def counted(query: Any) -> list[tuple]:
            queries.append(query)
            return await lookup(query)

        reader._key = counted  # type: ignore[method-assign]
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
