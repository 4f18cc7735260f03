"""Import of JSON Lines: every record is validated before the one transaction that writes them commits."""

from __future__ import annotations

import gzip
import io
import sqlite3
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from buildreport.models import UNFINISHED, ImportRecord
from buildreport.store.writer import BuildWriter, WriteStats

_DECODER = msgspec.json.Decoder(ImportRecord)
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
MAX_REPORTED_ERRORS = 1000
IMPORT_CACHE_KIB = 1024 * 1024


class Location(msgspec.Struct, frozen=True):
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


class RecordError(msgspec.Struct, frozen=True):
    location: Location
    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.location}: {self.field}: {self.reason}"


class ImportFailed(Exception):
    """The import wrote nothing; `errors` names every bad record."""

    def __init__(self, errors: list[RecordError], total: int) -> None:
        super().__init__(f"{total} invalid record{'s' if total != 1 else ''}; nothing was imported")
        self.errors = errors
        self.total = total


class ImportResult(msgspec.Struct):
    records: int
    stats: WriteStats
    seconds: float


def open_lines(path: Path) -> io.BufferedIOBase:
    """A file's bytes, gunzipped when its name ends in .gz."""
    raw = path.open("rb")
    return gzip.GzipFile(fileobj=raw, mode="rb") if path.name.endswith(".gz") else raw  # type: ignore[return-value]


def decode_error(exc: msgspec.MsgspecError) -> tuple[str, str]:
    """(field, reason) from a msgspec error such as "Expected `int`, got `str` - at `$.build_id`"."""
    message = str(exc)
    if isinstance(exc, msgspec.ValidationError) and " - at `$" in message:
        reason, _, where = message.rpartition(" - at `$")
        field = where.rstrip("`").lstrip(".") or "(record)"
        return field, reason[0].lower() + reason[1:]
    if isinstance(exc, msgspec.ValidationError):
        return "(record)", message[0].lower() + message[1:]
    return "(line)", "not valid JSON: " + message.removeprefix("JSON is malformed: ")


def resolve_status(record: ImportRecord) -> tuple[str, str] | None:
    """Fill in whichever of `build_status` and its alias `status` the record left out; an error if they differ."""
    given, alias = record.build_status, record.status
    if given is msgspec.UNSET and alias is msgspec.UNSET:
        return "build_status", "is required (or its alias status)"
    if given is not msgspec.UNSET and alias is not msgspec.UNSET and given != alias:
        return "status", f"is {alias.value!r} but build_status is {given.value!r}; status is an alias of build_status"
    record.build_status = record.status = given if given is not msgspec.UNSET else alias
    return None


def check_record(record: ImportRecord) -> tuple[str, str] | None:
    """Rules across fields that the types alone do not express; fills in the status alias."""
    problem = resolve_status(record)
    if problem is not None:
        return problem
    for name in ("create_time", "start_time"):
        if getattr(record, name) < EARLIEST:
            return name, "must not be before 1970-01-01T00:00:00Z"
    if record.build_status in UNFINISHED:
        if record.duration_seconds is not None:
            return "duration_seconds", f"must be null while the build is {record.build_status.value}"
    elif record.duration_seconds is None:
        return "duration_seconds", f"is required for a finished build ({record.build_status.value})"
    if record.restart_of_build_id is not None and record.restart_of_build_id == record.restarted_as_build_id:
        return "restarted_as_build_id", "cannot equal restart_of_build_id"
    return None


def read_records(paths: list[Path], errors: list[RecordError]) -> Iterator[tuple[Location, ImportRecord]]:
    """Valid records of every file, in order; bad ones are appended to `errors`."""
    first_seen: dict[int, Location] = {}
    for path in paths:
        with open_lines(path) as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                location = Location(str(path), number)
                try:
                    record = _DECODER.decode(line)
                except msgspec.MsgspecError as exc:
                    errors.append(RecordError(location, *decode_error(exc)))
                    continue
                problem = check_record(record)
                if problem is None and record.build_id in first_seen:
                    problem = ("build_id", f"{record.build_id} appears again (first at {first_seen[record.build_id]})")
                if problem is not None:
                    errors.append(RecordError(location, *problem))
                    continue
                first_seen[record.build_id] = location
                yield location, record


def import_files(
    conn: sqlite3.Connection,
    paths: list[Path],
    now_us: int,
    on_progress: Callable[[int], None] | None = None,
    transform: Callable[[ImportRecord], ImportRecord] | None = None,
) -> ImportResult:
    """Import every file in one transaction; on any bad record nothing is written and ImportFailed is raised."""
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
    started = time.perf_counter()
    errors: list[RecordError] = []

    def conflict(location: object, field: str, reason: str) -> None:
        errors.append(RecordError(location, field, reason))  # type: ignore[arg-type]

    # A large import touches every index page; a page cache of up to 1 GiB keeps them in memory for this connection.
    conn.execute(f"PRAGMA cache_size = -{IMPORT_CACHE_KIB}")
    conn.execute("BEGIN IMMEDIATE")
    try:
        writer = BuildWriter(conn, conflict, now_us)
        count = 0
        for location, record in read_records(paths, errors):
            count += 1
            if not errors:
                writer.add(location, transform(record) if transform is not None else record)
            if on_progress is not None and count % 1000 == 0:
                on_progress(count)
        if not errors:
            writer.finish()
        if errors:
            raise ImportFailed(errors[:MAX_REPORTED_ERRORS], len(errors))
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return ImportResult(records=count, stats=writer.stats, seconds=time.perf_counter() - started)
