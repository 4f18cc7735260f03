"""Local mode: `buildreport record -- nix-build …` runs a Nix command here and records each build it runs.

Nix is asked for `--log-format internal-json -v`; its events are read from its stderr, timestamped on
arrival, and rendered back to the terminal as Nix prints them, so a user sees the usual output. A
type-105 activity is one derivation being built: its start is recorded at once as `running`, then, once
Nix has exited, again with its final status, from the error messages and the validity of its outputs.
Substituted paths are not builds and are not recorded.

CPU time and peak memory come from the Nix process itself, and only where they belong to one build: a
single-user Nix (no daemon) forks its builders and reaps each one before the next build takes its slot, so
the CPU time of the children it has reaped, read at each build's start and at the end, splits into builds
when they ran one after another (Nix's default `max-jobs = 1`). Otherwise `cpu_seconds` is 0 with
`average_cpu_utilization` null (the Build fields require a number). The peak memory is known for a run of
one build only (the largest process of the run), and is null otherwise.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from buildreport.models import BuildOutput, BuildRecord, BuildStatus
from buildreport.record import nix
from buildreport.record.command import StdoutCopy, UsageError, nix_command_line, reads_build_json, verbosity
from buildreport.record.process import (
    Usage,
    hwm_kb,
    memory_megabytes,
    nix_peak_bound,
    reaped_cpu_seconds,
    single_user,
)
from buildreport.record.records import RecordInvalid, make_record, new_invocation, source_id, utc

Sink = Callable[[list[BuildRecord]], None]  # writes the records of one call all together, or raises

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
STDOUT = 1  # the descriptor Nix would write to without the recorder (whatever sys.stdout is in Python)
LOG_TAIL_LINES = 10_000  # kept from the event stream for a build whose log Nix did not store
# A record's log is the end of a longer one: a record must fit in one request to the service (16 MiB).
LOG_MAX_BYTES = 2 * 1024 * 1024
# CPU time is counted in clock ticks (10 ms): over a shorter build the ratio says nothing.
MIN_UTILIZATION_SECONDS = 0.1
NIX_MEMORY_SAMPLE_SECONDS = 0.02  # how often Nix's own peak memory is read while it runs


@dataclass
class LocalBuild:
    drv_path: str
    activity: int
    machine: str
    start: float
    source_id: str
    cpu_at_start: float | None = None  # CPU seconds of the children Nix had reaped when this build started
    drv: nix.Derivation | None = None
    progress_end: float | None = None
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_TAIL_LINES))


class Recorder:
    """One run of a Nix command and the records of the builds it ran."""

    def __init__(
        self,
        command: Sequence[str],
        sink: Sink,
        *,
        tags: Mapping[str, str] | None = None,
        cpu_count: int | None = None,
        allocated_megabytes: int | None = None,
        env: Mapping[str, str] | None = None,
        terminal: IO[bytes] | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.argv, self.kind = nix_command_line(command)
        self.sink = sink
        self.env = dict(os.environ if env is None else env)
        # Tags of the caller: its SERVICE_TAG_* variables, then --tag; a derivation's own attributes come last.
        self.tags = {**nix.tags_from_env(self.env), **(tags or {})}
        self.cpu_count = cpu_count or os.cpu_count() or 1
        self.allocated_megabytes = memory_megabytes() if allocated_megabytes is None else allocated_megabytes
        self.terminal = terminal if terminal is not None else sys.stderr.buffer
        self.color = self.terminal.isatty() and not self.env.get("NO_COLOR")
        self.warn = warn or (lambda text: sys.stderr.write(f"buildreport: {text}\n"))
        self.level = verbosity(command)
        self.print_build_logs = self.kind == "nix-build" or any(a in ("-L", "--print-build-logs") for a in command)
        self.invocation = new_invocation()
        self.builds: dict[int, LocalBuild] = {}
        self.activity_types: dict[int, int] = {}
        self.progress: dict[int, int] = {}
        self.findings: list[nix.ErrorFinding] = []
        self.built_by_nix: dict[str, nix.BuiltByNix] = {}  # what `nix build --json` said, by derivation
        self.valid: dict[int, bool] = {}  # by activity: whether all of a build's outputs are in the store
        self.errors: list[str] = []
        self.signalled: int | None = None
        self.signal_time: float | None = None
        self.create_time = 0.0
        self.proc: subprocess.Popen[bytes] | None = None
        self.nix_hwm_kb: int | None = None
        self.broken = False
        self.most_running = 0  # most builds Nix ran at once
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._hwm_lock = threading.Lock()

    # --- running Nix ---------------------------------------------------------------------------------------

    def run(self) -> int:
        """Run the command, record its builds; its exit status (negative: the signal that ended it)."""
        worker = threading.Thread(target=self._work, name="buildreport-record", daemon=True)
        worker.start()
        self.create_time = time.time()
        try:
            copy_json = reads_build_json(self.argv, self.kind, os.isatty(STDOUT))
            stdout = subprocess.PIPE if copy_json else None
            self.proc = subprocess.Popen(self.argv, stdout=stdout, stderr=subprocess.PIPE, env=self.env)
        except OSError as exc:
            self._jobs.put(None)
            raise UsageError(f"cannot run {self.argv[0]}: {exc.strerror or exc}") from exc
        stdout_copy = StdoutCopy(self.proc.stdout, STDOUT) if self.proc.stdout is not None else None
        previous = {sig: signal.signal(sig, self._forward) for sig in FORWARDED_SIGNALS}
        exited = threading.Event()
        watcher = threading.Thread(target=self._watch_nix_memory, args=(exited,), name="buildreport-hwm", daemon=True)
        watcher.start()
        try:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self._read(time.time(), line)
            exited.set()
            watcher.join()
            self._sample_nix_memory()  # the last look before Nix is gone: it may have grown while finishing
            usage = self._reap(self.proc.pid)
        finally:
            exited.set()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        exit_time = time.time()
        if stdout_copy is not None:
            self.built_by_nix = nix.parse_build_json(stdout_copy.text())
        self._jobs.put(None)
        worker.join()
        self._finish(usage, exit_time)
        return self.proc.returncode

    def _forward(self, signum: int, _frame: object) -> None:
        if self.signalled is None:
            self.signal_time = time.time()
        self.signalled = signum
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signum)

    def _reap(self, pid: int) -> Usage:
        """Wait for Nix; the CPU time of the children it reaped (read before it is reaped) and its rusage."""
        children = None
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            children = reaped_cpu_seconds(pid)
        while True:
            try:
                _, status, rusage = os.wait4(pid, 0)
                break
            except InterruptedError:
                continue
        assert self.proc is not None
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        return Usage(children_cpu_seconds=children, maxrss_kb=rusage.ru_maxrss, nix_hwm_kb=self.nix_hwm_kb)

    def _show(self, text: str) -> None:
        if not self.color:
            text = nix.strip_ansi(text)
        with contextlib.suppress(OSError, ValueError):
            self.terminal.write(text.encode(errors="replace") + b"\n")
            self.terminal.flush()

    def _read(self, at: float, line: bytes) -> None:
        """One line of Nix's stderr; whatever goes wrong in reading it, Nix's output keeps flowing."""
        if self.broken:
            self._pass_on(line)
            return
        try:
            self._line(at, line)
        except Exception as exc:
            self.broken = True
            self.warn(f"stopped recording this run: cannot read Nix's output ({exc!r})")
            self._pass_on(line)

    def _pass_on(self, line: bytes) -> None:
        event = nix.parse_event(line.rstrip(b"\n"))
        if event is None:
            with contextlib.suppress(OSError, ValueError):
                self.terminal.write(line)
                self.terminal.flush()
        elif event.action == "msg" and event.level <= self.level:
            self._show(event.msg)

    def _line(self, at: float, line: bytes) -> None:
        event = nix.parse_event(line.rstrip(b"\n"))
        if event is None:
            with contextlib.suppress(OSError, ValueError):
                self.terminal.write(line)
                self.terminal.flush()
            return
        if event.action != "result":
            self._sample_nix_memory()
        if event.action == "msg":
            if event.level <= self.level:
                self._show(event.msg)
            if event.level == 0:
                self.errors.append(event.msg)
                finding = nix.read_error(event.msg)
                if finding is not None:
                    self.findings.append(finding)
        elif event.action == "start":
            self.activity_types[event.id] = event.type
            if event.text and event.level <= self.level:
                self._show(event.text + "...")
            if event.type == nix.ACT_BUILD and event.fields:
                self._started(at, event)
        elif event.action == "result":
            if event.type == nix.RES_BUILD_LOG_LINE and event.fields:
                self._log_line(event.id, str(event.fields[0]))
            elif event.type == nix.RES_PROGRESS and self.activity_types.get(event.id) == nix.ACT_BUILDS:
                self._progress(at, event.id, event.fields)

    def _sample_nix_memory(self) -> None:
        """Nix's own peak so far; a larger peak of the whole invocation can then only be a builder's."""
        if self.proc is not None and (hwm := hwm_kb(self.proc.pid)) is not None:
            with self._hwm_lock:
                self.nix_hwm_kb = max(hwm, self.nix_hwm_kb or 0)

    def _watch_nix_memory(self, exited: threading.Event) -> None:
        """Nix's peak between its events too: a quiet stretch (evaluation, registering outputs) can raise it."""
        while not exited.wait(NIX_MEMORY_SAMPLE_SECONDS):
            self._sample_nix_memory()

    def _started(self, at: float, event: nix.NixEvent) -> None:
        drv_path = str(event.fields[0])
        if any(b.drv_path == drv_path for b in self.builds.values()):
            return  # another round of the same derivation (--repeat): one build
        machine = str(event.fields[1]) if len(event.fields) > 1 else ""
        build = LocalBuild(drv_path, event.id, machine, at, source_id(self.invocation, drv_path))
        if self.proc is not None:
            build.cpu_at_start = reaped_cpu_seconds(self.proc.pid)
        self.builds[event.id] = build
        self._jobs.put(lambda: self._record_running(build))

    def _log_line(self, activity: int, text: str) -> None:
        build = self.builds.get(activity)
        if build is not None:
            build.lines.append(text)
            if self.print_build_logs:
                prefix = "" if self.kind == "nix-build" else f"{nix.drv_name(build.drv_path)}> "
                self._show(prefix + text)

    def _progress(self, at: float, activity: int, fields: list[Any]) -> None:
        """A change of done + failed on the builds activity: a build ended; which, when only one was running."""
        try:
            finished = int(fields[0]) + int(fields[3])
        except (IndexError, TypeError, ValueError):
            return
        with contextlib.suppress(IndexError, TypeError, ValueError):
            self.most_running = max(self.most_running, int(fields[2]))
        if finished > self.progress.get(activity, 0):
            running = [b for b in self.builds.values() if b.progress_end is None]
            if len(running) == 1:
                running[0].progress_end = at
        self.progress[activity] = max(finished, self.progress.get(activity, 0))

    # --- records --------------------------------------------------------------------------------------------

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except Exception as exc:
                self.warn(f"cannot record a build: {exc!r}")

    def _derivation(self, build: LocalBuild) -> nix.Derivation | None:
        if build.drv is None:
            try:
                build.drv = nix.show_derivation(build.drv_path)
            except nix.NixError as exc:
                self.warn(f"cannot record {build.drv_path}: {exc}")
        return build.drv

    def _record(self, **fields: Any) -> BuildRecord | None:
        try:
            return make_record(**fields)
        except RecordInvalid as exc:
            self.warn(f"cannot record {fields['derivation_path']}: {exc}")
            return None

    def _deliver(self, records: list[BuildRecord]) -> None:
        if not records:
            return
        try:
            self.sink(records)
        except Exception as exc:  # a full disk or a locked database must not change what Nix did
            what = records[0].derivation_path if len(records) == 1 else f"{len(records)} builds"
            self.warn(f"cannot record {what}: {exc}")

    def _common(self, build: LocalBuild, drv: nix.Derivation) -> dict[str, Any]:
        return {
            "source_id": build.source_id,
            "create_time": utc(self.create_time),
            "start_time": utc(max(build.start, self.create_time)),  # never before it: the clock may step back
            "queue_time_seconds": round(max(0.0, build.start - self.create_time), 6),
            "cpu_count": self.cpu_count,
            "allocated_megabytes": self.allocated_megabytes,
            "peak_storage_use_kilobytes": None,
            "derivation_path": build.drv_path,
            "system": drv.system,
            "tags": {**self.tags, **drv.tags},
        }

    def _record_running(self, build: LocalBuild) -> None:
        drv = self._derivation(build)
        if drv is not None:
            record = self._record(
                **self._common(build, drv),
                duration_seconds=None,
                build_status=BuildStatus.running,
                status_message=None,
                cpu_seconds=0,
                average_cpu_utilization=None,
                peak_memory_use_kilobytes=None,
                outputs=[],
            )
            self._deliver([record] if record is not None else [])

    def _status(self, build: LocalBuild, drv: nix.Derivation, valid: bool) -> tuple[BuildStatus, str | None]:
        for finding in self.findings:
            if finding.drv_path == build.drv_path:
                return finding.status, finding.message
        if valid:
            return BuildStatus.built, None
        interrupt = next((f for f in self.findings if f.status == BuildStatus.cancelled), None)
        if interrupt is not None or self.signalled is not None:
            message = interrupt.message if interrupt else f"interrupted by {signal.Signals(self.signalled or 2).name}"
            return BuildStatus.cancelled, message
        if (timeout := self._unnamed_timeout()) is not None:
            return BuildStatus.timeout, f"building of '{build.drv_path}' {timeout}"
        assert self.proc is not None
        # An error about no derivation in particular may be this one's; one naming another build is not.
        for error in reversed(self.errors):
            text = nix.message_line(error)
            if text and (build.drv_path in nix.strip_ansi(error) or ".drv" not in text):
                return BuildStatus.build_failed, text
        code = self.proc.returncode
        ended = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
        return BuildStatus.build_failed, f"its outputs are missing after Nix {ended}"

    def _unnamed_timeout(self) -> str | None:
        """`timed out after N seconds` when Nix said so without naming the derivation (2.34) and there are as
        many such messages as builds left without outputs or a message of their own: each is one of those."""
        unnamed = [f.message for f in self.findings if f.status == BuildStatus.timeout and f.drv_path is None]
        named = {f.drv_path for f in self.findings}
        unexplained = [a for a, ok in self.valid.items() if not ok and self.builds[a].drv_path not in named]
        if not unnamed or len(unnamed) != len(unexplained):
            return None
        return unnamed[0] if len(set(unnamed)) == 1 else "timed out"

    def _end(self, build: LocalBuild, status: BuildStatus, exit_time: float) -> float:
        """The end of a build: its stored log's last write, else the progress event, else Nix's exit.

        An interrupted build ends when the signal came: Nix kills its builder then, without a last write to
        the log.
        """
        if status == BuildStatus.cancelled:
            return min(self.signal_time or exit_time, exit_time)
        mtime_ns = nix.log_mtime_ns(build.drv_path)
        if mtime_ns is not None and build.start - 0.05 <= mtime_ns / 1e9 <= exit_time + 1:
            return mtime_ns / 1e9
        return build.progress_end if build.progress_end is not None else exit_time

    def _finish(self, usage: Usage, exit_time: float) -> None:
        builds = list(self.builds.values())
        cpu = self._cpu_per_build(builds, usage)
        for build in builds:  # the build's own CPU time, from Nix (`nix build --json` of a build in a cgroup)
            said = self.built_by_nix.get(build.drv_path)
            if said is not None and said.cpu_seconds is not None:
                cpu[build.activity] = said.cpu_seconds
        alone = len(builds) == 1 and builds[0].activity in cpu
        peak = None
        if alone and usage.nix_hwm_kb is not None and usage.maxrss_kb > nix_peak_bound(usage.nix_hwm_kb):
            peak = usage.maxrss_kb  # far larger than Nix itself was: the builder's
        # Every build's outputs first: a time-out message naming no build is placed among those left without.
        outputs = {b.activity: self._outputs(b) for b in builds}
        records: list[BuildRecord] = []
        for build in builds:
            try:
                record = self._finish_build(build, outputs[build.activity], exit_time, cpu.get(build.activity), peak)
            except Exception as exc:
                self.warn(f"cannot record {build.drv_path}: {exc!r}")
                continue
            if record is not None:
                records.append(record)
        self._deliver(records)  # the final records of the run together: one spool file, one transaction

    def _cpu_per_build(self, builds: list[LocalBuild], usage: Usage) -> dict[int, float]:
        """CPU seconds of each build, by activity, where the builds ran one at a time in this process tree."""
        if (
            not builds
            or self.most_running > 1
            or any(b.machine != "" or b.cpu_at_start is None for b in builds)
            or usage.children_cpu_seconds is None
            or not single_user(self.argv, self.env)
        ):
            return {}
        marks = [b.cpu_at_start or 0.0 for b in builds] + [usage.children_cpu_seconds]
        return {b.activity: max(0.0, marks[i + 1] - marks[i]) for i, b in enumerate(builds)}

    def _outputs(self, build: LocalBuild) -> list[BuildOutput]:
        """The outputs `build` left valid in the store (noting in `valid` whether they are all there)."""
        drv = self._derivation(build)
        outputs: list[BuildOutput] = []
        if drv is not None:
            try:
                outputs = nix.build_outputs(drv)
            except nix.NixError as exc:
                self.warn(f"outputs of {build.drv_path}: {exc}")
            self.valid[build.activity] = nix.outputs_valid(drv, outputs)
        return outputs

    def _finish_build(
        self, build: LocalBuild, outputs: list[BuildOutput], exit_time: float, cpu: float | None, peak: int | None
    ) -> BuildRecord | None:
        drv = self._derivation(build)
        if drv is None:
            return None
        status, message = self._status(build, drv, self.valid.get(build.activity, False))
        end = self._end(build, status, exit_time)
        duration = max(0.0, end - build.start)
        log = nix.read_build_log(build.drv_path)
        if log is None and build.lines:
            log = "\n".join(build.lines) + "\n"
        return self._record(
            **self._common(build, drv),
            duration_seconds=round(duration, 6),
            build_status=status,
            status_message=message,
            cpu_seconds=round(cpu) if cpu is not None else 0,
            average_cpu_utilization=round(cpu / (duration * self.cpu_count), 4)
            if cpu is not None and duration >= MIN_UTILIZATION_SECONDS
            else None,
            peak_memory_use_kilobytes=peak,
            outputs=outputs if status == BuildStatus.built else [],
            log=log_tail(log),
        )


def log_tail(log: str | None, limit: int = LOG_MAX_BYTES) -> str | None:
    """The log, or its last `limit` bytes (whole lines) after a line that says how much was left out."""
    if log is None:
        return None
    raw = log.encode()
    if len(raw) <= limit:
        return log
    kept = raw[-limit:]
    kept = kept[kept.find(b"\n") + 1 :] if b"\n" in kept else kept
    return f"[{len(raw) - len(kept)} earlier bytes of this log are not kept]\n" + kept.decode(errors="replace")


def exit_like(returncode: int) -> int:
    """Leave as the wrapped command did: with its exit status, or killed by the same signal."""
    if returncode < 0:
        signal.signal(-returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -returncode)
        time.sleep(1)
        return 128 - returncode
    return returncode
