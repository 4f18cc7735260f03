"""Collect mode: record every build this machine's Nix runs, from the JSON log Nix (≥ 2.32) copies to a socket.

With `json-log-path = PATH` in nix.conf, each Nix process that logs (`nix …` commands, and each connection a
nix-daemon serves, `nix-daemon --stdio` of ssh-ng:// remote builds included) connects to the Unix stream socket
PATH once and writes its log there, one `internal-json` event a line. Legacy commands run without a daemon
(`nix-build`, `nix-store`) do not. See the README for what was measured.

Nix writes each line with a blocking write: a reader that stops reading stalls every build on the machine. So the
connection threads here only read and queue; everything slow (asking the store about outputs, writing records)
happens on the recorder thread, which also cuts the bytes into lines. When that falls far behind (256 MiB), what
Nix sends is dropped (and counted) until it catches up, never the reading.

What is recorded: each `build` activity (type 105) run here (machine ""), from its start to its stop. Its status:
built when its outputs are valid after the stop; otherwise what an error message of the same process says about
it (failure, time-out), else build_failed with the last log lines. Only connections of root are recorded: every
build of a multi-user Nix runs in a root process (the daemon), and another user's `nix` only repeats the events
its daemon also sends (the same activity ids, recorded once).
"""

from __future__ import annotations

import contextlib
import os
import platform
import queue
import socket
import sqlite3
import struct
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from buildreport.models import BuildOutput, BuildRecord
from buildreport.record import nix, records
from buildreport.record.fit import fit

MAX_LINE = 4 * 1024 * 1024  # a longer line is not an event of ours: it is skipped
CHUNK = 1024 * 1024
BACKLOG_LIMIT = 256 * 1024 * 1024  # bytes read but not yet recorded, beyond which what Nix sends is dropped
HOLD_SECONDS = 2.0  # how long a build without valid outputs waits for its process's error message
LOG_BYTES_KEPT = 2 * 1024 * 1024  # the end of a longer build log is kept
MESSAGE_LINES = 10
SEEN_ACTIVITIES = 100_000
NIX_DB = "/nix/var/nix/db/db.sqlite"


class CollectError(Exception):
    """The collector cannot start (the message says why, in one line)."""


# --- what the store says about a build -----------------------------------------------------------------------


class StoreView:
    """The derivation of a build and its valid outputs, asked of Nix (and, read-only, of its database)."""

    def __init__(self, nix_db: str = NIX_DB) -> None:
        self.nix_db = nix_db

    def derivation(self, drv_path: str) -> nix.Derivation | None:
        try:
            return nix.show_derivation(drv_path)
        except nix.NixError:
            return None  # e.g. a build that came over ssh-ng: its .drv travelled in memory, not into the store

    def outputs(self, drv_path: str, drv: nix.Derivation | None) -> list[BuildOutput]:
        """Its valid outputs; without the .drv, the paths Nix registered with this deriver."""
        paths = dict(drv.outputs) if drv is not None else self._derived_paths(drv_path)
        try:
            infos = nix.path_infos(paths.values()) if paths else {}
        except nix.NixError:
            return []
        return [
            BuildOutput(name=name, path=path, nar_hash=infos[path].nar_hash, nar_size_bytes=infos[path].nar_size)
            for name, path in sorted(paths.items())
            if path in infos
        ]

    def _derived_paths(self, drv_path: str) -> dict[str, str]:
        try:
            with contextlib.closing(sqlite3.connect(f"file:{self.nix_db}?mode=ro", uri=True, timeout=5)) as db:
                rows = db.execute("SELECT path FROM ValidPaths WHERE deriver = ?", (drv_path,)).fetchall()
        except sqlite3.Error:
            return {}
        name = nix.drv_name(drv_path)
        # <hash>-<name> is the output `out`; <hash>-<name>-<output> any other.
        return {_output_name(row[0], name): row[0] for row in rows}


