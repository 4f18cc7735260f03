"""`buildreport record -- nix-build …` against real Nix: every recorded field checked against Nix and the clock."""

from __future__ import annotations

import bz2
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import nixbuilds
import pytest
from conftest import query
from nixbuilds import (
    COMMANDS,
    check_clock,
    final,
    instantiate,
    nix_build,
    nonce,
    path_info,
    record_command,
    spooled,
    when,
)
from nixversions import NixVersion

from buildreport.models import BuildRecord
from buildreport.record import nix
from buildreport.record.local import (
    MIN_UTILIZATION_SECONDS,
    Recorder,
    UsageError,
    exit_like,
    log_tail,
    nix_command_line,
    single_user,
    verbosity,
)
from buildreport.record.spool import pending_files

nix_files = nixbuilds.nix_files  # the fixture: a nix.conf of the test's own, for each Nix version
nix_version = nixbuilds.nix_version
# CPU time is read in clock ticks (10 ms) at both ends of a build, and a build's start is when its event
# reached the recorder: a busy machine can make a build's CPU time look a few ticks longer than its wall time.
CPU_READING_SLACK = 0.05


# --- the command line, without Nix -------------------------------------------------------------------------


def test_internal_json_is_asked_for_and_a_users_log_format_dropped() -> None:
    argv, kind = nix_command_line(["nix-build", "a.nix", "--log-format", "bar", "-A", "x", "--log-format=raw"])
    assert (argv, kind) == (["nix-build", "a.nix", "-A", "x", "--log-format", "internal-json", "-v"], "nix-build")
    argv, kind = nix_command_line(["/usr/bin/nix", "build", "-f", "a.nix", "x", "-L"])
    assert argv == ["/usr/bin/nix", "build", "-f", "a.nix", "x", "-L", "--log-format", "internal-json", "-v"]
    assert kind == "nix build"
    argv, _ = nix_command_line(["nix-build", "-E", "x", "--", "--weird-file.nix"])
    assert argv == ["nix-build", "-E", "x", "--log-format", "internal-json", "-v", "--", "--weird-file.nix"]


def test_a_build_never_starts_before_the_command_even_when_the_clock_steps_back() -> None:
    from buildreport.record.local import LocalBuild

    recorder = Recorder(["nix-build", "a.nix"], lambda records: None, cpu_count=2, allocated_megabytes=1024)
    recorder.create_time = 1_000.5
    build = LocalBuild("/nix/store/" + "a" * 32 + "-x.drv", 1, "", 999.0, "host:1:a")
    drv = nix.Derivation(build.drv_path, "x86_64-linux", {}, {})
    common = recorder._common(build, drv)
    assert common["start_time"] == common["create_time"]
    assert common["queue_time_seconds"] == 0.0


@pytest.mark.parametrize("command", [[], ["nix-shell", "a.nix"], ["nix", "develop"], ["make"]])
def test_other_commands_are_refused(command: list[str]) -> None:
    with pytest.raises(UsageError):
        nix_command_line(command)


def test_messages_are_shown_up_to_the_users_verbosity() -> None:
    assert verbosity(["nix-build", "a.nix"]) == 3
    assert verbosity(["nix-build", "-vv", "--verbose", "a.nix"]) == 6
    assert verbosity(["nix", "build", "--quiet"]) == 2


def test_a_long_log_keeps_its_last_whole_lines() -> None:
    log = "".join(f"line {n}\n" for n in range(1000))
    assert log_tail(log, len(log)) == log and log_tail(None) is None
    tail = log_tail(log, 100)
    assert tail is not None
    first, rest = tail.split("\n", 1)
    assert log.endswith(rest) and rest.startswith("line ") and len(rest.encode()) <= 100
    assert first == f"[{len(log) - len(rest)} earlier bytes of this log are not kept]"


@pytest.mark.parametrize("returncode", [0, 1, 100, -signal.SIGTERM, -signal.SIGINT])
def test_the_recorder_ends_as_the_command_did(returncode: int) -> None:
    code = f"import sys; from buildreport.record.local import exit_like; sys.exit(exit_like({returncode}))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == returncode
    assert exit_like(3) == 3


