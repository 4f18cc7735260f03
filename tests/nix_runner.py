"""A throwaway runner on 127.0.0.1 for tests: sshd on a free port whose one key is forced into
`buildreport runner`, a Nix client with a store of its own, and helpers to build and read the spool.

Nothing outside the temporary folder is configured: sshd, the runner and the client each read files
made here (sshd_config, authorized_keys, NIX_CONF_DIR, an ssh client config passed in NIX_SSHOPTS).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import buildreport_command

from buildreport.models import BuildRecord
from buildreport.record.spool import pending_files

NIX_CONF = "sandbox = false\nsubstituters =\nexperimental-features = nix-command\n"

# Small sh-only derivations; `nonce` makes each test build afresh.
DERIVATIONS = """{ nonce ? "0" }:
let mk = name: script: extra: derivation ({
      inherit name nonce; system = builtins.currentSystem; builder = "/bin/sh";
      PATH = "/usr/bin:/bin"; args = [ "-c" script ];
    } // extra);
in {
  ok = mk "ok-test" "echo building; echo to-stderr >&2; mkdir -p $out; echo hi > $out/x"
    { SERVICE_TAG_drvtag = "yes"; SERVICE_TAG_team = "builders"; };
  hog = mk "hog-test" "x=$(head -c 40000000 /dev/zero | tr '\\\\0' a); echo held \\${#x} bytes; mkdir $out" {};
  busy = mk "busy-test" "i=0; while [ $i -lt 1000000 ]; do i=$((i+1)); done; times; mkdir $out" {};
  nap = mk "nap-test" "echo napping; sleep 3; mkdir -p $out" {};
  fail = mk "fail-test" "echo about to fail; exit 1" {};
  slow = mk "slow-test" "echo sleeping; sleep 30; mkdir $out" {};
  multi = mk "multi-test" "mkdir -p $out $dev; echo a > $out/a; echo b > $dev/b" { outputs = [ "out" "dev" ]; };
}
"""

REQUIRED = ("nix-build", "nix-daemon", "nix", "sshd", "ssh", "ssh-keygen")


def require_tools() -> None:
    """Skip (fail under CI=true) when Nix or OpenSSH is missing."""
    missing = [tool for tool in REQUIRED if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin") is None]
    if missing:
        reason = (
            f"runner tests need Nix and OpenSSH; missing: {', '.join(missing)} (apt-get install nix-bin openssh-server)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI=true, so they may not be skipped")
        pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Runner:
    """sshd + `buildreport runner` + a Nix client, all under `root`."""

    def __init__(
        self,
        root: Path,
        runner_args: list[str],
        tags: dict[str, str] | None = None,
        sink: list[str] | None = None,
        runner_env: dict[str, str] | None = None,
    ) -> None:
        self.root = root
        self.spool = root / "spool"
        self.state = root / "state"
        self.alias = f"buildreport-test-{uuid.uuid4().hex[:12]}"
        self.port = free_port()
        self.runner_conf = root / "runner-nix"
        self.client_conf = root / "client-nix"
        for conf in (self.runner_conf, self.client_conf):
            conf.mkdir(parents=True)
            (conf / "nix.conf").write_text(NIX_CONF)
        (root / "drv.nix").write_text(DERIVATIONS)
        for key in ("host", "client"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / key)], check=True)
        command = shlex.join(
            [
                "env",
                f"NIX_CONF_DIR={self.runner_conf}",
                *(f"{name}={value}" for name, value in (runner_env or {}).items()),
                *buildreport_command(),
                "runner",
                *(sink or ["--spool", str(self.spool)]),
                "--state-dir",
                str(self.state),
                *runner_args,
            ]
        )
        pub = (root / "client.pub").read_text().strip()
        (root / "authorized_keys").write_text(f'command="{command}",restrict {pub}\n')
        (root / "authorized_keys").chmod(0o600)
        (root / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {root / 'host'}\n"
            f"AuthorizedKeysFile {root / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            f"AcceptEnv SERVICE_TAG_*\nPidFile {root / 'sshd.pid'}\n"
        )
        set_env = " ".join(f"SERVICE_TAG_{k}={v}" for k, v in (tags or {}).items())
        (root / "ssh_config").write_text(
            f"Host {self.alias}\n  HostName 127.0.0.1\n  Port {self.port}\n  User {pwd.getpwuid(os.getuid()).pw_name}\n"
            f"  IdentityFile {root / 'client'}\n  IdentitiesOnly yes\n  UserKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking no\n  LogLevel ERROR\n" + (f"  SetEnv {set_env}\n" if set_env else "")
        )
        self.sshd: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        sshd = shutil.which("sshd", path=os.environ.get("PATH", "") + ":/usr/sbin")
        assert sshd
        self.sshd = subprocess.Popen(
            [sshd, "-D", "-f", str(self.root / "sshd_config"), "-E", str(self.root / "sshd.log")]
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"sshd did not start: {(self.root / 'sshd.log').read_text()}")

    def stop(self) -> None:
        if self.sshd is not None and self.sshd.poll() is None:
            self.sshd.terminate()
            self.sshd.wait(timeout=10)
        self.clear_load()

    def clear_load(self) -> None:
        """Forget this runner's slots in the client's load files (a failed connection leaves them taken)."""
        for path in Path("/nix/var/nix/current-load").glob(f"*{self.alias}*"):
            path.unlink(missing_ok=True)

    def client_env(self) -> dict[str, str]:
        return {**os.environ, "NIX_CONF_DIR": str(self.client_conf), "NIX_SSHOPTS": f"-F {self.root / 'ssh_config'}"}

    def build_argv(self, attr: str, nonce: str) -> list[str]:
        return [
            "nix-build",
            "--store",
            str(self.root / "client-store"),
            str(self.root / "drv.nix"),
            "-A",
            attr,
            "--argstr",
            "nonce",
            nonce,
            "--max-jobs",
            "0",
            "--builders",
            f"ssh-ng://{self.alias} x86_64-linux - 1 1",
            "--no-out-link",
        ]

    def build(self, attr: str, nonce: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.build_argv(attr, nonce), env=self.client_env(), capture_output=True, text=True, timeout=timeout
        )

    def start_build(self, attr: str, nonce: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.build_argv(attr, nonce),
            env=self.client_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def drv_path(self, attr: str, nonce: str) -> str:
        out = subprocess.run(
            [
                "nix-instantiate",
                "--store",
                str(self.root / "client-store"),
                str(self.root / "drv.nix"),
                "-A",
                attr,
                "--argstr",
                "nonce",
                nonce,
            ],
            env=self.client_env(),
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()

    def records(self) -> dict[str, list[dict[str, Any]]]:
        """Every spooled record, by source_id, in the order they were written. Files still being written (a
        temporary name, renamed into place when whole) are left for a later look, as `push` leaves them."""
        by_source: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for path in pending_files(self.spool):
            for line in path.read_text().splitlines():
                record = json.loads(line)
                assert_import_record(record)
                by_source[record["source_id"]].append(record)
        return dict(by_source)

    def wait_sessions(self, count: int, timeout: float = 30) -> None:
        """Until `count` sessions have ended."""
        deadline = time.monotonic() + timeout
        while self.runner_log().count("session ended") < count:
            assert time.monotonic() < deadline, self.runner_log()
            time.sleep(0.1)

    def wait_final(self, drv_path: str, timeout: float = 30) -> list[dict[str, Any]]:
        """The records of the build of `drv_path` once its last one is final (and the session is over)."""
        return self.wait_builds(drv_path, 1, timeout)[-1]

    def wait_builds(self, drv_path: str, count: int, timeout: float = 30) -> list[list[dict[str, Any]]]:
        """The records of each of `count` builds of `drv_path`, oldest first, once all are final."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            builds = [r for r in self.records().values() if r[0]["derivation_path"] == drv_path]
            final = len(builds) >= count and all(r[-1]["build_status"] != "running" for r in builds)
            if final and self.session_over():
                return sorted(builds, key=lambda r: r[0]["create_time"])
            time.sleep(0.1)
        raise AssertionError(f"no {count} final builds of {drv_path}: {self.records()}; log: {self.runner_log()}")

    def session_over(self) -> bool:
        return self.runner_log().count("session ended") >= self.runner_log().count("session from")

    def runner_log(self) -> str:
        path = self.state / "runner.log"
        return path.read_text() if path.exists() else ""


def assert_import_record(record: dict[str, Any]) -> None:
    """A spooled record is a record of `POST /builds` named by its source id alone."""
    assert "account" not in record and record["build_id"] is None and record["source_id"]
    msgspec.convert(record, BuildRecord, strict=False)


def path_info(runner: Runner, paths: list[str]) -> dict[str, dict[str, Any]]:
    out = subprocess.run(
        ["nix", "path-info", "--json", *paths],
        env={**os.environ, "NIX_CONF_DIR": str(runner.runner_conf)},
        capture_output=True,
        text=True,
        check=True,
    )
    return {info["path"]: info for info in json.loads(out.stdout)}


def kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
