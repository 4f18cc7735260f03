"""Retention: remove builds (or only their logs) created before a cut-off, in bounded batches.

Builds go through the writer (`BuildWriter.remove`), which takes their share out of every kept figure by the
same differences a rewrite of a build uses, so totals, usage, tag totals, day figures and day summaries stay
equal to a computation over the builds that remain. A restart link to a removed build becomes null.

Each batch is its own transaction and, in a server, takes the writers' turn (`turn`), so requests that
write wait at most one batch. The usage of removed billable builds can be kept (`kept_usage`), so that /usage
of past months still answers what was billed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import msgspec

from buildreport.models import BILLABLE
from buildreport.store.build_writer import BuildWriter
from buildreport.store.engines import is_postgres
from buildreport.store.errors import DatabaseError
from buildreport.store.queries import US_PER_DAY, Query, in_list

# Builds a batch removes at most. At most this many hours are touched, below FULL_RECOMPUTE_THRESHOLD: a batch
# keeps its figures by differences, never recomputing an account's totals.
BATCH = 400
MIN_BATCH = 10
# A batch holds the writers' turn about this long: the size follows the time the last one took, so that on a
# busy machine a waiting write is not held up by a batch that takes ten times as long as on an idle one.
BATCH_SECONDS = 0.04
# Between batches the turn stands free this long: a server's write waiting for it (polling every 0.5 ms) gets
# it rather than the next batch.
PAUSE_SECONDS = 0.005
# Pages one step of incremental vacuum gives back (of 4 KiB: 8 MiB), each step its own short transaction.
VACUUM_PAGES = 2_000

Turn = Callable[[], AbstractContextManager[None]]


class Policy(msgspec.Struct, frozen=True):
    """What to prune: builds created more than `older_than_us` before now, of one account or all."""

    older_than_us: int
    logs_only: bool = False  # drop logs, keep the builds
    account: str | None = None
    keep_usage: bool = True  # keep the billable usage of removed builds in kept_usage


class Pruned(msgspec.Struct):
    """What a prune removed (or, in a dry run, would remove)."""

    builds: int = 0
    logs: int = 0
    log_bytes: int = 0  # of log text, uncompressed
    freed_bytes: int = 0  # given back to the file system (SQLite)


def _accounts(conn: Any, name: str | None) -> list[int]:
    if name is None:
        return [row[0] for row in conn.execute("SELECT account_id FROM accounts ORDER BY account_id").fetchall()]
    row = conn.execute("SELECT account_id FROM accounts WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise DatabaseError(f"no account {name!r} in the database")
    return [row[0]]


def preview(conn: Any, policy: Policy, now_us: int) -> Pruned:
    """What `prune` would remove, removing nothing."""
    cutoff = now_us - policy.older_than_us
    result = Pruned()
    for account_id in _accounts(conn, policy.account):
        builds, logs, size = conn.execute(*preview_query(account_id, cutoff)).fetchone()
        result.builds += 0 if policy.logs_only else int(builds)
        result.logs += int(logs)
        result.log_bytes += int(size)
    return result


def prune(conn: Any, policy: Policy, now_us: int, turn: Turn = nullcontext, batch: int = BATCH) -> Pruned:
    """Remove what `policy` names, at most `batch` builds a transaction; what was removed. Stopping part way (a
    fault, a killed process) leaves every batch before whole and the rest untouched: pruning again continues."""
    cutoff = now_us - policy.older_than_us
    result = Pruned()
    size = min(batch, MIN_BATCH)
    for account_id in _accounts(conn, policy.account):
        after = (-(2**63), -(2**63))  # (create_us, build_id) of the last build looked at
        while True:
            started = time.perf_counter()
            with turn():
                conn.execute("BEGIN IMMEDIATE")
                try:
                    ids = _next_batch(conn, account_id, cutoff, after if policy.logs_only else None, size)
                    if ids:
                        _remove(conn, policy, ids, now_us, result)
                    conn.commit()
                except BaseException:
                    conn.rollback()
                    raise
            if len(ids) < size:
                break
            after = ids[-1]
            took = time.perf_counter() - started
            size = max(min(batch, MIN_BATCH), min(batch, round(size * BATCH_SECONDS / max(took, 1e-3))))
            time.sleep(PAUSE_SECONDS)
    return result


@contextmanager
def writers_turn(db: str) -> Iterator[Turn]:
    """The turn each batch takes among the writers of the database: on SQLite the servers' writer lock
    (sqlite/writelock.py), so that a server's writes and the batches follow one another; PostgreSQL's
    writes order themselves (BEGIN IMMEDIATE takes its advisory lock)."""
    if is_postgres(db):
        yield nullcontext
        return
    from buildreport.store.sqlite.writelock import WriterLock

    lock = WriterLock(db)
    try:
        yield lock.held
    finally:
        lock.close()


def batch_query(account_id: int, cutoff: int, after: tuple[int, int] | None, batch: int) -> Query:
    """(create_us, build_id) of the account's next builds created before `cutoff`, oldest first, from the
    time index; past `after` when builds stay (only their logs go)."""
    sql = "SELECT create_us, build_id FROM builds WHERE account_id = ? AND create_us < ?"
    params: list[object] = [account_id, cutoff]
    if after is not None:
        sql += " AND (create_us > ? OR (create_us = ? AND build_id > ?))"
        params += [after[0], after[0], after[1]]
    return sql + " ORDER BY create_us, build_id LIMIT ?", [*params, batch]


def preview_query(account_id: int, cutoff: int) -> Query:
    """(builds, logs, log bytes) of the account's builds created before `cutoff`."""
    return (
        "SELECT count(*), count(l.build_id), coalesce(sum(l.size_bytes), 0) FROM builds b"
        " LEFT JOIN build_logs l ON l.build_id = b.build_id WHERE b.account_id = ? AND b.create_us < ?",
        [account_id, cutoff],
    )


