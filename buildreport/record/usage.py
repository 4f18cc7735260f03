"""CPU time of one runner session: from a cgroup v2 made for it where one can be made, else from /proc.

A cgroup counts every process of the session, exited ones too, and is read at any moment, so each build
of a session gets its own CPU time from the difference at its start and end. Without one, the daemon's
/proc/PID/stat gives its own time plus that of the children it has reaped: the builder of each build is
reaped before the daemon answers, so the same difference works there too.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

# Where a writable cgroup v2 hierarchy usually is: the hybrid layout's unified tree, then a pure v2 one.
CGROUP_ROOTS = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))


def find_cgroup_root() -> Path | None:
    for root in CGROUP_ROOTS:
        if (root / "cgroup.procs").is_file() and (root / "cgroup.max.depth").is_file() and os.access(root, os.W_OK):
            return root
    return None


class SessionCgroup:
    """A cgroup v2 that holds the session's daemon and everything it starts."""

    def __init__(self, root: Path, name: str) -> None:
        self.root = root
        self.path = root / name
        self.path.mkdir()

    @classmethod
    def create(cls, root: Path | None, name: str) -> SessionCgroup | None:
        """The cgroup, or None when none can be made here (read-only, no permission, no cgroup v2)."""
        if root is None:
            return None
        try:
            return cls(root, name)
        except OSError:
            return None

    def add(self, pid: int) -> bool:
        try:
            (self.path / "cgroup.procs").write_text(f"{pid}\n")
        except OSError:
            return False
        return True

    def cpu_seconds(self) -> float | None:
        try:
            for line in (self.path / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
        except (OSError, ValueError):
            return None
        return None

    def memory_peak_kb(self) -> int | None:
        """The session's peak memory, where the memory controller is enabled for it (memory.peak)."""
        try:
            return int((self.path / "memory.peak").read_text()) // 1024
        except (OSError, ValueError):
            return None

    def remove(self, attempts: int = 20) -> None:
        """Move whatever is left to the parent (a cgroup with processes cannot be removed), then remove it.

        A process that is exiting still counts for a moment after it was moved or killed: try a few times.
        """
        for _ in range(attempts):
            with contextlib.suppress(OSError):
                for pid in (self.path / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        (self.root / "cgroup.procs").write_text(f"{pid}\n")
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.05)


def remove_stale(root: Path, prefix: str, older_than: float = 3600) -> None:
    """Remove empty session cgroups left by runners that were killed (a live session's is never empty)."""
    now = time.time()
    for path in root.glob(f"{prefix}*"):
        with contextlib.suppress(OSError):
            if now - path.stat().st_mtime > older_than:
                path.rmdir()  # fails, harmlessly, while any process is in it


def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime + cutime + cstime of a live process, in seconds."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its closing one.
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    except (IndexError, ValueError):
        return None
    return ticks / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """Reads the session's CPU seconds so far, from its cgroup or from the daemon's /proc entry."""

    def __init__(self, pid: int, cgroup: SessionCgroup | None) -> None:
        self.pid = pid
        self.cgroup = cgroup
        self.source = "cgroup" if cgroup is not None else "proc"

    def read(self) -> float | None:
        if self.cgroup is not None:
            return self.cgroup.cpu_seconds()
        return proc_cpu_seconds(self.pid)
