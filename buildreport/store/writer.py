"""The writer used by import: upserts builds, their tags and logs, and keeps restart links two-way.

It runs inside a transaction the caller owns; a conflict is reported, not raised, so that one
import can name every bad record before the caller rolls everything back.
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Callable, Sequence
from datetime import UTC
from typing import Any

import msgspec

from buildreport.models import Build, ImportRecord
from buildreport.store.totals import (
    DAILY,
    HOURLY,
    day_of,
    hour_of,
    oversized_totals,
    recompute_days,
    recompute_totals,
)
from buildreport.times import to_us

_BUILD_FIELD_COUNT = len(Build.__struct_fields__)
_STATUS_AT = Build.__struct_fields__.index("build_status")  # `status`, its alias, follows it
assert Build.__struct_fields__[_STATUS_AT + 1] == "status"
_ENCODER = msgspec.json.Encoder()
# Stored JSON is read back as plain data: a row written before a range was narrowed still re-imports.
_STORED = msgspec.json.Decoder(dict[str, Any])
# SQLite allows 32766 variables a statement; a batch stays well below it.
BATCH_SIZE = 2000

Conflict = Callable[[object, str, str], None]  # (location, field, reason)


class WriteStats(msgspec.Struct):
    created: int = 0
    updated: int = 0
    unchanged: int = 0


class _Row(msgspec.Struct):
    """What the builds table holds for one build, derived once: its columns, JSON, tags and log."""

    location: object
    account_id: int
    build: Build
    body: bytes
    create_us: int
    start_us: int
    duration_us: int | None
    log: bytes | None  # compressed
    log_size: int

    @classmethod
    def of(cls, location: object, account_id: int, build: Build, log_text: str | None) -> _Row:
        raw_log = log_text.encode() if log_text is not None else None
        return cls(
            location=location,
            account_id=account_id,
            build=build,
            body=_ENCODER.encode(build),
            create_us=to_us(build.create_time),
            start_us=to_us(build.start_time),
            duration_us=round(build.duration_seconds * 1_000_000) if build.duration_seconds is not None else None,
            log=zlib.compress(raw_log, 6) if raw_log is not None else None,
            log_size=len(raw_log) if raw_log is not None else 0,
        )

    @property
    def stop_us(self) -> int | None:
        return self.start_us + self.duration_us if self.duration_us is not None else None

    def values(self) -> tuple:
        b = self.build
        return (
            b.build_id,
            self.account_id,
            self.create_us,
            self.start_us,
            self.duration_us,
            self.stop_us,
            b.build_status.value,
            b.cpu_seconds,
            sum(o.nar_size_bytes for o in b.outputs),
            b.derivation_path,
            b.restart_of_build_id,
            b.restarted_as_build_id,
            self.body,
            body_hash(self.body),
        )


def body_hash(body: bytes) -> int:
    """A 64-bit digest of a build's JSON, stored beside it so that ETags of long lists cost no hashing."""
    return (zlib.crc32(body) << 32 | zlib.adler32(body)) - (1 << 63)


class _Existing(msgspec.Struct):
    account_id: int
    create_us: int
    stop_us: int | None
    restart_of: int | None
    restarted_as: int | None
    body: bytes


_UPSERT = """
INSERT INTO builds (build_id, account_id, create_us, start_us, duration_us, stop_us, status, cpu_seconds,
                    nar_size_bytes, derivation_path, restart_of_build_id, restarted_as_build_id, body, body_hash)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (build_id) DO UPDATE SET
    create_us = excluded.create_us, start_us = excluded.start_us, duration_us = excluded.duration_us,
    stop_us = excluded.stop_us, status = excluded.status, cpu_seconds = excluded.cpu_seconds,
    nar_size_bytes = excluded.nar_size_bytes, derivation_path = excluded.derivation_path,
    restart_of_build_id = excluded.restart_of_build_id, restarted_as_build_id = excluded.restarted_as_build_id,
    body = excluded.body, body_hash = excluded.body_hash
"""


