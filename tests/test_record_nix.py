"""buildreport.record.nix against real Nix: derivations, outputs, stored logs, events and error messages."""

from __future__ import annotations

import bz2
import json
import os
import subprocess
from pathlib import Path

import nixbuilds
import pytest
from nixbuilds import nonce
from nixversions import NixVersion

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


def nix_json(*args: str) -> object:
    """What the `nix` on PATH (the test's version) prints for `nix ARGS…`, decoded."""
    return json.loads(
        subprocess.run(
            ["nix", "--extra-experimental-features", "nix-command", *args], capture_output=True, check=True
        ).stdout
    )


def shown_derivation(version: NixVersion, drv_path: str) -> dict[str, object]:
    """The derivation as this version's Nix shows it, in the shape of 2.8 (full store paths)."""
    if not version.at_least(2, 15):
        return nix_json("show-derivation", drv_path)[drv_path]  # type: ignore[index]
    shown = nix_json("derivation", "show", drv_path)
    if version.at_least(2, 34):  # wrapped, without the store folder
        assert isinstance(shown, dict) and isinstance(shown["version"], int)
        drv = shown["derivations"][os.path.basename(drv_path)]
        for output in drv["outputs"].values():
            assert "/" not in output["path"]
            output["path"] = f"/nix/store/{output['path']}"
        return drv
    return shown[drv_path]  # type: ignore[index]


def listed_path_infos(version: NixVersion, paths: list[str]) -> dict[str, dict[str, object]]:
    """`nix path-info --json` of this version, by path: a list in 2.8, an object keyed by path later."""
    extra = ["--json-format", "1"] if version.at_least(2, 34) else []
    listed = nix_json("path-info", "--json", *extra, *paths)
    if version.at_least(2, 26):
        assert isinstance(listed, dict)
        return {path: {**info, "path": path} for path, info in listed.items() if info is not None}
    assert isinstance(listed, list)
    return {entry["path"]: entry for entry in listed if entry.get("valid", True)}


def test_show_derivation_gives_system_outputs_and_tags(nix_files: Path, nix_version: NixVersion) -> None:
    drv_path = instantiate(nix_files, "ok", nonce())
    drv = nix.show_derivation(drv_path)
    raw = shown_derivation(nix_version, drv_path)
    assert drv.path == drv_path
    assert drv.system == raw["system"]
    assert drv.outputs == {"out": raw["outputs"]["out"]["path"]}  # type: ignore[index]
    assert drv.tags == {"project": "web", "team": "drv-team"}


def test_show_derivations_answers_several_at_once(nix_files: Path) -> None:
    tag = nonce()
    paths = [instantiate(nix_files, "ok", tag), instantiate(nix_files, "multi", tag)]
    found = nix.show_derivations(paths + paths[:1])
    assert sorted(found) == sorted(paths)
    assert sorted(found[paths[1]].outputs) == ["dev", "out"]


def test_show_derivation_of_a_missing_drv_is_a_clear_error(nix_files: Path) -> None:
    with pytest.raises(nix.NixError, match=r"^nix (show-derivation|derivation) failed: .+"):
        nix.show_derivation("/nix/store/00000000000000000000000000000000-nothing.drv")


