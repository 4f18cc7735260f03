"""A build as the database holds it: the row, tag and log values a record becomes, the statements that write
them, and what a write reports (BuildWriter in build_writer.py decides which rows to write)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from datetime import UTC
from typing import Any

import msgspec

from buildreport.models import BILLABLE, Build, BuildRecord, ImportRecord
from buildreport.store.filter_sql import each_key, in_list
from buildreport.store.links import LinkEnds, body_hash
from buildreport.times import to_us

MAX_BUILD_ID = 2**63 - 1
_BUILD_FIELD_COUNT = len(Build.__struct_fields__)
_STATUS_AT = Build.__struct_fields__.index("build_status")  # `status`, its alias, follows it
assert Build.__struct_fields__[_STATUS_AT + 1] == "status"
_ENCODER = msgspec.json.Encoder()
# Stored JSON is read back as plain data: a row written before a range was narrowed still re-imports.
STORED_JSON = msgspec.json.Decoder(dict[str, Any])
# SQLite allows 32766 variables a statement; a batch stays well below it.
BATCH_SIZE = 2000

AnyRecord = ImportRecord | BuildRecord
PackedLog = tuple[bytes, int]  # (zlib-compressed text, size of the text in bytes)


def pack_log(text: str | None) -> PackedLog | None:
    """A log as stored; callers that hold a write lock pack logs before taking it."""
    if text is None:
        return None
    raw = text.encode()
    return zlib.compress(raw, 6), len(raw)


class WriteStats(msgspec.Struct):
    created: int = 0
    updated: int = 0
    unchanged: int = 0


class Row(msgspec.Struct):
    """What the builds table holds for one build, derived once: its columns, JSON, tags and log."""

    location: object
    account_id: int
    build: Build
    source_id: str | None
    body: bytes
    create_us: int
    start_us: int
    duration_us: int | None
    log: bytes | None  # compressed
    log_size: int
    duration_text: str | None  # the numbers as the JSON writes them, for the columns statistics read
    queue_text: str | None
    status: str
    nar_size_bytes: int  # of all its outputs

    @classmethod
    def of(cls, location: object, account_id: int, build: Build, log: PackedLog | None, source_id: str | None) -> Row:
        return cls(
            location=location,
            account_id=account_id,
            build=build,
            source_id=source_id,
            body=_ENCODER.encode(build),
            create_us=to_us(build.create_time),
            start_us=to_us(build.start_time),
            duration_us=round(build.duration_seconds * 1_000_000) if build.duration_seconds is not None else None,
            log=log[0] if log is not None else None,
            log_size=log[1] if log is not None else 0,
            duration_text=_number_text(build.duration_seconds),
            queue_text=_number_text(build.queue_time_seconds),
            status=build.build_status.value,
            nar_size_bytes=sum(o.nar_size_bytes for o in build.outputs),
        )

    @property
    def stop_us(self) -> int | None:
        return self.start_us + self.duration_us if self.duration_us is not None else None

    def values(self) -> tuple:
        """The builds row, in the order of BUILD_COLUMNS."""
        b = self.build
        return (
            b.build_id,
            self.account_id,
            self.create_us,
            self.start_us,
            self.duration_us,
            self.stop_us,
            self.status,
            b.cpu_seconds,
            self.nar_size_bytes,
            b.derivation_path,
            b.restart_of_build_id,
            b.restarted_as_build_id,
            self.body,
            body_hash(self.body),
            self.source_id,
            self.duration_text,
            self.queue_text,
            b.system,
        )

    def tag_values(self) -> list[tuple]:
        """Its rows of build_tags, in the order of TAG_COLUMNS: each tag with the figures statistics and usage by
        tag read, as the build's columns hold them."""
        b = self.build
        return [
            (self.account_id, k, v, self.create_us, b.build_id, self.status, b.cpu_seconds, self.duration_text,
             self.queue_text, self.stop_us)
            for k, v in b.tags.items()
        ]

    def log_values(self) -> tuple[int, int, bytes | None]:
        return self.build.build_id, self.log_size, self.log

    def links(self, strict: bool = False) -> LinkEnds:
        b = self.build
        return LinkEnds(
            self.location, self.account_id, b.build_id, b.restart_of_build_id, b.restarted_as_build_id, strict
        )


class Change(msgspec.Struct):
    """A build as written, and its status before (None: it is new)."""

    row: Row
    before: str | None


def _number_text(value: float | None) -> str | None:
    """A number as the build's JSON writes it, for the columns statistics read (see schema.py)."""
    return None if value is None else _ENCODER.encode(value).decode()


class StoredBuild(msgspec.Struct):
    """What the writer compares a record with: the stored columns of the build it names."""

    account_id: int
    create_us: int
    stop_us: int | None
    restart_of: int | None
    restarted_as: int | None
    body: bytes
    status: str
    source_id: str | None
    start_us: int
    duration_us: int | None
    cpu_seconds: int
    nar_size_bytes: int
    duration_text: str | None
    queue_text: str | None


