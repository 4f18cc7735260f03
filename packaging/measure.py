"""Measure an existing buildreport executable: file size and start-up time. Builds nothing.

    .venv/bin/python packaging/measure.py [dist/buildreport] [--runs 5] [--workers 1,2]

Start-up time is the wall-clock time from starting `serve` on a fresh database in a new temporary
folder, on a free port of 127.0.0.1, to the first 200 answer of /healthz (polled every 10 ms);
each run is stopped with SIGTERM. The median of the runs is reported, with every run, as JSON on
standard output. Only the standard library is used, so any Python 3.11+ can run it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_BYTES = 40 * 1000 * 1000
TARGET_STARTUP_S = 1.5
POLL_S = 0.01


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def healthz(port: int) -> int | None:
    """The status of GET /healthz, or None while nothing answers."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


def stop(process: subprocess.Popen[bytes], timeout: float = 10.0) -> float:
    """SIGTERM, then the seconds until the process exited (SIGKILL after `timeout`)."""
    started = time.perf_counter()
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return time.perf_counter() - started


def startup_once(exe: list[str], workers: int, timeout: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="buildreport-measure-") as tmp:
        port = free_port()
        command = [*exe, "serve", "--create", "--db", str(Path(tmp) / "measure.db"), "--host", "127.0.0.1",
                   "--port", str(port), "--workers", str(workers), "--no-access-log"]
        log = open(Path(tmp) / "server.log", "wb")  # noqa: SIM115 (closed below)
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   cwd=tmp)
        try:
            while True:
                if healthz(port) == 200:
                    seconds = time.perf_counter() - started
                    break
                if process.poll() is not None or time.perf_counter() - started > timeout:
                    log.close()
                    output = (Path(tmp) / "server.log").read_text(errors="replace")
                    state = f"exited with {process.returncode}" if process.poll() is not None else "timed out"
                    raise SystemExit(f"serve {state} before /healthz answered:\n{output}")
                time.sleep(POLL_S)
        finally:
            stop_seconds = stop(process)
            log.close()
        return {"startup_s": seconds, "stop_s": stop_seconds, "exit_code": process.returncode}


def version_once(exe: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([*exe, "--version"], check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("exe", nargs="?", default=os.environ.get("BUILDREPORT_EXE", "dist/buildreport"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts to measure [1,2]")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds one start may take")
    args = parser.parse_args()

    path = Path(args.exe).resolve()
    if not path.is_file():
        raise SystemExit(f"{args.exe} does not exist; build it first with `make binary`")
    exe = [str(path)]
    size = path.stat().st_size
    version = subprocess.run([*exe, "--version"], check=True, capture_output=True, text=True).stdout.strip()

    startup: dict[str, dict[str, object]] = {}
    for workers in (int(w) for w in args.workers.split(",") if w.strip()):
        runs = [startup_once(exe, workers, args.timeout) for _ in range(args.runs)]
        times = [r["startup_s"] for r in runs]
        startup[f"workers={workers}"] = {
            "median_s": round(statistics.median(times), 4),
            "min_s": round(min(times), 4),
            "max_s": round(max(times), 4),
            "runs_s": [round(t, 4) for t in times],
            "stop_median_s": round(statistics.median(r["stop_s"] for r in runs), 4),
            "exit_codes": sorted({r["exit_code"] for r in runs}),
        }
    versions = [version_once(exe) for _ in range(args.runs)]
    first = next(iter(startup.values()), None)
    median = first["median_s"] if first else None
    report = {
        "exe": str(path),
        "version": version,
        "size_bytes": size,
        "size_mb": round(size / 1e6, 2),
        "size_mib": round(size / 2**20, 2),
        "runs": args.runs,
        "startup_median_s": median,
        "startup": startup,
        "version_median_s": round(statistics.median(versions), 4),
        "targets": {
            "size_bytes_max": TARGET_BYTES,
            "startup_s_max": TARGET_STARTUP_S,
            "size_ok": size <= TARGET_BYTES,
            "startup_ok": median is not None and median <= TARGET_STARTUP_S,
        },
        "machine": {"cpus": os.cpu_count(), "platform": sys.platform},
    }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
