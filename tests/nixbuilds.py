"""Real Nix for the recorder tests: a nix.conf of the tests' own and small sh-only derivations.

Nix is configured through NIX_CONF_DIR (never /etc): no sandbox, no substituters, `nix-command` on, build
logs kept. Builders get an empty PATH, so every derivation sets one; a nonce makes each test build afresh.
`nix_files` runs its test once for each Nix version of tests/nixversions.py (2.8 on the host, 2.26 and 2.34
in chroots), with that version's `nix` first on PATH. Under CI=true a missing version fails these tests;
elsewhere they are skipped with the reason.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import nixversions
import pytest
from nixversions import NixVersion

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
