"""buildreport.record.nix against real Nix: derivations, outputs, stored logs, events and error messages."""

from __future__ import annotations

import bz2
import json
import subprocess
from pathlib import Path

import nixbuilds
import pytest
from nixbuilds import nonce

from buildreport.models import BuildStatus
from buildreport.record import nix

nix_files = nixbuilds.nix_files  # the fixture: a nix.conf of the test's own, for each Nix version
nix_version = nixbuilds.nix_version


def instantiate(folder: Path, attr: str, tag: str) -> str:
    done = subprocess.run(
        ["nix-instantiate", str(folder / "drvs.nix"), "-A", attr, "--argstr", "nonce", tag],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def build(folder: Path, attr: str, tag: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nix-build", str(folder / "drvs.nix"), "-A", attr, "--argstr", "nonce", tag, "--no-out-link", *extra],
        capture_output=True,
        text=True,
        check=False,
    )


def test_tags_come_from_service_tag_variables_only() -> None:
    env = {
        "SERVICE_TAG_project": "web",
        "SERVICE_TAG_GITHUB_REPOSITORY": "acme/shop",
        "SERVICE_TAG_": "x",
        "service_tag_low": "no",
        "PATH": "/bin",
        "SERVICE_TAG_empty": "",
    }
    assert nix.tags_from_env(env) == {"project": "web", "GITHUB_REPOSITORY": "acme/shop", "empty": ""}


def test_show_derivation_gives_system_outputs_and_tags(nix_files: Path) -> None:
    drv_path = instantiate(nix_files, "ok", nonce())
    drv = nix.show_derivation(drv_path)
    raw = json.loads(
        subprocess.run(
            ["nix", "--extra-experimental-features", "nix-command", "show-derivation", drv_path],
            capture_output=True,
            check=True,
        ).stdout
    )[drv_path]
    assert drv.path == drv_path
    assert drv.system == raw["system"]
    assert drv.outputs == {"out": raw["outputs"]["out"]["path"]}
    assert drv.tags == {"project": "web", "team": "drv-team"}


def test_show_derivations_answers_several_at_once(nix_files: Path) -> None:
    tag = nonce()
    paths = [instantiate(nix_files, "ok", tag), instantiate(nix_files, "multi", tag)]
    found = nix.show_derivations(paths + paths[:1])
    assert sorted(found) == sorted(paths)
    assert sorted(found[paths[1]].outputs) == ["dev", "out"]


def test_show_derivation_of_a_missing_drv_is_a_clear_error(nix_files: Path) -> None:
    with pytest.raises(nix.NixError, match=r"^nix show-derivation failed: .+"):
        nix.show_derivation("/nix/store/00000000000000000000000000000000-nothing.drv")


def test_outputs_match_nix_path_info(nix_files: Path) -> None:
    tag = nonce()
    assert build(nix_files, "multi", tag).returncode == 0
    drv = nix.show_derivation(instantiate(nix_files, "multi", tag))
    outputs = nix.build_outputs(drv)
    listed = subprocess.run(
        ["nix", "--extra-experimental-features", "nix-command", "path-info", "--json", *drv.outputs.values()],
        capture_output=True,
        check=True,
    ).stdout
    by_path = {entry["path"]: entry for entry in json.loads(listed)}
    assert [o.name for o in outputs] == ["dev", "out"]
    for output in outputs:
        assert output.path == drv.outputs[output.name]
        assert output.nar_hash == by_path[output.path]["narHash"]
        assert output.nar_hash.startswith("sha256-")
        assert output.nar_size_bytes == by_path[output.path]["narSize"] > 0
    assert nix.outputs_valid(drv, outputs)


def test_outputs_of_an_unbuilt_derivation_are_empty(nix_files: Path) -> None:
    drv = nix.show_derivation(instantiate(nix_files, "fail", nonce()))
    assert nix.build_outputs(drv) == []
    assert not nix.outputs_valid(drv, [])


def test_stored_log_is_read_from_the_log_file(nix_files: Path) -> None:
    tag = nonce()
    assert build(nix_files, "fail", tag).returncode != 0
    drv_path = instantiate(nix_files, "fail", tag)
    file = nix.log_file(drv_path)
    assert file.is_file()
    assert nix.read_build_log(drv_path) == bz2.decompress(file.read_bytes()).decode() == "about to fail\n"
    assert nix.log_mtime_ns(drv_path) == file.stat().st_mtime_ns


def test_stored_log_falls_back_to_nix_log(nix_files: Path, tmp_path: Path) -> None:
    tag = nonce()
    assert build(nix_files, "ok", tag).returncode == 0
    drv_path = instantiate(nix_files, "ok", tag)
    # Another log directory holds no file for it: `nix log` still finds the machine's.
    assert nix.read_build_log(drv_path, tmp_path) == "building\nto-stderr\n"


def test_a_build_never_run_has_no_log(nix_files: Path) -> None:
    drv_path = instantiate(nix_files, "fail", nonce())
    assert nix.read_build_log(drv_path) is None
    assert nix.log_mtime_ns(drv_path) is None


def test_internal_json_events_are_parsed_and_other_lines_ignored() -> None:
    start = nix.parse_event(
        b'@nix {"action":"start","fields":["/nix/store/f8-ok.drv","",1,1],"id":43,"level":3,'
        b'"text":"building \'/nix/store/f8-ok.drv\'","type":105}'
    )
    assert start is not None
    assert (start.action, start.type, start.id, start.fields[0]) == ("start", nix.ACT_BUILD, 43, "/nix/store/f8-ok.drv")
    line = nix.parse_event(b'@nix {"action":"result","fields":["hello"],"id":43,"type":101}')
    assert line is not None and line.type == nix.RES_BUILD_LOG_LINE and line.fields == ["hello"]
    assert nix.parse_event(b"plain text from a builder") is None
    assert nix.parse_event(b"@nix {not json") is None


@pytest.mark.parametrize(
    ("message", "status", "drv_path"),
    [
        (
            "\x1b[31;1merror:\x1b[0m builder for '\x1b[35;1m/nix/store/hk-fail-test.drv\x1b[0m' "
            "failed with exit code 1",
            BuildStatus.build_failed,
            "/nix/store/hk-fail-test.drv",
        ),
        (
            "\x1b[31;1merror:\x1b[0m \x1b[35;1mbuilding of '/nix/store/gk-slow-test.drv!out' from .drv file\x1b[0m "
            "timed out after \x1b[35;1m2\x1b[0m seconds",
            BuildStatus.timeout,
            "/nix/store/gk-slow-test.drv",
        ),
        (
            "error: building of '/nix/store/nq-slow-test.drv!out' from .drv file timed out after 2 seconds of silence",
            BuildStatus.timeout,
            "/nix/store/nq-slow-test.drv",
        ),
        ("\x1b[31;1merror:\x1b[0m interrupted by the user", BuildStatus.cancelled, None),
    ],
)
def test_error_messages_name_the_build_and_its_status(message: str, status: BuildStatus, drv_path: str | None) -> None:
    finding = nix.read_error(message)
    assert finding is not None
    assert (finding.status, finding.drv_path) == (status, drv_path)
    assert "\x1b" not in finding.message and finding.message.startswith("error: ")


def test_other_messages_are_no_finding() -> None:
    assert nix.read_error("these 3 derivations will be built:") is None
    assert nix.read_error("") is None


def test_real_failure_messages_are_recognised(nix_files: Path) -> None:
    tag = nonce()
    failed = build(nix_files, "fail", tag, "--log-format", "internal-json")
    slow = build(nix_files, "slow", tag, "--timeout", "1", "--log-format", "internal-json")
    findings = []
    for stderr in (failed.stderr, slow.stderr):
        events = [nix.parse_event(line.encode()) for line in stderr.splitlines()]
        findings += [f for e in events if e and e.action == "msg" and (f := nix.read_error(e.msg))]
    assert [(f.status, f.drv_path) for f in findings] == [
        (BuildStatus.build_failed, instantiate(nix_files, "fail", tag)),
        (BuildStatus.timeout, instantiate(nix_files, "slow", tag)),
    ]
