"""GET /events: builds written over HTTP make events; an account reads its own, oldest first, after a cursor."""

from __future__ import annotations

import re
import time
from typing import Any

import msgspec
import pytest
from conftest import Env, auth
from test_transaction import write_record

from buildreport.events.models import Event

WRITE = ("build:write",)


def post(client: Any, token: str, *recs: dict[str, Any]) -> None:
    answer = client.post("/builds", json=list(recs), headers=auth(token))
    assert answer.status_code == 200, answer.text


def feed(client: Any, token: str, query: str = "") -> tuple[list[Event], str]:
    answer = client.get(f"/events{query}", headers=auth(token))
    assert answer.status_code == 200, answer.text
    link = re.fullmatch(r'<([^>]+)>; rel="next"', answer.headers["link"])
    assert link is not None
    return msgspec.json.decode(answer.content, type=list[Event]), link[1].removeprefix("http://testserver.local")


@pytest.fixture
def tokens(env: Env) -> dict[str, str]:
    return {
        "acme_write": env.token("acme", WRITE), "acme": env.token("acme"),
        "globex_write": env.token("globex", WRITE), "globex": env.token("globex"),
    }


def test_a_series_that_stays_broken_makes_one_failure_then_recovers(env: Env, tokens: dict[str, str]) -> None:
    with env.client() as client:
        for number, status in enumerate(["built", "build_failed", "build_failed", "timeout", "built"], 1):
            post(client, tokens["acme_write"], write_record(f"s:{number}", build_status=status))
        events, _ = feed(client, tokens["acme"], "?types=build.failed,build.recovered")
    assert [e.type.value for e in events] == ["build.failed", "build.recovered"]
    failed, recovered = events
    assert failed.previous is not None and failed.previous.status.value == "built"
    assert recovered.previous is not None and recovered.previous.build_id == failed.build.build_id + 2
    assert failed.series.derivation == "hello-2.12.1" and failed.series.system == "x86_64-linux"
    assert failed.account == "acme"


def test_an_event_carries_the_build_as_get_builds_returns_it_and_a_signed_link(
    env: Env, tokens: dict[str, str]
) -> None:
    with env.client() as client:
        post(client, tokens["acme_write"], write_record("s:1", build_status="build_failed", tags={"project": "web"}))
        answer = client.get("/events?types=build.failed", headers=auth(tokens["acme"]))
        (event,) = msgspec.json.decode(answer.content)
        build = client.get(f"/builds/{event['build']['build_id']}", headers=auth(tokens["acme"])).json()
        assert event["build"] == build
        page = client.get(event["link"]["url"].removeprefix("http://testserver.local"))
    assert page.status_code == 200
    assert event["id"].startswith("evt_") and event["type"] == "build.failed"


def test_the_cursor_follows_on_and_another_account_never_sees_the_events(env: Env, tokens: dict[str, str]) -> None:
    with env.client() as client:
        post(client, tokens["acme_write"], write_record("a:1", build_status="running"))
        post(client, tokens["globex_write"], write_record("g:1", build_status="build_failed"))
        first, following = feed(client, tokens["acme"], "?limit=1")
        post(client, tokens["acme_write"], write_record("a:1", build_status="built"))
        second, _ = feed(client, tokens["acme"], following.removeprefix("/events"))
        globex, _ = feed(client, tokens["globex"])
        empty_after, again = feed(client, tokens["globex"], "?cursor=7" + "f" * 15)
    assert [e.type.value for e in first] == ["build.started"]
    assert [e.type.value for e in second] == ["build.finished"]
    assert {e.account for e in globex} == {"globex"} and [e.type.value for e in globex] == [
        "build.finished", "build.failed"]
    assert empty_after == [] and again.endswith("cursor=7" + "f" * 15)


@pytest.mark.parametrize(
    "query", ["?types=build.exploded", "?limit=0", "?limit=1001", "?wait=61", "?cursor=xyz", "?colour=red",
              "?limit=1&limit=2"],
)
def test_bad_parameters_are_a_400_that_names_them(env: Env, tokens: dict[str, str], query: str) -> None:
    with env.client() as client:
        answer = client.get(f"/events{query}", headers=auth(tokens["acme"]))
    assert answer.status_code == 400
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.json()["invalid_params"][0]["name"] in query


def test_the_feed_needs_the_read_scope(env: Env, tokens: dict[str, str]) -> None:
    with env.client() as client:
        assert client.get("/events", headers=auth(tokens["acme_write"])).status_code == 403
        assert client.get("/events").status_code == 401


def test_a_long_poll_without_events_answers_empty_after_its_wait(env: Env, tokens: dict[str, str]) -> None:
    with env.client() as client:
        started = time.monotonic()
        events, _ = feed(client, tokens["acme"], "?wait=1")
    assert events == [] and time.monotonic() - started >= 1


def test_a_regression_episode_makes_one_event_and_a_second_episode_another(env: Env, tokens: dict[str, str]) -> None:
    durations = [100.0] * 20 + [200.0] * 5 + [100.0] * 3 + [300.0] * 3
    with env.client() as client:
        post(client, tokens["acme_write"], *(write_record(f"r:{n}", build_status="built", duration_seconds=seconds)
                                             for n, seconds in enumerate(durations)))
        events, _ = feed(client, tokens["acme"], "?types=build.regressed")
    assert len(events) == 2
    first, second = events
    assert (first.regression.recent_median_seconds, first.regression.baseline_median_seconds) == (200.0, 100.0)
    # The second slow build already makes the median of the last three slow; 19 builds are before those three.
    assert first.regression.baseline_builds == 19 and second.regression.recent_median_seconds == 300.0
