"""Events and webhooks: what deriving events costs a write, how fast deliveries go to a fast receiver, how long
from a build's write to its delivery (p50, p99), and what a dead receiver costs the rest.

    .venv/bin/python bench/events.py [--builds N]

Everything runs in a temporary folder on 127.0.0.1 and is bounded in count and time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import msgspec
from server import Server

from buildreport.models import BuildRecord
from buildreport.store import open_auth, open_database
from buildreport.store.admin import insert_token
from buildreport.store.transaction import write_with_events
from buildreport.times import US_PER_DAY, now_us
from buildreport.tokens import new_token

CLI = [sys.executable, "-m", "buildreport"]
BATCH = 500
DEADLINE_S = 120.0


def records(start: int, count: int, series: int = 50) -> list[BuildRecord]:
    """Finished builds of `series` derivations, one in ten failed: every one makes build.finished."""
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    made = []
    for n in range(start, start + count):
        when = (t0 + timedelta(seconds=n)).isoformat()
        made.append({
            "source_id": f"b:{n}", "create_time": when, "start_time": when, "queue_time_seconds": 0.1,
            "duration_seconds": 60.0, "build_status": "build_failed" if n % 10 == 0 else "built", "cpu_count": 1,
            "allocated_megabytes": 1024, "cpu_seconds": 60,
            "derivation_path": f"/nix/store/{'a' * 32}-pkg{n % series}-1.0.drv", "outputs": [],
            "system": "x86_64-linux", "tags": {"project": "bench"},
        })
    return msgspec.convert(made, list[BuildRecord])


def write_speed(folder: Path, batches: int, events: bool) -> float:
    """Builds/s written in batches of BATCH, in this process, with or without their events."""
    db = folder / f"write-{events}.db"
    conn = open_database(db)
    patch = mock.patch("buildreport.store.transaction.record_events", return_value=0) if not events else None
    if patch is not None:
        patch.start()
    try:
        started = time.perf_counter()
        for i in range(batches):
            write_with_events(conn, "acme", records(i * BATCH, BATCH), now_us())
        return batches * BATCH / (time.perf_counter() - started)
    finally:
        if patch is not None:
            patch.stop()
        conn.close()


class Sink:
    """A receiver that answers 200 at once (or, `dead`, never within the sender's time-out)."""

    def __init__(self, dead: bool = False) -> None:
        self.arrivals: dict[str, float] = {}
        self.times: dict[str, float] = {}
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                if dead:
                    time.sleep(30)
                    return
                event = json.loads(body)
                sink.arrivals.setdefault(event["id"], time.time())
                sink.times[event["id"]] = datetime.fromisoformat(event["time"]).timestamp()
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def token(db: Path) -> str:
    open_database(db).close()
    conn = open_auth(db)
    token_id, secret, digest = new_token()
    with conn:
        insert_token(conn, token_id=token_id, account="acme", digest=digest, scopes=("build:write", "build:read"),
                     label="bench", now_us=now_us(), expires_us=now_us() + US_PER_DAY)
    conn.close()
    return secret


def hook(db: Path, url: str) -> None:
    subprocess.run([*CLI, "hook", "add", "--db", str(db), "--account", "acme", "--url", url, "--event",
                    "build.finished"], check=True, capture_output=True)


def delivery_run(folder: Path, name: str, builds: int, dead: bool, pace: float = 0.0) -> dict[str, float]:
    """Write `builds` finished builds over HTTP to a server with a hook to a fast receiver (and, `dead`, a second
    hook to a receiver that never answers): in batches of 50 one after another, or with `pace`, one build every
    `pace` seconds; delivery and write figures."""
    db = folder / f"{name}.db"
    secret = token(db)
    fast, stuck = Sink(), Sink(dead=True) if dead else None
    hook(db, fast.url)
    if stuck is not None:
        hook(db, stuck.url)
    server = Server(CLI, db, 1, folder / f"{name}.log")
    server.command += ["--hook-timeout", "10"]
    posts: list[float] = []
    auth = {"Authorization": f"Bearer {secret}"}
    with server, httpx.Client(base_url=server.base, headers=auth, timeout=60) as client:
        started = time.time()
        batch = 1 if pace else 50
        for start in range(0, builds, batch):
            time.sleep(pace)
            body = msgspec.json.encode(records(start, min(batch, builds - start)))
            sent = time.perf_counter()
            client.post("/builds", content=body, headers={"content-type": "application/json"}).raise_for_status()
            posts.append(time.perf_counter() - sent)
        deadline = time.time() + DEADLINE_S
        while len(fast.arrivals) < builds and time.time() < deadline:
            time.sleep(0.05)
    fast.close()
    if stuck is not None:
        stuck.close()
    latencies = sorted(fast.arrivals[i] - fast.times[i] for i in fast.arrivals)
    done = max(fast.arrivals.values()) - started if fast.arrivals else float("nan")
    return {
        "delivered": len(fast.arrivals), "events": builds, "events_per_s": round(len(fast.arrivals) / done, 1),
        "latency_p50_ms": round(1000 * latencies[len(latencies) // 2], 1),
        "latency_p99_ms": round(1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 1),
        "post_median_ms": round(1000 * statistics.median(posts), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--builds", type=int, default=2000, help="events delivered in each delivery run")
    parser.add_argument("--batches", type=int, default=40, help="batches of 500 builds in the write runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="buildreport-bench-events-") as name:
        folder = Path(name)
        report = {
            "write_builds_per_s_without_events": round(write_speed(folder, args.batches, events=False)),
            "write_builds_per_s_with_events": round(write_speed(folder, args.batches, events=True)),
            "fast_receiver": delivery_run(folder, "fast", args.builds, dead=False),
            "fast_receiver_beside_a_dead_one": delivery_run(folder, "dead", args.builds, dead=True),
            "one_build_every_50ms": delivery_run(folder, "paced", 200, dead=False, pace=0.05),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
