"""The one writer of a server: every worker's writes, and every kind of write, go to it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest
from conftest import auth, query
from test_transaction import write_record

from buildreport.store import transaction
from buildreport.store.sqlite.writelock import lock_path

WAIT_SECONDS = 20.0


def holders(path: Path) -> set[int]:
    """The processes that have `path` open."""
    found = set()
    target = str(path)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            links = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except OSError:
            continue
        if target in links:
            found.add(int(entry.name))
    return found


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def post(url: str, secret: str, source: str) -> httpx.Response:
    # A new connection each time, so that both workers take some.
    return httpx.post(url + "/builds", json=[write_record(source)], headers=auth(secret), timeout=30)


@pytest.mark.sqlite_only
def test_two_workers_write_through_one_writer_that_comes_back_when_killed(env, serve) -> None:
    secret = env.token(scopes=("build:read", "build:write"))
    server = serve(env.db, "--workers", "2", "--no-access-log")
    for i in range(40):
        assert post(server.url, secret, f"w:{i}").status_code == 200
    assert query(env.db, "SELECT count(*) FROM builds")[0][0] == 40
    # Only one process ever takes the turn to write: the writer that `serve` started, not a worker.
    writers = holders(lock_path(env.db))
    assert len(writers) == 1
    (writer,) = writers
    assert parent_of(writer) == server.process.pid
    os.kill(writer, signal.SIGKILL)
    deadline = time.monotonic() + WAIT_SECONDS
    while True:  # a job sent while the writer is down is a 503; once it is back, writes go on
        answer = post(server.url, secret, "w:after")
        if answer.status_code == 200:
            break
        assert answer.status_code == 503 and answer.headers["retry-after"]
        assert time.monotonic() < deadline, "the writer never came back"
    assert query(env.db, "SELECT count(*) FROM builds")[0][0] == 41
    again = holders(lock_path(env.db))
    assert len(again) == 1 and writer not in again and parent_of(again.pop()) == server.process.pid


def test_the_app_opens_no_write_connection_of_its_own(env, monkeypatch) -> None:
    """Builds, tokens' last use and the deliverer's bookkeeping all go to the writer's process."""
    opened: list[str] = []
    original = transaction.WriteSession.__init__

    def counting(self, *args, **kwargs) -> None:
        opened.append(str(args[0]))
        original(self, *args, **kwargs)

    monkeypatch.setattr(transaction.WriteSession, "__init__", counting)
    secret = env.token(scopes=("build:read", "build:write"))
    with env.client() as client:
        answer = client.post("/builds", json=[write_record("a:1")], headers=auth(secret))
        assert answer.status_code == 200
        assert client.get("/builds", headers=auth(secret)).status_code == 200
        deadline = time.monotonic() + WAIT_SECONDS
        while query(env.db, "SELECT last_used_us FROM tokens", tokens=True) == [(None,)]:
            assert time.monotonic() < deadline, "the token's last use was never written"
            time.sleep(0.05)
        time.sleep(0.6)  # the deliverer has looked for due deliveries at least once
    assert query(env.db, "SELECT count(*) FROM builds")[0][0] == 1
    assert opened == []
