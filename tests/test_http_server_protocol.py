"""The HTTP server's bounds, against a real `buildreport serve`: head size, time to send it, keep-alive, connections."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import httpx
import pytest
from conftest import auth, record

from buildreport.config import DEFAULT_MAX_HEADER_BYTES


def rss_kib(pid: int) -> int:
    """Resident memory of a process and its children (an executable's bootloader runs the server as a child)."""
    total = 0
    pending = [pid]
    while pending:
        current = pending.pop()
        status = Path(f"/proc/{current}/status").read_text()
        total += int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
        for task in Path(f"/proc/{current}/task").iterdir():
            pending += [int(child) for child in (task / "children").read_text().split()]
    return total


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def answer(sock: socket.socket, limit: float = 10.0) -> bytes:
    """Everything the server sends until it closes the connection (or `limit` seconds pass)."""
    sock.settimeout(limit)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def test_a_huge_header_is_refused_without_reading_it_into_memory(env, serve):
    env.load([record(1)])
    secret = env.token()
    server = serve(env.db)
    with httpx.Client(base_url=server.url, timeout=10) as client:
        assert client.get("/builds/1", headers=auth(secret)).status_code == 200
    before = rss_kib(server.process.pid)
    sent = 0
    with connect(server.url) as sock:
        sock.sendall(b"GET /builds/1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ")
        chunk = b"A" * (1 << 20)
        try:
            for _ in range(32):  # 32 MB at most
                sock.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        reply = answer(sock)
    assert sent < 32 << 20 or reply.startswith(b"HTTP/1.1 431") or reply == b""
    assert not reply.startswith(b"HTTP/1.1 2")
    grown_mib = (rss_kib(server.process.pid) - before) / 1024
    assert grown_mib < 10, f"memory grew by {grown_mib:.0f} MiB"
    assert httpx.get(server.url + "/healthz", timeout=10).status_code == 200


def test_a_header_over_the_limit_gets_431(env, serve):
    env.load([record(1)])
    server = serve(env.db, "--max-header-bytes", "4096")
    with connect(server.url) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"p" * 5000)
        time.sleep(0.5)  # the server reads it all and answers before anything else arrives
        reply = answer(sock)
    assert reply.startswith(b"HTTP/1.1 431 "), reply[:200]
    assert b"application/problem+json" in reply and b"4096 bytes" in reply
    small = httpx.get(server.url + "/healthz", headers={"X-Padding": "p" * 3000}, timeout=10)
    assert small.status_code == 200


def test_default_header_limit_allows_ordinary_requests(env, serve):
    env.load([record(1)])
    secret = env.token()
    server = serve(env.db)
    headers = {**auth(secret), "Cookie": "c" * (DEFAULT_MAX_HEADER_BYTES // 2)}
    assert httpx.get(server.url + "/builds/1", headers=headers, timeout=10).status_code == 200


def test_a_client_that_never_finishes_its_headers_is_dropped(env, serve):
    env.load([record(1)])
    server = serve(env.db, "--header-timeout", "1")
    started = time.monotonic()
    with connect(server.url) as slow, connect(server.url) as silent:
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        for _ in range(3):  # a byte now and then does not keep it open
            time.sleep(0.2)
            slow.sendall(b"X")
        reply = answer(slow)
        dropped_after = time.monotonic() - started
        assert answer(silent) == b""
    assert reply.startswith(b"HTTP/1.1 408 "), reply[:200]
    assert 0.9 <= dropped_after < 5


def test_the_next_request_on_a_connection_has_its_own_time_to_send_its_head(env, serve):
    env.load([record(1)])
    server = serve(env.db, "--header-timeout", "1")
    with connect(server.url) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(10)
        first = b""
        while not first.endswith(b'{"status":"ok"}'):  # the head and the body may come apart
            chunk = sock.recv(65536)
            assert chunk, first
            first += chunk
        assert first.startswith(b"HTTP/1.1 200 ")
        time.sleep(0.6)  # the first head's clock would end 0.4 s into the next head
        began = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        for _ in range(3):
            time.sleep(0.2)
            sock.sendall(b"X")
        reply = answer(sock)
        dropped_after = time.monotonic() - began
    assert reply.startswith(b"HTTP/1.1 408 "), reply[:200]
    assert 0.9 <= dropped_after < 5


def test_idle_keep_alive_connections_are_closed(env, serve):
    env.load([record(1)])
    server = serve(env.db, "--keep-alive-timeout", "1")
    with connect(server.url) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        started = time.monotonic()
        reply = answer(sock)
        assert reply.startswith(b"HTTP/1.1 200 ")
        assert time.monotonic() - started < 5


def test_many_idle_connections_do_not_stop_the_service(env, serve):
    env.load([record(1)])
    secret = env.token()
    server = serve(env.db)
    idle = []
    try:
        for _ in range(200):
            idle.append(connect(server.url))
        with httpx.Client(base_url=server.url, timeout=5) as client:
            assert client.get("/healthz").status_code == 200
            assert client.get("/builds/1", headers=auth(secret)).status_code == 200
    finally:
        for sock in idle:
            sock.close()


def test_connections_beyond_the_limit_get_503(env, serve):
    env.load([record(1)])
    server = serve(env.db, "--max-connections", "5", "--header-timeout", "30")
    idle = [connect(server.url) for _ in range(6)]
    try:
        time.sleep(0.3)
        assert httpx.get(server.url + "/healthz", timeout=10).status_code == 503
    finally:
        for sock in idle:
            sock.close()
    time.sleep(0.3)
    assert httpx.get(server.url + "/healthz", timeout=10).status_code == 200


@pytest.mark.parametrize("flag", ["--max-header-bytes=10", "--header-timeout=0", "--keep-alive-timeout=-1",
                                  "--max-connections=0", "--log-streams=0", "--link-rate-limit=-1"])
def test_limits_out_of_range_are_refused_at_start(env, flag):
    from click.testing import CliRunner

    from buildreport.cli.main import main

    result = CliRunner().invoke(main, ["serve", "--db", str(env.db), flag], env={"HOME": os.environ.get("HOME", "/")})
    assert result.exit_code == 2
    assert "Invalid value" in result.output and "Traceback" not in result.output
