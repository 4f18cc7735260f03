"""`buildreport runner` with real Nix 2.8 and a real sshd on 127.0.0.1: every recorded field checked
against what Nix reports and against the clock. Skipped without Nix or OpenSSH, except under CI=true."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import Env, Server, auth, buildreport_command
from nix_runner import Runner, kill_group, path_info, require_tools

from buildreport.record.destinations import SpoolSink
from buildreport.record.protocol import BuildRequest, BuildResult, BuildResultStatus, ClientScanner, DaemonError
from buildreport.record.runner import RunnerConfig, Session, status_of

DATA = Path(__file__).parent / "data" / "nix_session"
CGROUP_ROOT = Path("/sys/fs/cgroup/unified")
TIMEOUT = 10  # long enough for every other build on a busy machine
CPU_COUNT = 3
MEGABYTES = 1234


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    require_tools()
    runner = Runner(
        tmp_path_factory.mktemp("runner"),
        ["--timeout", str(TIMEOUT), "--cpu-count", str(CPU_COUNT), "--allocated-megabytes", str(MEGABYTES)],
        tags={"project": "web", "team": "infra"},
    )
    runner.start()
    try:
        yield runner
    finally:
        runner.stop()
    # Every session removed the cgroup it made for itself.
    sessions = set(re.findall(r"^\S+ (\S+) session ended", runner.runner_log(), re.M))
    assert sessions
    assert not [s for s in sessions if (CGROUP_ROOT / f"buildreport-runner-{s}").exists()]


def nonce() -> str:
    return str(time.time_ns())


def scan_requests(name: str) -> list[BuildRequest]:
    found: list[BuildRequest] = []
    ClientScanner(found.append).feed((DATA / f"{name}.client").read_bytes())
    return found


def when(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def assert_timed(record: dict, before: float, after: float) -> None:
    """create <= start <= stop, all within the client's own run, and queue time = start - create."""
    create, start = when(record["create_time"]), when(record["start_time"])
    assert before <= create <= start <= after
    assert record["queue_time_seconds"] == pytest.approx(start - create, abs=1e-5)
    assert start + record["duration_seconds"] <= after


def test_runner_records_a_built_derivation_with_outputs_log_tags_and_resources(runner: Runner) -> None:
    n = nonce()
    drv = runner.drv_path("ok", n)
    before = time.time()
    result = runner.build("ok", n)
    after = time.time()
    assert result.returncode == 0, result.stderr
    records = runner.wait_final(drv)
    running, final = records[0], records[-1]
    assert running["build_status"] == "running" and running["duration_seconds"] is None
    assert {r["source_id"] for r in records} == {final["source_id"]} and len(final["source_id"]) <= 200
    assert final["build_status"] == "built" and final["status_message"] is None
    assert_timed(final, before, after)
    assert final["start_time"] == running["start_time"] and final["create_time"] == running["create_time"]
    assert final["system"] == "x86_64-linux"
    # Tags of the session and of the derivation; the derivation's value wins where both name one.
    assert final["tags"] == {"project": "web", "team": "builders", "drvtag": "yes"}
    assert final["log"] == "building\nto-stderr\n"
    assert final["cpu_count"] == CPU_COUNT and final["allocated_megabytes"] == MEGABYTES
    assert isinstance(final["cpu_seconds"], int) and final["cpu_seconds"] >= 0
    assert final["average_cpu_utilization"] is not None and 0 <= final["average_cpu_utilization"] <= 1
    assert final["peak_memory_use_kilobytes"] > 0  # one build in the session: the session's peak is its own
    assert final["peak_storage_use_kilobytes"] is None
    [output] = final["outputs"]
    info = path_info(runner, [output["path"]])[output["path"]]
    assert output == {
        "name": "out",
        "path": info["path"],
        "nar_hash": info["narHash"],
        "nar_size_bytes": info["narSize"],
    }
    assert result.stdout.strip().split("/")[-1] == output["path"].split("/")[-1]  # the client got the same path


