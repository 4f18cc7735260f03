"""One writer at a time across every server process on a SQLite file.

SQLite lets one transaction write at a time; a second writer that finds the lock taken sleeps in its busy
handler (1, 2, 5, 10 … 100 ms) and retries, so with several processes writing, the lock mostly stands
free while they sleep. The server's writes first take an exclusive `flock` on a file beside the database
and are handed the turn the moment the writer before them is done. Commands that write (import, token
changes) do not take it; between them and a server SQLite's own lock and busy timeout still apply.

`flock` locks are separate from the POSIX locks SQLite takes, and the lock file is never one SQLite
opens, so closing it cannot release a lock SQLite holds.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SUFFIX = "-writer.lock"
# As long as SQLite's busy timeout (schema.CONNECTION_PRAGMAS): past it a write would have failed anyway.
WAIT_SECONDS = 10.0
_POLL_SECONDS = 0.0005


def lock_path(db: Path | str) -> Path:
    return Path(str(db) + SUFFIX)


class WriterLock:
    """The exclusive turn to write to one database file; used by one thread at a time."""

    def __init__(self, db: Path | str, wait_seconds: float = WAIT_SECONDS) -> None:
        self._path = lock_path(db)
        self._wait = wait_seconds
        self._fd: int | None = None

    def _file(self) -> int | None:
        """The lock file, opened once; None where it cannot be made (SQLite's own lock then stands alone)."""
        if self._fd is None:
            try:
                self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:
                return None
        return self._fd

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold the turn for the block; sqlite3.OperationalError ("database is locked") when another process
        keeps it longer than the busy timeout, as SQLite itself would say."""
        fd = self._file()
        if fd is None:
            yield
            return
        deadline = time.monotonic() + self._wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise sqlite3.OperationalError("database is locked") from None
                time.sleep(_POLL_SECONDS)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
