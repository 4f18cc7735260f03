"""Datasette side by side: the same builds, served by Datasette from a table with the same columns.

Datasette is installed from PyPI into a virtual environment of its own (bench/data/datasette-venv), so it
never shares packages with buildreport. Its database is a copy of the builds table (the stored JSON as
text) with the indexes a Datasette user would add for these questions: account and time, and account,
status and time. When Datasette cannot be installed or started, the step is skipped with the reason.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from server import free_port

VERSION = "0.65.5"
NAME = "builds"  # Datasette names a database after its file: /builds/builds is the table

COLUMNS = ("build_id, account_id, create_us, start_us, duration_us, stop_us, status, cpu_seconds, nar_size_bytes,"
           " derivation_path, restart_of_build_id, restarted_as_build_id, body, body_hash, source_id")
INDEXES = (
    "CREATE INDEX builds_account_time ON builds (account_id, create_us)",
    "CREATE INDEX builds_account_status_time ON builds (account_id, status, create_us)",
)


class Skip(Exception):
    """Datasette cannot be measured here; the message says why."""


def install(data: Path) -> Path:
    """The datasette command of the bench's own virtual environment, created on first use."""
    venv = data / "datasette-venv"
    command = venv / "bin" / "datasette"
    if command.exists():
        return command
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"datasette=={VERSION}"], check=True,
                       capture_output=True, text=True, timeout=900)
    except subprocess.CalledProcessError as exc:
        raise Skip(f"pip could not install datasette=={VERSION}: {(exc.stderr or '').strip()[-300:]}") from exc
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Skip(f"could not create Datasette's environment: {exc}") from exc
    return command


def database(source: Path, folder: Path) -> tuple[Path, float]:
    """A copy of the builds table for Datasette in `folder`, and the seconds it took."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{NAME}.db"
    started = time.perf_counter()
    tmp = folder / f"{NAME}.tmp.db"
    tmp.unlink(missing_ok=True)
    conn = sqlite3.connect(tmp, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = OFF")
        conn.execute("ATTACH DATABASE ? AS src", (f"file:{source}?mode=ro",))
        conn.execute("BEGIN")
        conn.execute(
            "CREATE TABLE builds (build_id INTEGER PRIMARY KEY, account_id INTEGER NOT NULL, create_us INTEGER NOT"
            " NULL, start_us INTEGER NOT NULL, duration_us INTEGER, stop_us INTEGER, status TEXT NOT NULL,"
            " cpu_seconds INTEGER NOT NULL, nar_size_bytes INTEGER NOT NULL, derivation_path TEXT NOT NULL,"
            " restart_of_build_id INTEGER, restarted_as_build_id INTEGER, body TEXT NOT NULL,"
            " body_hash INTEGER NOT NULL, source_id TEXT)"
        )
        # The stored JSON as text, so that Datasette answers it as a string, not as base64 bytes.
        select = COLUMNS.replace("body,", "CAST(body AS TEXT),")
        conn.execute(f"INSERT INTO builds ({COLUMNS}) SELECT {select} FROM src.builds ORDER BY build_id")
        for index in INDEXES:
            conn.execute(index)
        conn.execute("COMMIT")
        conn.execute("DETACH DATABASE src")
        conn.execute("ANALYZE")
    finally:
        conn.close()
    tmp.rename(target)
    return target, time.perf_counter() - started


class Datasette:
    """`datasette serve` of one database file, immutable (-i), on a free local port; stopped by its pid."""

    def __init__(self, command: Path, db: Path, log: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.command = [str(command), "serve", "-i", str(db), "--host", "127.0.0.1", "--port", str(self.port),
                        "--setting", "sql_time_limit_ms", "60000", "--setting", "max_returned_rows", "1000"]
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Datasette:
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise Skip(f"datasette exited with {self.process.returncode}: {self.log.read_text()[-300:]}")
            try:
                self.get("/-/versions.json")
                return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise Skip("datasette did not answer within 120 s")

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=20)

    def get(self, path: str) -> object:
        with urllib.request.urlopen(self.base + path, timeout=120) as answer:
            return json.loads(answer.read())


def paths(account_id: int, ids: list[int], since_us: int) -> dict[str, list[str]]:
    """What Datasette is asked, as a Datasette user would ask it."""
    table = f"/{NAME}/builds.json"
    return {
        "list": [f"{table}?_shape=array&_size=500&_sort_desc=create_us&account_id={account_id}"],
        "lookup": [f"/{NAME}/builds/{i}.json?_shape=array" for i in ids],
        "count": [f"{table}?_size=1&account_id={account_id}&status=built&create_us__gte={since_us}"],
    }
