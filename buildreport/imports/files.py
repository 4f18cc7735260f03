"""JSON Lines files of build records: opened (plain or gzip), decoded and checked record by record, every
problem named by file and line; nothing here writes."""

from __future__ import annotations

import gzip
import io
import os
import re
import zlib
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import msgspec

from buildreport.jsoncheck import depth_reason, duplicate_key, duplicate_reason, too_deep
from buildreport.models import UNFINISHED, ImportRecord
from buildreport.times import to_us

_DECODER = msgspec.json.Decoder(ImportRecord)
EARLIEST_DATE = date(1970, 1, 1)
LATEST_DATE = date(9899, 12, 31)
# The latest time written in UTC; written with an offset west of UTC a time may be up to a day later.
LATEST_US = to_us(datetime(9899, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC))
ZERO = timedelta(0)
MAX_REPORTED_ERRORS = 1000
GZIP_TRAILER = 18  # the smallest gzip file: header and trailer


# Untracked by the garbage collector: an import keeps one per build (to name a repeated build_id), and a
# million tracked ones made its collections a sixth of the import's time (bench/store.md).
class Location(msgspec.Struct, frozen=True, gc=False):
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


def lines_size(path: Path) -> int:
    """About how many bytes of lines a file holds: its size, or for a .gz file the size gzip writes at its end
    (modulo 4 GiB: never taken as less than the compressed size). 0 when the file cannot be read."""
    try:
        with path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            if not path.name.endswith(".gz") or size < GZIP_TRAILER:
                return size
            file.seek(-4, os.SEEK_END)
            return max(size, int.from_bytes(file.read(4), "little"))
    except OSError:
        return 0  # read_records names the file and why


def open_lines(path: Path) -> io.BufferedIOBase:
    """A file's bytes, gunzipped when its name ends in .gz."""
    raw = path.open("rb")
    return gzip.GzipFile(fileobj=raw, mode="rb") if path.name.endswith(".gz") else raw  # type: ignore[return-value]


_WHERE = re.compile(r"(?P<reason>.*) - at `(?P<key>key` in `)?\$(?P<path>[^`]*)`", re.DOTALL)


def decode_error(exc: msgspec.MsgspecError) -> tuple[str, str]:
    """(field, reason) from a msgspec error such as "Expected `int`, got `str` - at `$.build_id`"."""
    message = str(exc)
    match = _WHERE.fullmatch(message)
    if isinstance(exc, msgspec.ValidationError) and match:
        field = match["path"].lstrip(".") or "(record)"
        reason = match["reason"][0].lower() + match["reason"][1:]
        return field, ("a key: " + reason if match["key"] else reason)
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
        problem = check_time(getattr(record, name))
        if problem is not None:
            return name, problem
    if record.start_time < record.create_time:
        return "start_time", f"is before create_time ({record.create_time.isoformat()}); a build starts once created"
    if record.build_status in UNFINISHED:
        if record.duration_seconds is not None:
            return "duration_seconds", f"must be null while the build is {record.build_status.value}"
    elif record.duration_seconds is None:
        return "duration_seconds", f"is required for a finished build ({record.build_status.value})"
    return None


def check_time(moment: datetime) -> str | None:
    """The documented range of a time, on the date as written (the OpenAPI document says it with a pattern).

    Years end at 9899, so a start plus the longest duration stays before 9999-12-31 in UTC; on 1970-01-01 an
    offset east of UTC would put the time before the epoch."""
    day = moment.date()
    if not EARLIEST_DATE <= day <= LATEST_DATE or (day == EARLIEST_DATE and (moment.utcoffset() or ZERO) > ZERO):
        return f"must be written from {EARLIEST_DATE} to {LATEST_DATE} (on {EARLIEST_DATE} not east of UTC)"
    return None


def check_links(record: ImportRecord) -> tuple[str, str] | None:
    """Rules between a record's ids, which JSON Schema cannot state: over HTTP they are conflicts (409)."""
    if record.restart_of_build_id is not None and record.restart_of_build_id == record.restarted_as_build_id:
        return "restarted_as_build_id", "cannot equal restart_of_build_id"
    return None


def decode_line(line: bytes) -> ImportRecord | tuple[str, str]:
    """A record, or (field, reason) for a line that is not one."""
    try:
        record = _DECODER.decode(line)
    except msgspec.MsgspecError as exc:
        return undecodable(line, exc)
    except UnicodeDecodeError as exc:  # msgspec checks UTF-8 inside strings with Python's codec
        return "(line)", f"not valid UTF-8 (byte {exc.start} of a string: {exc.reason})"
    return repeated_key(line) or record


def undecodable(text: bytes, exc: msgspec.MsgspecError) -> tuple[str, str]:
    """(field, reason) for JSON text that is no record: nesting no record has is named as such."""
    if too_deep(text):
        return "(record)", depth_reason()
    return decode_error(exc)


def repeated_key(text: bytes) -> tuple[str, str] | None:
    """(field, reason) for a record's JSON text that holds a key twice in one object, where the decoder took the
    last and ignored the others. Called once the record decoded: its nesting is a record's."""
    key = duplicate_key(text)
    return None if key is None else ("(record)", duplicate_reason(key))


def read_records(paths: list[Path], errors: list[RecordError]) -> Iterator[tuple[Location, ImportRecord]]:
    """Valid records of every file, in order; bad ones, and a file that cannot be read, are appended to `errors`."""
    first_seen: dict[int, Location] = {}
    for path in paths:
        number = 0
        try:
            with open_lines(path) as lines:
                for number, line in enumerate(lines, start=1):
                    if not line.strip():
                        continue
                    location = Location(str(path), number)
                    record = decode_line(line)
                    if isinstance(record, tuple):
                        errors.append(RecordError(location, *record))
                        continue
                    problem = check_record(record) or check_links(record)
                    if problem is None and record.build_id in first_seen:
                        first = first_seen[record.build_id]
                        problem = ("build_id", f"{record.build_id} appears again (first at {first})")
                    if problem is not None:
                        errors.append(RecordError(location, *problem))
                        continue
                    first_seen[record.build_id] = location
                    yield location, record
        except (OSError, EOFError, zlib.error) as exc:  # unreadable, or a truncated or corrupt .gz
            errors.append(RecordError(Location(str(path), number + 1), "(file)", _read_error(exc)))


def _read_error(exc: BaseException) -> str:
    if isinstance(exc, gzip.BadGzipFile):
        return f"is not valid gzip, or data follows its compressed data: {exc}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot be read: {exc.strerror}"
    return f"cannot be read: {exc or type(exc).__name__}"