def _output_name(path: str, name: str) -> str:
    tail = os.path.basename(path).split("-", 1)[-1]
    return tail[len(name) + 1 :] if tail.startswith(name + "-") else "out"


# --- the builds of one connection ----------------------------------------------------------------------------


@dataclass
class Build:
    act_id: int
    drv_path: str
    start: float
    source_id: str
    log: deque[str] = field(default_factory=deque)
    log_bytes: int = 0
    dropped: int = 0
    stop: float | None = None

    def add_log(self, line: str) -> None:
        self.log.append(line)
        self.log_bytes += len(line) + 1
        while self.log_bytes > LOG_BYTES_KEPT and len(self.log) > 1:
            self.log_bytes -= len(self.log.popleft()) + 1
            self.dropped += 1

    def log_text(self) -> str | None:
        if not self.log:
            return None
        head = [f"[{self.dropped} earlier lines not kept]"] if self.dropped else []
        return "\n".join([*head, *self.log]) + "\n"


@dataclass
class Connection:
    number: int
    pid: int
    uid: int
    builds: dict[int, Build] = field(default_factory=dict)
    remote: set[str] = field(default_factory=set)  # derivations this process sent to another machine
    errors: list[nix.ErrorFinding] = field(default_factory=list)
    closed: bool = False
    pending: bytes = b""  # the start of a line whose end has not come yet
    resync: bool = False  # bytes were dropped: the next line is cut, skip to its end


@dataclass
class CollectConfig:
    sink: Callable[[BuildRecord], None]
    cpu_count: int
    allocated_megabytes: int
    log: Callable[[str], None]
    store: StoreView = field(default_factory=StoreView)
    host: str = field(default_factory=socket.gethostname)
    system: str = field(default_factory=lambda: f"{platform.machine()}-{platform.system().lower()}")


