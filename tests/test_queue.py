"""Requests beyond a server's database connections wait their turn (store/queue.py) instead of being
refused; only past the queue's bound (`serve --queue-length`, `--queue-wait`) do they get 503, busy."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import psycopg
import pytest
from conftest import Env, auth, record

from buildreport.store.errors import DatabaseBusy
from buildreport.store.postgres.reader import OPEN_TIMEOUT, POOL_SIZE
from buildreport.store.queue import RETRY_AFTER_S, Turns

BURST = 32
STATS = "/builds/stats?create_time_from=2000-01-01&group_by=system"
LIST = "/builds?create_time_from=2000-01-01"


# --- the queue itself ------------------------------------------------------------------------------------------


def test_reads_beyond_the_size_wait_and_enter_in_arrival_order() -> None:
    async def run() -> tuple[list[int], int]:
        turns = Turns(2, length=100, wait=5)
        entered: list[int] = []
        inside = most = 0

        async def read(name: int) -> None:
            nonlocal inside, most
            async with turns:
                entered.append(name)
                inside += 1
                most = max(most, inside)
                await asyncio.sleep(0.01)
                inside -= 1

        await asyncio.wait_for(asyncio.gather(*(read(n) for n in range(10))), timeout=10)
        return entered, most

    entered, most = asyncio.run(run())
    assert entered == list(range(10))
    assert most == 2


async def hold(turns: Turns, release: asyncio.Event) -> None:
    """Take a turn and keep it until `release` is set."""
    async with turns:
        await release.wait()


def test_a_read_beyond_the_queue_length_is_refused_at_once_as_busy() -> None:
    async def run() -> DatabaseBusy:
        turns = Turns(1, length=1, wait=5)
        release = asyncio.Event()

        held = asyncio.create_task(hold(turns, release))
        await asyncio.sleep(0)
        waiting = asyncio.create_task(hold(turns, release))
        await asyncio.sleep(0)
        assert turns.waiting == 1
        with pytest.raises(DatabaseBusy) as refused:
            async with turns:
                pass
        release.set()
        await asyncio.wait_for(asyncio.gather(held, waiting), timeout=5)
        return refused.value

    refused = asyncio.run(run())
    assert refused.retry_after == RETRY_AFTER_S
    assert "1 requests are already waiting for a database connection" in str(refused)


def test_a_read_that_waits_past_the_wait_is_refused_and_its_place_freed() -> None:
    async def run() -> tuple[float, DatabaseBusy, int]:
        turns = Turns(1, length=10, wait=0.05)
        release = asyncio.Event()

        held = asyncio.create_task(hold(turns, release))
        await asyncio.sleep(0)
        started = time.monotonic()
        with pytest.raises(DatabaseBusy) as refused:
            async with turns:
                pass
        waited = time.monotonic() - started
        left = turns.waiting
        release.set()
        await asyncio.wait_for(held, timeout=5)
        async with asyncio.timeout(1):  # the turn is free again: taken at once
            async with turns:
                pass
        return waited, refused.value, left

    waited, refused, left = asyncio.run(run())
    assert 0.05 <= waited < 2
    assert "waited 0.05 s for a database connection, as long as the queue allows" in str(refused)
    assert left == 0


def test_a_cancelled_wait_gives_its_place_to_the_next_read() -> None:
    async def run() -> list[str]:
        turns = Turns(1, length=10, wait=5)
        release = asyncio.Event()
        entered: list[str] = []

        async def read(name: str, until: asyncio.Event | None = None) -> None:
            async with turns:
                entered.append(name)
                if until is not None:
                    await until.wait()

        held = asyncio.create_task(read("first", release))
        await asyncio.sleep(0)
        gone = asyncio.create_task(read("gone"))
        after = asyncio.create_task(read("after"))
        await asyncio.sleep(0)
        gone.cancel()
        release.set()
        await asyncio.wait_for(asyncio.gather(held, after), timeout=5)
        assert gone.cancelled() and turns.waiting == 0
        return entered

    assert asyncio.run(run()) == ["first", "after"]


# --- a server under a burst ------------------------------------------------------------------------------------


def _burst(url: str, secret: str, path: str = STATS, count: int = BURST) -> list[httpx.Response]:
    """`count` requests at once, each on a connection of its own; each ends within a minute."""
    with ThreadPoolExecutor(count) as pool:
        return [future.result() for future in _sent(pool, url, secret, path, count)]


def _sent(pool: ThreadPoolExecutor, url: str, secret: str, path: str, count: int) -> list[Future[httpx.Response]]:
    return [pool.submit(httpx.get, url + path, headers=auth(secret), timeout=60) for _ in range(count)]


@contextmanager
def _builds_locked(db: str) -> Iterator[None]:
    """Every read of the builds table waits until the block ends: queries that hold a server's connections."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("BEGIN")
        conn.execute("LOCK TABLE builds IN ACCESS EXCLUSIVE MODE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")


