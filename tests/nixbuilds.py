"""Real Nix for the recorder tests: a nix.conf of the tests' own and small sh-only derivations.

Nix is configured through NIX_CONF_DIR (never /etc): no sandbox, no substituters, `nix-command` on, build
logs kept. Builders get an empty PATH, so every derivation sets one; a nonce makes each test build afresh.
`nix_files` runs its test once for each Nix version of tests/nixversions.py (2.8 on the host, 2.26 and 2.34
in chroots), with that version's `nix` first on PATH. Under CI=true a missing version fails these tests;
elsewhere they are skipped with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import nixversions
import pytest
from nixversions import NixVersion

from buildreport.models import BuildRecord
from buildreport.record import nix
from buildreport.record.spool import pending_files

nix_version = nixversions.nix_version  # the fixture: each Nix version in turn

# Every derivation the recorder tests build. `nonce` changes the .drv, hence the outputs, on every call.
DERIVATIONS = r"""
{ nonce ? "0" }:
let
  mk = name: script: attrs: derivation ({
    inherit name nonce;
    system = builtins.currentSystem;
    builder = "/bin/sh";
    PATH = "/usr/bin:/bin";
    args = [ "-c" script ];
  } // attrs);
in {
  ok = mk "ok-test" "echo building; echo to-stderr >&2; mkdir -p $out; echo hi > $out/x"
    { SERVICE_TAG_project = "web"; SERVICE_TAG_team = "drv-team"; };
  fail = mk "fail-test" "echo about to fail; exit 1" { };
  fail2 = mk "fail2-test" "echo failing too; exit 2" { };
  slow = mk "slow-test" "echo slow start; sleep 30" { };
  busy = mk "busy-test" "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; mkdir -p $out" { };
  busy2 = mk "busy2-test" "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; mkdir -p $out" { };
  big = mk "big-test" "x=$(head -c 40000000 /dev/zero | tr '\\0' a); echo \${#x}; mkdir -p $out" { };
  multi = mk "multi-test" "mkdir -p $out $dev; echo a > $out/a; echo bb > $dev/b" { outputs = [ "out" "dev" ]; };
}
"""


def record_command(nix_version: NixVersion, spool: Path, *args: str) -> list[str]:
    """`buildreport record --spool SPOOL ARGS…` as a user of that Nix runs it (in its chroot, from the wheel)."""
    return [*nix_version.buildreport, "record", "--spool", str(spool), *args]


def when(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def instantiate(folder: Path, attr: str, tag: str) -> str:
    done = subprocess.run(
        ["nix-instantiate", str(folder / "drvs.nix"), "-A", attr, "--argstr", "nonce", tag],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def path_info(version: NixVersion, paths: list[str]) -> dict[str, Any]:
    """`nix path-info --json` of this version by path: a list in 2.8, an object keyed by path later."""
    extra = ["--json-format", "1"] if version.at_least(2, 34) else []
    raw = subprocess.run(
        ["nix", "--extra-experimental-features", "nix-command", "path-info", "--json", *extra, *paths],
        capture_output=True,
        check=True,
    ).stdout
    listed = json.loads(raw)
    if isinstance(listed, dict):
        return {path: {**entry, "path": path} for path, entry in listed.items() if entry is not None}
    return {entry["path"]: entry for entry in listed}


def check_clock(record: dict[str, Any], before: float, after: float) -> None:
    create, start = when(record["create_time"]), when(record["start_time"])
    assert before <= create <= start <= after
    assert record["queue_time_seconds"] == pytest.approx(start - create, abs=1e-5)
    if record["duration_seconds"] is not None:
        assert start + record["duration_seconds"] <= after


def nix_build(nix_files: Path, tag: str, *attrs: str) -> list[str]:
    selected = [arg for attr in attrs for arg in ("-A", attr)]
    return ["nix-build", str(nix_files / "drvs.nix"), *selected, "--argstr", "nonce", tag, "--no-out-link"]


def nix_build_new(nix_files: Path, tag: str, *attrs: str) -> list[str]:
    """The same builds as `nix_build`, through `nix build` (the new command line)."""
    return ["nix", "build", "-f", str(nix_files / "drvs.nix"), *attrs, "--argstr", "nonce", tag, "--no-link"]


COMMANDS = {"nix-build": nix_build, "nix build": nix_build_new}


def spooled(spool: Path) -> list[dict[str, Any]]:
    """Every record of the spool, oldest file first; each is also a valid write record."""
    records = []
    for path in pending_files(spool):
        for line in path.read_bytes().splitlines():
            msgspec.json.decode(line, type=BuildRecord)
            records.append(json.loads(line))
    return records


def final(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The last record of each derivation, by its name (`ok-test` …)."""
    return {nix.drv_name(r["derivation_path"]): r for r in records}


def nonce() -> str:
    return f"{time.time_ns()}-{os.getpid()}"


@pytest.fixture
def nix_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nix_version: NixVersion) -> Path:
    """A folder with nix.conf (in effect for this test, with `nix_version`'s Nix first on PATH) and drvs.nix."""
    folder = tmp_path / "nix"
    folder.mkdir()
    (folder / "nix.conf").write_text(nix_version.nix_conf)
    (folder / "drvs.nix").write_text(DERIVATIONS)
    monkeypatch.setenv("NIX_CONF_DIR", str(folder))
    env = nix_version.env()
    for name in ("PATH", "NIX_LOG_DIR"):
        if name in env:
            monkeypatch.setenv(name, env[name])
    for name in [n for n in os.environ if n.startswith("SERVICE_TAG_")]:
        monkeypatch.delenv(name)
    return folder
