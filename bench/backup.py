"""Backup and retention under load: how long `buildreport backup` (plain and `--gzip`) and `prune` take on a
database of BENCH_BACKUP_BUILDS sample builds, the archive sizes and the space prune gives back, and what one
reader (`/builds/summary`, `/builds?limit=50` in turn) and one writer (`POST /builds`, 20 builds a request) of
a running `buildreport serve` see meanwhile (p50/p99), against the same load alone.

    .venv/bin/python bench/backup.py            # 200,000 builds over 90 days
    BENCH_BACKUP_BUILDS=5000 .venv/bin/python bench/backup.py   # a quick check

Everything lives in a temporary folder, removed at the end; the server listens on 127.0.0.1 on a free port and
is stopped by its pid; every load loop is bounded in requests and time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

BUILDS = int(os.environ.get("BENCH_BACKUP_BUILDS", "200000"))
DAYS = 90
BASELINE_SECONDS = float(os.environ.get("BENCH_BACKUP_SECONDS", "5"))
MAX_REQUESTS = 200_000  # per load thread, beside the time bound
MAX_PHASE_SECONDS = 600.0
COMMAND = [sys.executable, "-m", "buildreport"]


def cli(*args: str) -> str:
    done = subprocess.run([*COMMAND, *args], capture_output=True, text=True, check=True)
    return (done.stdout + done.stderr).strip()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def percentiles(values: list[float]) -> dict[str, float | int]:
    if len(values) < 2:
        return {"count": len(values)}
    cuts = statistics.quantiles(values, n=100)
    return {"count": len(values), "p50_ms": round(cuts[49], 2), "p99_ms": round(cuts[98], 2)}


class Load:
    """One reader and one writer against the server until stopped; latencies in ms, errors counted."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.headers = url, {"Authorization": f"Bearer {token}"}
        self.reads: list[float] = []
        self.writes: list[float] = []
        self.errors = 0
        self._stop = threading.Event()
        self._serial = 0
        self._threads = [threading.Thread(target=self._read), threading.Thread(target=self._write)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _timed(self, into: list[float], send) -> None:  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        response = send()
        into.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            self.errors += 1

    def _read(self) -> None:
        paths = ("/builds/summary", "/builds?limit=50")
        with httpx.Client(base_url=self.url, headers=self.headers, timeout=60) as client:
            for n in range(MAX_REQUESTS):
                if self._stop.is_set():
                    return
                self._timed(self.reads, lambda n=n: client.get(paths[n % 2]))

    def _write(self) -> None:
        with httpx.Client(base_url=self.url, headers=self.headers, timeout=60) as client:
            for _ in range(MAX_REQUESTS):
                if self._stop.is_set():
                    return
                body = [self._record() for _ in range(20)]
                self._timed(self.writes, lambda body=body: client.post("/builds", json=body))

    def _record(self) -> dict:
        self._serial += 1
        now = datetime.now(UTC).isoformat()
        return {
            "source_id": f"bench-backup:{self._serial}", "create_time": now, "start_time": now,
            "queue_time_seconds": 0.4, "duration_seconds": 61.5, "build_status": "built", "status_message": None,
            "cpu_count": 4, "allocated_megabytes": 8192, "cpu_seconds": 200, "average_cpu_utilization": 0.8,
            "peak_memory_use_kilobytes": 100000, "peak_storage_use_kilobytes": 200000,
            "derivation_path": f"/nix/store/{'b' * 32}-bench-{self._serial}.drv", "outputs": [],
            "system": "x86_64-linux", "tags": {"bench": "backup"}, "log": "building\n" * 20,
        }

    def figures(self) -> dict:
        return {"reads": percentiles(self.reads), "writes": percentiles(self.writes), "errors": self.errors}


def under_load(url: str, token: str, args: list[str] | None) -> dict:
    """The load alone for BASELINE_SECONDS (args None), or for as long as the command `args` runs."""
    with Load(url, token) as load:
        time.sleep(2)  # both loops under way, the write process started
        load.reads.clear()
        load.writes.clear()
        started = time.perf_counter()
        output = ""
        if args is None:
            time.sleep(BASELINE_SECONDS)
        else:
            output = subprocess.run([*COMMAND, *args], capture_output=True, text=True, check=True,
                                    timeout=MAX_PHASE_SECONDS).stderr.strip()
        seconds = time.perf_counter() - started
        figures = load.figures()
    return {"seconds": round(seconds, 2), "output": output, **figures}


def start_server(db: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen([*COMMAND, "serve", "--db", str(db), "--host", "127.0.0.1", "--port", str(port),
                                "--workers", "1", "--no-access-log", "--rate-limit", "0"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("the server did not start")


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="buildreport-bench-backup-"))
    server = None
    try:
        db = folder / "bench.db"
        end = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
        cli("sample", "-o", str(folder / "sample.jsonl.gz"), "--builds", str(BUILDS), "--days", str(DAYS),
            "--end", end)
        started = time.perf_counter()
        cli("import", "--db", str(db), str(folder / "sample.jsonl.gz"))
        report: dict = {"builds": BUILDS, "import_seconds": round(time.perf_counter() - started, 1),
                        "database_bytes": db.stat().st_size}
        token = cli("token", "create", "--db", str(db), "--account", "acme", "--scope", "build:read", "--scope",
                    "build:write").splitlines()[0]
        server, url = start_server(db)
        report["alone"] = under_load(url, token, None)
        for name, extra in (("backup", []), ("backup --gzip", ["--gzip"])):
            archive = folder / f"bench-{len(extra)}.tar"
            report[name] = under_load(url, token, ["backup", "--db", str(db), "--to", str(archive), *extra])
            report[name]["archive_bytes"] = archive.stat().st_size
        size = db.stat().st_size
        report["prune 60d"] = under_load(url, token, ["prune", "--db", str(db), "--older-than", "60d"])
        freed = re.search(r"gave back ([0-9.]+ \w+)", report["prune 60d"]["output"])
        report["prune 60d"] |= {"file_bytes_before": size, "file_bytes_after": db.stat().st_size,
                                "given_back": freed[1] if freed else None}
        print(json.dumps(report, indent=2))
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
