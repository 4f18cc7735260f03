"""The Nix versions the recorder tests run against: the host's own and newer ones in Debian chroots.

    2.8   Debian bookworm's nix-bin, installed on the host (`nix-build` on PATH)
    2.26  Debian trixie's nix-bin, in the chroot <cache>/trixie
    2.34  Debian sid's nix-bin, in the chroot <cache>/sid

<cache> is $BUILDREPORT_NIX_CACHE, default /var/cache/buildreport-nix. `.ci/nix_chroot.sh SUITE…` makes the
chroots (`make test` runs it first); each holds its suite's Nix, Python and OpenSSH, and buildreport installed
from a wheel of this checkout in a virtual environment of the checkout's own (`v.venv`, under /opt/buildreport).
When a test session starts, it is installed again if the checkout's sources changed. Under CI=true a missing
version fails its tests; elsewhere they skip.

Interface (the `nix_version` fixture is parametrised over the three; ids `nix-2.8`, `nix-2.26`, `nix-2.34`):

- `v.name` ("2.34"), `v.suite` ("sid"), `v.version` (`nix --version`'s "2.34.8"), `v.at_least(2, 12)`;
- `v.root`: the chroot's folder (None for the host's Nix); `v.host_path("/nix/store/…")` is where a path
  inside the chroot is seen from outside;
- `v.bin_dir`: a folder of wrappers (`nix`, `nix-build`, `nix-instantiate`, `nix-store`, `nix-daemon`,
  `nix-env`, `nix-shell`, `buildreport`, `python3`, `sshd`, `ssh`, `ssh-keygen`) that run the chroot's
  program of that name; None for the host's Nix;
- `v.env(base=None)`: `base` (default os.environ) with `v.bin_dir` first on PATH and NIX_LOG_DIR set to the
  chroot's log folder seen from outside, so that `nix …` from the tests and `buildreport.record.nix` in the
  test process reach this version (the `nix_files` fixture puts this in effect for a test);
- `v.command(argv)`: argv that runs `argv` with this version (inside the chroot; unchanged on the host);
  `v.run(argv, **kw)` and `v.popen(argv, **kw)` are subprocess.run / Popen of it;
- `v.buildreport`: the argv that starts buildreport next to this Nix (in the chroot: `v.venv`/bin/buildreport,
  from the wheel, under the chroot's Python);
- `v.log_dir`: the stored build logs of this Nix, seen from outside; `v.nix_conf`: the nix.conf the tests use.

How a command runs inside: `unshare --mount` gives it a mount namespace of its own, in which
tests/nix_in_chroot.sh bind-mounts /proc, /sys, /dev, /dev/pts and the temporary folder (the same path on both
sides: a test's tmp_path, its files and databases are the same inside and out) and then execs `chroot`. The
mounts vanish with the command's last process, however it ends, and are never seen outside. The command keeps
the pid the caller started (every step execs the next), so signals reach it directly. The chroot's Nix has a
store of its own (<cache>/SUITE/nix), used by one test at a time (tests run serially); builds run as root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHECKOUT = Path(__file__).resolve().parent.parent
IN_CHROOT = CHECKOUT / "tests" / "nix_in_chroot.sh"
SET_UP = CHECKOUT / ".ci" / "nix_chroot.sh"
CHROOT_SUITES = {"2.26": "trixie", "2.34": "sid"}
NAMES = ("2.8", "2.26", "2.34")
WRAPPED = ("nix", "nix-build", "nix-instantiate", "nix-store", "nix-daemon", "nix-env", "nix-shell", "python3")
WRAPPED_ABSOLUTE = {
    "sshd": "/usr/sbin/sshd",
    "ssh": "/usr/bin/ssh",
    "ssh-keygen": "/usr/bin/ssh-keygen",
}

HOST_NIX_CONF = """\
sandbox = false
substituters =
experimental-features = nix-command
keep-build-log = true
"""
# In a chroot there are no nixbld users: builds run as root.
CHROOT_NIX_CONF = HOST_NIX_CONF + "build-users-group =\n"


def cache_dir() -> Path:
    return Path(os.environ.get("BUILDREPORT_NIX_CACHE") or "/var/cache/buildreport-nix")


@dataclass(frozen=True)
class NixVersion:
    """One Nix version and how to run commands with it (see the module's docstring)."""

    name: str
    suite: str
    version: str
    root: Path | None = None
    bin_dir: Path | None = None
    venv: str | None = None  # buildreport's virtual environment inside the chroot
    nix_conf: str = HOST_NIX_CONF
    _numbers: tuple[int, ...] = field(default=(), repr=False)

    def at_least(self, major: int, minor: int) -> bool:
        return self._numbers[:2] >= (major, minor)

    def host_path(self, path: str | Path) -> Path:
        return Path(path) if self.root is None else self.root / str(path).lstrip("/")

    @property
    def log_dir(self) -> Path:
        return self.host_path("/nix/var/log/nix")

    @property
    def buildreport(self) -> list[str]:
        if self.bin_dir is None:
            return [sys.executable, "-m", "buildreport"]
        return [str(self.bin_dir / "buildreport")]

    def command(self, argv: list[str]) -> list[str]:
        if self.root is None:
            return list(argv)
        return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", str(IN_CHROOT), str(self.root),
                *argv]  # fmt: skip

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        if self.bin_dir is not None:
            env["PATH"] = f"{self.bin_dir}:{env.get('PATH', '')}"
            env["NIX_LOG_DIR"] = str(self.log_dir)
        return env

    def run(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        return subprocess.run(self.command(argv), **kwargs)

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        return subprocess.Popen(self.command(argv), **kwargs)


def _numbers(text: str) -> tuple[int, ...]:
    """(2, 34, 8) from `nix (Nix) 2.34.8`."""
    word = text.strip().split()[-1] if text.strip() else ""
    return tuple(int(part) for part in word.split(".") if part.isdigit())


def _write_wrappers(root: Path, venv: str, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    programs = {**{name: name for name in WRAPPED}, **WRAPPED_ABSOLUTE, "buildreport": f"{venv}/bin/buildreport"}
    for name, target in programs.items():
        wrapper = folder / name
        wrapper.write_text(
            "#!/bin/sh\n"
            f'exec unshare --mount --propagation private -- /bin/sh "{IN_CHROOT}" "{root}" "{target}" "$@"\n'
        )
        wrapper.chmod(0o755)


def _host_version() -> NixVersion | str:
    if shutil.which("nix") is None or shutil.which("nix-build") is None:
        return "Nix is not installed (Debian: apt-get install nix-bin)"
    # Nix makes its store on first use where it may: a fresh machine's /nix/store may not exist yet.
    store = Path("/nix/store")
    nearest = next(folder for folder in (store, *store.parents) if folder.exists())
    if not os.access(nearest, os.W_OK) and not Path("/nix/var/nix/daemon-socket/socket").exists():
        return "the Nix store is not writable and no nix-daemon runs"
    done = subprocess.run(["nix", "--version"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"nix --version failed: {done.stderr.strip()}"
    numbers = _numbers(done.stdout)
    return NixVersion(name="2.8", suite="bookworm", version=".".join(map(str, numbers)), _numbers=numbers)


def _chroot_version(name: str, wrappers: Path) -> NixVersion | str:
    suite = CHROOT_SUITES[name]
    root = cache_dir() / suite
    if os.geteuid() != 0:
        return f"Nix {name} runs in a chroot, which needs root"
    if not (root / ".buildreport-ready").is_file():
        return f"no Nix {name} chroot in {root}: make it with `sh .ci/nix_chroot.sh {suite}` (or `make test`)"
    # Brings the chroot's buildreport up to date with this checkout (quick when it already is).
    done = subprocess.run(["sh", str(SET_UP), suite], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"the Nix {name} chroot is not usable: {done.stderr.strip().splitlines()[-1:]}"
    venv = done.stdout.split()[-1]  # the set-up's last line: "SUITE CHROOT VENV"
    _write_wrappers(root, venv, wrappers)
    version = subprocess.run([str(wrappers / "nix"), "--version"], capture_output=True, text=True, check=False)
    if version.returncode != 0:
        return f"nix --version failed in {root}: {version.stderr.strip()}"
    numbers = _numbers(version.stdout)
    if ".".join(map(str, numbers[:2])) != name:
        return f"the {suite} chroot holds Nix {version.stdout.strip()}, not {name}"
    return NixVersion(
        name=name,
        suite=suite,
        version=".".join(map(str, numbers)),
        root=root,
        bin_dir=wrappers,
        venv=venv,
        nix_conf=CHROOT_NIX_CONF,
        _numbers=numbers,
    )


_PREPARED: dict[str, NixVersion | str] = {}


def prepare(name: str, tmp_path_factory: pytest.TempPathFactory) -> NixVersion:
    """The Nix version `name`, prepared once a session; skips (fails under CI=true) when it cannot run here."""
    if name not in _PREPARED:
        if name == "2.8":
            _PREPARED[name] = _host_version()
        else:
            _PREPARED[name] = _chroot_version(name, tmp_path_factory.mktemp(f"nix-{name}-bin"))
    found = _PREPARED[name]
    if isinstance(found, str):
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs Nix {name}: {found}")
        pytest.skip(found)
    return found


@pytest.fixture(params=NAMES, ids=[f"nix-{name}" for name in NAMES])
def nix_version(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> NixVersion:
    """Each Nix version in turn (a test using it runs once per version)."""
    return prepare(request.param, tmp_path_factory)
