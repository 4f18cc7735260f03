"""Webhook deliveries by a running server: signed, in event order, retried, never lost, one hook never holding
up another; and the feed's long poll across a real server."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from typing import Any

import httpx
import pytest
from conftest import Env, auth, buildreport_command, free_port
from receiver import Receiver
from test_transaction import write_record

FAST = ("--hook-retry-base", "0.1", "--hook-timeout", "1")


def hook(env: Env, *args: str) -> tuple[str, str]:
    done = subprocess.run([*buildreport_command(), "hook", "add", "--db", str(env.db), *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    hook_id, secret = done.stdout.split()
    return hook_id, secret


def cli(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*buildreport_command(), "hook", *args, "--db", str(env.db)],
                          capture_output=True, text=True, timeout=60)


def post(url: str, token: str, *recs: dict[str, Any]) -> None:
    answer = httpx.post(f"{url}/builds", json=list(recs), headers=auth(token), timeout=30)
    assert answer.status_code == 200, answer.text


def feed_ids(url: str, token: str) -> list[str]:
    return [e["id"] for e in httpx.get(f"{url}/events?limit=1000", headers=auth(token), timeout=30).json()]


def test_deliveries_are_signed_and_in_event_order(env: Env, serve: Any) -> None:
    with Receiver() as receiver:
        _, receiver.secret = hook(env, "--account", "acme", "--url", receiver.url)
        hook(env, "--account", "acme", "--url", receiver.url + "/never", "--tags", "project:other")
        server = serve(env.db, *FAST)
        token = env.token("acme", ("build:write", "build:read"))
        for number, status in enumerate(["running", "built", "build_failed", "build_failed", "built"]):
            post(server.url, token, write_record(f"s:{min(number, 1)}" if number < 2 else f"s:{number}",
                                                 build_status=status))
        expected = feed_ids(server.url, token)
        got = receiver.wait_for(len(expected))
        time.sleep(0.5)
    assert [r.headers["webhook-id"] for r in receiver.received] == expected
    assert all(r.verified for r in got)
    assert [r.json["type"] for r in got] == [
        "build.started", "build.finished", "build.finished", "build.failed", "build.finished", "build.finished",
        "build.recovered"]
    assert all(r.json["link"]["url"].startswith(server.url + "/b/") for r in got)
    assert not any(r.headers.get("webhook-id") is None for r in got)


def test_a_failing_receiver_gets_the_same_webhook_id_until_it_answers(env: Env, serve: Any) -> None:
    with Receiver(answer=lambda n: 500 if n < 2 else 200) as receiver:
        hook_id, receiver.secret = hook(env, "--account", "acme", "--url", receiver.url, "--event", "build.failed")
        server = serve(env.db, *FAST)
        post(server.url, env.token("acme", ("build:write",)), write_record("f:1", build_status="build_failed"))
        got = receiver.wait_for(3)
    assert len({r.headers["webhook-id"] for r in got}) == 1 and all(r.verified for r in got)
    listed = cli(env, "deliveries", hook_id)
    assert " delivered  3 attempts" in listed.stdout, listed.stdout + listed.stderr


def test_410_gone_disables_the_hook(env: Env, serve: Any) -> None:
    with Receiver(answer=lambda n: 410) as receiver:
        hook_id, receiver.secret = hook(env, "--account", "acme", "--url", receiver.url)
        server = serve(env.db, *FAST)
        token = env.token("acme", ("build:write",))
        post(server.url, token, write_record("g:1", build_status="built"))
        receiver.wait_for(1)
        post(server.url, token, write_record("g:2", build_status="built"))
        time.sleep(1.5)
    assert len(receiver.received) == 1
    assert "disabled" in cli(env, "list").stdout
    assert " failed " in cli(env, "deliveries", hook_id).stdout


@pytest.mark.parametrize("answer", ["refused", "timeout"])
def test_a_receiver_that_never_answers_is_retried_then_marked_failed(env: Env, serve: Any, answer: str) -> None:
    with Receiver(answer=lambda n: 3.0) as slow:
        url = slow.url if answer == "timeout" else f"http://127.0.0.1:{free_port()}/hook"
        hook_id, _ = hook(env, "--account", "acme", "--url", url, "--event", "build.finished")
        server = serve(env.db, "--hook-retry-base", "0.2", "--hook-timeout", "0.5", "--hook-retry-for", "3")
        post(server.url, env.token("acme", ("build:write",)), write_record("t:1", build_status="built"))
        deadline = time.monotonic() + 30
        while " failed " not in (listed := cli(env, "deliveries", hook_id).stdout) and time.monotonic() < deadline:
            time.sleep(0.3)
        if answer == "timeout":
            assert len(slow.received) >= 2
    assert " failed " in listed and "attempts" in listed


def test_a_dead_receiver_does_not_hold_up_another_hook(env: Env, serve: Any) -> None:
    with Receiver(answer=lambda n: 5.0) as dead, Receiver() as alive:
        hook(env, "--account", "acme", "--url", dead.url)
        _, alive.secret = hook(env, "--account", "acme", "--url", alive.url)
        server = serve(env.db, "--hook-retry-base", "0.1", "--hook-timeout", "5")
        token = env.token("acme", ("build:write",))
        started = time.monotonic()
        for number in range(5):
            post(server.url, token, write_record(f"d:{number}", build_status="built"))
        alive.wait_for(5, seconds=4)
        took = time.monotonic() - started
    assert took < 4 and all(r.verified for r in alive.received)


def test_a_server_killed_mid_delivery_delivers_after_restart(env: Env, serve: Any) -> None:
    with Receiver(answer=lambda n: 2.0 if n == 0 else 200) as receiver:
        _, receiver.secret = hook(env, "--account", "acme", "--url", receiver.url, "--event", "build.finished")
        port = free_port()
        server = serve(env.db, "--hook-timeout", "5", "--hook-retry-base", "0.1", port=port)
        token = env.token("acme", ("build:write", "build:read"))
        for number in range(3):
            post(server.url, token, write_record(f"k:{number}", build_status="built"))
        receiver.wait_for(1)
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(10)
        restarted = serve(env.db, "--hook-timeout", "5", "--hook-retry-base", "0.1", port=port)
        expected = feed_ids(restarted.url, token)
        got = receiver.wait_for(4, seconds=40)  # the first again once its lease expired, then the two others
        deadline = time.monotonic() + 20
        while {r.headers["webhook-id"] for r in receiver.received} != set(expected) and time.monotonic() < deadline:
            time.sleep(0.1)
    ids = [r.headers["webhook-id"] for r in receiver.received]
    assert set(ids) == set(expected) and all(r.verified for r in got)
    assert sorted(dict.fromkeys(ids), key=expected.index) == list(dict.fromkeys(ids))  # first arrivals in order


def test_a_long_poll_wakes_up_when_an_event_is_written(env: Env, serve: Any) -> None:
    server = serve(env.db)
    token = env.token("acme", ("build:write", "build:read"))
    timer = threading.Timer(0.5, post, (server.url, token, write_record("w:1", build_status="built")))
    started = time.monotonic()
    timer.start()
    try:
        answer = httpx.get(f"{server.url}/events?wait=30", headers=auth(token), timeout=40)
    finally:
        timer.join()
    assert [e["type"] for e in answer.json()] == ["build.finished"]
    assert time.monotonic() - started < 10


def test_two_servers_on_one_database_send_each_delivery_once_in_order(env: Env, serve: Any) -> None:
    with Receiver() as receiver:
        _, receiver.secret = hook(env, "--account", "acme", "--url", receiver.url)
        one, two = serve(env.db, *FAST), serve(env.db, *FAST)
        token = env.token("acme", ("build:write", "build:read"))
        for number in range(10):
            post((one, two)[number % 2].url, token, write_record(f"m:{number}", build_status="built"))
        expected = feed_ids(one.url, token)
        receiver.wait_for(len(expected))
        time.sleep(1.5)  # time for a duplicate to show
    assert [r.headers["webhook-id"] for r in receiver.received] == expected
