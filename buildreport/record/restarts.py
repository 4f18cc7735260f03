"""Restart links across runner sessions: which derivation last ended in a discarded failure, and as what.

When a build ends as `internal_error` (a failure of the runner, not of the build) its derivation and
source id are kept in a small JSON file; the next build of the same derivation, in any session, takes
that source id as `restart_of_source_id` and removes the entry. Sessions run side by side, so every
read-modify-write holds an exclusive lock on the file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

MAX_ENTRIES = 10_000  # the oldest entries go first; a derivation not retried by then is not coming back


class RestartState:
    def __init__(self, directory: Path) -> None:
        self.path = directory / "discarded.json"
        self.lock = directory / "discarded.lock"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, str]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                entries = json.loads(self.path.read_text())
                if not isinstance(entries, dict):
                    entries = {}
            except (OSError, ValueError):
                entries = {}
            before = dict(entries)
            yield entries
            if entries != before:
                while len(entries) > MAX_ENTRIES:
                    del entries[next(iter(entries))]
                temp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
                temp.write_text(json.dumps(entries))
                os.replace(temp, self.path)
        finally:
            os.close(fd)

    def take(self, drv_path: str) -> str | None:
        """The source id of the discarded build this one restarts, if any; it is restarted only once."""
        try:
            with self._locked() as entries:
                source_id = entries.pop(drv_path, None)
        except OSError:
            return None
        return source_id if isinstance(source_id, str) else None

    def discarded(self, drv_path: str, source_id: str) -> None:
        with contextlib.suppress(OSError), self._locked() as entries:
            entries.pop(drv_path, None)
            entries[drv_path] = source_id
