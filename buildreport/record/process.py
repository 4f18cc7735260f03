"""What the kernel says about the Nix process `buildreport record` runs: its children's CPU time, peaks of
memory, whether its builders are its own children (a single-user Nix) and the machine's memory.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass
class Usage:
    """What the kernel says the Nix process and the children it reaped used."""

    children_cpu_seconds: float | None
    maxrss_kb: int
    nix_hwm_kb: int | None


def single_user(command: Sequence[str], env: Mapping[str, str]) -> bool:
    """Whether Nix builds in this process tree (no daemon), so that its reaped children are the builders."""
    if env.get("NIX_REMOTE", "") not in ("", "local") or any(
        a == "--store" or a.startswith("--store=") for a in command
    ):
        return False
    state = env.get("NIX_STATE_DIR") or "/nix/var/nix"
    return os.access(os.path.join(state, "db"), os.W_OK)


def memory_megabytes() -> int:
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return 0


def nix_peak_bound(nix_hwm_kb: int) -> int:
    """The largest peak that may still be Nix's own: its peak as last seen, plus what it may add while exiting.

    A builder is forked from Nix, so until it execs it counts Nix's resident pages as its own: the run's
    peak is a builder's only when it is clearly larger than Nix.
    """
    return nix_hwm_kb + nix_hwm_kb // 4 + 8192


def reaped_cpu_seconds(pid: int) -> float | None:
    """CPU time of the children process `pid` has reaped (cutime + cstime), also while it is a zombie."""
    with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    return None


def hwm_kb(pid: int) -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None
