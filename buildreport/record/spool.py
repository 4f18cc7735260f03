"""The spool: a directory of JSON Lines files of build records, waiting to be sent to a buildreport service.

Writers (the recorders) put each file in place atomically: written under a hidden temporary name,
flushed to disk, then renamed to its final `*.jsonl` name. A reader (`buildreport push`) therefore
only ever sees whole files, and a crash leaves at most a hidden temporary file behind, never half a batch.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterable
from pathlib import Path

SUFFIX = ".jsonl"
TEMP_PREFIX = ".tmp-"
REJECTED = "rejected"


def spool_name(now_ns: int | None = None) -> str:
    """A file name that sorts by creation time and never collides between writers."""
    stamp = time.time_ns() if now_ns is None else now_ns
    return f"{stamp:020d}-{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}"


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_spool_file(directory: Path, lines: Iterable[bytes]) -> Path:
    """Write one spool file of JSON Lines atomically and durably; the path of the finished file.

    Each element of `lines` is one encoded record, without its newline.
    """
    directory.mkdir(parents=True, exist_ok=True)
    name = spool_name()
    temp = directory / (TEMP_PREFIX + name)
    final = directory / name
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            for line in lines:
                handle.write(line)
                handle.write(b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(temp, final)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync_dir(directory)
    return final


def pending_files(directory: Path) -> list[Path]:
    """Finished spool files, oldest first; temporary files and the rejected folder are not included."""
    if not directory.is_dir():
        return []
    return sorted(
        (p for p in directory.iterdir() if p.name.endswith(SUFFIX) and not p.name.startswith(".") and p.is_file()),
        key=lambda p: p.name,
    )
