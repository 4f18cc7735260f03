"""A real `buildreport serve` process on 127.0.0.1: started, waited for, probed, measured and always stopped."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 15.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(port: int, path: str, token: str | None = None, timeout: float = 60.0) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def _descendants(pid: int) -> list[int]:
    """`pid` and every process below it, from the parent ids in /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(parents.get(current, []))
    return found


def _status_kib(pid: int) -> dict[str, object] | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)

    def kib(name: str) -> int:
        return int(fields.get(name, "0 kB").split()[0])

    role = ("worker" if "spawn_main" in cmdline else "resource tracker" if "resource_tracker" in cmdline
            else "server" if " serve " in f" {cmdline} " else "other")
    return {"pid": pid, "role": role, "vm_hwm_kib": kib("VmHWM"), "vm_rss_kib": kib("VmRSS"),
            "rss_anon_kib": kib("RssAnon"), "rss_file_kib": kib("RssFile"), "cmdline": cmdline[:200]}


class AnonSampler:
    """Peak RssAnon (heap, stacks: what the process itself allocated) and peak RssFile (mapped file pages,
    the SQLite memory map among them) of a process, sampled every 0.2 s until stopped: /proc keeps no
    high-water mark of either. `phase` names what the process serves from then on; each phase keeps the RssAnon
    it started at and its peak, so that the report can say which requests raised the peak."""

    def __init__(self, pid: int) -> None:
        import threading

        self.pid = pid
        self.peak_anon_kib = self.peak_file_kib = self.samples = 0
        self.phases: dict[str, dict[str, int]] = {}
        self._phase: dict[str, int] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def phase(self, name: str) -> None:
        status = _status_kib(self.pid)
        now = int(status["rss_anon_kib"]) if status is not None else 0  # type: ignore[call-overload]
        with self._lock:
            self._phase = self.phases[name] = {"start_rss_anon_kib": now, "peak_rss_anon_kib": now}

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            status = _status_kib(self.pid)
            if status is None:
                return
            anon = int(status["rss_anon_kib"])  # type: ignore[call-overload]
            self.samples += 1
            self.peak_anon_kib = max(self.peak_anon_kib, anon)
            self.peak_file_kib = max(self.peak_file_kib, int(status["rss_file_kib"]))  # type: ignore[call-overload]
            with self._lock:
                if self._phase is not None:
                    self._phase["peak_rss_anon_kib"] = max(self._phase["peak_rss_anon_kib"], anon)

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(timeout=5)
        return {"peak_rss_anon_kib": self.peak_anon_kib, "peak_rss_file_kib": self.peak_file_kib,
                "samples": self.samples, "phases": self.phases}


class Server:
    """`buildreport serve` in a session of its own, so that it and its workers can be stopped together.

    `db` is a SQLite file or a `postgresql://` URL, as `--db` takes it."""

    def __init__(self, cli: list[str], db: Path | str, workers: int, log_path: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.command = [*cli, "serve", "--db", str(db), "--host", "127.0.0.1", "--port", str(self.port),
                        "--workers", str(workers), "--rate-limit", "0", "--link-rate-limit", "0",
                        "--no-access-log"]
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None
        self.stop_s: float | None = None
        self.exit_code: int | None = None

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def start(self) -> None:
        log = open(self.log_path, "wb")  # noqa: SIM115 (the child keeps it; closed below)
        started = time.perf_counter()
        try:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        while True:
            try:
                if get(self.port, "/healthz", timeout=2)[0] == 200:
                    self.startup_s = time.perf_counter() - started
                    return
            except OSError:
                pass
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode} before /healthz answered:\n"
                                   + self.log_tail())
            if time.perf_counter() - started > START_TIMEOUT_S:
                raise RuntimeError(f"/healthz did not answer 200 within {START_TIMEOUT_S:.0f}s:\n" + self.log_tail())
            time.sleep(0.05)

    def _proc_files(self, name: str) -> list[str]:
        """The /proc/PID/`name` file of the server and of every process it started, while it runs."""
        if self.process is None or self.process.poll() is not None:
            return []
        texts = []
        for pid in _descendants(self.process.pid):
            try:
                texts.append(Path(f"/proc/{pid}/{name}").read_text())
            except OSError:
                continue  # a process that ended in between
        return texts

    def cpu_seconds(self) -> float:
        """CPU time used so far by the server and every process it started (user and system)."""
        ticks = 0
        for stat in self._proc_files("stat"):
            fields = stat[stat.rindex(")") + 2 :].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        return ticks / os.sysconf("SC_CLK_TCK")

    def read_bytes(self) -> int:
        """Bytes the server and every process it started have read from storage so far: a read the kernel
        answered from its page cache counts nothing."""
        return sum(int(line.split()[1]) for text in self._proc_files("io") for line in text.splitlines()
                   if line.startswith("read_bytes:"))

    def memory(self) -> dict[str, object]:
        """Peak (VmHWM) and current resident memory of the server and every process it started."""
        if self.process is None or self.process.poll() is not None:
            return {"processes": [], "vm_hwm_total_kib": 0, "vm_hwm_max_kib": 0}
        processes = [s for pid in _descendants(self.process.pid) if (s := _status_kib(pid)) is not None]
        hwm = [int(p["vm_hwm_kib"]) for p in processes]  # type: ignore[arg-type]
        return {"processes": processes, "vm_hwm_total_kib": sum(hwm), "vm_hwm_max_kib": max(hwm, default=0)}

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a while; workers it left behind are killed by their pid too."""
        process = self.process
        if process is None or self.stop_s is not None:
            return
        started = time.perf_counter()
        children = _descendants(process.pid)[1:] if process.poll() is None else []
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=STOP_TIMEOUT_S)
        for pid in children:
            try:
                # Still in the server's process group (its session), so still one of ours.
                if os.getpgid(pid) == process.pid:
                    os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.stop_s = time.perf_counter() - started
        self.exit_code = process.returncode

    def clean_exit(self) -> bool:
        """Stopped by SIGTERM alone: exit 0, or -SIGTERM, which uvicorn re-raises after a clean shutdown."""
        return self.exit_code in (0, -signal.SIGTERM) and self.stop_s is not None and self.stop_s < STOP_TIMEOUT_S

    def info(self) -> dict[str, object]:
        return {"command": " ".join(self.command), "startup_s": _round(self.startup_s), "stop_s": _round(self.stop_s),
                "exit_code": self.exit_code, "clean_exit": self.clean_exit()}


def _round(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None

