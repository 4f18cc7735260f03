"""The read answers apart from any framework: the query as written, the headers and digests they return."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import Env, record

from buildreport.errors import InvalidParams, NotFound
from buildreport.http import answers
from buildreport.store import open_reader
from buildreport.store.errors import DatabaseBusy


def test_pairs_keep_their_order_blanks_and_repeats() -> None:
    assert answers.pairs_of(b"limit=&tags=a:b&tags=c:d&x") == [("limit", ""), ("tags", "a:b"), ("tags", "c:d"),
                                                             ("x", "")]
    assert answers.pairs_of(b"from=%ff&to=a%2Bb+c") == [("from", "\ufffd"), ("to", "a+b c")]
    assert answers.pairs_of(b"") == []


def _ask(env: Env, steps: Any) -> Any:
    async def run() -> Any:
        reader = await open_reader(env.db)
        state = SimpleNamespace(settings=SimpleNamespace(base_url="https://reports.example"),
                                heavy=answers.heavy_turns())
        try:
            return await steps(lambda query, build_id="": answers.Ask(answers.pairs_of(query), 1, reader, state,
                                                                      build_id))
        finally:
            await reader.close()

    return asyncio.run(run())


def test_a_full_page_links_the_next_and_its_digest_covers_the_link(env: Env) -> None:
    env.load([record(i) for i in range(1, 4)])

    async def steps(ask: Any) -> tuple[answers.Json, answers.Json]:
        return await answers.build_list(ask(b"limit=2&create_time_from=2000-01-01")), await answers.build_list(
            ask(b"limit=3&create_time_from=2000-01-01"))

    paged, whole = _ask(env, steps)
    assert [b["build_id"] for b in json.loads(paged.body)] == [3, 2]
    link = paged.headers["Link"]
    assert link.startswith("<https://reports.example/builds?limit=2&create_time_from=") and 'rel="next"' in link
    assert paged.digest_of.endswith(link.encode())
    assert len(json.loads(whole.body)) == 3 and whole.headers == {} and whole.digest_of


def test_a_build_is_its_stored_json_and_a_missing_one_is_not_found(env: Env) -> None:
    env.load([record(1), record(2, account="globex")])

    async def steps(ask: Any) -> list[Any]:
        found = await answers.one_build(ask(b"", "1"))
        outcomes: list[Any] = [json.loads(found.body)["build_id"], found.headers, found.digest_of]
        for query, build_id in ((b"", "2"), (b"x=1", "1"), (b"", "01")):
            try:
                await answers.one_build(ask(query, build_id))
            except (NotFound, InvalidParams) as exc:
                outcomes.append(type(exc))
        return outcomes

    assert _ask(env, steps) == [1, None, None, NotFound, InvalidParams, InvalidParams]


@pytest.mark.sqlite_only
def test_usage_is_encoded_from_the_reader(env: Env) -> None:
    env.load([record(1, cpu_seconds=9)])

    async def steps(ask: Any) -> answers.Json:
        return await answers.usage(ask(b"from=2000-01-01"))

    assert json.loads(_ask(env, steps).body) == {"billable_cpu_seconds": 9, "billable_build_count": 1}


@pytest.mark.sqlite_only
def test_statistics_and_breakdowns_wait_while_every_heavy_turn_is_taken(env: Env) -> None:
    env.load([record(1, cpu_seconds=9)])

    async def steps(ask: Any) -> tuple[list[bool], list[answers.Json]]:
        heavy = ask(b"").state.heavy
        for _ in range(answers.HEAVY_AT_ONCE):
            await heavy.acquire()
        waiting = [asyncio.create_task(answers.build_stats(ask(b"create_time_from=2000-01-01"))),
                   asyncio.create_task(answers.usage_breakdown(ask(b"group_by=day&from=2000-01-01")))]
        await asyncio.sleep(0.2)
        done_while_taken = [task.done() for task in waiting]
        heavy.release()  # one turn free: both answers get it in turn
        return done_while_taken, await asyncio.wait_for(asyncio.gather(*waiting), 10)

    done_while_taken, (built, usage) = _ask(env, steps)
    assert done_while_taken == [False, False]
    assert sum(group["build_count"] for group in json.loads(built.body)) == 1
    assert [group["billable_cpu_seconds"] for group in json.loads(usage.body)] == [9]


@pytest.mark.sqlite_only
def test_statistics_waiting_past_the_queue_bound_are_refused_as_busy(env: Env) -> None:
    env.load([record(1)])

    async def run() -> tuple[list[BaseException | None], int]:
        reader = await open_reader(env.db)
        state = SimpleNamespace(heavy=answers.heavy_turns(length=1, wait=0.2))
        ask = answers.Ask(answers.pairs_of(b"create_time_from=2000-01-01"), 1, reader, state, "")
        try:
            for _ in range(answers.HEAVY_AT_ONCE):
                await state.heavy.acquire()
            waiting = [asyncio.create_task(answers.build_stats(ask)) for _ in range(2)]
            outcomes = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 10)
            return [outcome if isinstance(outcome, BaseException) else None for outcome in outcomes], \
                state.heavy.waiting
        finally:
            await reader.close()

    (timed_out, refused), left = asyncio.run(run())
    assert isinstance(timed_out, DatabaseBusy) and isinstance(refused, DatabaseBusy)
    assert str(timed_out) == "waited 0.2 s for a turn to compute statistics, as long as the queue allows"
    assert str(refused) == "1 requests are already waiting for a turn to compute statistics, as many as the queue holds"
    assert left == 0
