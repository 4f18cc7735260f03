"""The local recorder, case by case, through `nix-build` and `nix build`, with each Nix version.

Every case compares what was recorded with what Nix itself says (the derivation, `nix path-info`, `nix log`,
`nix build --json`) and checks that the command ended exactly as it does without the recorder (exit status and
standard output).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any, NamedTuple

import nixbuilds
import pytest
from nixbuilds import COMMANDS, check_clock, final, instantiate, nonce, path_info, record_command, spooled, when
from nixversions import NixVersion

from buildreport.record import nix
from buildreport.record.command import reads_build_json

nix_files = nixbuilds.nix_files  # the fixture: a nix.conf of the test's own, for each Nix version
nix_version = nixbuilds.nix_version


def nix_log(drv_path: str) -> str:
    """The build log as `nix log` gives it (the test's Nix version)."""
    return subprocess.run(
        ["nix", "--extra-experimental-features", "nix-command", "log", drv_path],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


class Case(NamedTuple):
    rec: dict[str, Any]  # the final record
    done: subprocess.CompletedProcess[str]  # the recorded run
    plain: subprocess.CompletedProcess[str]  # the same command again, without the recorder
    span: tuple[float, float]  # when the recorded run began and ended
    tag: str  # the nonce of the derivations


def record_and_run_plain(
    version: NixVersion, nix_files: Path, tmp_path: Path, kind: str, attr: str, *extra: str
) -> Case:
    """Build `attr` under the recorder, then the same command without it."""
    spool, tag = tmp_path / "spool", nonce()
    command = [*COMMANDS[kind](nix_files, tag, attr), *extra]
    before = time.time()
    done = subprocess.run(record_command(version, spool, "--", *command), capture_output=True, text=True)
    after = time.time()
    plain = subprocess.run(command, capture_output=True, text=True)
    records = final(spooled(spool))
    assert len(records) == 1, done.stderr
    return Case(next(iter(records.values())), done, plain, (before, after), tag)


def check_common(case: Case, attr: str, nix_files: Path) -> dict[str, str]:
    """Fields every case has (the derivation, its system, the times, the stored log) and the command's ending
    as without the recorder; the derivation's outputs."""
    rec = case.rec
    assert (case.done.returncode, case.done.stdout) == (case.plain.returncode, case.plain.stdout)
    assert rec["derivation_path"] == instantiate(nix_files, attr, case.tag)
    check_clock(rec, *case.span)
    drv = nix.show_derivation(rec["derivation_path"])
    assert rec["system"] == drv.system
    assert rec["log"] == nix_log(rec["derivation_path"])
    return drv.outputs


@pytest.mark.parametrize("kind", list(COMMANDS))
@pytest.mark.parametrize("attr", ["ok", "multi"])
def test_a_build_that_succeeds_is_recorded_with_the_outputs_nix_lists(
    nix_files: Path, nix_version: NixVersion, tmp_path: Path, kind: str, attr: str
) -> None:
    case = record_and_run_plain(nix_version, nix_files, tmp_path, kind, attr)
    rec, outputs = case.rec, check_common(case, attr, nix_files)
    assert case.done.returncode == 0
    assert (rec["build_status"], rec["status_message"]) == ("built", None)
    info = path_info(nix_version, list(outputs.values()))
    assert rec["outputs"] == [
        {"name": out, "path": path, "nar_hash": info[path]["narHash"], "nar_size_bytes": info[path]["narSize"]}
        for out, path in sorted(outputs.items())
    ]
    assert [o["name"] for o in rec["outputs"]] == (["out"] if attr == "ok" else ["dev", "out"])
    # Tagged: the derivation's SERVICE_TAG_* attributes.
    assert rec["tags"] == ({"project": "web", "team": "drv-team"} if attr == "ok" else {})
    if kind == "nix-build":  # the path of the default output, as without the recorder
        assert case.done.stdout == outputs["out"] + "\n"


@pytest.mark.parametrize("kind", list(COMMANDS))
def test_a_build_that_fails_is_recorded_with_the_builders_exit_code(
    nix_files: Path, nix_version: NixVersion, tmp_path: Path, kind: str
) -> None:
    case = record_and_run_plain(nix_version, nix_files, tmp_path, kind, "fail")
    rec, _ = case.rec, check_common(case, "fail", nix_files)
    assert case.done.returncode == (100 if kind == "nix-build" else 1)
    assert rec["build_status"] == "build_failed" and rec["outputs"] == []
    assert rec["status_message"] == f"builder for '{rec['derivation_path']}' failed with exit code 1"
    assert rec["log"] == "about to fail\n"


@pytest.mark.parametrize("kind", list(COMMANDS))
@pytest.mark.parametrize(
    "limit", [["--timeout", "1"], ["--option", "max-silent-time", "1"]], ids=["timeout", "silence"]
)
def test_a_build_that_times_out_is_recorded_timeout_with_nixs_limit(
    nix_files: Path, nix_version: NixVersion, tmp_path: Path, kind: str, limit: list[str]
) -> None:
    case = record_and_run_plain(nix_version, nix_files, tmp_path, kind, "slow", *limit)
    rec, _ = case.rec, check_common(case, "slow", nix_files)
    assert case.done.returncode == (101 if kind == "nix-build" else 1)
    assert rec["build_status"] == "timeout" and rec["outputs"] == []
    # 2.34 says "timed out after 1 seconds" for both limits; the older ones add "of silence" for the second.
    silence = " of silence" if limit[0] == "--option" and not nix_version.at_least(2, 34) else ""
    assert rec["status_message"] == f"building of '{rec['derivation_path']}' timed out after 1 seconds{silence}"
    assert 0.9 <= rec["duration_seconds"] <= 3
    assert rec["log"] == "slow start\n"


def test_nix_build_json_is_passed_on_unchanged_and_agrees_with_the_recorded_times(
    nix_files: Path, nix_version: NixVersion, tmp_path: Path
) -> None:
    spool, tag = tmp_path / "spool", nonce()
    command = [*COMMANDS["nix build"](nix_files, tag, "busy", "multi"), "--json", "--max-jobs", "1"]
    done = subprocess.run(record_command(nix_version, spool, "--", *command), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)  # read by the recorder, passed on whole
    plain = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    assert [(e["drvPath"], e["outputs"]) for e in printed] == [(e["drvPath"], e["outputs"]) for e in plain]
    records = final(spooled(spool))
    assert sorted(e["drvPath"] for e in printed) == sorted(r["derivation_path"] for r in records.values())
    for entry in printed:
        rec = next(r for r in records.values() if r["derivation_path"] == entry["drvPath"])
        # 2.26 says when the build started and stopped, in whole seconds; 2.8 and 2.34 do not.
        assert ("startTime" in entry) == (nix_version.name == "2.26")
        if "startTime" in entry:
            start, end = when(rec["start_time"]), when(rec["start_time"]) + rec["duration_seconds"]
            assert entry["startTime"] <= start < entry["startTime"] + 2
            assert entry["stopTime"] <= end + 0.01 < entry["stopTime"] + 2
        assert "cpuUser" not in entry  # only for builds in a cgroup, which these are not


def test_what_nix_build_json_says_of_a_build_is_read_in_each_versions_shape() -> None:
    measured_226 = (
        b'[{"cpuSystem":0.795554,"cpuUser":0.536726,"drvPath":"/nix/store/f8-busy.drv",'
        b'"outputs":{"out":"/nix/store/p3-busy"},"startTime":1795353708,"stopTime":1795353710}]'
    )
    said = nix.parse_build_json(measured_226)["/nix/store/f8-busy.drv"]
    assert (said.start_time, said.stop_time) == (1795353708, 1795353710)
    assert said.cpu_seconds == pytest.approx(1.33228)
    plain_28 = b'[{"drvPath":"/nix/store/f8-ok.drv","outputs":{"out":"/nix/store/p3-ok"}}]'
    assert nix.parse_build_json(plain_28)["/nix/store/f8-ok.drv"].cpu_seconds is None
    assert nix.parse_build_json(b"") == {} and nix.parse_build_json(b"/nix/store/p3-ok\n") == {}


@pytest.mark.parametrize(
    ("command", "terminal", "reads"),
    [
        (["nix", "build", "-f", "a.nix", "--json"], False, True),
        (["nix", "build", "-f", "a.nix", "--json"], True, False),  # a terminal gets Nix's own formatting
        (["nix", "build", "-f", "a.nix"], False, False),
        (["nix", "build", "-f", "a.nix", "--", "--json"], False, False),  # an argument, not the flag
        (["nix-build", "a.nix", "--json"], False, False),
    ],
)
def test_build_json_is_read_only_when_asked_for_and_not_on_a_terminal(
    command: list[str], terminal: bool, reads: bool
) -> None:
    kind = "nix build" if command[1] == "build" else "nix-build"
    assert reads_build_json(command, kind, terminal) is reads
