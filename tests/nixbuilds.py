"""Real Nix for the recorder tests: a nix.conf of the tests' own and small sh-only derivations.

Nix is configured through NIX_CONF_DIR (never /etc): no sandbox, no substituters, `nix-command` on, build
logs kept. Builders get an empty PATH, so every derivation sets one; a nonce makes each test build afresh.
Under CI=true a machine without Nix fails these tests; elsewhere they are skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

NIX_CONF = """\
sandbox = false
substituters =
experimental-features = nix-command
keep-build-log = true
"""

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


def nix_usable() -> str | None:
    """Why real Nix builds cannot run here, or None when they can."""
    if shutil.which("nix") is None or shutil.which("nix-build") is None:
        return "Nix is not installed (Debian: apt-get install nix-bin)"
    if not os.access("/nix/store", os.W_OK) and not Path("/nix/var/nix/daemon-socket/socket").exists():
        return "the Nix store is not writable and no nix-daemon runs"
    return None


def require_nix() -> None:
    """Skip (or, under CI=true, fail) a test that needs Nix where there is none."""
    reason = nix_usable()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs real Nix: {reason}")
    pytest.skip(reason)


def nonce() -> str:
    return f"{time.time_ns()}-{os.getpid()}"


@pytest.fixture
def nix_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with nix.conf (in effect for this test) and drvs.nix; its path."""
    require_nix()
    folder = tmp_path / "nix"
    folder.mkdir()
    (folder / "nix.conf").write_text(NIX_CONF)
    (folder / "drvs.nix").write_text(DERIVATIONS)
    monkeypatch.setenv("NIX_CONF_DIR", str(folder))
    for name in [n for n in os.environ if n.startswith("SERVICE_TAG_")]:
        monkeypatch.delenv(name)
    return folder