@pytest.fixture
def filled(env: Env) -> Env:
    env.load([record(n, system=("x86_64-linux", "aarch64-linux")[n % 2]) for n in range(1, 201)])
    return env


def test_a_burst_of_statistics_requests_gets_no_5xx(filled: Env, serve) -> None:
    server = serve(filled.db)
    responses = _burst(server.url, filled.token())
    assert [r.status_code for r in responses] == [200] * BURST
    assert all(r.json() == responses[0].json() for r in responses)


@pytest.fixture
def pg_filled(pg_url: str, tmp_path) -> Env:
    env = Env(tmp_path, pg_url)
    env.load([record(n) for n in range(1, 21)])
    return env


def _in_burst(server_url: str, secret: str, db: str, path: str, held_for: float,
              answered: int = BURST + 1) -> list[httpx.Response]:
    """A burst sent while the builds table is locked, for `held_for` seconds or until `answered` responses came
    back: its first reads hold every pooled connection (or every turn to compute statistics), the others queue
    behind them."""
    with ThreadPoolExecutor(BURST) as pool:
        with _builds_locked(db):
            futures = _sent(pool, server_url, secret, path, BURST)
            deadline = time.monotonic() + held_for
            while time.monotonic() < deadline and sum(future.done() for future in futures) < answered:
                time.sleep(0.05)
        return [future.result(timeout=120) for future in futures]


@pytest.mark.parametrize("path", [LIST, STATS])
def test_requests_queued_longer_than_the_pools_own_timeout_are_all_served(pg_filled: Env, serve, path: str) -> None:
    server = serve(pg_filled.db)
    responses = _in_burst(server.url, pg_filled.token(), pg_filled.db, path, OPEN_TIMEOUT + 1.5)
    assert [r.status_code for r in responses] == [200] * BURST


@pytest.mark.parametrize(
    ("path", "bound", "said"),
    [
        (LIST, ("--queue-length", "0"), "0 requests are already waiting for a database connection"),
        (LIST, ("--queue-wait", "0.5"), "waited 0.5 s for a database connection, as long as the queue allows"),
        # Waiting for a turn to compute statistics, or for a connection that statistics' queries hold.
        (STATS, ("--queue-length", "0"), "0 requests are already waiting for a "),
    ],
)
def test_past_its_bound_the_queue_answers_503_busy_with_retry_after(
    pg_filled: Env, serve, path: str, bound: tuple[str, str], said: str
) -> None:
    server = serve(pg_filled.db, *bound)
    # The lock is held until every request but those holding a turn has its answer (or 30 s).
    responses = _in_burst(server.url, pg_filled.token(), pg_filled.db, path, 30.0, answered=BURST - POOL_SIZE)
    refused = [r for r in responses if r.status_code == 503]
    assert len(refused) >= BURST - POOL_SIZE
    assert {r.status_code for r in responses} <= {200, 503}
    for answer in refused:
        assert answer.headers["retry-after"] == str(RETRY_AFTER_S)
        assert answer.headers["content-type"] == "application/problem+json"
        problem = answer.json()
        assert problem["status"] == 503
        assert problem["detail"].startswith("The server is busy: ")
        assert said in problem["detail"]
    # Once the burst has passed, the server answers as before.
    assert httpx.get(server.url + path, headers=auth(pg_filled.token()), timeout=30).status_code == 200