def to_build(record: ImportRecord) -> Build:
    """The Build part of an import record (its leading fields), with its times in UTC."""
    values = msgspec.structs.astuple(record)[:_BUILD_FIELD_COUNT]
    status = record.build_status if record.build_status is not msgspec.UNSET else record.status
    build = Build(*values[:_STATUS_AT], status, status, *values[_STATUS_AT + 2 :])
    if build.create_time.tzinfo is not UTC or build.start_time.tzinfo is not UTC:
        build.create_time = build.create_time.astimezone(UTC)
        build.start_time = build.start_time.astimezone(UTC)
    return build


class BuildWriter:
    """Writes import records in batches; `conflict` is told of every record that cannot be written."""

    def __init__(self, conn: sqlite3.Connection, conflict: Conflict, now_us: int) -> None:
        self._conn = conn
        self._conflict = conflict
        self._now_us = now_us
        self._accounts: dict[str, int] = dict(conn.execute("SELECT name, account_id FROM accounts").fetchall())
        self._batch: list[tuple[object, ImportRecord]] = []
        self._hours: set[tuple[int, int]] = set()
        self._days: set[tuple[int, int]] = set()
        self.stats = WriteStats()
        self._last_location: dict[int, object] = {}

    def add(self, location: object, record: ImportRecord) -> None:
        self._batch.append((location, record))
        if len(self._batch) >= BATCH_SIZE:
            self.flush()

    def flush(self) -> None:
        if self._batch:
            self._write(self._batch)
            self._batch = []

    def finish(self) -> None:
        """Write what is batched and bring the totals of every touched hour and day in step."""
        self.flush()
        recompute_totals(self._conn, HOURLY, self._hours)
        recompute_totals(self._conn, DAILY, self._hours)
        recompute_days(self._conn, self._days)
        for account_id, location in self._last_location.items():
            field = oversized_totals(self._conn, account_id)
            if field is not None:
                self._conflict(location, field, "the account's total would reach 2^62; sums over it could overflow")

    def _touch(self, account_id: int, create_us: int, stop_us: int | None) -> None:
        self._hours.add((account_id, hour_of(create_us)))
        if stop_us is not None:
            self._days.add((account_id, day_of(stop_us)))

    def account_id(self, name: str) -> int:
        if name not in self._accounts:
            cur = self._conn.execute("INSERT INTO accounts (name, created_us) VALUES (?, ?)", (name, self._now_us))
            self._accounts[name] = int(cur.lastrowid or 0)
        return self._accounts[name]

    def _existing(self, ids: Sequence[int]) -> dict[int, _Existing]:
        marks = ",".join("?" * len(ids))
        rows = self._conn.execute(
            "SELECT build_id, account_id, create_us, stop_us, restart_of_build_id, restarted_as_build_id, body"
            f" FROM builds WHERE build_id IN ({marks})",
            list(ids),
        ).fetchall()
        return {row[0]: _Existing(*row[1:]) for row in rows}

    def _write(self, batch: list[tuple[object, ImportRecord]]) -> None:
        existing = self._existing([record.build_id for _, record in batch])
        rows: list[_Row] = []
        for location, record in batch:
            row = self._prepare(location, record, existing.get(record.build_id))
            if row is not None:
                rows.append(row)
        self._conn.executemany(_UPSERT, [row.values() for row in rows])
        for row in rows:
            self._touch(row.account_id, row.create_us, row.stop_us)
            old = existing.get(row.build.build_id)
            if old is not None:
                self._touch(old.account_id, old.create_us, old.stop_us)
        self._write_tags(rows, existing)
        self._conn.executemany(
            "INSERT OR REPLACE INTO build_logs (build_id, size_bytes, zlib) VALUES (?, ?, ?)",
            [(row.build.build_id, row.log_size, row.log) for row in rows if row.log is not None],
        )
        self._link_peers(rows)

    def _prepare(self, location: object, record: ImportRecord, old: _Existing | None) -> _Row | None:
        account_id = self.account_id(record.account)
        build = to_build(record)
        if old is not None:
            if old.account_id != account_id:
                self._conflict(location, "build_id", f"build {build.build_id} belongs to another account")
                return None
            build = self._merge_links(location, build, old)
            if build is None:
                return None
        row = _Row.of(location, account_id, build, record.log)
        self._last_location[account_id] = location
        if old is None:
            self.stats.created += 1
        elif old.body == row.body and (row.log is None or self._same_log(build.build_id, row.log)):
            self.stats.unchanged += 1
            return None
        else:
            self.stats.updated += 1
        return row

    def _merge_links(self, location: object, build: Build, old: _Existing) -> Build | None:
        """Links already stored (set from the other side) are kept; a different link is a conflict."""
        links = {}
        for name, stored in (("restart_of_build_id", old.restart_of), ("restarted_as_build_id", old.restarted_as)):
            given = getattr(build, name)
            if given is not None and stored is not None and given != stored:
                self._conflict(location, name, f"is {given}, but build {build.build_id} is stored with {stored}")
                return None
            links[name] = given if given is not None else stored
        return msgspec.structs.replace(build, **links)

    def _same_log(self, build_id: int, log: bytes) -> bool:
        row = self._conn.execute("SELECT zlib FROM build_logs WHERE build_id = ?", (build_id,)).fetchone()
        return row is not None and row[0] == log

    def _write_tags(self, rows: list[_Row], existing: dict[int, _Existing]) -> None:
        stale = []
        for row in rows:
            old = existing.get(row.build.build_id)
            if old is not None:
                old_tags = _STORED.decode(old.body).get("tags") or {}
                stale += [(row.account_id, k, v, old.create_us, row.build.build_id) for k, v in old_tags.items()]
        self._conn.executemany(
            "DELETE FROM build_tags WHERE account_id = ? AND key = ? AND value = ? AND create_us = ? AND build_id = ?",
            stale,
        )
        fresh = []
        for row in rows:
            fresh += [(row.account_id, k, v, row.create_us, row.build.build_id) for k, v in row.build.tags.items()]
        self._conn.executemany(
            "INSERT OR IGNORE INTO build_tags (account_id, key, value, create_us, build_id) VALUES (?, ?, ?, ?, ?)",
            fresh,
        )

    def _link_peers(self, rows: list[_Row]) -> None:
        """Make every restart link hold in both directions, once both builds are stored."""
        for row in rows:
            build = row.build
            if build.restart_of_build_id is not None:
                self._link(row, build.restart_of_build_id, "restart_of_build_id", "restarted_as_build_id")
            if build.restarted_as_build_id is not None:
                self._link(row, build.restarted_as_build_id, "restarted_as_build_id", "restart_of_build_id")
        ids = [row.build.build_id for row in rows]
        if not ids:
            return
        by_id = {row.build.build_id: row for row in rows}
        marks = ",".join("?" * len(ids))
        pairs = (("restart_of_build_id", "restarted_as_build_id"), ("restarted_as_build_id", "restart_of_build_id"))
        for column, own in pairs:
            peers = self._conn.execute(
                f"SELECT build_id, {column}, account_id FROM builds WHERE {column} IN ({marks})", ids
            ).fetchall()
            for peer_id, target, peer_account in peers:
                row = by_id[target]
                if peer_account != row.account_id:
                    self._conflict(row.location, own, f"build {peer_id} of another account links to this build")
                elif getattr(row.build, own) is None:
                    self._set_link(target, own, peer_id)
                    row.build = msgspec.structs.replace(row.build, **{own: peer_id})

    def _link(self, row: _Row, peer_id: int, field: str, peer_field: str) -> None:
        build_id = row.build.build_id
        if peer_id == build_id:
            self._conflict(row.location, field, "a build cannot be linked to itself")
            return
        peer = self._conn.execute(
            f"SELECT account_id, {peer_field} FROM builds WHERE build_id = ?", (peer_id,)
        ).fetchone()
        if peer is None:
            return  # the other build has not been imported yet; its import completes the link
        peer_account, peer_link = peer
        if peer_account != row.account_id:
            self._conflict(row.location, field, f"build {peer_id} belongs to another account")
        elif peer_link is None:
            self._set_link(peer_id, peer_field, build_id)
        elif peer_link != build_id:
            self._conflict(row.location, field, f"build {peer_id} already has {peer_field} {peer_link}")

    def _set_link(self, build_id: int, field: str, value: int) -> None:
        (body,) = self._conn.execute("SELECT body FROM builds WHERE build_id = ?", (build_id,)).fetchone()
        stored = _STORED.decode(body)
        stored[field] = value
        body = _ENCODER.encode(stored)
        self._conn.execute(
            f"UPDATE builds SET {field} = ?, body = ?, body_hash = ? WHERE build_id = ?",
            (value, body, body_hash(body), build_id),
        )