def test_runner_measures_the_cpu_time_of_a_busy_build(runner: Runner) -> None:
    n = nonce()
    drv = runner.drv_path("busy", n)
    assert runner.build("busy", n).returncode == 0
    final = runner.wait_final(drv)[-1]
    assert final["build_status"] == "built"
    # The builder printed its own CPU time (sh `times`: user and system of the shell, then of its children).
    spent = sum(int(m) * 60 + float(s) for m, s in re.findall(r"(\d+)m([\d.]+)s", final["log"].splitlines()[0]))
    assert spent > 0.3
    # The record holds whole seconds, and its share is of those seconds: each is the builder's time, rounded.
    assert final["cpu_seconds"] == pytest.approx(spent, abs=0.5 + 0.15 + 0.1 * spent)
    share = final["cpu_seconds"] / (final["duration_seconds"] * CPU_COUNT)
    assert final["average_cpu_utilization"] == pytest.approx(share, abs=1e-4)


def test_runner_records_the_peak_memory_of_a_session_of_one_build(runner: Runner) -> None:
    n = nonce()
    drv = runner.drv_path("hog", n)
    assert runner.build("hog", n).returncode == 0
    final = runner.wait_final(drv)[-1]
    assert final["log"] == "held 40000000 bytes\n"
    # The shell held the 40 MB string: the session's largest process peaked above that, and not far above.
    assert 40_000_000 / 1024 < final["peak_memory_use_kilobytes"] < 3 * 40_000_000 / 1024


def test_runner_records_every_output_of_a_multi_output_derivation(runner: Runner) -> None:
    n = nonce()
    drv = runner.drv_path("multi", n)
    assert runner.build("multi", n).returncode == 0
    final = runner.wait_final(drv)[-1]
    assert [o["name"] for o in final["outputs"]] == ["dev", "out"]
    infos = path_info(runner, [o["path"] for o in final["outputs"]])
    for output in final["outputs"]:
        assert output["nar_hash"] == infos[output["path"]]["narHash"]
        assert output["nar_size_bytes"] == infos[output["path"]]["narSize"]
    assert final["tags"] == {"project": "web", "team": "infra"}


def test_runner_records_a_failed_build_with_the_error_and_the_client_fails_as_usual(runner: Runner) -> None:
    n = nonce()
    drv = runner.drv_path("fail", n)
    before = time.time()
    result = runner.build("fail", n)
    after = time.time()
    assert result.returncode != 0
    assert f"builder for '{drv}' failed with exit code 1" in result.stderr
    final = runner.wait_final(drv)[-1]
    assert final["build_status"] == "build_failed"
    assert f"builder for '{drv}' failed with exit code 1" in final["status_message"]
    assert "\x1b" not in final["status_message"]
    assert final["log"] == "about to fail\n"
    assert final["outputs"] == []
    assert_timed(final, before, after)


def test_runner_records_a_timeout_under_its_own_limit(runner: Runner) -> None:
    n = nonce()
    drv = runner.drv_path("slow", n)
    before = time.time()
    result = runner.build("slow", n)
    after = time.time()
    assert result.returncode != 0
    assert f"timed out after {TIMEOUT} seconds" in result.stderr
    final = runner.wait_final(drv)[-1]
    assert final["build_status"] == "timeout"
    assert re.search(rf"timed out after {TIMEOUT} seconds", final["status_message"])
    assert TIMEOUT <= final["duration_seconds"] < TIMEOUT + 5
    assert final["log"] == "sleeping\n"
    assert_timed(final, before, after)