def _next_batch(conn: Any, account_id: int, cutoff: int, after: tuple[int, int] | None, batch: int) -> list[tuple]:
    return [tuple(row) for row in conn.execute(*batch_query(account_id, cutoff, after, batch))]


def _remove(conn: Any, policy: Policy, keys: Sequence[tuple], now_us: int, result: Pruned) -> None:
    ids = [build_id for _, build_id in keys]
    marks = ",".join("?" * len(ids))
    logs, size = conn.execute(
        f"SELECT count(*), coalesce(sum(size_bytes), 0) FROM build_logs WHERE build_id IN ({marks})", ids
    ).fetchone()
    result.logs += int(logs)
    result.log_bytes += int(size)
    if policy.logs_only:
        conn.execute(f"DELETE FROM build_logs WHERE build_id IN ({marks})", ids)
        return
    if policy.keep_usage:
        _keep_usage(conn, ids, marks)

    def refuse(location: object, field: str, reason: str) -> None:  # removing builds names no record
        raise DatabaseError(f"cannot prune: {field} {reason}")

    writer = BuildWriter(conn, refuse, now_us)
    result.builds += writer.remove(ids)
    writer.finish()


_KEEP_USAGE = (
    "INSERT INTO kept_usage (account_id, day_us, builds, cpu_seconds)"
    f" SELECT account_id, stop_us - stop_us % {US_PER_DAY}, count(*), sum(cpu_seconds) FROM builds"
    " WHERE build_id IN ({marks}) AND stop_us IS NOT NULL AND status IN " + in_list(BILLABLE) + " GROUP BY 1, 2"
    " ON CONFLICT (account_id, day_us) DO UPDATE SET builds = kept_usage.builds + excluded.builds,"
    " cpu_seconds = kept_usage.cpu_seconds + excluded.cpu_seconds"
)


def _keep_usage(conn: Any, ids: list[int], marks: str) -> None:
    """Add the usage of the billable builds about to be removed to kept_usage, per account and stop day."""
    conn.execute(_KEEP_USAGE.format(marks=marks), ids)


def give_back_space(conn: Any, turn: Turn = nullcontext) -> int | None:
    """Return a SQLite file's free pages to the file system, VACUUM_PAGES a step, each in the writers' turn;
    the bytes given back. None on PostgreSQL, whose autovacuum makes the space of deleted rows reusable, and
    for a SQLite file not yet switched to incremental vacuum (see `switch_to_incremental`)."""
    if getattr(conn, "engine", None) == "postgresql":
        return None
    if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
        return None
    (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    (before,) = conn.execute("PRAGMA page_count").fetchone()
    (free,) = conn.execute("PRAGMA freelist_count").fetchone()
    for _ in range(-(-free // VACUUM_PAGES)):  # the pages free now: writes meanwhile cannot keep it going
        with turn():
            # Each page freed is a step of the statement, which only a script runs to its end.
            conn.executescript(f"PRAGMA incremental_vacuum({VACUUM_PAGES})")  # a number from this module
    (after,) = conn.execute("PRAGMA page_count").fetchone()
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")  # the file shrinks once the log is written back
    return (before - after) * page_size


def switch_to_incremental(conn: Any) -> bool:
    """Switch a SQLite file made before incremental vacuum to it: one VACUUM, which rewrites the whole file and
    holds the write lock meanwhile. Whether it had to; False on PostgreSQL."""
    if getattr(conn, "engine", None) == "postgresql":
        return False
    if conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2:
        return False
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    conn.execute("VACUUM")
    return True
