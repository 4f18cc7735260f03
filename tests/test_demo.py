"""The demo: sample data shifted to now, a token per account, and nothing left behind when it stops or fails."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from conftest import buildreport_command, free_port

import buildreport
from buildreport.cli import demo as demo_command
from buildreport.cli.main import main
from buildreport.config import Settings
from buildreport.demo import prepare_demo, sample_data_path
from buildreport.store import open_database
from buildreport.times import now_us


def test_the_sample_data_ships_inside_the_package():
    path = sample_data_path()
    assert path.is_file()
    assert Path(buildreport.__file__).resolve().parent in path.resolve().parents


def test_demo_builds_never_start_in_the_future(tmp_path):
    now = now_us()
    conn = open_database(tmp_path / "demo.db")
    prepare_demo(conn, Settings(db=str(tmp_path / "demo.db")), sample_data_path(), now)
    newest_start, newest_create = conn.execute("SELECT max(start_us), max(create_us) FROM builds").fetchone()
    pending = conn.execute("SELECT max(start_us) FROM builds WHERE status = 'pending'").fetchone()[0]
    conn.close()
    assert newest_start == now
    assert newest_create <= now and pending <= now


def test_demo_lines_start_with_https_when_serving_tls(tmp_path):
    db = tmp_path / "demo.db"
    conn = open_database(db)
    settings = Settings(db=str(db), port=8443, tls_cert="c.pem", tls_key="k.pem")
    lines = prepare_demo(conn, settings, sample_data_path(), now_us())
    conn.close()
    urls = [word.strip('"') for line in lines for word in line.split() if "://" in word]
    assert urls and all(url.startswith("https://127.0.0.1:8443/") for url in urls)


def answers(port: int, timeout: float = 30) -> bool:
    """Whether a server on the port answers /healthz within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            time.sleep(0.1)
    return False


def _failing_server(settings: Settings) -> None:
    raise RuntimeError("the server could not start")


def test_a_failed_demo_removes_the_database_it_created(tmp_path, monkeypatch):
    monkeypatch.setattr(demo_command, "run_server", _failing_server)
    db = tmp_path / "demo.db"
    result = CliRunner().invoke(main, ["demo", "--db", str(db), "--port", str(free_port())])
    assert result.exit_code != 0
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    again = CliRunner().invoke(main, ["demo", "--db", str(db), "--port", str(free_port())])
    assert "exists" not in again.output  # the same command can run again


def test_a_failed_demo_removes_its_temporary_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(demo_command, "run_server", _failing_server)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    result = CliRunner().invoke(main, ["demo", "--port", str(free_port())])
    assert result.exit_code != 0
    assert list(tmp_path.iterdir()) == []


def test_a_demo_refused_before_it_starts_creates_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    result = CliRunner().invoke(main, ["demo", "--port", "0", "--tls-cert", str(tmp_path / "missing.pem"),
                                           "--tls-key", str(tmp_path / "missing.key")])
    assert result.exit_code != 0 and "cannot read TLS file" in result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "terminate"])
def test_a_stopped_demo_leaves_no_temporary_folder(tmp_path, stop):
    port = free_port()
    process = subprocess.Popen(
        [*buildreport_command(), "demo", "--port", str(port), "--workers", "1", "--no-access-log"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    try:
        assert answers(port)
        assert [p.name.startswith("buildreport-demo-") for p in tmp_path.iterdir()] == [True]
        process.send_signal(stop)
        process.wait(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=5)
    output = process.stdout.read().decode(errors="replace") if process.stdout else ""
    assert "Traceback" not in output
    assert list(tmp_path.iterdir()) == []


def test_a_stopped_demo_keeps_the_database_it_was_given(tmp_path):
    port = free_port()
    db = tmp_path / "kept.db"
    process = subprocess.Popen(
        [*buildreport_command(), "demo", "--db", str(db), "--port", str(port), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )
    try:
        assert answers(port)
        process.send_signal(signal.SIGINT)
        process.wait(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=5)
    conn = open_database(db)
    assert conn.execute("SELECT count(*) FROM builds").fetchone()[0] > 0
    conn.close()
