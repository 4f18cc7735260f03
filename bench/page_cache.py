"""A database's files read once before a measured phase, so that the page cache holds them as a serving
machine's holds its working set.

Some machines give memory back to their host when it has not been used for a while (Linux's DAMON reclaim
pages out what is idle for a minute on this one, whatever the free memory). A phase would then read from disk
what an earlier one had cached, and measure the disk instead of the service. Reading the files costs one
sequential pass; the report notes each pass and, where the machine has such a reclaimer, says so.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CHUNK = 16 * 2**20
DAMON = Path("/sys/kernel/mm/damon/admin/kdamonds")


def sqlite_files(db: Path | str) -> list[Path]:
    """A SQLite database and its write-ahead log."""
    return [Path(str(db)), Path(f"{db}-wal")]


def postgres_files(data: Path) -> list[Path]:
    """Every file of a PostgreSQL cluster's databases (its `base` folder)."""
    return sorted(path for path in (data / "base").rglob("*") if path.is_file())


def read_files(paths: Iterable[Path]) -> dict[str, Any]:
    """Read each file that exists from start to end; the bytes read and the seconds it took."""
    began = time.perf_counter()
    total = 0
    buffer = bytearray(CHUNK)
    for path in paths:
        try:
            with path.open("rb", buffering=0) as file:
                while count := file.readinto(buffer):
                    total += count
        except FileNotFoundError:  # a log that was checkpointed away, a file PostgreSQL just dropped
            continue
    return {"bytes": total, "seconds": round(time.perf_counter() - began, 2)}


def reclaimer() -> str | None:
    """What pages out idle memory on this machine, when something does (DAMON's kdamonds that are on)."""
    try:
        states = [(path / "state").read_text().strip() for path in DAMON.iterdir() if path.name.isdigit()]
    except OSError:
        return None
    running = sum(state == "on" for state in states)
    return f"{running} DAMON kdamond(s) on" if running else None