def test_runner_records_a_client_that_goes_away_mid_build(runner: Runner) -> None:
    n = nonce()
    drv = runner.drv_path("slow", n)
    client = runner.start_build("slow", n)
    try:
        deadline = time.monotonic() + 60
        while not any(r[0]["derivation_path"] == drv for r in runner.records().values()):
            assert time.monotonic() < deadline, runner.runner_log()
            assert client.poll() is None
            time.sleep(0.1)
        killed = time.time()
    finally:
        kill_group(client)
    final = runner.wait_final(drv)[-1]
    assert final["build_status"] == "client_disconnect"
    assert final["status_message"].startswith("ssh session closed")
    assert when(final["start_time"]) + final["duration_seconds"] == pytest.approx(killed, abs=2)
    assert final["duration_seconds"] < TIMEOUT + 1


def test_runner_stopped_mid_build_records_internal_error(runner: Runner) -> None:
    n = nonce()
    drv = runner.drv_path("slow", n)
    client = runner.start_build("slow", n)
    try:
        deadline = time.monotonic() + 60
        while not (running := [r for r in runner.records().values() if r[0]["derivation_path"] == drv]):
            assert time.monotonic() < deadline, runner.runner_log()
            time.sleep(0.1)
        # source_id = host:<session ns>.<runner pid>.<n>:<drv hash>
        runner_pid = int(running[0][0]["source_id"].split(":")[1].split(".")[1])
        os.kill(runner_pid, signal.SIGTERM)
        final = runner.wait_final(drv)[-1]
        assert client.wait(timeout=60) != 0
    finally:
        kill_group(client)
    assert final["build_status"] == "internal_error"
    assert final["status_message"].startswith(f"the runner was stopped by signal {signal.SIGTERM.value} during")
    assert final["duration_seconds"] < TIMEOUT