def test_a_daemon_store_is_not_single_user() -> None:
    assert not single_user(["nix-build"], {"NIX_REMOTE": "daemon"})
    assert not single_user(["nix-build", "--store", "ssh://x"], {})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--", "nix-build", "x.nix"], "give --spool DIR or --db PATH --account NAME"),
        (["--db", "x.db", "--", "nix-build", "x.nix"], "--db needs --account NAME"),
        (["--db", "x.db", "--account", "Not Valid", "--", "nix-build"], "is not an account name"),
        (["--spool", "s", "--tag", "novalue", "--", "nix-build"], "'novalue' is not KEY=VALUE"),
        (["--spool", "s", "--", "make", "all"], "wraps nix-build or nix build, not 'make all'"),
        (["--db", "no/such/dir/x.db", "--account", "acme", "--", "nix-build"], "directory no/such/dir does not exist"),
    ],
)
def test_bad_invocations_are_one_clear_line(tmp_path: Path, args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "buildreport", "record", *args], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode != 0
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "s").exists()


def test_a_machine_without_nix_is_one_clear_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "buildreport", "record", "--spool", "s", "--", "nix-build", "x.nix"],
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PATH": str(tmp_path / "empty")},
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr == "Error: cannot run nix-build: No such file or directory\n"
    assert not (tmp_path / "s").exists()


# --- real builds -------------------------------------------------------------------------------------------


