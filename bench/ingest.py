"""Ingestion over HTTP: builds/s through `POST /builds` in batches of 500, with one and with four concurrent
senders, while one client reads `/builds/{id}`; and that read latency, against the same reads alone.

It writes into a copy of the benchmark database (`sqlite_copy` here, a PostgreSQL copy in postgres.py), so
the data of the other phases stays as it was. With several server processes on one database the senders
take turns over them. Every run is bounded in time; the senders stop at their deadline and the reader runs
as long.
"""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import load
from server import Server

from buildreport.store.sqlite.schema import auth_path, remove_files

BATCH = 500
SENDERS = (1, 4)
MAX_BATCHES_PER_SENDER = 20_000  # a bound beside the deadline
# Batches made ahead of a run: enough for this many builds/s over the run (past them senders make their own).
PREPARED_BUILDS_PER_S = 30_000


def _record_template() -> str:
    """One record as JSON with {placeholders}: what a recorder spools for a finished build."""
    record = {
        "source_id": "@source@",
        "create_time": "@create@",
        "start_time": "@create@",
        "queue_time_seconds": 0.4,
        "duration_seconds": 61.5,
        "build_status": "built",
        "status_message": None,
        "cpu_count": 4,
        "allocated_megabytes": 8192,
        "cpu_seconds": 157,
        "average_cpu_utilization": 0.64,
        "peak_memory_use_kilobytes": 812000,
        "peak_storage_use_kilobytes": 1400000,
        "derivation_path": "/nix/store/@hash@-bench-@n@.drv",
        "outputs": [
            {"name": "out", "path": "/nix/store/@hash@-bench-@n@", "nar_hash": "sha256-@hash@",
             "nar_size_bytes": 48213},
            {"name": "doc", "path": "/nix/store/@hash@-bench-@n@-doc", "nar_hash": "sha256-@hash@",
             "nar_size_bytes": 9121},
        ],
        "system": "x86_64-linux",
        "tags": {"project": "ingest", "branch": "main", "runner": "@sender@"},
    }
    text = json.dumps(record, separators=(",", ":")).replace("{", "{{").replace("}", "}}")
    for name in ("source", "create", "hash", "n", "sender"):
        text = text.replace(f"@{name}@", "{" + name + "}")
    return text


TEMPLATE = _record_template()


def batch_body(run: str, sender: int, number: int, *, start: datetime) -> bytes:
    """Batch `number` of one sender: BATCH new builds as gzip JSON Lines, as `buildreport push` sends them."""
    lines = []
    for i in range(BATCH):
        n = number * BATCH + i
        create = (start + timedelta(milliseconds=n)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        lines.append(TEMPLATE.format(source=f"{run}-{sender}-{n}", create=create, hash=f"{sender:04x}{n:028x}",
                                     n=n, sender=f"s{sender}"))
    return gzip.compress(("\n".join(lines) + "\n").encode(), compresslevel=6)


def _send(base: str, token: str, bodies: list[bytes], more: Callable[[int], bytes], deadline: float,
          out: dict[str, Any]) -> None:
    """Post the prepared batches, then (past them, before the deadline) batches made on the way."""
    latencies: list[float] = []
    created = errors = 0
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson",
               "Content-Encoding": "gzip"}
    with httpx.Client(base_url=base, timeout=120) as client:
        for number in range(MAX_BATCHES_PER_SENDER):
            if time.perf_counter() >= deadline:
                break
            body = bodies[number] if number < len(bodies) else more(number)
            began = time.perf_counter()
            response = client.post("/builds", content=body, headers=headers)
            latencies.append(time.perf_counter() - began)
            if response.status_code == 200:
                created += response.json()["created"]
            else:
                errors += 1
                out.setdefault("first_error", f"{response.status_code} {response.text[:300]}")
    out.update(created=created, errors=errors, latencies=latencies)


