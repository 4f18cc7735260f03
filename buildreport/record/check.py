"""`buildreport runner --check`: is this machine ready to serve and record ssh-ng builds?

Each check gives a line a person can act on. `ok` and `note` lines leave the runner usable; one
`missing` line makes the check fail (non-zero exit).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from buildreport.record.destinations import SpoolSink, UnusableDatabase
from buildreport.record.runner import RunnerConfig


@dataclass(frozen=True)
class Finding:
    level: str  # "ok", "note" or "missing"
    text: str


def _nix_config(nix: str, env: dict[str, str]) -> dict[str, str] | None:
    try:
        proc = subprocess.run(
            [nix, "--extra-experimental-features", "nix-command", "show-config"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    config = {}
    for line in proc.stdout.splitlines():
        key, sep, value = line.partition(" = ")
        if sep:
            config[key.strip()] = value.strip()
    return config


def _sshd_accepts_tags(sshd_config: Path) -> bool | None:
    """Whether sshd's configuration (the main file and the `sshd_config.d/*.conf` it includes on Debian)
    passes SERVICE_TAG_* variables to sessions; None when it cannot be read."""
    try:
        texts = [sshd_config.read_text()]
    except OSError:
        return None
    for extra in sorted((sshd_config.parent / "sshd_config.d").glob("*.conf")):
        try:
            texts.append(extra.read_text())
        except OSError:
            continue
    for text in texts:
        for line in text.splitlines():
            words = line.split("#", 1)[0].split()
            accept = len(words) >= 2 and words[0].lower() == "acceptenv"
            if accept and any(w.startswith("SERVICE_TAG_") for w in words[1:]):
                return True
    return False


def _check_sink(config: RunnerConfig) -> Finding:
    sink = config.sink
    if isinstance(sink, SpoolSink):
        try:
            sink.directory.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=sink.directory, prefix=".check-"):
                pass
        except OSError as exc:
            return Finding("missing", f"spool: cannot write to {sink.directory}: {exc.strerror or exc}")
        return Finding("ok", f"spool: {sink.directory} is writable")
    if isinstance(sink, UnusableDatabase):
        return Finding("missing", f"database: {sink.reason}")
    return Finding("ok", "database: opened and up to date")


def check(config: RunnerConfig, env: dict[str, str], sshd_config: Path = Path("/etc/ssh/sshd_config")) -> list[Finding]:
    found: list[Finding] = []
    daemon = shutil.which(config.nix_daemon, path=env.get("PATH"))
    if daemon:
        found.append(Finding("ok", f"nix-daemon: {daemon}"))
    else:
        found.append(Finding("missing", f"nix-daemon: `{config.nix_daemon}` not found on PATH (install nix-bin)"))
    nix = shutil.which("nix", path=env.get("PATH"))
    if nix is None:
        found.append(Finding("missing", "nix: not found on PATH; outputs' NAR hashes need `nix path-info`"))
    else:
        settings = _nix_config(nix, env)
        if settings is None:
            found.append(Finding("missing", "nix.conf: `nix show-config` failed; check /etc/nix/nix.conf"))
        else:
            options = dict(config.nix_options)
            substituters = options.get("substituters", settings.get("substituters", ""))
            found.append(
                Finding(
                    "ok",
                    f"nix.conf: cores = {settings.get('cores', '?')}, sandbox = "
                    f"{options.get('sandbox', settings.get('sandbox', '?'))}",
                )
            )
            if substituters:
                found.append(Finding("note", f"nix.conf: substituters = {substituters} (each build may wait on them)"))
            if config.timeout is None:
                found.append(Finding("note", "--timeout not set: builds run as long as nix.conf allows"))
    found.append(_check_sink(config))
    try:
        config.state_dir.mkdir(parents=True, exist_ok=True)
        if not os.access(config.state_dir, os.W_OK):
            raise PermissionError(13, "not writable")
        found.append(Finding("ok", f"state: {config.state_dir} is writable (runner.log, restart links)"))
    except OSError as exc:
        found.append(Finding("missing", f"state: cannot write to {config.state_dir}: {exc.strerror or exc}"))
    if config.cgroup_root is None:
        found.append(Finding("note", "cgroup v2: none writable; CPU time comes from the daemon's /proc entry"))
    else:
        probe = config.cgroup_root / f"buildreport-check-{os.getpid()}"
        try:
            probe.mkdir()
            probe.rmdir()
            found.append(Finding("ok", f"cgroup v2: one per session under {config.cgroup_root}"))
        except OSError as exc:
            found.append(
                Finding(
                    "note",
                    f"cgroup v2: cannot create under {config.cgroup_root} ({exc.strerror}); "
                    "CPU time comes from the daemon's /proc entry",
                )
            )
    accepts = _sshd_accepts_tags(sshd_config)
    if accepts is None:
        found.append(
            Finding("note", f"sshd: cannot read {sshd_config}; add `AcceptEnv SERVICE_TAG_*` for session tags")
        )
    elif accepts:
        found.append(Finding("ok", f"sshd: {sshd_config} accepts SERVICE_TAG_* variables"))
    else:
        found.append(Finding("note", f"sshd: add `AcceptEnv SERVICE_TAG_*` to {sshd_config} for clients' tags"))
    return found
