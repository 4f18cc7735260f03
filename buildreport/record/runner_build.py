"""One build of a runner session, the build_status of Nix's answer, the runner's own log file, and the
small system helpers of the relay."""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from buildreport.models import BuildOutput
from buildreport.record.protocol import BuildRequest, BuildResult, BuildResultStatus, DaemonError, ReplyEvents

LOG_MAX_BYTES = 2 * 1024 * 1024  # the end of a longer log is kept
MESSAGE_LINES = 10  # log lines in the status message of a failure without an error text


class RunnerLog:
    """The runner's own notes: to a file in its state folder, never into the client's stream."""

    def __init__(self, path: Path, session: str) -> None:
        self.path = path
        self.session = session

    MAX_BYTES = 16 * 1024 * 1024  # then the log moves to runner.log.1 (replacing the one before)

    def __call__(self, message: str) -> None:
        line = f"{datetime.now(UTC).isoformat(timespec='milliseconds')} {self.session} {message}\n"
        try:
            with contextlib.suppress(FileNotFoundError):
                if self.path.stat().st_size > self.MAX_BYTES:
                    os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(line)
        except OSError:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write(line)


@dataclass
class Build:
    """One wopBuildDerivation of the session, from request to answer."""

    index: int
    request: BuildRequest
    source_id: str
    create_time: float
    requested: float
    restart_of: str | None = None
    start: float | None = None
    end: float | None = None
    cpu_start: float | None = None
    cpu_end: float | None = None
    cpu_nix: float | None = None  # the build's own CPU time as the daemon measured it (protocol 1.37, cgroups)
    log: deque[str] = field(default_factory=deque)
    log_bytes: int = 0
    dropped_lines: int = 0
    status: str | None = None
    message: str | None = None
    outputs: list[BuildOutput] = field(default_factory=list)
    peak_memory_kb: int | None = None

    def add_log(self, line: str) -> None:
        self.log.append(line)
        self.log_bytes += len(line) + 1
        while self.log_bytes > LOG_MAX_BYTES and len(self.log) > 1:
            self.log_bytes -= len(self.log.popleft()) + 1
            self.dropped_lines += 1

    def log_tail(self) -> str:
        return "\n".join(list(self.log)[-MESSAGE_LINES:])

    def log_text(self) -> str | None:
        if not self.log:
            return None
        head = [f"[{self.dropped_lines} earlier lines not kept]"] if self.dropped_lines else []
        return "\n".join([*head, *self.log]) + "\n"


def status_of(result: BuildResult | DaemonError, duration: float, timeout: int | None) -> str | None:
    """The build_status of an answer; None when nothing was built (the outputs were there already)."""
    if isinstance(result, DaemonError):
        return "internal_error"
    status = result.status
    if status in (BuildResultStatus.Substituted, BuildResultStatus.AlreadyValid):
        return None
    if status == BuildResultStatus.ResolvesToAlreadyValid:
        return None
    if status == BuildResultStatus.Built:
        return "built"
    if status == BuildResultStatus.TimedOut or (timeout and duration >= timeout):
        return "timeout"
    if status == BuildResultStatus.MiscFailure:
        return "internal_error"
    return "build_failed"


class QueuedEvents(ReplyEvents):
    """Reply decoder events, stamped on arrival and handed to the recorder thread."""

    def __init__(self, events: queue.Queue[tuple[float, str, Any]]) -> None:
        self.events = events

    def build_started(self, drv_path: str) -> None:
        self.events.put((time.time(), "started", drv_path))

    def log_line(self, line: str) -> None:
        self.events.put((time.time(), "log", line))

    def finished(self, result: BuildResult | DaemonError) -> None:
        self.events.put((time.time(), "finished", result))


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def wait4(pid: int) -> tuple[int, int, Any]:
    while True:
        try:
            return os.wait4(pid, 0)
        except ChildProcessError:
            return pid, 0, None
        except InterruptedError:
            continue
