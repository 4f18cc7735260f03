"""A few checks against a real `buildreport serve` process, over real HTTP."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from conftest import auth, buildreport_command, free_port, record


def wait_for(predicate, timeout: float = 5.0, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def test_real_server_answers_every_endpoint(env, serve):
    env.load([record(1, tags={"project": "web"}, cpu_seconds=30), record(2, cpu_seconds=12)])
    secret = env.token()
    server = serve(env.db)
    with httpx.Client(base_url=server.url, headers=auth(secret), timeout=10) as client:
        builds = client.get("/builds")
        assert builds.status_code == 200
        assert builds.headers["content-type"].startswith("application/json")
        assert [b["build_id"] for b in builds.json()] == [2, 1]
        assert [b["build_id"] for b in client.get("/builds", params={"tags": "project:web"}).json()] == [1]

        page = client.get("/builds", params={"limit": 1})
        assert page.headers["link"].startswith("<")
        following = client.get(page.headers["link"][1:].split(">", 1)[0])
        assert [b["build_id"] for b in following.json()] == [1]

        one = client.get("/builds/1")
        assert one.status_code == 200
        assert one.json()["tags"] == {"project": "web"}
        assert client.get("/builds/3").status_code == 404

        summary = client.get("/builds/summary").json()
        assert summary["build_count"] == 2
        assert summary["total_cpu_seconds"] == 42

        assert client.get("/usage", params={"from": "2000-01-01"}).json() == {
            "billable_cpu_seconds": 42, "billable_build_count": 2,
        }

        before = time.time()
        link = client.get("/builds/1/url", params={"ttl_seconds": 120}).json()
        assert link["build_id"] == 1
        expires = datetime.fromisoformat(link["expires_at"].replace("Z", "+00:00")).astimezone(UTC).timestamp()
        assert before + 118 <= expires <= time.time() + 122
        assert urlsplit(link["url"]).scheme in ("http", "https")
        assert secret not in link["url"]

        assert client.head("/builds/1").content == b""
        etag = one.headers["etag"]
        assert client.get("/builds/1", headers={"If-None-Match": etag}).status_code == 304


def test_real_server_requires_a_token(env, serve):
    env.load([record(1)])
    server = serve(env.db)
    response = httpx.get(server.url + "/builds", timeout=10)
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["www-authenticate"] == 'Bearer realm="buildreport"'
    assert httpx.get(server.url + "/healthz", timeout=10).status_code == 200
    bad = httpx.get(server.url + "/builds", headers=auth("brt_" + "A" * 43), timeout=10)
    assert bad.status_code == 401
    assert 'error="invalid_token"' in bad.headers["www-authenticate"]


def test_real_server_logs_the_request_id_and_stops_promptly(env, serve):
    env.load([record(1)])
    secret = env.token()
    server = serve(env.db)
    rid = "trace-server-4711"
    response = httpx.get(server.url + "/builds/1", headers={**auth(secret), "X-Request-ID": rid}, timeout=10)
    assert response.status_code == 200
    assert response.headers["x-request-id"] == rid
    missing = httpx.get(server.url + "/builds/999", headers={**auth(secret), "X-Request-ID": rid + "-404"}, timeout=10)
    assert missing.status_code == 404
    assert wait_for(lambda: rid + "-404" in server.log.read_text(errors="replace"))
    assert rid in server.log.read_text(errors="replace")
    assert secret not in server.log.read_text(errors="replace")

    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 5
    assert server.process.poll() is not None
    port = urlsplit(server.url).port
    with socket.socket() as sock:
        sock.settimeout(1)
        assert sock.connect_ex(("127.0.0.1", port)) != 0


def test_a_serving_process_freezes_what_it_started_with_and_collects_less_often():
    code = (
        "import gc; from buildreport.http.app import GC_THRESHOLDS, tune_process; tune_process();"
        " print(gc.get_freeze_count() > 1000, gc.get_threshold() == GC_THRESHOLDS)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.split() == ["True", "True"]


def test_serve_refuses_a_missing_database_and_says_how_to_make_one(tmp_path):
    for args in (["--db", str(tmp_path / "typo.db")], []):  # a typo, and plain `serve` in an empty folder
        result = subprocess.run(
            [*buildreport_command(), "serve", "--port", str(free_port()), *args],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, cwd=tmp_path,
        )
        assert result.returncode == 1, result.stderr
        [line] = result.stderr.splitlines()
        assert line.startswith("Error: ") and "does not exist" in line
        assert "buildreport import --db" in line and "--create" in line
    assert list(tmp_path.iterdir()) == []  # nothing made: no database, tokens file or signing key


def test_serve_create_starts_with_an_empty_database(tmp_path):
    db, port = tmp_path / "new.db", free_port()
    process = subprocess.Popen(
        [*buildreport_command(), "serve", "--create", "--db", str(db), "--port", str(port), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )
    try:
        assert wait_for(lambda: _healthy(f"http://127.0.0.1:{port}"), timeout=20)
        assert db.exists()
    finally:
        process.terminate()
        process.wait(timeout=10)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sigterm_while_the_server_starts_leaves_no_writer_folder(workers):
    # The writer's socket folder goes in TMPDIR: a short private one, watched for the folder to appear.
    base = Path(tempfile.mkdtemp(prefix="br-term-", dir="/tmp"))
    try:
        db = base / "db" / "new.db"
        db.parent.mkdir()
        process = subprocess.Popen(
            [*buildreport_command(), "serve", "--create", "--db", str(db), "--port", str(free_port()),
             "--workers", workers],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            env={**os.environ, "TMPDIR": str(base)},
        )
        try:
            assert wait_for(lambda: any(base.glob("buildreport-writer-*")), timeout=30, step=0.002)
            process.send_signal(signal.SIGTERM)  # before uvicorn has taken the signal
            stderr = process.communicate(timeout=30)[1].decode()
        finally:
            process.kill()
            process.wait(timeout=10)
        assert process.returncode == -signal.SIGTERM  # ended by the signal, as without a handler
        assert "Traceback" not in stderr
        assert sorted(path.name for path in base.iterdir()) == ["db"]
    finally:
        shutil.rmtree(base, ignore_errors=True)
