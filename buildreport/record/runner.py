"""Runner mode: the SSH forced command that serves one `ssh-ng://` session and records each build in it.

sshd starts `buildreport runner` for every session of a key whose authorized_keys entry forces it. It
spawns `nix-daemon --stdio` and relays the client's bytes to it and its answers back, unchanged; a copy
of each direction goes to the protocol decoders (`protocol.py`). The relay comes first: a decoder that
fails only turns recording off for the session (noted in the runner's log file), a spool that cannot
be written loses a record but never a byte of the session, and the slow work (spooling, `nix path-info`)
happens on a thread of its own.

Each wopBuildDerivation that really builds becomes one record, spooled as `running` when the daemon
starts the build and again, under the same `source_id`, with its final status when the answer comes.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from buildreport.models import BuildOutput, BuildRecord
from buildreport.record import nix, records
from buildreport.record.fit import fit
from buildreport.record.handshake import HandshakeReader, version_text
from buildreport.record.protocol import (
    BuildRequest,
    BuildResult,
    ClientScanner,
    DaemonError,
    ProtocolError,
    ReplyDecoder,
)
from buildreport.record.restarts import RestartState
from buildreport.record.runner_build import Build, QueuedEvents, RunnerLog, status_of, wait4, write_all
from buildreport.record.usage import CpuMeter, SessionCgroup, remove_stale

DAEMON_COMMAND = "nix-daemon --stdio"
CHUNK = 64 * 1024
HOLD_FINAL_SECONDS = 2.0
CGROUP_PREFIX = "buildreport-runner-"
DISCONNECT_MESSAGE = "ssh session closed: the client went away during the build"


@dataclass
class RunnerConfig:
    sink: Callable[[BuildRecord], None]  # buildreport.record.destinations: a spool or a local database
    state_dir: Path
    cpu_count: int
    allocated_megabytes: int
    timeout: int | None = None
    nix_daemon: str = "nix-daemon"
    nix_options: list[tuple[str, str]] = field(default_factory=list)
    cgroup_root: Path | None = None
    store_dir: str = "/nix/store"
    host: str = field(default_factory=socket.gethostname)

    def daemon_argv(self) -> list[str]:
        argv = [self.nix_daemon, "--stdio"]
        if self.timeout:
            argv += ["--option", "timeout", str(self.timeout)]
        for name, value in self.nix_options:
            argv += ["--option", name, value]
        return argv


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


class Session:
    """One SSH session: the relay, the decoders and the recorder thread."""

    def __init__(self, config: RunnerConfig, env: dict[str, str], stdin_fd: int = 0, stdout_fd: int = 1) -> None:
        self.config = config
        self.env = env
        self.stdin_fd = stdin_fd
        self.stdout_fd = stdout_fd
        self.started = time.time()
        self.session_id = f"{time.time_ns()}.{os.getpid()}"
        self.log = RunnerLog(config.state_dir / "runner.log", self.session_id)
        self.session_tags = nix.tags_from_env(env)
        self.restarts = RestartState(config.state_dir)
        self.events: queue.Queue[tuple[float, str, Any]] = queue.Queue()
        self.lock = threading.Lock()
        self.recording = True
        self.scanner = ClientScanner(self._on_request, config.store_dir)
        self.handshake = HandshakeReader()
        self.unrecorded: str | None = None  # why the session's builds are relayed without being recorded
        self.daemon_total = 0
        self.reply: ReplyDecoder | None = None
        self.builds: list[Build] = []
        self.requests = 0
        self.held: Build | None = None
        self.current: Build | None = None
        self.signalled: int | None = None

    # --- the relay ------------------------------------------------------------------------------------

    def _stop_recording(self, why: str) -> None:
        if self.recording:
            self.recording = False
            self.log(f"recording off for this session: {why}")
            self.events.put((time.time(), "recording_off", why))

    def _decoding_failed(self, stream: str, exc: Exception) -> None:
        """One line: the version, the operation and the offset where decoding failed; the relay goes on."""
        version = self.handshake.info.version
        if not self.handshake.done:
            operation = "the handshake"
        elif stream == "daemon" and self.reply is not None:
            operation = "the answer to wopBuildDerivation"
        else:
            operation = "wopBuildDerivation"
        offset = exc.offset if isinstance(exc, ProtocolError) else None
        where = f"{stream} stream byte {offset}" if offset is not None else f"{stream} stream"
        self._stop_recording(
            f"decoding failed: protocol {'?' if version is None else version_text(version)}, "
            f"{operation}, {where}: {exc}; the session is relayed unchanged, not recorded"
        )

    def _follow_handshake(self, side: str, data: bytes) -> None:
        handshake = self.handshake
        if handshake.done:
            return
        known = handshake.versions_known
        (handshake.feed_client if side == "client" else handshake.feed_daemon)(data)
        reason = handshake.unsupported_reason
        if not known and reason is not None:
            self.unrecorded = reason
            self._stop_recording(f"{handshake.info.describe()}: {reason}; builds are relayed unchanged, not recorded")
        elif handshake.done:
            self.log(f"negotiated {handshake.info.describe()}")

    def _tap_client(self, data: bytes) -> None:
        # A session of a protocol the runner does not decode is still scanned, to name what was not recorded.
        if not self.recording and self.unrecorded is None:
            return
        try:
            self._follow_handshake("client", data)
            self.scanner.feed(data)
        except Exception as exc:  # a decoder must never take the relay down with it
            if self.recording:
                self._decoding_failed("client", exc)
            self.unrecorded = None

    def _tap_daemon(self, data: bytes) -> None:
        if not self.recording:
            return
        try:
            self._follow_handshake("daemon", data)
            with self.lock:
                reply, start = self.reply, self.reply_start
                end = self.daemon_total
            if reply is not None and not reply.done:
                offset = max(0, start - (end - len(data)))
                reply.feed(data[offset:])
        except Exception as exc:
            self._decoding_failed("daemon", exc)

    def _on_request(self, request: BuildRequest) -> None:
        # Called on the client thread before the last bytes of the op reach the daemon: its answer
        # therefore starts exactly at the daemon bytes counted so far.
        now = time.time()
        if not self.recording:
            self.log(f"not recorded: a build of {request.drv_path} ({self.unrecorded})")
            return
        if not self.handshake.done:
            raise ProtocolError("a build before the handshake")
        info = self.handshake.info
        with self.lock:
            self.reply_start = self.daemon_total
            self.reply = ReplyDecoder(
                info.minor, QueuedEvents(self.events), self.config.store_dir, info.features, base=self.reply_start
            )
        self.events.put((now, "request", request))

    def _pump_client(self, daemon_stdin: int) -> None:
        while True:
            try:
                data = os.read(self.stdin_fd, CHUNK)
            except OSError:
                data = b""
            if not data:
                break
            self._tap_client(data)
            try:
                write_all(daemon_stdin, data)
            except OSError:
                break  # the daemon is gone; its exit is what the session reports
        self.events.put((time.time(), "client_closed", None))
        with contextlib.suppress(OSError):
            os.close(daemon_stdin)

    def _pump_daemon(self, daemon_stdout: int) -> None:
        client_alive = True
        while True:
            try:
                data = os.read(daemon_stdout, CHUNK)
            except OSError:
                data = b""
            if not data:
                break
            with self.lock:
                self.daemon_total += len(data)
            self._tap_daemon(data)
            if client_alive:
                try:
                    write_all(self.stdout_fd, data)
                except OSError:
                    client_alive = False  # keep draining so the daemon never blocks on a full pipe
        with contextlib.suppress(OSError):
            os.close(daemon_stdout)

    # --- the session ----------------------------------------------------------------------------------

    def run(self) -> int:
        config = self.config
        try:
            config.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self.log(f"no state folder {config.state_dir}: {exc}; restart links are not kept")
        self.reply_start = 0
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        if config.cgroup_root is not None:
            remove_stale(config.cgroup_root, CGROUP_PREFIX)
        cgroup = SessionCgroup.create(config.cgroup_root, f"{CGROUP_PREFIX}{self.session_id}")
        try:
            pid = os.fork()
        except OSError as exc:
            self.log(f"cannot start {config.nix_daemon}: {exc}")
            sys.stderr.write(f"buildreport runner: cannot start {config.nix_daemon}: {exc}\n")
            return 1
        if pid == 0:  # the child: become nix-daemon --stdio on the two pipes
            try:
                signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # Python ignores it; the daemon expects the default
                os.dup2(in_r, 0)
                os.dup2(out_w, 1)
                for fd in (in_r, in_w, out_r, out_w):
                    os.close(fd)
                if cgroup is not None:
                    cgroup.add(os.getpid())
                argv = config.daemon_argv()
                os.execvpe(argv[0], argv, self.env)
            except BaseException as exc:
                with contextlib.suppress(BaseException):
                    os.write(2, f"buildreport runner: cannot start {config.nix_daemon}: {exc}\n".encode())
            os._exit(127)
        os.close(in_r)
        os.close(out_w)
        self.daemon_pid = pid
        self.cpu = CpuMeter(pid, cgroup)
        self.log(
            f"session from {self.env.get('SSH_CLIENT', 'local')}: daemon pid {pid}, cpu from {self.cpu.source}, "
            f"tags {self.session_tags}"
        )
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._on_signal)
        recorder = threading.Thread(target=self._record_loop, name="recorder", daemon=True)
        recorder.start()
        client = threading.Thread(target=self._pump_client, args=(in_w,), name="client", daemon=True)
        client.start()
        daemon = threading.Thread(target=self._pump_daemon, args=(out_r,), name="daemon", daemon=True)
        daemon.start()
        _, wait_status, rusage = wait4(pid)
        daemon.join(timeout=30)
        code = os.waitstatus_to_exitcode(wait_status)
        self.events.put((time.time(), "daemon_exit", (code, rusage)))
        self.events.put((time.time(), "end", None))
        recorder.join(timeout=120)
        if cgroup is not None:
            cgroup.remove()
        self.log(f"session ended: daemon exit {code}, {len(self.builds)} build(s) recorded")
        return code if code >= 0 else 128 - code

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signalled = signum
        self.events.put((time.time(), "signal", signum))
        with contextlib.suppress(OSError):
            os.kill(self.daemon_pid, signal.SIGTERM)

    # --- the recorder ---------------------------------------------------------------------------------

    def _record_loop(self) -> None:
        while True:
            try:
                at, kind, value = self.events.get(timeout=HOLD_FINAL_SECONDS if self.held else None)
            except queue.Empty:
                self._flush_held()
                continue
            if kind == "end":
                self._flush_held()
                return
            try:
                self._handle(at, kind, value)
            except Exception as exc:  # recording must never end the session
                self.log(f"recording {kind} failed: {exc!r}")

    def _handle(self, at: float, kind: str, value: Any) -> None:
        build = self.current
        if kind == "request":
            request: BuildRequest = value
            if build is not None:
                self.log(f"a new build began before {build.source_id} was answered; that one is not recorded")
            self._flush_held()  # a second build: the session's peak memory is no longer one build's
            self.requests += 1
            index = self.requests
            # <host>:<session>.<n>:<drv hash>, as every recorder names its builds
            source_id = records.source_id(f"{self.session_id}.{index}", request.drv_path, self.config.host)
            # The first build of a session was asked for when the session began; a later one when it came.
            create = self.started if index == 1 else at
            self.current = Build(index, request, source_id, create, at, self.restarts.take(request.drv_path))
        elif build is None:
            if kind == "daemon_exit":
                self._session_end(value)
            return
        elif kind == "started":
            build.start = at
            build.cpu_start = self.cpu.read()
            self._spool(build, final=False)
        elif kind == "log":
            build.add_log(value)
        elif kind == "finished":
            self._finish(build, at, value)
        elif kind == "client_closed" or (kind == "signal" and value == signal.SIGHUP):
            # The client closed its end, or the session's connection hung up.
            self._close(build, at, "client_disconnect", DISCONNECT_MESSAGE)
        elif kind == "signal":
            self._close(build, at, "internal_error", f"the runner was stopped by signal {value} during the build")
        elif kind == "daemon_exit":
            code, _ = value
            ended = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
            self._close(build, at, "internal_error", f"nix-daemon {ended} during the build")
            self._session_end(value)
        elif kind == "recording_off":
            self._close(build, at, "internal_error", f"the runner could not follow the session: {value}")

    def _finish(self, build: Build, at: float, result: BuildResult | DaemonError) -> None:
        start = build.start if build.start is not None else build.requested
        status = status_of(result, at - start, self.config.timeout)
        if status is None and build.start is None:
            self.current = None  # nothing was built: not a build to record
            return
        build.end = at
        build.cpu_end = self.cpu.read()
        build.cpu_nix = result.cpu_seconds if isinstance(result, BuildResult) else None
        build.status = status or "built"
        if status != "built":
            text = result.message if isinstance(result, DaemonError) else result.error_msg
            build.message = nix.strip_ansi(text).strip() or build.log_tail()
        else:
            build.message = None
        if status == "built":
            build.outputs = self._outputs(build, result)
        self._done(build)

    def _outputs(self, build: Build, result: BuildResult | DaemonError) -> list[BuildOutput]:
        """The derivation's outputs (and any the answer names besides) with NAR hash and size from the store."""
        paths = {o.name: o.path for o in build.request.outputs if o.path}
        if isinstance(result, BuildResult):
            paths.update(result.built_outputs)
        try:
            infos = nix.path_infos(paths.values())
        except nix.NixError as exc:
            self.log(f"no outputs for {build.source_id}: {exc}")
            return []
        return [
            BuildOutput(name=name, path=path, nar_hash=infos[path].nar_hash, nar_size_bytes=infos[path].nar_size)
            for name, path in sorted(paths.items())
            if path in infos
        ]

    def _close(self, build: Build, at: float, status: str, message: str) -> None:
        """End a build that got no answer: the client left, the daemon died or the runner was stopped."""
        build.end = at
        build.cpu_end = self.cpu.read()
        build.status = status
        tail = build.log_tail()
        build.message = f"{message}\n{tail}" if tail else message
        self._done(build)

    def _done(self, build: Build) -> None:
        self._flush_held()
        self.builds.append(build)
        self.current = None
        if build.status == "internal_error":
            self.restarts.discarded(build.request.drv_path, build.source_id)
        # The client usually closes the session right after fetching the outputs: the final record waits
        # a moment for that, so that a session of one build can carry the session's peak memory.
        self.held = build

    def _flush_held(self) -> None:
        if self.held is not None:
            build, self.held = self.held, None
            self._spool(build, final=True)

    def _session_end(self, value: tuple[int, Any]) -> None:
        """With one build in the session, the session's peak memory is that build's."""
        _, rusage = value
        if len(self.builds) != 1:
            return
        build = self.builds[0]
        peak = self.cpu.cgroup.memory_peak_kb() if self.cpu.cgroup is not None else None
        if peak is None and rusage is not None and rusage.ru_maxrss > 0:
            peak = int(rusage.ru_maxrss)
        if peak is None:
            return
        build.peak_memory_kb = peak
        if self.held is not build:  # already spooled: send it again, complete
            self._spool(build, final=True)

    def record(self, build: Build, *, final: bool) -> dict[str, Any]:
        """The build in the write format of `buildreport push` (an import record without account or id)."""
        config = self.config
        # Never before its creation, which the service refuses: the wall clock may have stepped back meanwhile.
        start = max(build.start if build.start is not None else build.requested, build.create_time)
        duration = max(0.0, build.end - start) if final and build.end is not None else None
        cpu = build.cpu_nix if final else None
        if cpu is None and final and build.cpu_start is not None and build.cpu_end is not None:
            cpu = max(0.0, build.cpu_end - build.cpu_start)
        # Both figures come from the whole seconds recorded, so a 0 beside a non-zero share cannot happen.
        cpu_seconds = round(cpu) if cpu is not None else 0
        utilization = None
        if cpu is not None and duration:
            utilization = round(cpu_seconds / (duration * config.cpu_count), 4)
        tags = {**self.session_tags, **nix.tags_from_env(build.request.env)}
        record: dict[str, Any] = {
            "source_id": build.source_id,
            "create_time": _utc(build.create_time),
            "start_time": _utc(start),
            "queue_time_seconds": round(max(0.0, start - build.create_time), 6),
            "duration_seconds": None if duration is None else round(duration, 6),
            "build_status": build.status if final else "running",
            "status_message": build.message if final else None,
            "cpu_count": config.cpu_count,
            "allocated_megabytes": config.allocated_megabytes,
            "cpu_seconds": cpu_seconds,
            "average_cpu_utilization": utilization,
            "peak_memory_use_kilobytes": build.peak_memory_kb if final else None,
            "peak_storage_use_kilobytes": None,
            "derivation_path": build.request.drv_path,
            "outputs": build.outputs if final else [],
            "system": build.request.platform,
            "tags": tags,
        }
        if final:
            record["log"] = build.log_text()
        if build.restart_of is not None:
            record["restart_of_source_id"] = build.restart_of
        return record

    def _spool(self, build: Build, *, final: bool) -> None:
        try:
            record = msgspec.convert(fit(self.record(build, final=final)), BuildRecord, from_attributes=True)
        except msgspec.ValidationError as exc:  # never expected: say so rather than spool what the service refuses
            self.log(f"record of {build.source_id} is not valid: {exc}")
            return
        try:
            self.config.sink(record)
        except (OSError, ValueError) as exc:
            self.log(f"could not keep {build.source_id}: {exc}")
            return
        self.log(f"recorded {build.source_id} {build.status if final else 'running'}")


def check_original_command(env: dict[str, str]) -> str | None:
    """Why this session cannot be served (None when it can): the runner serves ssh-ng clients only."""
    command = env.get("SSH_ORIGINAL_COMMAND")
    if command is None or " ".join(command.split()) == DAEMON_COMMAND:
        return None
    return (
        f"buildreport runner serves ssh-ng:// remote builds (`{DAEMON_COMMAND}`) only; "
        f"this session asked for `{command[:200]}`"
    )


def run_session(config: RunnerConfig, env: dict[str, str] | None = None) -> int:
    return Session(config, dict(os.environ if env is None else env)).run()
