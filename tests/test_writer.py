"""The write process: the server's writes done beside its event loop, never half done, never left behind."""

from __future__ import annotations

import fcntl
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import auth, query
from litestar.testing import TestClient
from test_transaction import records, write_record

from buildreport.http.app import create_app
from buildreport.models import BuildRecord
from buildreport.store import open_database
from buildreport.store.sqlite.writelock import lock_path
from buildreport.store.writer import Outcome, WriteProcess, encode_job

WAIT_SECONDS = 20.0


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie has ended; it waits only to be reaped
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_until(predicate, what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def job(*sources: str, account: str = "acme") -> bytes:
    return encode_job(account, records(*(write_record(s) for s in sources)), 0)


def turn_taken(db) -> bool:
    """Whether a server's writer holds the turn to write to `db` (see writelock.py)."""
    fd = os.open(lock_path(db), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def count(db) -> int:
    return query(db, "SELECT count(*) FROM builds")[0][0]


@pytest.fixture
def db(fresh_db, tmp_path: Path):
    path = fresh_db(tmp_path)
    open_database(path).close()
    return path


def test_writes_run_in_another_process_which_ends_when_stopped(db) -> None:
    process = WriteProcess(str(db))
    try:
        first = process.run(job("p:1", "p:2"))
        pid = process.pid
        assert first.result is not None and first.result.created == 2
        assert pid is not None and pid != os.getpid() and alive(pid)
        again = process.run(job("p:2", "p:3"))
        assert again.result is not None and (again.result.created, again.result.unchanged) == (1, 1)
        assert process.pid == pid  # one process serves every write
    finally:
        process.stop()
    assert process.pid is None and not alive(pid)
    assert count(db) == 3


def test_conflicts_come_back_named_and_nothing_is_written(db) -> None:
    process = WriteProcess(str(db))
    try:
        assert process.run(job("c:1")).result is not None
        # A restart of a build the account does not have: the second record conflicts, the first is not written.
        bad = records(write_record("c:2"), write_record("c:3", restart_of_source_id="c:missing"))
        outcome = process.run(encode_job("acme", bad, 0))
    finally:
        process.stop()
    assert outcome.result is None and outcome.conflicts is not None
    assert [(c.index, c.field) for c in outcome.conflicts] == [(1, "restart_of_source_id")]
    assert count(db) == 1


@pytest.mark.sqlite_only
def test_a_database_that_is_gone_is_reported_as_unavailable(tmp_path: Path) -> None:
    process = WriteProcess(str(tmp_path / "missing.db"))
    try:
        outcome = process.run(job("m:1"))
    finally:
        process.stop()
    assert outcome.result is None and outcome.unavailable == "unable to open database file"
    assert not (tmp_path / "missing.db").exists()  # never created in place of the one that went


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_a_stop_sent_to_the_process_group_are_left_to_the_server(db, signum: int) -> None:
    process = WriteProcess(str(db))
    try:
        assert process.run(job("i:1")).result is not None
        pid = process.pid
        os.kill(pid, signum)
        time.sleep(0.2)
        outcome = process.run(job("i:2"))
        assert outcome.result is not None and outcome.result.created == 1 and process.pid == pid
    finally:
        process.stop()


@pytest.mark.sqlite_only
def test_a_process_killed_mid_write_stores_all_or_nothing_and_the_next_write_starts_another(db) -> None:
    process = WriteProcess(str(db))
    size = 20_000
    big = encode_job("acme", records(*(write_record(f"k:{i}") for i in range(size))), 0)
    try:
        assert process.run(job("k:first")).result is not None
        pid = process.pid
        outcomes: list[Outcome] = []
        writing = threading.Thread(target=lambda: outcomes.append(process.run(big)))
        writing.start()
        wait_until(lambda: turn_taken(db), "the write did not begin")
        time.sleep(0.2)  # well inside the write of 20,000 builds
        os.kill(pid, signal.SIGKILL)
        writing.join(WAIT_SECONDS)
        assert not writing.is_alive()
        assert outcomes[0].result is None and outcomes[0].unavailable == "the write process stopped before it answered"
        assert count(db) == 1  # the open transaction died with the process
        after = process.run(job("k:after"))
        assert after.result is not None and after.result.created == 1
        assert process.pid not in (None, pid)
    finally:
        process.stop()
    assert count(db) == 2


PARENT = """
import sys, time
from buildreport.store.writer import WriteProcess
from test_writer import job
process = WriteProcess(sys.argv[1])
assert process.run(job("o:1")).result is not None
print(process.pid, flush=True)
time.sleep(60)
"""


@pytest.mark.sqlite_only
def test_the_process_ends_with_a_server_that_is_killed(db) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(db)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        child = int(parent.stdout.readline())
        assert alive(child)
        parent.kill()
        parent.wait(WAIT_SECONDS)
        wait_until(lambda: not alive(child), "the write process outlived the server")
    finally:
        parent.kill()
        parent.wait(WAIT_SECONDS)
        parent.stdout.close()


@pytest.mark.sqlite_only
def test_a_write_whose_process_died_is_a_503_and_the_next_one_is_written(env) -> None:
    secret = env.token(scopes=("build:read", "build:write"))
    headers = auth(secret)
    served = create_app(env.settings())
    with TestClient(served, base_url="http://testserver.local") as client:
        assert client.post("/builds", json=[write_record("h:first")], headers=headers).status_code == 200
        pid = served.app.state.writes.writer.pid
        holder = sqlite3.connect(env.db)
        holder.execute("BEGIN IMMEDIATE")  # another writer: the request's write waits for it, under way
        answers = []
        body = [write_record("h:1"), write_record("h:2")]
        posting = threading.Thread(target=lambda: answers.append(client.post("/builds", json=body, headers=headers)))
        try:
            posting.start()
            wait_until(lambda: turn_taken(env.db), "the write did not begin")
            os.kill(pid, signal.SIGKILL)
            posting.join(WAIT_SECONDS)
        finally:
            holder.rollback()
            holder.close()
        response = answers[0]
        assert response.status_code == 503 and response.headers["retry-after"] == "5"
        assert "nothing was half-written" in response.json()["detail"]
        assert query(env.db, "SELECT count(*) FROM builds")[0][0] == 1
        again = client.post("/builds", json=body, headers=headers)
        assert again.status_code == 200 and again.json()["created"] == 2


def test_jobs_keep_every_field_of_the_records(db) -> None:
    """A job is JSON: times keep their offsets, numbers and logs come through as sent."""
    sent = records(write_record("f:1", create_time="2026-01-02T03:04:05.123456+05:30", log="line one\nline two\n"))
    from buildreport.store.writer_jobs import JOB as _JOB

    decoded = _JOB.decode(encode_job("acme", sent, 7))
    assert (decoded.account, decoded.now_us) == ("acme", 7)
    assert decoded.records == sent and isinstance(decoded.records[0], BuildRecord)
    assert decoded.records[0].create_time.utcoffset().total_seconds() == 5.5 * 3600