def test_runner_check_reports_a_usable_set_up(runner: Runner, tmp_path: Path) -> None:
    out = subprocess.run(
        [*buildreport_command(), "runner", "--spool", str(tmp_path / "spool"), "--check"],
        capture_output=True,
        text=True,
        env={**runner.client_env()},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ok  nix-daemon:" in out.stdout and "ok  spool:" in out.stdout
    missing = subprocess.run(
        [
            *buildreport_command(),
            "runner",
            "--spool",
            str(tmp_path / "s"),
            "--check",
            "--nix-daemon",
            "no-such-nix-daemon",
        ],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 1
    assert "missing  nix-daemon: `no-such-nix-daemon` not found" in missing.stdout


# Stands in for nix-daemon: the first session it serves, the real daemon is killed a second into it.
DYING_DAEMON = """#!/bin/sh
if [ -e "{marker}" ]; then
    rm -f "{marker}"
    exec 3<&0
    nix-daemon "$@" <&3 &
    daemon=$!
    (sleep 1; kill -9 $daemon) &
    wait $daemon
    kill -9 $$  # end as the daemon did: by SIGKILL
fi
exec nix-daemon "$@"
"""


def test_runner_records_a_daemon_that_dies_as_internal_error_and_links_the_rebuild(tmp_path: Path) -> None:
    require_tools()
    marker = tmp_path / "kill-next-daemon"
    daemon = tmp_path / "dying-nix-daemon"
    daemon.write_text(DYING_DAEMON.format(marker=marker))
    daemon.chmod(0o755)
    # The killed daemon never removes its build's folder: it goes in this test's own temporary folder.
    builds = tmp_path / "t"
    builds.mkdir()
    runner = Runner(tmp_path / "r", ["--nix-daemon", str(daemon)], runner_env={"TMPDIR": str(builds)})
    runner.start()
    try:
        n = nonce()
        drv = runner.drv_path("nap", n)
        marker.touch()
        failed = runner.build("nap", n)
        assert failed.returncode != 0
        first = runner.wait_final(drv)[-1]
        assert first["build_status"] == "internal_error"
        assert "nix-daemon was killed by signal 9 during the build" in first["status_message"]
        assert "napping" in first["status_message"]  # the last lines of the log follow the reason
        runner.clear_load()
        # The killed daemon's builder lives on for its `sleep 3`; the rebuild starts once it has gone.
        time.sleep(3.5)
        again = runner.build("nap", n)
        assert again.returncode == 0, again.stderr
        earlier, rebuilt = (records[-1] for records in runner.wait_builds(drv, 2))
        assert earlier == first
        assert rebuilt["build_status"] == "built"
        assert rebuilt["restart_of_source_id"] == first["source_id"]
        assert first["restart_of_source_id"] is None
    finally:
        runner.stop()


# --- the relay, without Nix: a stand-in daemon that echoes what it gets ---------------------------


def run_relay(
    tmp_path: Path, payload: bytes, spool: Path, daemon: str = "exec cat"
) -> tuple[subprocess.CompletedProcess[bytes], str]:
    echo = tmp_path / "echo-daemon"
    echo.write_text(f"#!/bin/sh\n{daemon}\n")
    echo.chmod(0o755)
    state = tmp_path / "state"
    proc = subprocess.run(
        [
            *buildreport_command(),
            "runner",
            "--spool",
            str(spool),
            "--state-dir",
            str(state),
            "--nix-daemon",
            str(echo),
            "--no-cgroup",
        ],
        input=payload,
        capture_output=True,
        timeout=60,
        env={**os.environ, "SSH_ORIGINAL_COMMAND": "nix-daemon --stdio"},
    )
    log = (state / "runner.log").read_text() if (state / "runner.log").exists() else ""
    return proc, log


def test_relay_passes_every_byte_both_ways_when_the_stream_is_not_the_protocol(tmp_path: Path) -> None:
    payload = random.Random(7).randbytes(3 * 1024 * 1024)
    proc, log = run_relay(tmp_path, payload, tmp_path / "spool")
    assert proc.returncode == 0
    assert proc.stdout == payload
    [line] = [line for line in log.splitlines() if "recording off" in line]
    assert "decoding failed: protocol ?, the handshake, client stream byte 0: " in line
    assert "the client did not open with the worker magic" in line
    assert not list((tmp_path / "spool").glob("*.jsonl"))


def test_relay_passes_a_real_session_unchanged_even_when_the_spool_cannot_be_written(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("a file where a folder should be")
    spool = tmp_path / "file" / "spool"
    client = (DATA / "ok.client").read_bytes()
    # The echo daemon answers the build request with the client's own bytes: not a valid answer, and
    # the relay must not care.
    proc, log = run_relay(tmp_path, client, spool)
    assert proc.returncode == 0
    assert proc.stdout == client
    [line] = [line for line in log.splitlines() if "recording off" in line]
    # The whole request arrives before the stand-in answers at all: no real client does that.
    assert "decoding failed: protocol ?, the handshake, client stream: a build before the handshake" in line


# A daemon of a protocol newer than any the runner knows (1.40): its hello, then it echoes the client.
NEWER_DAEMON = "head -c 16 >/dev/null; printf 'oixd\\0\\0\\0\\0\\050\\001\\0\\0\\0\\0\\0\\0'; exec cat"


def test_a_session_of_a_newer_protocol_is_relayed_and_the_log_names_what_was_not_recorded(tmp_path: Path) -> None:
    daemon = tmp_path / "newer-daemon"
    daemon.write_text(f"#!/bin/sh\n{NEWER_DAEMON}\n")
    daemon.chmod(0o755)
    state = tmp_path / "state"
    client = (DATA / "ok.client").read_bytes()
    client = client[:8] + (0x128).to_bytes(8, "little") + client[16:]  # the client speaks 1.40 too
    command = [*buildreport_command(), "runner", "--spool", str(tmp_path / "spool"), "--state-dir", str(state)]
    proc = subprocess.Popen(
        [*command, "--nix-daemon", str(daemon), "--no-cgroup"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "SSH_ORIGINAL_COMMAND": "nix-daemon --stdio"},
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(client[:16])  # as a real client: its hello, then the rest once the daemon answered
        proc.stdin.flush()
        assert proc.stdout.read(16)[8:] == (0x128).to_bytes(8, "little")
        proc.stdin.write(client[16:])
        proc.stdin.close()
        assert proc.stdout.read() == client[16:]
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    log = (state / "runner.log").read_text()
    assert "protocol 1.40, client 1.40, daemon 1.40: protocol 1.40 is not one this runner decodes" in log
    [line] = [line for line in log.splitlines() if "not recorded: a build of" in line]
    assert "-ok-test.drv (protocol 1.40 is not one this runner decodes" in line
    assert not list((tmp_path / "spool").glob("*.jsonl"))


def test_runner_refuses_a_session_that_asks_for_another_command(tmp_path: Path) -> None:
    proc = subprocess.run(
        [*buildreport_command(), "runner", "--spool", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SSH_ORIGINAL_COMMAND": "sh -c id"},
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.strip() == (
        "buildreport runner serves ssh-ng:// remote builds (`nix-daemon --stdio`) only; "
        "this session asked for `sh -c id`"
    )
    assert "Traceback" not in proc.stderr


# --- pure parts -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "duration", "expected"),
    [
        (BuildResultStatus.Built, 1.0, "built"),
        (BuildResultStatus.AlreadyValid, 0.0, None),
        (BuildResultStatus.Substituted, 0.0, None),
        (BuildResultStatus.PermanentFailure, 1.0, "build_failed"),
        (BuildResultStatus.DependencyFailed, 0.0, "build_failed"),
        (BuildResultStatus.LogLimitExceeded, 1.0, "build_failed"),
        (BuildResultStatus.TimedOut, 1.0, "timeout"),
        (BuildResultStatus.PermanentFailure, 10.0, "timeout"),  # failed at the runner's own limit
        (BuildResultStatus.MiscFailure, 1.0, "internal_error"),
    ],
)
def test_status_of_a_build_result(status: int, duration: float, expected: str | None) -> None:
    assert status_of(BuildResult(status, ""), duration, timeout=10) == expected


def test_status_of_a_daemon_error_is_internal_error() -> None:
    assert status_of(DaemonError("boom"), 1.0, None) == "internal_error"


def test_runner_writes_to_a_local_database_and_the_api_answers_with_the_clients_tags(
    tmp_path: Path, fresh_db: Any
) -> None:
    require_tools()
    env = Env(tmp_path, fresh_db(tmp_path))
    runner = Runner(
        tmp_path / "r", [], tags={"GITHUB_REPOSITORY": "acme/webshop"}, sink=["--db", str(env.db), "--account", "acme"]
    )
    runner.start()
    try:
        n = nonce()
        drv = runner.drv_path("ok", n)
        assert runner.build("ok", n).returncode == 0
        runner.wait_sessions(1)
    finally:
        runner.stop()
    with env.client() as client:
        response = client.get(
            "/builds",
            params={"tags": "GITHUB_REPOSITORY:acme/webshop", "derivation_path": drv},
            headers=auth(env.token()),
        )
    assert response.status_code == 200, response.text
    [build] = response.json()
    assert build["build_status"] == "built"
    assert build["tags"] == {"GITHUB_REPOSITORY": "acme/webshop", "drvtag": "yes", "team": "builders"}
    assert [o["name"] for o in build["outputs"]] == ["out"]
    assert "recorded" in runner.runner_log()


def test_builds_go_from_client_through_runner_spool_and_pusher_to_the_api(
    tmp_path: Path, serve: Callable[..., Server]
) -> None:
    """client -> ssh-ng -> runner -> spool -> buildreport push -> central server -> the API, with the client's tags."""
    require_tools()
    env = Env(tmp_path)
    write_token, read_token = env.token(scopes=("build:write",)), env.token()
    server = serve(env.db)
    job = {"GITHUB_REPOSITORY": "acme/webshop", "GITHUB_RUN_ID": "4242"}
    runner = Runner(tmp_path / "r", ["--timeout", str(TIMEOUT)], tags=job)
    runner.start()
    try:
        n = nonce()
        drvs = {attr: runner.drv_path(attr, n) for attr in ("ok", "fail")}
        assert runner.build("ok", n).returncode == 0
        assert runner.build("fail", n).returncode != 0
        finals = {attr: runner.wait_final(drv)[-1] for attr, drv in drvs.items()}
    finally:
        runner.stop()
    push = subprocess.run(
        [*buildreport_command(), "push", "--to", server.url, "--token", write_token, str(runner.spool)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert push.returncode == 0, push.stderr
    assert list(runner.spool.glob("*.jsonl")) == []
    response = httpx.get(
        f"{server.url}/builds",
        params={"tags": "GITHUB_REPOSITORY:acme/webshop,GITHUB_RUN_ID:4242"},
        headers=auth(read_token),
    )
    assert response.status_code == 200, response.text
    builds = {b["derivation_path"]: b for b in response.json()}
    assert sorted(builds) == sorted(drvs.values())
    for attr, drv in drvs.items():
        build, final = builds[drv], finals[attr]
        assert build["tags"] == final["tags"] and job.items() <= build["tags"].items()
        for key in ("build_status", "status_message", "cpu_seconds", "outputs", "system", "peak_memory_use_kilobytes"):
            assert build[key] == final[key], key
        for key in ("create_time", "start_time"):
            assert when(build[key]) == pytest.approx(when(final[key]), abs=1e-6)
        assert build["duration_seconds"] == pytest.approx(final["duration_seconds"], abs=1e-6)
    assert builds[drvs["ok"]]["build_status"] == "built"
    assert builds[drvs["fail"]]["build_status"] == "build_failed"


# --- the recorder, driven by events as the relay would send them ------------------------------------


class FixedCpu:
    """A CPU meter that reads what the test says."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.cgroup = None
        self.source = "test"

    def read(self) -> float:
        return self.seconds


def test_a_session_of_two_builds_records_each_with_its_own_times_and_cpu(tmp_path: Path) -> None:
    config = RunnerConfig(
        sink=SpoolSink(tmp_path / "spool"), state_dir=tmp_path / "state", cpu_count=2, allocated_megabytes=512
    )
    session = Session(config, {"SERVICE_TAG_job": "7"})
    session.cpu = cpu = FixedCpu()
    [first] = scan_requests("fail")
    [second] = scan_requests("ok")
    t0 = session.started
    failed = BuildResult(BuildResultStatus.PermanentFailure, "\x1b[31;1merror:\x1b[0m builder failed")
    cpu.seconds = 1.0
    session._handle(t0 + 1, "request", first)
    session._handle(t0 + 2, "started", first.drv_path)
    session._handle(t0 + 2.5, "log", "about to fail")
    cpu.seconds = 3.0
    session._handle(t0 + 4, "finished", failed)
    session._handle(t0 + 5, "request", second)
    session._handle(t0 + 6, "started", second.drv_path)
    cpu.seconds = 4.0
    session._handle(t0 + 10, "client_closed", None)
    session._handle(t0 + 11, "daemon_exit", (0, None))
    session._flush_held()
    records: dict[str, list[dict]] = {}
    for path in sorted((tmp_path / "spool").glob("*.jsonl")):
        record = json.loads(path.read_text())
        records.setdefault(record["derivation_path"], []).append(record)
    fail, ok = records[first.drv_path][-1], records[second.drv_path][-1]
    assert [r["build_status"] for r in records[first.drv_path]] == ["running", "build_failed"]
    assert when(fail["create_time"]) == pytest.approx(t0) and when(fail["start_time"]) == pytest.approx(t0 + 2)
    assert fail["duration_seconds"] == pytest.approx(2) and fail["cpu_seconds"] == 2
    assert fail["average_cpu_utilization"] == pytest.approx(2 / (2 * 2))
    assert fail["status_message"] == "error: builder failed" and fail["log"] == "about to fail\n"
    # The second build was asked for later in the same session, and the client left during it.
    assert when(ok["create_time"]) == pytest.approx(t0 + 5) and ok["queue_time_seconds"] == pytest.approx(1)
    assert ok["build_status"] == "client_disconnect" and ok["duration_seconds"] == pytest.approx(4)
    assert ok["cpu_seconds"] == 1
    assert fail["peak_memory_use_kilobytes"] is None and ok["peak_memory_use_kilobytes"] is None
    assert fail["tags"] == {"job": "7"} and ok["tags"] == {"job": "7", "drvtag": "yes"}
    assert fail["source_id"] != ok["source_id"]


def one_build(tmp_path: Path, result: BuildResult, meter: tuple[float, float], seconds: float) -> dict[str, Any]:
    """The final record of a session of one `ok` build that took `seconds`, the meter reading `meter`."""
    config = RunnerConfig(
        sink=SpoolSink(tmp_path / "spool"), state_dir=tmp_path / "state", cpu_count=2, allocated_megabytes=512
    )
    session = Session(config, {})
    session.cpu = cpu = FixedCpu()
    [request] = scan_requests("ok")
    t0 = session.started
    cpu.seconds = meter[0]
    session._handle(t0, "request", request)
    session._handle(t0, "started", request.drv_path)
    cpu.seconds = meter[1]
    session._handle(t0 + seconds, "finished", result)
    session._flush_held()
    *_, final = [json.loads(p.read_text()) for p in sorted((tmp_path / "spool").glob("*.jsonl"))]
    return final


def test_the_cpu_time_nix_sends_is_the_builds_cpu_seconds(tmp_path: Path) -> None:
    result = BuildResult(BuildResultStatus.Built, "", 1, False, 0, 4, {}, cpu_user_us=2_600_000, cpu_system_us=900_000)
    final = one_build(tmp_path, result, meter=(10.0, 20.0), seconds=4)
    assert final["cpu_seconds"] == 4  # 3.5 s of the build's own, not the 10 s the session's meter saw
    assert final["average_cpu_utilization"] == pytest.approx(4 / (4 * 2))


def test_without_nixs_cpu_time_the_sessions_meter_is_used(tmp_path: Path) -> None:
    final = one_build(tmp_path, BuildResult(BuildResultStatus.Built, ""), meter=(1.0, 4.0), seconds=3)
    assert final["cpu_seconds"] == 3 and final["average_cpu_utilization"] == pytest.approx(3 / (3 * 2))


def test_cpu_seconds_and_utilization_come_from_the_same_whole_seconds(tmp_path: Path) -> None:
    # 0.4 s of CPU in 2 s on 2 CPUs: recorded as 0 s, so the share is 0 too, never 0.1 beside 0 s.
    result = BuildResult(BuildResultStatus.Built, "", cpu_user_us=300_000, cpu_system_us=100_000)
    final = one_build(tmp_path, result, meter=(0.0, 0.4), seconds=2)
    assert final["cpu_seconds"] == 0 and final["average_cpu_utilization"] == 0


def test_a_build_never_starts_before_it_was_created_even_when_the_clock_steps_back(tmp_path: Path) -> None:
    from buildreport.record.runner_build import Build

    session = Session(RunnerConfig(sink=lambda record: None, state_dir=tmp_path, cpu_count=2,
                                   allocated_megabytes=1024), {})
    request = BuildRequest("/nix/store/" + "a" * 32 + "-x.drv", (), (), "x86_64-linux", "/bin/sh", (), {}, 0)
    build = Build(1, request, "host:1:a", create_time=1_000.5, requested=1_000.5, start=999.0, end=1_010.5)
    build.status = "built"
    record = session.record(build, final=True)
    assert record["start_time"] == record["create_time"]
    assert (record["queue_time_seconds"], record["duration_seconds"]) == (0.0, 10.0)
