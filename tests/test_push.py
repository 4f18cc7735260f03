"""`buildreport push`: every spooled record reaches the service once, through refusals, outages and rivals."""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import ENGINES, Env, auth, buildreport_command, new_database, query, start_server
from test_transaction import write_record

from buildreport.record.push import Pusher, PushStopped, backoff, retry_after
from buildreport.record.spool import REJECTED, pending_files, write_spool_file

TOKEN = "brt_" + "A" * 43


def spool_records(spool: Path, prefix: str, files: int, per_file: int, **fields: Any) -> list[dict[str, Any]]:
    written = []
    for f in range(files):
        batch = [write_record(f"{prefix}:{f}:{i}", cpu_seconds=f * 1000 + i, **fields) for i in range(per_file)]
        write_spool_file(spool, [json.dumps(r).encode() for r in batch])
        written += batch
    return written


def push(url: str, token: str, spool: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*buildreport_command(), "push", "--to", url, "--token", token, *args, str(spool)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def database_state(db: Path) -> dict[str, list[tuple]]:
    """Everything a report is made from: builds with their ids and bodies, tags, logs and every kept total."""
    tables = {
        "builds": "SELECT build_id, a.name, source_id, create_us, stop_us, status, body FROM builds"
        " JOIN accounts a USING (account_id) ORDER BY build_id",
        "tags": "SELECT key, value, build_id FROM build_tags ORDER BY 3, 1, 2",
        "logs": "SELECT build_id, zlib FROM build_logs ORDER BY 1",
        "hourly": "SELECT period_us, status, builds, cpu_seconds, duration_us FROM hourly_totals ORDER BY 1, 2",
        "daily": "SELECT period_us, status, builds, cpu_seconds, duration_us FROM daily_totals ORDER BY 1, 2",
        "usage": "SELECT day_us, builds, cpu_seconds FROM daily_usage ORDER BY 1",
    }
    return {name: query(db, sql) for name, sql in tables.items()}


def builds_from(db: Path, prefix: str) -> int:
    return query(db, "SELECT count(*) FROM builds WHERE source_id LIKE ?", (prefix + ":%",))[0][0]


@pytest.fixture(scope="module", params=ENGINES)
def service(request, tmp_path_factory):
    """One service for the cases below; each sends records of its own source id prefix."""
    tmp = tmp_path_factory.mktemp("push")
    env = Env(tmp, new_database(request, request.param, tmp))
    env.load([])
    server = start_server(env.db)
    try:
        yield env, server, env.token("acme", ("build:write",))
    finally:
        server.stop()


def test_push_sends_every_file_in_batches_and_deletes_it(service, tmp_path):
    env, server, token = service
    spool = tmp_path / "spool"
    records = spool_records(spool, "batch", files=3, per_file=420, tags={"runner": "r1"})
    result = push(server.url, token, spool, "--batch-size", "200")
    assert result.returncode == 0, result.stderr
    assert "pushed 1260 records from 3 files (1260 new, 0 updated, 0 unchanged)" in result.stderr
    assert pending_files(spool) == []
    assert builds_from(env.db, "batch") == len(records)


def test_a_refused_file_moves_to_rejected_with_its_problem_and_the_rest_is_sent(service, tmp_path):
    env, server, token = service
    spool = tmp_path / "spool"
    spool_records(spool, "before", files=1, per_file=2)
    bad = write_spool_file(spool, [json.dumps(write_record("bad:1")).encode(), b'{"source_id": "bad:2"}'])
    spool_records(spool, "after", files=1, per_file=2)
    result = push(server.url, token, spool)
    assert result.returncode == 0, result.stderr
    assert pending_files(spool) == []
    assert (spool / REJECTED / bad.name).read_bytes().count(b"\n") == 2
    problem = json.loads((spool / REJECTED / (bad.name + ".problem.json")).read_text())
    assert problem["status"] == 400
    assert problem["invalid_records"][0]["index"] == 1
    assert builds_from(env.db, "before") + builds_from(env.db, "after") + builds_from(env.db, "bad") == 4


def test_a_wrong_token_stops_the_pusher_and_moves_nothing(service, tmp_path):
    env, server, _ = service
    spool = tmp_path / "spool"
    spool_records(spool, "t", files=2, per_file=1)
    reader = env.token("acme", ("build:read",))
    for token in (reader, TOKEN):
        result = push(server.url, token, spool)
        assert result.returncode == 1
        assert "nothing more was sent" in result.stderr
        assert "Traceback" not in result.stderr
        assert len(pending_files(spool)) == 2
    assert not (spool / REJECTED).exists()


def test_a_pass_that_cannot_reach_the_service_fails_and_keeps_the_files(tmp_path):
    spool = tmp_path / "spool"
    spool_records(spool, "down", files=2, per_file=1)
    with __import__("socket").socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        result = push(url, TOKEN, spool, "--retries", "2")
    assert result.returncode == 1
    assert "2 files left unsent" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(pending_files(spool)) == 2


def test_bad_options_are_one_clear_line(tmp_path):
    for args in (["--to", "ftp://x", "--token", TOKEN], ["--to", "http://x", "--token", "secret"]):
        result = subprocess.run(
            [*buildreport_command(), "push", *args, str(tmp_path)], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 2
        assert "Traceback" not in result.stderr


def test_token_comes_from_the_environment_too(service, tmp_path):
    _env, server, token = service
    spool = tmp_path / "spool"
    spool_records(spool, "envtoken", files=1, per_file=1)
    result = subprocess.run(
        [*buildreport_command(), "push", "--to", server.url, str(spool)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "BUILDREPORT_TOKEN": token},
    )
    assert result.returncode == 0, result.stderr
    assert pending_files(spool) == []


def test_a_service_restarted_mid_push_ends_as_one_clean_import(tmp_path):
    """Nothing lost, nothing doubled: the database equals one request of all the records to a fresh service."""
    spool = tmp_path / "spool"
    records = spool_records(spool, "restart", files=40, per_file=25, build_status="built")
    records += spool_records(spool, "restart-late", files=5, per_file=25, build_status="running")
    records += spool_records(spool, "restart-late", files=5, per_file=25, build_status="built")

    clean = Env(tmp_path / "clean")
    (tmp_path / "clean").mkdir()
    with clean.client() as client:
        answer = client.post("/builds", json=records[:5000], headers=auth(clean.token("acme", ("build:write",))))
        assert answer.status_code == 200, answer.text

    pushed = Env(tmp_path / "pushed")
    (tmp_path / "pushed").mkdir()
    pushed.load([])
    token = pushed.token("acme", ("build:write",))
    server = start_server(pushed.db)
    port = server.url.rsplit(":", 1)[1]
    pusher = subprocess.Popen(
        [
            *buildreport_command(),
            "push",
            "--to",
            server.url,
            "--token",
            token,
            "--batch-size",
            "10",
            "--retries",
            "1000",
            str(spool),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while len(pending_files(spool)) > 35 and time.monotonic() < deadline:
            time.sleep(0.02)
        server.stop()  # mid-push: requests now fail to connect, and the pusher retries
        time.sleep(1.5)
        server = start_server(pushed.db, port=int(port))  # the same service again, on the same port
        _out, err = pusher.communicate(timeout=120)
    finally:
        if pusher.poll() is None:
            pusher.kill()
        server.stop()
    assert pusher.returncode == 0, err
    assert "retrying in" in err
    assert pending_files(spool) == []
    assert database_state(pushed.db) == database_state(clean.db)


def test_concurrent_pushers_send_each_file_once(service, tmp_path):
    _env, server, token = service
    spool = tmp_path / "spool"
    records = spool_records(spool, "rival", files=60, per_file=5)
    pushers = [
        subprocess.Popen(
            [*buildreport_command(), "push", "--to", server.url, "--token", token, str(spool)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    created = unchanged = 0
    for process in pushers:
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        summary = err.strip().splitlines()[-1]
        created += int(summary.split("(")[1].split(" new")[0])
        unchanged += int(summary.split("updated, ")[1].split(" unchanged")[0])
    assert (created, unchanged) == (len(records), 0)
    assert pending_files(spool) == []


def test_follow_sends_new_files_and_stops_cleanly_on_sigterm(service, tmp_path):
    _env, server, token = service
    spool = tmp_path / "spool"
    pusher = subprocess.Popen(
        [
            *buildreport_command(),
            "push",
            "--follow",
            "--interval",
            "0.1",
            "--to",
            server.url,
            "--token",
            token,
            str(spool),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(0.5)
        spool_records(spool, "follow", files=2, per_file=3)
        deadline = time.monotonic() + 30
        while pending_files(spool) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pending_files(spool) == []
        pusher.send_signal(signal.SIGTERM)
        _, err = pusher.communicate(timeout=15)
    finally:
        if pusher.poll() is None:
            pusher.kill()
    assert pusher.returncode == 0, err
    assert "pushed 6 records from 2 files" in err
    assert "Traceback" not in err


# --- the pusher's answers to each status, with a scripted service -----------------------------------------


class Script:
    """A service that answers from a list; records what was sent."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.answers = list(answers)
        self.bodies: list[list[dict[str, Any]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        lines = gzip.decompress(request.content).splitlines()
        self.bodies.append([json.loads(line) for line in lines])
        answer = self.answers.pop(0)
        if answer.status_code == 200:
            n = len(lines)
            return httpx.Response(200, json={"created": n, "updated": 0, "unchanged": 0, "build_ids": [1] * n})
        return answer


def scripted(spool: Path, script: Script, waits: list[float], **options: Any) -> Pusher:
    stop = threading.Event()
    stop.wait = lambda delay: waits.append(delay) or False  # type: ignore[method-assign]
    return Pusher(
        "http://service.test",
        TOKEN,
        spool,
        stop=stop,
        say=lambda _: None,
        transport=httpx.MockTransport(script),
        **options,
    )


def test_retries_on_outages_and_honours_retry_after(tmp_path):
    spool_records(tmp_path, "s", files=1, per_file=1)
    ok = httpx.Response(200)
    script = Script(
        httpx.Response(503),
        httpx.Response(429, headers={"Retry-After": "7"}),
        httpx.Response(502),
        ok,
    )
    waits: list[float] = []
    pusher = scripted(tmp_path, script, waits)
    assert pusher.push_all()
    assert len(script.bodies) == 4 and all(b == script.bodies[0] for b in script.bodies)
    assert waits[1] == 7
    assert 0.25 <= waits[0] <= 0.5 and 1.0 <= waits[2] <= 2.0  # doubling, with jitter
    assert pending_files(tmp_path) == []


def test_connection_errors_are_retried_then_given_up(tmp_path):
    spool_records(tmp_path, "s", files=2, per_file=1)

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    waits: list[float] = []
    stop = threading.Event()
    stop.wait = lambda delay: waits.append(delay) or False  # type: ignore[method-assign]
    pusher = Pusher(
        "http://service.test",
        TOKEN,
        tmp_path,
        retries=3,
        stop=stop,
        say=lambda _: None,
        transport=httpx.MockTransport(refuse),
    )
    assert not pusher.push_all()
    assert len(waits) == 3
    assert (pusher.stats.files_left, len(pending_files(tmp_path))) == (2, 2)


def test_a_batch_too_large_is_halved(tmp_path):
    spool_records(tmp_path, "s", files=1, per_file=8)
    script = Script(httpx.Response(413), httpx.Response(200), httpx.Response(200))
    pusher = scripted(tmp_path, script, [], batch_size=8)
    assert pusher.push_all()
    assert [len(b) for b in script.bodies] == [8, 4, 4]


def test_a_batch_over_the_service_record_limit_is_sent_in_batches_of_that_limit(tmp_path):
    spool_records(tmp_path, "s", files=1, per_file=8)
    over = httpx.Response(400, json={"status": 400, "detail": "8 records in one request", "max_records": 3})
    script = Script(over, httpx.Response(200), httpx.Response(200), httpx.Response(200))
    pusher = scripted(tmp_path, script, [], batch_size=8)
    assert pusher.push_all()
    assert [len(b) for b in script.bodies] == [8, 3, 3, 2]


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(404, json={"detail": "No such resource"}),
        httpx.Response(301, headers={"Location": "https://service.test/builds"}),
        httpx.Response(200, text="<html>a login page</html>"),
    ],
)
def test_an_address_that_is_not_the_service_stops_the_pusher(tmp_path, answer):
    spool_records(tmp_path, "s", files=1, per_file=1)

    def answer_with(request: httpx.Request) -> httpx.Response:
        return answer

    stop = threading.Event()
    pusher = Pusher(
        "http://service.test",
        TOKEN,
        tmp_path,
        stop=stop,
        say=lambda _: None,
        transport=httpx.MockTransport(answer_with),
    )
    with pytest.raises(PushStopped, match=str(answer.status_code)):
        pusher.push_all()
    assert len(pending_files(tmp_path)) == 1
    assert not (tmp_path / REJECTED).exists()


def test_a_file_another_pusher_holds_is_left_to_it(tmp_path):
    (path,) = [write_spool_file(tmp_path, [json.dumps(write_record("held")).encode()])]
    script = Script()
    with path.open("rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        pusher = scripted(tmp_path, script, [])
        assert pusher.push_all()
    assert script.bodies == []
    assert pending_files(tmp_path) == [path]


def test_an_empty_file_is_removed_without_a_request(tmp_path):
    write_spool_file(tmp_path, [])
    script = Script()
    assert scripted(tmp_path, script, []).push_all()
    assert script.bodies == [] and pending_files(tmp_path) == []


@pytest.mark.parametrize(("header", "expected"), [("", None), ("12", 12.0), ("99999", 600.0), ("soon", None)])
def test_retry_after_is_read_and_bounded(header, expected):
    response = httpx.Response(429, headers={"Retry-After": header} if header else {})
    assert retry_after(response) == expected


def test_backoff_doubles_up_to_its_cap_with_jitter():
    for attempt, cap in ((1, 0.5), (2, 1.0), (3, 2.0), (10, 30.0)):
        delays = [backoff(attempt, 30.0) for _ in range(50)]
        assert all(cap / 2 <= d <= cap for d in delays)
        assert len(set(delays)) > 1

