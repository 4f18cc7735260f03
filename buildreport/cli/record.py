"""The `buildreport runner` command: settings from its options, then one session or a set-up check."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from buildreport.models import BuildRecord
from buildreport.record.destinations import DatabaseSink, SpoolSink
from buildreport.record.runner import RunnerConfig, check_original_command, run_session
from buildreport.record.usage import find_cgroup_root
from buildreport.store import is_postgres


def _memory_megabytes() -> int:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class UnusableDatabase:
    """Stands in for a database that cannot be opened: the session is served, its records are refused."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __call__(self, record: BuildRecord) -> None:
        raise ValueError(self.reason)


def _database(db: str, account: str) -> Callable[[BuildRecord], None]:
    from buildreport.store import DatabaseError

    try:
        return DatabaseSink(db, account)
    except DatabaseError as exc:
        return UnusableDatabase(str(exc))


def runner_config(
    spool: Path | None,
    db: str | None,
    account: str | None,
    state_dir: Path | None,
    timeout: int | None,
    cpu_count: int | None,
    allocated_megabytes: int | None,
    nix_daemon: str,
    nix_options: tuple[tuple[str, str], ...],
    cgroup: bool,
) -> RunnerConfig:
    sink: Callable[[BuildRecord], None]
    if spool is not None:
        sink = SpoolSink(spool)
        state_dir = state_dir or spool / ".runner"
    else:
        assert db is not None and account is not None
        sink = _database(db, account)
        if state_dir is None:
            # Beside a database file; for a database server, in the home of the user the runner runs as.
            local = Path.home() / "buildreport" if is_postgres(str(db)) else Path(db)
            state_dir = local.parent / f"{local.name}.runner"
    return RunnerConfig(
        sink=sink,
        state_dir=state_dir,
        cpu_count=cpu_count or os.cpu_count() or 1,
        allocated_megabytes=_memory_megabytes() if allocated_megabytes is None else allocated_megabytes,
        timeout=timeout,
        nix_daemon=nix_daemon,
        nix_options=list(nix_options),
        cgroup_root=find_cgroup_root() if cgroup else None,
    )


def run_runner(*, check_only: bool, **options: Any) -> int:
    config = runner_config(**options)
    env = dict(os.environ)
    if check_only:
        from buildreport.record.check import check

        findings = check(config, env)
        for finding in findings:
            print(f"{finding.level:>7}  {finding.text}")
        usable = not any(f.level == "missing" for f in findings)
        print("ready: this machine can serve and record ssh-ng builds" if usable else "not ready: see `missing` above")
        return 0 if usable else 1
    refusal = check_original_command(env)
    if refusal is not None:
        sys.stderr.write(f"{refusal}\n")
        return 1
    return run_session(config, env)
