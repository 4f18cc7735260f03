"""Import of JSON Lines: every record is validated before the one transaction that writes them commits."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from buildreport.imports.files import MAX_REPORTED_ERRORS, ImportFailed, RecordError, lines_size, read_records
from buildreport.models import ImportRecord
from buildreport.store import Connection, after_bulk_write, bulk_write, deferred_indexes, loads_fresh
from buildreport.store.build_rows import WriteStats
from buildreport.store.build_writer import BuildWriter
from buildreport.store.fresh_load import FreshLoad

# From this many bytes of JSON Lines, an import into a database with no builds reads in a second process:
# below it, starting that process costs more than it saves (bench/store.md).
TWO_PROCESS_BYTES = 16 * 1024 * 1024
EVENTS_BATCH = 2000  # builds written whose events are made together (an import with --events)


class ImportResult(msgspec.Struct):
    records: int
    stats: WriteStats
    seconds: float


def _refuse_if(errors: list[RecordError], unreported: int = 0) -> None:
    if errors:
        raise ImportFailed(errors[:MAX_REPORTED_ERRORS], len(errors) + unreported)


def import_files(
    conn: Connection,
    paths: list[Path],
    now_us: int,
    on_progress: Callable[[int], None] | None = None,
    transform: Callable[[ImportRecord], ImportRecord] | None = None,
    events: bool = False,
) -> ImportResult:
    """Import every file in one transaction; on any bad record nothing is written and ImportFailed is raised.
    With `events`, the builds make their events (and webhook deliveries) as if they were sent one by one."""
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
    started = time.perf_counter()
    errors: list[RecordError] = []
    with bulk_write(conn):
        conn.execute("BEGIN IMMEDIATE")
        try:
            fresh = transform is None and not events and loads_fresh(conn)
            if fresh and sum(map(lines_size, paths)) >= TWO_PROCESS_BYTES:
                count, stats = _import_fresh(conn, paths, now_us, errors, on_progress)
            else:
                count, stats = _import(conn, paths, now_us, errors, on_progress, transform, events)
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
    after_bulk_write(conn, stats.created + stats.updated)
    return ImportResult(records=count, stats=stats, seconds=time.perf_counter() - started)


def _conflicts_into(errors: list[RecordError]) -> Callable[[object, str, str], None]:
    def conflict(location: object, field: str, reason: str) -> None:
        errors.append(RecordError(location, field, reason))  # type: ignore[arg-type]

    return conflict


def _import(
    conn: Connection,
    paths: list[Path],
    now_us: int,
    errors: list[RecordError],
    on_progress: Callable[[int], None] | None,
    transform: Callable[[ImportRecord], ImportRecord] | None,
    events: bool = False,
) -> tuple[int, WriteStats]:
    """Every record through the writer, in this process: (records read, what was written)."""
    writer = BuildWriter(conn, _conflicts_into(errors), now_us, keep_changes=events)
    names: dict[int, str] = {}  # accounts by id, for their events
    count = 0
    with deferred_indexes(conn):
        for location, record in read_records(paths, errors):
            count += 1
            if not errors:
                record = transform(record) if transform is not None else record
                writer.add(location, record)
                if events:
                    names.setdefault(writer.account_id(record.account), record.account)
                    if len(writer.changes or ()) >= EVENTS_BATCH:
                        _record_events(conn, writer, names, now_us)
            if on_progress is not None and count % 1000 == 0:
                on_progress(count)
        if not errors:
            writer.flush()  # every build is in before the indexes are made and the totals read them
            if events:
                _record_events(conn, writer, names, now_us)
        _refuse_if(errors)
    writer.finish()
    _refuse_if(errors)
    return count, writer.stats


def _record_events(conn: Connection, writer: BuildWriter, names: dict[int, str], now_us: int) -> None:
    """The events of the builds the writer wrote since the last call, account by account, in write order."""
    from buildreport.store.events import record_events
    from buildreport.store.transaction import DEFAULT_RULES

    changes, writer.changes = writer.changes or [], []
    by_account: dict[int, list] = {}
    for change in changes:
        by_account.setdefault(change.row.account_id, []).append(change)
    for account_id, written in by_account.items():
        record_events(conn, names[account_id], account_id, written, now_us, DEFAULT_RULES)


def _import_fresh(
    conn: Connection,
    paths: list[Path],
    now_us: int,
    errors: list[RecordError],
    on_progress: Callable[[int], None] | None,
) -> tuple[int, WriteStats]:
    """Into a database with no builds: records are read in a process of their own (import_reader)."""
    from buildreport.imports import reader as import_reader

    load = FreshLoad(conn, _conflicts_into(errors), now_us)
    with deferred_indexes(conn, beside_reader=True):
        count, unreported = import_reader.load(load, paths, errors, on_progress)
        _refuse_if(errors, unreported)
    return count, WriteStats(created=load.created)
