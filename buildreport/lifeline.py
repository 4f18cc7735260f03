"""Processes that end with the process that started them, whatever signal ended it.

The one-file executable is a bootloader that runs the real program as its child: `kill -9` of the
bootloader must not leave an import or a server running on its own. Worker processes of `serve
--workers N` likewise end with the server that started them. Linux delivers a chosen signal to a
process when its parent dies (prctl PR_SET_PDEATHSIG); a parent that died before the request took
effect is caught by checking the parent afterwards.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
from pathlib import Path

PR_SET_PDEATHSIG = 1
log = logging.getLogger("buildreport.lifeline")


def _set_parent_death_signal(sig: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _exe(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def is_onefile_child() -> bool:
    """True in the program a one-file executable's bootloader unpacked and started (not in a one-folder build)."""
    meipass = getattr(sys, "_MEIPASS", None)
    return bool(getattr(sys, "frozen", False) and meipass) and Path(meipass).parent != Path(sys.executable).parent


def follow_bootloader() -> None:
    """In the child of a one-file executable: end when the bootloader ends."""
    if not is_onefile_child():
        return
    parent = os.getppid()
    if not _set_parent_death_signal(signal.SIGKILL):
        return
    # The bootloader runs the same file as its child; anything else means it is already gone.
    if parent <= 1 or _exe(parent) != _exe("self"):
        os._exit(1)


def follow_parent_process() -> None:
    """In a worker process started by multiprocessing: end when the process that started it ends.

    The parent's death signal covers a direct parent; the watch on multiprocessing's parent sentinel also
    covers a worker whose direct parent is a bootloader of its own (a worker of the one-file executable).
    """
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    if _set_parent_death_signal(signal.SIGKILL) and os.getppid() != parent.pid and not is_onefile_child():
        _end_with_parent(parent.pid)
    sentinel = parent.sentinel

    def watch() -> None:
        from multiprocessing.connection import wait

        wait([sentinel])
        _end_with_parent(parent.pid)

    threading.Thread(target=watch, name="buildreport-parent-watch", daemon=True).start()


def _end_with_parent(parent_pid: int | None) -> None:
    """End at once, saying why: a worker that ends leaves the connections it held without an answer."""
    log.warning("process %d ends: the process that started it (%s) has ended", os.getpid(), parent_pid)
    os._exit(1)
