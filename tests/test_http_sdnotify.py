"""systemd notifications over a real AF_UNIX datagram socket, and a real `serve` that sends them."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import buildreport_command, free_port, self_signed

from buildreport.http import sdnotify


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """A datagram socket standing in for systemd's, at a path (AF_UNIX paths are short: a relative name)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = tmp_path / "notify"
    sock.bind(str(path))
    sock.settimeout(10)
    yield sock, str(path)
    sock.close()


def receive(sock: socket.socket, until: str, timeout: float = 30.0) -> list[str]:
    """Every message received up to and including the first one holding the line `until`."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            message = sock.recv(4096).decode()
        except TimeoutError:
            break
        seen.append(message)
        if until in message.split("\n"):
            return seen
    raise AssertionError(f"no {until} within {timeout}s; received {seen}")


def collect(sock: socket.socket, seconds: float) -> list[str]:
    """Every message received for `seconds`."""
    seen: list[str] = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            seen.append(sock.recv(4096).decode())
        except TimeoutError:
            break
    return seen


def test_notify_sends_one_datagram_of_lines_to_the_socket_path(listener):
    sock, path = listener
    assert sdnotify.notify("READY=1", "STATUS=up", environ={"NOTIFY_SOCKET": path})
    assert sock.recv(4096) == b"READY=1\nSTATUS=up"


def test_notify_reaches_an_abstract_socket_named_with_an_at_sign():
    name = f"buildreport-test-{os.getpid()}-{time.monotonic_ns()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        assert sdnotify.notify("WATCHDOG=1", environ={"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(4096) == b"WATCHDOG=1"


def test_notify_does_nothing_without_a_socket_and_reports_one_that_is_gone(tmp_path):
    assert not sdnotify.notify("READY=1", environ={})
    assert not sdnotify.notify("READY=1", environ={"NOTIFY_SOCKET": "relative/name"})
    assert not sdnotify.notify("READY=1", environ={"NOTIFY_SOCKET": str(tmp_path / "missing")})


def test_watchdog_interval_is_half_of_watchdog_usec_and_only_for_this_process():
    assert sdnotify.watchdog_seconds({"WATCHDOG_USEC": "3000000"}) == 1.5
    assert sdnotify.watchdog_seconds({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": str(os.getpid())}) == 1.5
    assert sdnotify.watchdog_seconds({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": str(os.getpid() + 1)}) is None
    assert sdnotify.watchdog_seconds({"WATCHDOG_USEC": "0"}) is None
    assert sdnotify.watchdog_seconds({"WATCHDOG_USEC": "soon"}) is None
    assert sdnotify.watchdog_seconds({}) is None


def test_status_is_one_short_line():
    assert sdnotify.status("database\nunavailable:   gone") == "STATUS=database unavailable: gone"
    assert len(sdnotify.status("x" * 1000)) == len("STATUS=") + sdnotify.MAX_STATUS_CHARS


def test_probe_host_reaches_a_server_on_every_address_over_loopback():
    assert sdnotify.probe_host("0.0.0.0") == "127.0.0.1"
    assert sdnotify.probe_host("::") == "::1"
    assert sdnotify.probe_host("192.0.2.7") == "192.0.2.7"


def test_ask_health_says_why_when_nothing_listens():
    problem = sdnotify.ask_health("127.0.0.1", free_port(), tls=False, timeout=2)
    assert problem is not None and problem.startswith("/healthz does not answer")


def start(db: Path, listener_path: str, *args: str, port: int | None = None, watchdog_usec: int = 600_000,
          ) -> subprocess.Popen[bytes]:
    env = {**os.environ, "NOTIFY_SOCKET": listener_path, "WATCHDOG_USEC": str(watchdog_usec)}
    env.pop("WATCHDOG_PID", None)
    command = [*buildreport_command(), "serve", "--create", "--db", str(db), "--host", "127.0.0.1",
               "--port", str(free_port() if port is None else port), *args]
    log = (db.parent / "server.log").open("wb")
    return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_says_ready_then_pings_the_watchdog_then_says_stopping(tmp_path, listener, workers):
    sock, path = listener
    process = start(tmp_path / "builds.db", path, "--workers", workers)
    try:
        before_ready = receive(sock, "READY=1")
        assert not any("WATCHDOG=1" in m for m in before_ready)
        assert any(f"with {workers} worker(s)" in m for m in before_ready)
        pings = [receive(sock, "WATCHDOG=1") for _ in range(3)]  # one every 0.3 s
        assert len(pings) == 3
        process.terminate()
        receive(sock, "STOPPING=1")
        # uvicorn ends by raising the signal again: systemd counts a SIGTERM exit as a clean stop.
        assert process.wait(timeout=15) in (0, -15)
    finally:
        stop(process)


def test_serve_stops_pinging_the_watchdog_while_its_database_does_not_answer(tmp_path, listener):
    sock, path = listener
    db = tmp_path / "builds.db"
    process = start(db, path, "--workers", "1")
    try:
        receive(sock, "READY=1")
        receive(sock, "WATCHDOG=1")
        moved = tmp_path / "elsewhere.db"
        db.rename(moved)  # /healthz answers 503: the file read is no longer the one opened
        messages = collect(sock, seconds=3)
        unhealthy = [n for n, m in enumerate(messages) if m.startswith("STATUS=unhealthy: /healthz answers 503")]
        assert unhealthy, messages
        assert not any("WATCHDOG=1" in m.split("\n") for m in messages[unhealthy[0]:])
    finally:
        stop(process)


def test_the_watchdog_asks_over_https_under_the_public_path(tmp_path, listener):
    sock, path = listener
    cert, key = self_signed(tmp_path)
    port = free_port()
    process = start(tmp_path / "builds.db", path, "--workers", "1", "--tls-cert", str(cert), "--tls-key", str(key),
                    "--public-url", f"https://127.0.0.1:{port}/api/v1", port=port)
    try:
        receive(sock, "READY=1")
        messages = collect(sock, seconds=1.5)  # five intervals: pings, and no complaint
        assert sum("WATCHDOG=1" in m.split("\n") for m in messages) >= 3, messages
        assert not any("unhealthy" in m for m in messages), messages
    finally:
        stop(process)


def test_the_ready_status_names_the_port_the_system_chose(tmp_path, listener):
    sock, path = listener
    process = start(tmp_path / "builds.db", path, "--workers", "1", port=0)
    try:
        (ready,) = [m for m in receive(sock, "READY=1") if "READY=1" in m.split("\n")]
        port = int(re.search(r"serving on port ([0-9]+)", ready)[1])
        assert port != 0
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    finally:
        stop(process)