# The columns of a builds row, in the order of Row.values.
BUILD_COLUMNS = (
    "build_id", "account_id", "create_us", "start_us", "duration_us", "stop_us", "status", "cpu_seconds",
    "nar_size_bytes", "derivation_path", "restart_of_build_id", "restarted_as_build_id", "body", "body_hash",
    "source_id", "duration_text", "queue_text", "system",
)
UPSERT_BUILDS = f"""
INSERT INTO builds ({", ".join(BUILD_COLUMNS)})
VALUES ({", ".join("?" * len(BUILD_COLUMNS))})
ON CONFLICT (build_id) DO UPDATE SET
    create_us = excluded.create_us, start_us = excluded.start_us, duration_us = excluded.duration_us,
    stop_us = excluded.stop_us, status = excluded.status, cpu_seconds = excluded.cpu_seconds,
    nar_size_bytes = excluded.nar_size_bytes, derivation_path = excluded.derivation_path,
    restart_of_build_id = excluded.restart_of_build_id, restarted_as_build_id = excluded.restarted_as_build_id,
    body = excluded.body, body_hash = excluded.body_hash, source_id = coalesce(excluded.source_id, builds.source_id),
    duration_text = excluded.duration_text, queue_text = excluded.queue_text, system = excluded.system
"""

UPSERT_LOGS = (
    "INSERT INTO build_logs (build_id, size_bytes, zlib) VALUES (?, ?, ?)"
    " ON CONFLICT (build_id) DO UPDATE SET size_bytes = excluded.size_bytes, zlib = excluded.zlib"
)
# A tag row: its key, then its build's figures (every column a build's own: its JSON is the one source of both).
TAG_COLUMNS = ("account_id", "key", "value", "create_us", "build_id", "status", "cpu_seconds", "duration_text",
               "queue_text", "stop_us")  # fmt: skip
_TAG_FIGURES = TAG_COLUMNS[5:]
UPSERT_TAGS = (
    f"INSERT INTO build_tags ({', '.join(TAG_COLUMNS)}) VALUES ({', '.join('?' * len(TAG_COLUMNS))})"
    " ON CONFLICT (account_id, key, value, create_us, build_id) DO UPDATE SET "
    + ", ".join(f"{name} = excluded.{name}" for name in _TAG_FIGURES)
)


# Usage by tag: each tag row carries its build's stop time, and the billable ones are indexed by key and stop time
# with their value and CPU seconds, so that a breakdown by a tag's values reads one range of that index instead of
# every billable build's JSON in range (bench/notes.md).
BILLABLE_TAG_ROWS = f"stop_us IS NOT NULL AND status IN {in_list(BILLABLE)}"
TAG_STOP_MIGRATION = (
    "ALTER TABLE build_tags ADD COLUMN stop_us {integer};\n"
    "UPDATE build_tags AS t SET stop_us = b.stop_us FROM builds AS b WHERE b.build_id = t.build_id"
    " AND b.stop_us IS NOT NULL;\n"
    "CREATE INDEX build_tags_by_stop ON build_tags (account_id, key, stop_us, status, value, cpu_seconds)"
    f" WHERE {BILLABLE_TAG_ROWS};\n"
)


def tags_of_builds(json_tags: str) -> str:
    """INSERT of the tag rows of builds `b`, as Row.tag_values makes them, read from each build's JSON by the
    engine's `json_tags` (a table of key and value, joined laterally): a load writes them once its builds are in."""
    figures = ", ".join(f"b.{name}" for name in ("create_us", "build_id", *_TAG_FIGURES))
    return (
        f"INSERT INTO build_tags ({', '.join(TAG_COLUMNS)}) SELECT b.account_id, t.key, t.value, {figures}"
        f" FROM builds AS b {json_tags}"
    )


def builds_by_source(account_id: int, sources: Sequence[str]) -> tuple[str, list[object]]:
    """The build ids of an account's source ids, each one lookup in the partial unique index on them; a source id
    without a build comes back with a null id."""
    return (
        f"{each_key(('source_id',), len(sources))} SELECT source_id, (SELECT build_id FROM builds"
        " WHERE account_id = ? AND builds.source_id = wanted.source_id) FROM wanted",
        [*sources, account_id],
    )


def to_build(record: AnyRecord, build_id: int, restart_of: int | None) -> Build:
    """The Build part of a record (its leading fields) with its ids resolved and its times in UTC."""
    fields = msgspec.structs.astuple(record)[:_BUILD_FIELD_COUNT]
    status = record.build_status if record.build_status is not msgspec.UNSET else record.status
    build = Build(build_id, *fields[1:_STATUS_AT], status, status, *fields[_STATUS_AT + 2 :])
    build.restart_of_build_id = restart_of
    if build.create_time.tzinfo is not UTC or build.start_time.tzinfo is not UTC:
        build.create_time = build.create_time.astimezone(UTC)
        build.start_time = build.start_time.astimezone(UTC)
    return build