def test_outputs_match_nix_path_info(nix_files: Path, nix_version: NixVersion) -> None:
    tag = nonce()
    assert build(nix_files, "multi", tag).returncode == 0
    drv = nix.show_derivation(instantiate(nix_files, "multi", tag))
    outputs = nix.build_outputs(drv)
    by_path = listed_path_infos(nix_version, list(drv.outputs.values()))
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
    ("message", "status", "drv_path", "expected"),
    [
        (  # 2.8 and 2.26
            "\x1b[31;1merror:\x1b[0m builder for '\x1b[35;1m/nix/store/hk-fail-test.drv\x1b[0m' "
            "failed with exit code 1",
            BuildStatus.build_failed,
            "/nix/store/hk-fail-test.drv",
            "builder for '/nix/store/hk-fail-test.drv' failed with exit code 1",
        ),
        (  # 2.34
            "\x1b[31;1merror:\x1b[0m Cannot build '\x1b[35;1m/nix/store/hx-fail-test.drv\x1b[0m'.\n"
            "       Reason: \x1b[31;1mbuilder failed with exit code 2\x1b[0m.\n       Output paths:\n"
            "         \x1b[35;1m/nix/store/yg-fail-test\x1b[0m",
            BuildStatus.build_failed,
            "/nix/store/hx-fail-test.drv",
            "builder for '/nix/store/hx-fail-test.drv' failed with exit code 2",
        ),
        (
            "error: Cannot build '/nix/store/hx-odd-test.drv'.\n       Reason: some other reason.\n",
            BuildStatus.build_failed,
            "/nix/store/hx-odd-test.drv",
            "cannot build '/nix/store/hx-odd-test.drv': some other reason",
        ),
        (  # 2.8
            "\x1b[31;1merror:\x1b[0m \x1b[35;1mbuilding of '/nix/store/gk-slow-test.drv!out' from .drv file\x1b[0m "
            "timed out after \x1b[35;1m2\x1b[0m seconds",
            BuildStatus.timeout,
            "/nix/store/gk-slow-test.drv",
            "building of '/nix/store/gk-slow-test.drv' timed out after 2 seconds",
        ),
        (  # 2.26
            "\x1b[31;1merror:\x1b[0m \x1b[0m\x1b[35;1mbuilding of '/nix/store/yf-slow-test.drv^out' from .drv "
            "file\x1b[0m timed out after \x1b[35;1m1\x1b[0m seconds of silence",
            BuildStatus.timeout,
            "/nix/store/yf-slow-test.drv",
            "building of '/nix/store/yf-slow-test.drv' timed out after 1 seconds of silence",
        ),
        (  # 2.34 names no derivation
            "\x1b[31;1merror:\x1b[0m timed out after \x1b[35;1m1\x1b[0m seconds",
            BuildStatus.timeout,
            None,
            "timed out after 1 seconds",
        ),
        ("\x1b[31;1merror:\x1b[0m interrupted by the user", BuildStatus.cancelled, None, "interrupted by the user"),
    ],
)
def test_error_messages_name_the_build_and_its_status(
    message: str, status: BuildStatus, drv_path: str | None, expected: str
) -> None:
    finding = nix.read_error(message)
    assert finding is not None
    assert (finding.status, finding.drv_path, finding.message) == (status, drv_path, expected)


def test_other_messages_are_no_finding() -> None:
    assert nix.read_error("these 3 derivations will be built:") is None
    assert nix.read_error("") is None
    # 2.34's summary of a failed `nix build` names builds that have messages of their own.
    assert nix.read_error("error: build of '/nix/store/a-x.drv^out', '/nix/store/b-y.drv^out' failed") is None


def test_both_shapes_of_derivation_show_give_full_store_paths() -> None:
    drv = {"outputs": {"out": {"path": "p3-ok"}}, "system": "x86_64-linux", "env": {"SERVICE_TAG_a": "b"}}
    wrapped = json.dumps({"derivations": {"f8-ok.drv": drv}, "version": 4}).encode()
    old = json.dumps({"/nix/store/f8-ok.drv": {**drv, "outputs": {"out": {"path": "/nix/store/p3-ok"}}}}).encode()
    for raw in (wrapped, old):
        found = nix.parse_derivations(raw, "/nix/store")
        assert found == {
            "/nix/store/f8-ok.drv": nix.Derivation(
                path="/nix/store/f8-ok.drv", system="x86_64-linux", outputs={"out": "/nix/store/p3-ok"},
                env={"SERVICE_TAG_a": "b"},
            )
        }  # fmt: skip
    with pytest.raises(nix.NixError, match="printed something unexpected"):
        nix.parse_derivations(b'{"derivations": {"x.drv": {}}, "version": 4}', "/nix/store")


def test_both_shapes_of_path_info_give_the_valid_paths() -> None:
    listed = b'[{"path":"/nix/store/a","narHash":"sha256-x","narSize":3},{"path":"/nix/store/b","valid":false}]'
    keyed = b'{"/nix/store/a":{"narHash":"sha256-x","narSize":3,"version":1},"/nix/store/b":null}'
    for raw in (listed, keyed):
        infos = nix.parse_path_infos(raw)
        assert [(i.path, i.valid, i.nar_hash, i.nar_size) for i in infos] == [
            ("/nix/store/a", True, "sha256-x", 3),
            ("/nix/store/b", False, "", 0),
        ]
    with pytest.raises(nix.NixError, match="printed something unexpected"):
        nix.parse_path_infos(b'{"/nix/store/a": 3}')


def test_real_failure_messages_are_recognised(nix_files: Path, nix_version: NixVersion) -> None:
    tag = nonce()
    failed = build(nix_files, "fail", tag, "--log-format", "internal-json")
    slow = build(nix_files, "slow", tag, "--timeout", "1", "--log-format", "internal-json")
    findings = []
    for stderr in (failed.stderr, slow.stderr):
        events = [nix.parse_event(line.encode()) for line in stderr.splitlines()]
        findings += [f for e in events if e and e.action == "msg" and (f := nix.read_error(e.msg))]
    slow_drv = None if nix_version.at_least(2, 34) else instantiate(nix_files, "slow", tag)  # 2.34 names none
    assert [(f.status, f.drv_path) for f in findings] == [
        (BuildStatus.build_failed, instantiate(nix_files, "fail", tag)),
        (BuildStatus.timeout, slow_drv),
    ]
