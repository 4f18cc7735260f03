"""The collector without Nix: JSON log events written to its socket as Nix 2.34 writes them (events seen
with Nix 2.34.8: a `nix build` of its own, a nix-daemon's connection, an ssh-ng:// client and its builder)."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import buildreport_command
from nix_runner import Runner, require_tools
from nixbuilds import DERIVATIONS
from nixversions import NixVersion, prepare

from buildreport.models import BuildOutput
from buildreport.record import nix
from buildreport.record.collect import CollectConfig, CollectError, Collector, Recorder, StoreView, open_socket
from buildreport.record.destinations import SpoolSink
from buildreport.record.spool import pending_files

OK = "/nix/store/qm75ivbwcwk1b41bdv86ci0gpad81ack-ok-test.drv"
OK_OUT = "/nix/store/n7pj50zid7gjpr6pkb52lk7zj3w1agb8-ok-test"
FAIL = "/nix/store/kh8cyvbcwl7z0n0364avamx9gvxj0yab-fail-test.drv"
NAR_HASH = "sha256-2VD35R+ze2oS2wod5MbPe9ckn9zHIiCLCb/QdhzXR94="


class FakeStore(StoreView):
    """Derivations and valid outputs as a test sets them; `gate`, when set, holds every question until opened."""

    def __init__(self) -> None:
        super().__init__("/nonexistent/db.sqlite")
        self.valid: set[str] = set()
        self.gate: threading.Event | None = None

    def derivation(self, drv_path: str) -> nix.Derivation | None:
        if self.gate is not None:
            self.gate.wait(600)
        if drv_path == OK:
            return nix.Derivation(OK, "x86_64-linux", {"out": OK_OUT}, {"SERVICE_TAG_project": "web"})
        if drv_path == FAIL:
            return nix.Derivation(FAIL, "x86_64-linux", {"out": FAIL[:-4]}, {})
        return None

    def outputs(self, drv_path: str, drv: nix.Derivation | None) -> list[BuildOutput]:
        if drv is None or drv.outputs["out"] not in self.valid:
            return []
        return [BuildOutput(name="out", path=drv.outputs["out"], nar_hash=NAR_HASH, nar_size_bytes=288)]


def ev(**fields: Any) -> bytes:
    return json.dumps(fields).encode() + b"\n"


def build_start(act: int, drv: str, machine: str = "", parent: int = 0) -> bytes:
    return ev(
        action="start", id=act, level=3, parent=parent, type=105, text=f"building '{drv}'", fields=[drv, machine, 1, 1]
    )


def log_line(act: int, text: str) -> bytes:
    return ev(action="result", id=act, type=101, fields=[text])


def stop(act: int) -> bytes:
    return ev(action="stop", id=act)


class Running:
    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "nix-log.sock"
        self.spool = tmp_path / "spool"
        self.store = FakeStore()
        self.notes: list[str] = []
        config = CollectConfig(
            sink=SpoolSink(self.spool), cpu_count=4, allocated_megabytes=2048, log=self.notes.append, store=self.store
        )
        self.collector = Collector(open_socket(self.path, self.notes.append), config)
        self.thread = threading.Thread(target=self.collector.serve, daemon=True)
        self.thread.start()

    def send(self, *chunks: bytes) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(self.path))
            for chunk in chunks:
                conn.sendall(chunk)

    def records(self, count: int, timeout: float = 20) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            found = [json.loads(line) for f in pending_files(self.spool) for line in f.read_bytes().splitlines()]
            if len(found) >= count or time.monotonic() > deadline:
                return found
            time.sleep(0.05)

    def stop(self) -> None:
        self.collector.stop()
        self.thread.join(30)


@pytest.fixture
def running(tmp_path: Path) -> Any:
    collector = Running(tmp_path)
    yield collector
    collector.stop()


def test_a_build_whose_outputs_are_valid_is_recorded_built_with_its_log_and_tags(running: Running) -> None:
    running.store.valid.add(OK_OUT)
    running.send(build_start(7, OK), log_line(7, "building"), log_line(7, "to-stderr"), stop(7))
    first, last = running.records(2)
    assert first["build_status"] == "running" and first["source_id"] == last["source_id"]
    assert last["build_status"] == "built" and last["status_message"] is None
    assert last["derivation_path"] == OK and last["system"] == "x86_64-linux" and last["tags"] == {"project": "web"}
    assert last["outputs"] == [{"name": "out", "path": OK_OUT, "nar_hash": NAR_HASH, "nar_size_bytes": 288}]
    assert last["log"] == "building\nto-stderr\n"
    assert last["cpu_seconds"] == 0 and last["average_cpu_utilization"] is None  # the log says nothing of CPU
    assert last["cpu_count"] == 4 and last["allocated_megabytes"] == 2048
    assert last["duration_seconds"] >= 0


def test_a_failed_build_takes_the_error_message_that_follows_its_stop(running: Running) -> None:
    error = f"\u001b[31;1merror:\u001b[0m builder for '{FAIL}' failed with exit code 1"
    running.send(build_start(8, FAIL), log_line(8, "about to fail"), stop(8), ev(action="msg", level=0, msg=error))
    *_, last = running.records(2)
    assert last["build_status"] == "build_failed" and "failed with exit code 1" in last["status_message"]
    assert last["outputs"] == [] and last["log"] == "about to fail\n"


def test_a_failed_daemon_build_without_a_message_says_its_last_log_lines(running: Running) -> None:
    running.send(build_start(9, FAIL), log_line(9, "about to fail"), stop(9))
    *_, last = running.records(2)
    assert last["build_status"] == "build_failed" and last["status_message"] == "about to fail"


def test_a_build_sent_to_another_machine_is_left_to_that_machine(running: Running) -> None:
    # The client's log: its own activity names the remote machine; then it relays the builder's, machine "".
    running.store.valid.add(OK_OUT)
    running.send(build_start(20, OK, "ssh-ng://runner"), build_start(21, OK, "", parent=3), stop(21), stop(20))
    time.sleep(0.5)
    assert running.records(1, timeout=1) == []


def test_a_daemon_build_relayed_to_its_client_is_recorded_once(running: Running) -> None:
    running.store.valid.add(OK_OUT)
    running.send(build_start(30, OK), stop(30))  # the daemon's connection
    running.send(build_start(30, OK), stop(30))  # its client's, carrying the same activity
    time.sleep(0.5)
    assert [r["build_status"] for r in running.records(2)] == ["running", "built"]


def test_the_reader_keeps_draining_while_the_recorder_is_stuck(running: Running) -> None:
    # Nix writes with blocking writes: if the collector stopped reading, builds would stall.
    running.store.gate = gate = threading.Event()
    lines = b"".join(log_line(40, f"log line {i:07d} " + "x" * 80) for i in range(200_000))  # about 25 MB
    sender = threading.Thread(target=running.send, args=(build_start(40, OK), lines, stop(40)))
    sender.start()
    sender.join(60)
    finished = not sender.is_alive()
    gate.set()
    assert finished, "writing to the collector's socket blocked while its recorder was busy"
    *_, last = running.records(2, timeout=60)
    assert last["build_status"] == "build_failed"


def test_connections_of_other_users_are_read_but_not_recorded() -> None:
    written: list[Any] = []
    recorder = Recorder(CollectConfig(sink=written.append, cpu_count=1, allocated_megabytes=0, log=lambda _: None,
                                      store=FakeStore()))  # fmt: skip
    recorder.opened(1, pid=123, uid=1000)
    recorder.data(time.time(), 1, build_start(50, OK))
    assert written == []


def test_a_stale_socket_of_an_earlier_run_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    old = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old.bind(str(path))
    old.close()  # the socket file stays, nobody listens
    open_socket(path, print).close()
    assert path.is_socket()


def test_a_file_nix_wrote_while_no_socket_was_there_is_kept_aside(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    path.write_text('{"action":"msg","level":3,"msg":"hello"}\n')
    notes: list[str] = []
    open_socket(path, notes.append).close()
    [aside] = tmp_path.glob("s.sock.*.unrecorded.jsonl")
    assert "hello" in aside.read_text() and path.is_socket()
    assert str(aside) in notes[0]


def test_a_socket_someone_listens_at_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    other = open_socket(path, print)
    try:
        with pytest.raises(CollectError, match="already listens"):
            open_socket(path, print)
    finally:
        other.close()


# --- with Nix 2.34 (the first Debian Nix with json-log-path) ---------------------------------------------------


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_collect_records_the_builds_of_nix_build_and_of_the_daemon_with_nix_2_34(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    version = prepare("2.34", tmp_path_factory)
    sock, spool, conf = tmp_path / "nix-log.sock", tmp_path / "spool", tmp_path / "nix"
    conf.mkdir()
    (conf / "nix.conf").write_text(version.nix_conf + f"json-log-path = {sock}\n")
    (conf / "drvs.nix").write_text(DERIVATIONS)
    env = {**version.env(), "NIX_CONF_DIR": str(conf)}
    state = version.host_path("/nix/var/nix")
    command = [*buildreport_command(), "collect", "--socket", str(sock), "--spool", str(spool)]
    with open(tmp_path / "collect.log", "w") as notes:
        collector = subprocess.Popen([*command, "--nix-state-dir", str(state)], env=env, stderr=notes)
    daemon: subprocess.Popen[str] | None = None
    try:
        wait_for(sock.is_socket, 30, "the collector did not listen")
        tag = f"{time.time_ns()}"
        argv = ["nix", "build", "-f", str(conf / "drvs.nix"), "ok", "fail", "--keep-going", "--no-link"]
        own = version.run([*argv, "--argstr", "nonce", tag], env=env, capture_output=True, text=True, timeout=120)
        assert own.returncode != 0  # `fail` failed
        socket_file = version.host_path("/nix/var/nix/daemon-socket/socket")
        socket_file.unlink(missing_ok=True)  # an earlier daemon's: wait for this one's
        daemon = version.popen(["nix-daemon"], env=env)
        wait_for(socket_file.is_socket, 30, "nix-daemon did not start")
        legacy = ["nix-build", str(conf / "drvs.nix"), "-A", "ok", "--argstr", "nonce", f"{tag}-d", "--no-out-link"]
        via_daemon = version.run(legacy, env={**env, "NIX_REMOTE": "daemon"}, capture_output=True, text=True)
        assert via_daemon.returncode == 0, via_daemon.stderr

        def finals() -> dict[str, dict[str, Any]]:
            found = [json.loads(line) for f in pending_files(spool) for line in f.read_bytes().splitlines()]
            return {r["derivation_path"]: r for r in found if r["build_status"] != "running"}

        wait_for(lambda: len(finals()) >= 3, 30, "three builds were not recorded")
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(timeout=30)
        collector.terminate()
        collector.wait(timeout=30)
    records = finals()
    assert sorted(nix.drv_name(drv) for drv in records) == ["fail-test", "ok-test", "ok-test"]
    built = [r for r in records.values() if r["build_status"] == "built"]
    [failed] = [r for r in records.values() if r["build_status"] == "build_failed"]
    assert len(built) == 2
    assert "failed with exit code 1" in failed["status_message"] and failed["log"] == "about to fail\n"
    for record in built:
        [output] = record["outputs"]
        info = path_info_of(version, env, output["path"])
        assert (output["nar_hash"], output["nar_size_bytes"]) == (info["narHash"], info["narSize"])
        assert record["tags"] == {"project": "web", "team": "drv-team"} and record["log"].startswith("building\n")
    assert via_daemon.stdout.strip() in {r["outputs"][0]["path"] for r in built}  # the daemon's build too


def path_info_of(version: NixVersion, env: dict[str, str], path: str) -> dict[str, Any]:
    done = version.run(["nix", "path-info", "--json", "--json-format", "1", path], env=env, capture_output=True)
    infos = json.loads(done.stdout)
    return infos[path] if isinstance(infos, dict) else infos[0]


def test_collect_records_a_remote_build_arriving_over_ssh_ng_once_with_nix_2_34(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    require_tools()
    version = prepare("2.34", tmp_path_factory)
    sock, spool = tmp_path / "nix-log.sock", tmp_path / "collected"
    path = f"{version.bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"
    runner = Runner(tmp_path / "runner", ["--nix-daemon", str(version.bin_dir / "nix-daemon"), "--no-cgroup"],
                    runner_env={"PATH": path})  # fmt: skip
    (runner.runner_conf / "nix.conf").write_text(version.nix_conf + f"json-log-path = {sock}\n")
    command = [*buildreport_command(), "collect", "--socket", str(sock), "--spool", str(spool)]
    state = version.host_path("/nix/var/nix")
    with open(tmp_path / "collect.log", "w") as notes:
        collector = subprocess.Popen([*command, "--nix-state-dir", str(state)], env=version.env(), stderr=notes)
    runner.start()
    try:
        wait_for(sock.is_socket, 30, "the collector did not listen")
        tag = str(time.time_ns())
        done = runner.build("ok", tag)  # a Nix 2.8 client: the derivation travels in memory, not as a .drv
        assert done.returncode == 0, done.stderr
        out = done.stdout.strip()

        def collected() -> list[dict[str, Any]]:
            return [json.loads(line) for f in pending_files(spool) for line in f.read_bytes().splitlines()]

        wait_for(lambda: any(r["build_status"] != "running" for r in collected()), 30, "no build was collected")
        time.sleep(1)  # time enough for a second record of the same build, which must not come
    finally:
        runner.stop()
        collector.terminate()
        collector.wait(timeout=30)
    records = collected()
    assert len({r["source_id"] for r in records}) == 1  # one build, recorded once
    final = records[-1]
    assert final["build_status"] == "built" and final["derivation_path"].endswith("-ok-test.drv")
    assert [o["path"] for o in final["outputs"]] == [out]  # found through the deriver Nix registered
    assert final["system"] == "x86_64-linux" and final["log"] == "building\nto-stderr\n"
    runner_final = runner.wait_final(final["derivation_path"])[-1]  # the runner recorded it as well
    assert runner_final["outputs"] == final["outputs"]