class Recorder:
    """Turns the queued events of every connection into build records (on one thread: no locks needed)."""

    def __init__(self, config: CollectConfig) -> None:
        self.config = config
        self.connections: dict[int, Connection] = {}
        self.seen: OrderedDict[int, None] = OrderedDict()  # build activities already recorded
        self.invocation = f"collect-{time.time_ns()}"
        self.recorded = 0

    def opened(self, number: int, pid: int, uid: int) -> None:
        self.connections[number] = Connection(number, pid, uid)

    def closed(self, at: float, number: int) -> None:
        conn = self.connections.get(number)
        if conn is not None:
            conn.closed = True
            for build in list(conn.builds.values()):
                build.stop = build.stop if build.stop is not None else at
            self.settle(at)

    def data(self, at: float, number: int, chunk: bytes | None) -> None:
        """Bytes of one connection as they came (None: some were dropped before these)."""
        conn = self.connections.get(number)
        if conn is None or conn.uid != 0:
            return
        if chunk is None:
            conn.pending, conn.resync = b"", True
            return
        lines = (conn.pending + chunk).split(b"\n")
        conn.pending = lines.pop()
        if len(conn.pending) > MAX_LINE:
            conn.pending, conn.resync = b"", True
        if conn.resync and lines:
            lines.pop(0)
            conn.resync = False
        for line in lines:
            self.line(at, conn, line)

    def line(self, at: float, conn: Connection, data: bytes) -> None:
        event = nix.parse_event(nix.EVENT_PREFIX + data)
        if event is None:
            return
        if event.action == "start" and event.type == nix.ACT_BUILD and event.fields:
            self._started(at, conn, event)
        elif event.action == "result" and event.type == nix.RES_BUILD_LOG_LINE and event.id in conn.builds:
            if event.fields and isinstance(event.fields[0], str):
                conn.builds[event.id].add_log(nix.strip_ansi(event.fields[0]))
        elif event.action == "stop" and event.id in conn.builds:
            conn.builds[event.id].stop = at
            self.settle(at)
        elif event.action == "msg" and event.level == 0:
            finding = nix.read_error(event.msg)
            if finding is not None:
                conn.errors.append(finding)

    def _started(self, at: float, conn: Connection, event: nix.NixEvent) -> None:
        drv_path, machine = event.fields[0], event.fields[1] if len(event.fields) > 1 else ""
        if not isinstance(drv_path, str) or not drv_path.endswith(".drv"):
            return
        if machine:
            conn.remote.add(drv_path)  # built elsewhere: that machine records it
            return
        if drv_path in conn.remote or event.id in self.seen:
            return  # the remote machine's events relayed by this process, or a daemon's relayed to its client
        self.seen[event.id] = None
        while len(self.seen) > SEEN_ACTIVITIES:
            self.seen.popitem(last=False)
        source_id = records.source_id(f"{self.invocation}.{event.id}", drv_path, self.config.host)
        build = Build(event.id, drv_path, at, source_id)
        conn.builds[event.id] = build
        self._write(build, None, final=False)

    def settle(self, now: float) -> None:
        """Finish every stopped build whose outcome is known (or waited for long enough)."""
        for conn in list(self.connections.values()):
            for act_id, build in list(conn.builds.items()):
                if build.stop is not None and self._finish(conn, build, now):
                    del conn.builds[act_id]
            if conn.closed and not conn.builds:
                del self.connections[conn.number]

    def _finish(self, conn: Connection, build: Build, now: float) -> bool:
        assert build.stop is not None
        drv = self.config.store.derivation(build.drv_path)
        outputs = self.config.store.outputs(build.drv_path, drv)
        expected = len(drv.outputs) if drv is not None else 1
        if outputs and len(outputs) >= expected:
            self._write(build, ("built", None, outputs, drv), final=True)
            return True
        finding = next((f for f in reversed(conn.errors) if f.drv_path in (build.drv_path, None)), None)
        if finding is None and not conn.closed and now - build.stop < HOLD_SECONDS:
            return False  # the error message of a `nix` command comes after the build's stop
        if finding is not None:
            status, message = getattr(finding.status, "value", str(finding.status)), finding.message
        else:
            status, message = "build_failed", "\n".join(list(build.log)[-MESSAGE_LINES:]) or "the build failed"
        self._write(build, (status, message, [], drv), final=True)
        return True

    def _write(self, build: Build, outcome: tuple[str, str | None, list[BuildOutput], Any] | None, final: bool) -> None:
        config = self.config
        drv = outcome[3] if outcome is not None else config.store.derivation(build.drv_path)
        duration = max(0.0, build.stop - build.start) if final and build.stop is not None else None
        record: dict[str, Any] = {
            "source_id": build.source_id,
            "create_time": records.utc(build.start),
            "start_time": records.utc(build.start),
            "queue_time_seconds": 0.0,
            "duration_seconds": None if duration is None else round(duration, 6),
            "build_status": outcome[0] if outcome is not None else "running",
            "status_message": outcome[1] if outcome is not None else None,
            "cpu_count": config.cpu_count,
            "allocated_megabytes": config.allocated_megabytes,
            "cpu_seconds": 0,  # Nix's JSON log says nothing of CPU time
            "average_cpu_utilization": None,
            "peak_memory_use_kilobytes": None,
            "peak_storage_use_kilobytes": None,
            "derivation_path": build.drv_path,
            "outputs": outcome[2] if outcome is not None else [],
            "system": drv.system if drv is not None else config.system,
            "tags": drv.tags if drv is not None else {},
        }
        if final:
            record["log"] = build.log_text()
        try:
            converted = msgspec.convert(fit(record), BuildRecord, from_attributes=True)
            config.sink(converted)
        except (msgspec.ValidationError, OSError, ValueError) as exc:
            config.log(f"could not keep {build.source_id}: {exc}")
            return
        if final:
            self.recorded += 1
        config.log(f"recorded {build.source_id} {record['build_status']}")


# --- the socket ----------------------------------------------------------------------------------------------