def test_builds_are_recorded_running_then_final_with_what_nix_says(
    nix_files: Path, nix_version: NixVersion, tmp_path: Path
) -> None:
    spool, tag = tmp_path / "spool", nonce()
    env = {**os.environ, "SERVICE_TAG_team": "env-team", "SERVICE_TAG_ci": "yes"}
    before = time.time()
    done = subprocess.run(
        record_command(nix_version, spool, "--tag", "job=unit", "--tag", "ci=cli", "--cpu-count", "4",
                       "--allocated-megabytes", "2048", "--",
                       *nix_build(nix_files, tag, "ok", "fail", "multi"), "--keep-going"),
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    after = time.time()
    assert done.returncode == 100  # legacy nix-build's "a build failed"

    records = spooled(spool)
    assert [r["build_status"] for r in records[:3]] == ["running"] * 3
    assert len(pending_files(spool)) == 4  # a file for each start, then the final records together
    running, last = final(records[:3]), final(records[3:])
    assert sorted(last) == ["fail-test", "multi-test", "ok-test"]
    for name, rec in last.items():
        assert running[name]["source_id"] == rec["source_id"]
        assert rec["source_id"].endswith(":" + os.path.basename(rec["derivation_path"]).split("-")[0])
        assert running[name]["start_time"] == rec["start_time"]
        assert running[name]["duration_seconds"] is None and running[name]["log"] is None
        check_clock(rec, before, after)
        assert (rec["cpu_count"], rec["allocated_megabytes"]) == (4, 2048)
        # Builds of a few milliseconds: no CPU second; three builds, no one peak.
        assert (rec["cpu_seconds"], rec["peak_memory_use_kilobytes"]) == (0, None)
        # No ratio over 10 ms ticks for a build shorter than MIN_UTILIZATION_SECONDS; a busy machine can make
        # these last longer, and then the ratio is that of a build that hardly used its CPUs.
        utilization = rec["average_cpu_utilization"]
        if rec["duration_seconds"] < MIN_UTILIZATION_SECONDS:
            assert utilization is None
        else:
            assert utilization is not None and 0 <= utilization <= 1
        assert rec["peak_storage_use_kilobytes"] is None
        assert rec["derivation_path"] == instantiate(nix_files, name.removesuffix("-test"), tag)
        drv = nix.show_derivation(rec["derivation_path"])
        assert rec["system"] == drv.system
        log_file = nix.log_file(rec["derivation_path"])
        assert rec["log"] == bz2.decompress(log_file.read_bytes()).decode()
        end = log_file.stat().st_mtime
        assert rec["duration_seconds"] == pytest.approx(max(0.0, end - when(rec["start_time"])), abs=1e-3)

    assert last["ok-test"]["tags"] == {"team": "drv-team", "ci": "cli", "job": "unit", "project": "web"}
    assert last["fail-test"]["tags"] == {"team": "env-team", "ci": "cli", "job": "unit"}

    fail = last["fail-test"]
    assert (fail["build_status"], fail["outputs"], fail["log"]) == ("build_failed", [], "about to fail\n")
    assert fail["status_message"] == f"builder for '{fail['derivation_path']}' failed with exit code 1"

    for name in ("ok-test", "multi-test"):
        rec = last[name]
        assert (rec["build_status"], rec["status_message"]) == ("built", None)
        paths = nix.show_derivation(rec["derivation_path"]).outputs
        info = path_info(nix_version, list(paths.values()))
        assert rec["outputs"] == [
            {"name": out, "path": path, "nar_hash": info[path]["narHash"], "nar_size_bytes": info[path]["narSize"]}
            for out, path in sorted(paths.items())
        ]
    assert [o["name"] for o in last["multi-test"]["outputs"]] == ["dev", "out"]
    assert last["ok-test"]["log"] == "building\nto-stderr\n"

    # The terminal sees what Nix prints: the build plan, build logs, the error, without event lines.
    assert "@nix" not in done.stderr
    assert f"building '{last['ok-test']['derivation_path']}'..." in done.stderr
    assert "about to fail\n" in done.stderr and "to-stderr\n" in done.stderr
    said = "Cannot build '{}'" if nix_version.at_least(2, 34) else "builder for '{}' failed with exit code 1"
    assert "error: " + said.format(fail["derivation_path"]) in done.stderr
    assert "\x1b[" not in done.stderr  # not a terminal: no colours, as Nix does

    # The same command without the recorder ends the same way.
    plain = subprocess.run([*nix_build(nix_files, tag, "ok", "fail", "multi"), "--keep-going"], capture_output=True)
    assert plain.returncode == done.returncode


def test_output_paths_on_stdout_are_unchanged(nix_files: Path, nix_version: NixVersion, tmp_path: Path) -> None:
    tag = nonce()
    done = subprocess.run(
        record_command(nix_version, tmp_path / "spool", "--", *nix_build(nix_files, tag, "multi")),
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0
    plain = subprocess.run(nix_build(nix_files, tag, "multi"), capture_output=True, text=True, check=True)
    out = nix.show_derivation(instantiate(nix_files, "multi", tag)).outputs["out"]
    assert done.stdout == plain.stdout == out + "\n"


def test_one_build_gets_the_cpu_time_of_its_builder(nix_files: Path, nix_version: NixVersion, tmp_path: Path) -> None:
    spool, tag = tmp_path / "spool", nonce()
    done = subprocess.run(
        record_command(nix_version, spool, "--cpu-count", "1", "--", *nix_build(nix_files, tag, "busy")),
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rec = final(spooled(spool))["busy-test"]
    assert rec["build_status"] == "built"
    # A shell counting to 200,000 takes a good part of a second; the builder's time only, not Nix's.
    assert rec["average_cpu_utilization"] is not None
    cpu = rec["average_cpu_utilization"] * rec["duration_seconds"]
    assert 0.1 < cpu <= rec["duration_seconds"] + CPU_READING_SLACK
    assert rec["cpu_seconds"] == round(cpu) or abs(rec["cpu_seconds"] - cpu) <= 0.51
    # A shell is far smaller than Nix itself: the run's peak was Nix's, not the build's.
    assert rec["peak_memory_use_kilobytes"] is None


def test_builds_one_after_another_each_get_their_own_cpu_time(
    nix_files: Path, nix_version: NixVersion, tmp_path: Path
) -> None:
    spool, tag = tmp_path / "spool", nonce()
    done = subprocess.run(
        record_command(nix_version, spool, "--cpu-count", "1", "--",
                       *nix_build(nix_files, tag, "busy", "ok", "busy2"), "--max-jobs", "1"),
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    last = final(spooled(spool)[3:])
    for name in ("busy-test", "busy2-test"):
        rec = last[name]
        cpu = rec["average_cpu_utilization"] * rec["duration_seconds"]
        assert 0.1 < cpu <= rec["duration_seconds"] + CPU_READING_SLACK
        assert rec["peak_memory_use_kilobytes"] is None  # three builds: the run's peak is no one build's
    assert last["ok-test"]["cpu_seconds"] == 0


def test_builds_side_by_side_get_no_cpu_time(nix_files: Path, nix_version: NixVersion, tmp_path: Path) -> None:
    spool, tag = tmp_path / "spool", nonce()
    done = subprocess.run(
        record_command(nix_version, spool, "--", *nix_build(nix_files, tag, "busy", "busy2"), "--max-jobs", "2"),
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for rec in final(spooled(spool)[2:]).values():
        assert (rec["cpu_seconds"], rec["average_cpu_utilization"]) == (0, None)


def test_one_build_gets_the_peak_memory_of_its_builder(
    nix_files: Path, nix_version: NixVersion, tmp_path: Path
) -> None:
    spool, tag = tmp_path / "spool", nonce()
    done = subprocess.run(
        record_command(nix_version, spool, "--", *nix_build(nix_files, tag, "big")), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    rec = final(spooled(spool))["big-test"]
    assert rec["log"] == "40000000\n"
    # The builder's shell held a 40 MB string (and, growing it, a copy): 39,063 KiB at least.
    assert 39_063 <= rec["peak_memory_use_kilobytes"] <= 400_000


def test_a_build_that_times_out_is_recorded_as_timeout(
    nix_files: Path, nix_version: NixVersion, tmp_path: Path
) -> None:
    spool, tag = tmp_path / "spool", nonce()
    before = time.time()
    done = subprocess.run(
        record_command(nix_version, spool, "--", *nix_build(nix_files, tag, "slow"), "--timeout", "1"),
        capture_output=True, text=True,
    )  # fmt: skip
    after = time.time()
    assert done.returncode == 101  # legacy nix-build's "timed out"
    rec = final(spooled(spool))["slow-test"]
    check_clock(rec, before, after)
    assert rec["build_status"] == "timeout"
    assert rec["status_message"] == (f"building of '{rec['derivation_path']}' timed out after 1 seconds")
    assert 0.9 <= rec["duration_seconds"] <= 3
    assert rec["log"] == "slow start\n" and rec["outputs"] == []


@pytest.mark.parametrize("kind", list(COMMANDS))
@pytest.mark.parametrize(
    ("whole_group", "signum"),
    [(False, signal.SIGINT), (True, signal.SIGINT), (False, signal.SIGTERM)],
    ids=["recorder-only", "ctrl-c-in-a-terminal", "sigterm"],
)
def test_interrupted_builds_are_recorded_cancelled(
    nix_files: Path, nix_version: NixVersion, tmp_path: Path, whole_group: bool, signum: int, kind: str
) -> None:
    spool, tag = tmp_path / "spool", nonce()
    before = time.time()
    proc = subprocess.Popen(
        record_command(nix_version, spool, "--", *COMMANDS[kind](nix_files, tag, "slow")),
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.time() + 60
        while not pending_files(spool) and time.time() < deadline:
            time.sleep(0.05)
        assert pending_files(spool), "the build never started"
        interrupted = time.time()
        # Ctrl-C in a terminal reaches Nix as well as the recorder: the second SIGINT must do no harm.
        if whole_group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the session the test started: recorder, Nix and builder
            proc.wait()
    after = time.time()
    assert proc.returncode == 1 and "error: interrupted by the user" in stderr
    rec = final(spooled(spool))["slow-test"]
    check_clock(rec, before, after)
    assert (rec["build_status"], rec["status_message"]) == ("cancelled", "interrupted by the user")
    assert when(rec["start_time"]) + rec["duration_seconds"] == pytest.approx(interrupted, abs=0.5)
    assert rec["outputs"] == []


def test_nix_build_is_recorded_too(nix_files: Path, nix_version: NixVersion, tmp_path: Path) -> None:
    spool, tag = tmp_path / "spool", nonce()
    command = ["nix", "build", "-f", str(nix_files / "drvs.nix"), "ok", "--argstr", "nonce", tag, "--no-link", "-L"]
    done = subprocess.run(record_command(nix_version, spool, "--", *command), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rec = final(spooled(spool))["ok-test"]
    assert rec["build_status"] == "built" and len(rec["outputs"]) == 1
    assert "ok-test> to-stderr" in done.stderr  # -L: build logs prefixed with the name, as nix build prints them


def test_records_go_to_a_database_with_db(
    nix_files: Path, nix_version: NixVersion, tmp_path: Path, fresh_db: Any
) -> None:
    db, tag = fresh_db(tmp_path), nonce()
    done = subprocess.run(
        [*nix_version.buildreport, "record", "--db", str(db), "--account", "acme", "--tag", "job=db",
         "--", *nix_build(nix_files, tag, "ok", "fail"), "--keep-going"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 100, done.stderr
    rows = query(
        db,
        "SELECT b.derivation_path, b.status, b.source_id FROM builds b JOIN accounts a USING (account_id)"
        " WHERE a.name = 'acme' ORDER BY b.derivation_path",
    )
    # The running record and the final one of each build are one row.
    assert sorted((nix.drv_name(path), status) for path, status, _ in rows) == [
        ("fail-test", "build_failed"),
        ("ok-test", "built"),
    ]
    assert all(source for _, _, source in rows)


def test_a_sink_that_fails_changes_nothing_for_nix(nix_files: Path, tmp_path: Path) -> None:
    warnings: list[str] = []

    def broken(records: list[BuildRecord]) -> None:
        raise OSError("No space left on device")

    with open(os.devnull, "wb") as terminal:
        recorder = Recorder(nix_build(nix_files, nonce(), "ok"), broken, terminal=terminal, warn=warnings.append)
        assert recorder.run() == 0
    assert len(warnings) == 2 and all("No space left on device" in w for w in warnings)


def test_a_failure_nix_build_does_not_report_gets_no_other_builds_message(
    nix_files: Path, nix_version: NixVersion, tmp_path: Path
) -> None:
    spool, tag = tmp_path / "spool", nonce()
    command = ["nix", "build", "-f", str(nix_files / "drvs.nix"), "fail", "fail2", "--argstr", "nonce", tag,
               "--no-link", "--keep-going"]  # fmt: skip
    done = subprocess.run(record_command(nix_version, spool, "--", *command), capture_output=True, text=True)
    assert done.returncode == 1
    last = final(spooled(spool))
    assert {r["build_status"] for r in last.values()} == {"build_failed"}
    codes = {"fail-test": 1, "fail2-test": 2}
    own = {name: f"builder for '{r['derivation_path']}' failed with exit code {codes[name]}"
           for name, r in last.items()}  # fmt: skip
    generic = "its outputs are missing after Nix exited with status 1"
    messages = {name: r["status_message"] for name, r in last.items()}
    assert all(messages[name] in (own[name], generic) for name in last)
    assert any(messages[name] == own[name] for name in last)
    assert last["fail-test"]["log"] == "about to fail\n" and last["fail2-test"]["log"] == "failing too\n"


def test_nix_output_keeps_flowing_when_reading_it_fails(nix_files: Path, tmp_path: Path) -> None:
    warnings: list[str] = []
    records: list[BuildRecord] = []
    terminal = tmp_path / "terminal"
    with terminal.open("wb") as handle:
        recorder = Recorder(nix_build(nix_files, nonce(), "ok"), records.extend, terminal=handle, warn=warnings.append)
        recorder._line = None  # type: ignore[assignment,method-assign]  # reading every event now fails
        assert recorder.run() == 0
    assert len(warnings) == 1 and warnings[0].startswith("stopped recording this run: cannot read Nix's output")
    shown = terminal.read_text()
    assert "these derivations will be built" in shown or "this derivation will be built" in shown
    assert "@nix" not in shown and records == []


def test_recorded_builds_reach_the_api_through_push(
    nix_files: Path, nix_version: NixVersion, tmp_path: Path, env: Any, serve: Any
) -> None:
    spool, tag = tmp_path / "spool", nonce()
    done = subprocess.run(
        record_command(nix_version, spool, "--tag", f"run={tag}", "--", *nix_build(nix_files, tag, "ok", "fail"),
                       "--keep-going"),
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 100, done.stderr
    recorded = final(spooled(spool))
    writer = env.token("acme", scopes=("build:write",))
    reader = env.token("acme", scopes=("build:read",))
    server = serve(env.db)
    pushed = subprocess.run(
        [sys.executable, "-m", "buildreport", "push", "--to", server.url, "--token", writer, str(spool)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert pushed.returncode == 0, pushed.stderr
    assert pending_files(spool) == []
    answer = httpx.get(
        f"{server.url}/builds", params={"tags": f"run:{tag}"}, headers={"Authorization": f"Bearer {reader}"}
    )
    assert answer.status_code == 200
    builds = {nix.drv_name(b["derivation_path"]): b for b in answer.json()}
    assert sorted(builds) == ["fail-test", "ok-test"]  # the running record and the final one are one build
    for name, build in builds.items():
        for field in ("build_status", "status_message", "derivation_path", "outputs", "tags", "system"):
            assert build[field] == recorded[name][field]
        assert when(build["start_time"]) == pytest.approx(when(recorded[name]["start_time"]), abs=1e-6)
    assert builds["ok-test"]["tags"] == {"run": tag, "project": "web", "team": "drv-team"}