def _prepared(makers: list[Callable[[int], bytes]], seconds: int) -> list[list[bytes]]:
    """The batches each sender posts, made before the clock starts: the senders share the server's two cores,
    and what is measured is the server taking builds in, not the benchmark making them."""
    per_sender = max(1, -(-PREPARED_BUILDS_PER_S * seconds // (BATCH * len(makers))))
    return [[make(number) for number in range(per_sender)] for make in makers]


def _read(wrk: str | None, run_dir: Path, name: str, base: str, paths: list[str], token: str,
          seconds: int) -> dict[str, Any]:
    if wrk is not None:
        return load.run_wrk(wrk, run_dir, name, base, paths, token, 1, 1, seconds)
    return load.run_python(base, paths, token, 1, seconds)


def _ms(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return round(load._percentile(ordered, q) * 1000, 1) if ordered else None


@contextmanager
def sqlite_copy(db: Path, run_dir: Path) -> Iterator[Path]:
    """A copy of a SQLite database and the tokens file beside it (so that the read token works on the copy
    too), removed afterwards."""
    copy = run_dir / "ingest.db"
    try:
        for original, duplicate in ((db, copy), (auth_path(db), auth_path(copy))):
            with sqlite3.connect(original) as source, sqlite3.connect(duplicate) as target:
                source.backup(target)
        # The copy's gigabytes on their way to the disk would slow the server's own commits for the next
        # seconds: what is measured is the server's writes, so the copy is on disk before the clock starts.
        os.sync()
        yield copy
    finally:
        remove_files(copy)


def measure(cli: list[str], db: Path | str, run_dir: Path, read_token: str, read_paths: list[str], seconds: int,
            wrk: str | None, workers: int = 1, processes: int = 1) -> dict[str, Any]:
    """Figures of ingestion into `db` (written to: a scratch copy where the disk holds one): builds/s and read
    latency, alone and with 1 and 4 senders, served by `processes` servers of `workers` workers each. Sender n
    posts to server n % processes; the reader reads from the first server."""
    made = subprocess.run([*cli, "token", "create", "--db", str(db), "--account", "acme", "--scope",
                           "build:write", "--expires-in", "1d", "--label", "make bench ingest"],
                          capture_output=True, text=True, timeout=120, check=True)
    write_token = made.stdout.strip()
    result: dict[str, Any] = {"batch": BATCH, "seconds": seconds, "workers": workers, "processes": processes,
                              "runs": {}}
    servers = [Server(cli, db, workers, run_dir / f"server-ingest-{n}.log") for n in range(processes)]
    result["command"] = " ".join(servers[0].command)
    with ExitStack() as stack:
        for server in servers:
            stack.enter_context(server)
        reader = servers[0]
        result["reads_alone"] = _read(wrk, run_dir, "ingest-reads-alone", reader.base, read_paths, read_token,
                                      seconds)
        # Each run's builds were created in an hour of their own, one after the other, as time passes for real
        # runners; within a run the senders' builds interleave, a millisecond apart each.
        first_hour = datetime.now(UTC) - timedelta(hours=len(SENDERS) + 1)
        for run, senders in enumerate(SENDERS):
            start = first_hour + timedelta(hours=run)
            outs: list[dict[str, Any]] = [{} for _ in range(senders)]
            # Source ids name the setting too: where the disk holds no scratch copy, every setting writes into
            # one database, and a build sent again under its source id replaces the one stored instead of adding.
            run_name = f"w{workers}p{processes}-run{senders}"
            makers = [partial(batch_body, run_name, s, start=start) for s in range(senders)]
            prepared = _prepared(makers, seconds)
            deadline = time.perf_counter() + seconds
            began = time.perf_counter()
            threads = [threading.Thread(target=_send, args=(servers[s % processes].base, write_token,
                                                            prepared[s], makers[s], deadline, outs[s]))
                       for s in range(senders)]
            for thread in threads:
                thread.start()
            reads = _read(wrk, run_dir, f"ingest-reads-{senders}", reader.base, read_paths, read_token, seconds)
            for thread in threads:
                thread.join(timeout=seconds + 180)
            elapsed = time.perf_counter() - began
            latencies = [x for out in outs for x in out.get("latencies", [])]
            created = sum(out.get("created", 0) for out in outs)
            result["runs"][str(senders)] = {
                "senders": senders,
                "builds": created,
                "requests": len(latencies),
                "errors": sum(out.get("errors", 0) for out in outs),
                "first_error": next((o["first_error"] for o in outs if "first_error" in o), None),
                "seconds": round(elapsed, 2),
                "builds_per_s": round(created / elapsed, 1) if elapsed else 0.0,
                "batch_p50_ms": _ms(latencies, 50),
                "batch_p99_ms": _ms(latencies, 99),
                "reads": reads,
            }
            for server in servers:
                if server.process is not None and server.process.poll() is not None:
                    raise RuntimeError("a server exited during ingestion:\n" + server.log_tail())
    return result
