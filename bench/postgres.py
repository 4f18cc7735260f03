"""PostgreSQL for `make bench`: the test suite's throwaway cluster (tests/pgcluster.py: initdb in a temporary
folder, 127.0.0.1, a free port, a non-root user), run with durable writes, and copies and sizes of databases.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from pgcluster import PgCluster, PostgresMissing, find_bin_dir

__all__ = ["SETTINGS", "PgCluster", "PostgresMissing", "database_copy", "database_size", "find_bin_dir",
           "fresh_database", "scratch_or_itself", "start", "version"]

# The tests' cluster gives up durability for speed; a benchmark must not. Commits are written to the WAL and
# flushed by the WAL writer within moments rather than one by one (synchronous_commit off), as SQLite's
# synchronous=NORMAL in WAL mode does: a crash of the machine may lose the last commits, never corrupts.
# shared_buffers is a quarter of a small server's memory; the rest is PostgreSQL's defaults.
SETTINGS = {
    "fsync": "on",
    "full_page_writes": "on",
    "synchronous_commit": "off",
    "shared_buffers": "512MB",
    "max_wal_size": "4GB",
}


def start() -> PgCluster:
    """A running cluster with the settings above; raises PostgresMissing without Debian's server binaries."""
    return PgCluster.start(find_bin_dir(), settings=SETTINGS)


def version(cluster: PgCluster) -> str:
    return str(cluster.admin().execute("SHOW server_version").fetchone()[0])  # type: ignore[index]


def database_size(cluster: PgCluster, name: str) -> int:
    """pg_database_size: every table, index and TOAST file of the database, in bytes."""
    return int(cluster.admin().execute("SELECT pg_database_size(%s)", (name,)).fetchone()[0])  # type: ignore[index]


@contextmanager
def database_copy(cluster: PgCluster, name: str) -> Iterator[str]:
    """A scratch copy of database `name` (CREATE DATABASE … TEMPLATE, a file copy), dropped afterwards; its URL.
    Nothing may be connected to `name` while it is copied."""
    copy = cluster.create_database(template=name)
    try:
        yield cluster.url(copy)
    finally:
        cluster.drop_database(copy)


# Disk left free beside a scratch copy: room for the WAL (max_wal_size above) and the builds written into it.
SPARE_BYTES = 10 * 2**30


@contextmanager
def scratch_or_itself(cluster: PgCluster, name: str, said: list[str]) -> Iterator[str]:
    """A scratch copy of database `name` when the disk holds one with SPARE_BYTES to spare; otherwise `name`
    itself, which the writes then grow (the ingestion phase is the last to use it), and a sentence in `said`."""
    size = database_size(cluster, name)
    free = shutil.disk_usage(cluster.data).free
    if free - size >= SPARE_BYTES:
        with database_copy(cluster, name) as url:
            yield url
        return
    said.append(f"PostgreSQL's ingestion wrote into the measured database itself: a copy of its {size / 2**30:.1f}"
                f" GiB would have left {max(free - size, 0) / 2**30:.1f} GiB of disk free")
    yield cluster.url(name)


@contextmanager
def fresh_database(cluster: PgCluster) -> Iterator[tuple[str, str]]:
    """An empty database, dropped afterwards: its name and URL."""
    name = cluster.create_database()
    try:
        yield name, cluster.url(name)
    finally:
        cluster.drop_database(name)