def open_socket(path: Path, log: Callable[[str], None]) -> socket.socket:
    """Listen at `path`: after a stale socket of an earlier run, or a file Nix wrote while no socket was there."""
    if path.is_socket():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # nobody listens: an earlier collector's
        else:
            raise CollectError(f"another program already listens at {path}")
        finally:
            probe.close()
    elif path.is_file():
        # With no socket there, Nix appends its log to a plain file of that name: keep it, and say so.
        aside = path.with_name(f"{path.name}.{datetime.now(UTC):%Y%m%dT%H%M%SZ}.unrecorded.jsonl")
        os.replace(path, aside)
        log(f"Nix wrote to {path} as a file while no collector listened: kept as {aside}, not recorded")
    elif path.exists():
        raise CollectError(f"{path} exists and is not a socket")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(path))
        # Every user's `nix` connects (write permission on the socket is what connect needs); only root's
        # connections are recorded.
        os.chmod(path, 0o666)
        server.listen(128)
    except OSError as exc:
        server.close()
        raise CollectError(f"cannot listen at {path}: {exc.strerror or exc}") from exc
    return server


def _peer(conn: socket.socket) -> tuple[int, int]:
    pid, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return pid, uid


class Collector:
    """The accept loop, a reader thread per connection, and the recorder thread between them and the sink."""

    def __init__(self, server: socket.socket, config: CollectConfig) -> None:
        self.server = server
        self.config = config
        self.recorder = Recorder(config)
        self.events: queue.Queue[tuple[float, str, int, Any]] = queue.Queue()
        self.backlog = 0  # bytes queued, not yet recorded
        self.backlog_lock = threading.Lock()
        self.dropped = 0
        self.stopping = threading.Event()

    def serve(self) -> None:
        # The readers must get the interpreter soon after data arrives, not after the recorder's 5 ms turn.
        sys.setswitchinterval(0.0005)
        recorder = threading.Thread(target=self._record_loop, name="recorder", daemon=True)
        recorder.start()
        number = 0
        while not self.stopping.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                if self.stopping.is_set():
                    break
                time.sleep(0.1)
                continue
            number += 1
            threading.Thread(target=self._read, args=(conn, number), name=f"conn-{number}", daemon=True).start()
        self.events.put((time.time(), "end", 0, None))
        recorder.join(timeout=30)

    def stop(self) -> None:
        self.stopping.set()
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()

    def _read(self, conn: socket.socket, number: int) -> None:
        """Read as fast as Nix writes, whatever the recorder is doing."""
        with conn:
            try:
                pid, uid = _peer(conn)
            except OSError:
                pid, uid = 0, -1
            self.events.put((time.time(), "open", number, (pid, uid)))
            dropping = False
            while True:
                try:
                    data = conn.recv(CHUNK)
                except OSError:
                    data = b""
                if not data:
                    break
                with self.backlog_lock:
                    full = self.backlog > BACKLOG_LIMIT
                    if not full:
                        self.backlog += len(data)
                if full:
                    self.dropped += len(data)  # far behind: give up these bytes rather than make Nix wait
                    dropping = True
                    continue
                if dropping:
                    self.events.put((time.time(), "data", number, None))
                    dropping = False
                self.events.put((time.time(), "data", number, data))
        self.events.put((time.time(), "close", number, None))

    def _record_loop(self) -> None:
        recorder, reported = self.recorder, 0
        while True:
            try:
                at, kind, number, value = self.events.get(timeout=HOLD_SECONDS / 2)
            except queue.Empty:
                recorder.settle(time.time())
                continue
            try:
                if kind == "end":
                    return
                if kind == "open":
                    recorder.opened(number, *value)
                elif kind == "data":
                    if value is not None:
                        with self.backlog_lock:
                            self.backlog -= len(value)
                    recorder.data(at, number, value)
                else:
                    recorder.closed(at, number)
            except Exception as exc:  # one odd event must not end the recording of every other build
                self.config.log(f"an event could not be recorded: {exc!r}")
            if self.dropped > reported:
                self.config.log(f"{self.dropped - reported} bytes of Nix's log dropped: the recorder fell behind")
                reported = self.dropped
