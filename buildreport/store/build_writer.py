"""The one writer of builds, for `import`, `POST /builds` and the recorders alike: upserts builds, their tags
and logs, keeps restart links two-way and the kept totals in step.

It runs inside a transaction the caller owns; a conflict is reported, not raised, so that one
import or request can name every bad record before the caller rolls everything back.

A build is named by its `build_id`, or by the sender's `source_id` (unique per account), for which the
writer assigns the next free build id. A finished build never goes back to pending or running: a record
that would do that is older news, ignored and counted as unchanged.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import msgspec

from buildreport.models import BILLABLE, UNFINISHED, Build, BuildRecord, BuildStatus
from buildreport.store import day_figures, day_summaries
from buildreport.store.build_rows import (
    BATCH_SIZE,
    MAX_BUILD_ID,
    STORED_JSON,
    UPSERT_BUILDS,
    UPSERT_LOGS,
    UPSERT_TAGS,
    AnyRecord,
    Change,
    PackedLog,
    Row,
    StoredBuild,
    WriteStats,
    builds_by_source,
    pack_log,
    to_build,
)
from buildreport.store.filter_sql import KEYS_CHUNK
from buildreport.store.links import LINKED_ABOVE, LINKED_BELOW, Conflict, link_peers, set_link
from buildreport.store.tag_totals import TagTouches
from buildreport.store.totals import (
    DAILY,
    FULL_RECOMPUTE_THRESHOLD,
    HOURLY,
    HourDelta,
    apply_hour_deltas,
    apply_usage_deltas,
    day_of,
    hour_of,
    recompute_days,
    recompute_totals,
    refuse_oversized,
)


class _Item(msgspec.Struct):
    """One record on its way in: whose it is, and its ids once resolved."""

    location: object
    account_id: int
    record: AnyRecord
    log: PackedLog | None = None
    packed: bool = False  # `log` was packed by the caller
    build_id: int = 0
    restart_of: int | None = None

    @property
    def strict(self) -> bool:
        """A record of `POST /builds`: its restart links name builds of its own account that are stored or come
        in the same request, never ids still free (which would tie a later build of another account to it)."""
        return isinstance(self.record, BuildRecord)


class BuildWriter:
    """Writes records in batches; `conflict` is told of every record that cannot be written.

    With `keep_ids`, `build_ids` holds each record's build id in the order added (None for a conflict).
    """

    def __init__(
        self, conn: sqlite3.Connection, conflict: Conflict, now_us: int, *, keep_ids: bool = False,
        keep_changes: bool = False,
    ) -> None:
        self._conn = conn
        self._conflict = conflict
        self._now_us = now_us
        self._accounts: dict[str, int] = dict(conn.execute("SELECT name, account_id FROM accounts").fetchall())
        self._batch: list[_Item] = []
        # Names of the builds in the batch: a record naming one of them again waits for the batch to be written.
        self._keys: set[tuple[int, str] | int] = set()
        self._next_id = 0
        self._low_id: int | None = None  # counting down once the ids above the highest are used up
        self._linked: set[int] = set()  # ids that builds link to: never assigned (see LINKED_ABOVE)
        self._new_links: list[tuple[object, int, str, int]] = []  # (location, account, field, id) of strict records
        self._hours: set[tuple[int, int]] = set()
        self._days: set[tuple[int, int]] = set()
        self._hours_per_account: dict[int, int] = {}
        self._full: set[int] = set()  # accounts whose totals are recomputed rather than kept by differences
        self._hour_deltas: dict[tuple[int, int, str], HourDelta] = {}
        self._usage_deltas: dict[tuple[int, int], list[int]] = {}
        self._day_deltas: dict[tuple[int, int, str], day_figures.Delta] = {}
        self._tags = TagTouches()
        self.stats = WriteStats()
        self._last_location: dict[int, object] = {}
        self._sums: dict[int, list[int]] = {}  # what the write changes in each account's totals (oversized_totals)
        self.build_ids: list[int | None] | None = [] if keep_ids else None
        # With `keep_changes`: each build written, in order, with its status before (None: new), for its events.
        self.changes: list[Change] | None = [] if keep_changes else None

    def add(
        self, location: object, record: AnyRecord, account_id: int | None = None, *, log: PackedLog | None = None
    ) -> None:
        """Queue a record; an import record names its account, a write record is the caller's `account_id`'s.
        `log` is the record's log packed in advance (see pack_log), when the caller did that."""
        if account_id is None:
            account_id = self.account_id(record.account)  # type: ignore[union-attr]
        source = getattr(record, "source_id", None)
        restart_source = getattr(record, "restart_of_source_id", None)
        own: list[tuple[int, str] | int] = [record.build_id] if record.build_id is not None else []
        if source is not None:
            own.append((account_id, source))
        named = [*own, (account_id, restart_source)] if restart_source is not None else own
        if any(key in self._keys for key in named):
            self.flush()  # later records about the same build apply after earlier ones, in order
        self._keys.update(own)
        self._batch.append(_Item(location, account_id, record, log, log is not None or record.log is None))
        if len(self._batch) >= BATCH_SIZE:
            self.flush()

    def flush(self) -> None:
        if self._batch:
            self._write(self._batch)
            self._batch = []
            self._keys = set()

    def finish(self) -> None:
        """Write what is batched and bring the totals of every touched hour and day in step: by differences,
        or, for an account whose builds spread over many hours (a large import), in one pass over its builds."""
        self.flush()
        self._check_new_links()
        if refuse_oversized(self._conn, self._conflict, self._last_location, self._sums):
            return  # the write fails, and its totals might not fit their columns
        full = self._full
        if full:
            hours = {key for key in self._hours if key[0] in full}
            recompute_totals(self._conn, HOURLY, hours)
            recompute_totals(self._conn, DAILY, hours)
            recompute_days(self._conn, {key for key in self._days if key[0] in full})
        apply_hour_deltas(self._conn, {k: d for k, d in self._hour_deltas.items() if k[0] not in full})
        apply_usage_deltas(self._conn, {k: d for k, d in self._usage_deltas.items() if k[0] not in full})
        self._tags.apply(self._conn)
        rebuilt = {(account_id, day_of(hour)) for account_id, hour in self._hours if account_id in full}
        changed = day_figures.recompute(self._conn, rebuilt)
        changed |= day_figures.apply(self._conn, {k: d for k, d in self._day_deltas.items() if k[0] not in full})
        day_summaries.refresh(self._conn, changed)

    def _check_new_links(self) -> None:
        """Every restart link a write record made names a build of its own account, now that all are written.

        One answer for an id that is free and for a build of another account, so that no answer tells
        another account's build ids."""
        if not self._new_links:
            return
        ids = sorted({build_id for *_, build_id in self._new_links})
        owners: dict[int, int] = {}
        for start in range(0, len(ids), BATCH_SIZE):
            part = ids[start : start + BATCH_SIZE]
            marks = ",".join("?" * len(part))
            owners.update(self._conn.execute(
                f"SELECT build_id, account_id FROM builds WHERE build_id IN ({marks})", part
            ).fetchall())
        for location, account_id, field, build_id in self._new_links:
            if owners.get(build_id) != account_id:
                self._conflict(location, field, f"no build {build_id} in this account (a restart link names a "
                               "build stored before, or one in the same request)")

    def _day_delta(self, account_id: int, create_us: int, status: str) -> day_figures.Delta:
        """The differences to a day's figures; for an account whose days are rebuilt at the end, a throwaway."""
        if account_id in self._full:
            return day_figures.Delta()
        key = (account_id, day_of(create_us), status)
        delta = self._day_deltas.get(key)
        if delta is None:
            delta = self._day_deltas[key] = day_figures.Delta()
        return delta

    def _touch(self, account_id: int, create_us: int, stop_us: int | None) -> None:
        hour = (account_id, hour_of(create_us))
        if hour not in self._hours:
            self._hours.add(hour)
            count = self._hours_per_account[account_id] = self._hours_per_account.get(account_id, 0) + 1
            if count > FULL_RECOMPUTE_THRESHOLD:
                self._full.add(account_id)  # from now on its totals are recomputed in one pass at the end
                self._day_deltas = {k: d for k, d in self._day_deltas.items() if k[0] != account_id}
        if stop_us is not None:
            self._days.add((account_id, day_of(stop_us)))

    def _count(
        self,
        sign: int,
        account_id: int,
        status: str,
        create_us: int,
        start_us: int,
        duration_us: int | None,
        stop_us: int | None,
        cpu: int,
        nar: int,
    ) -> None:
        """Add (sign 1) or take away (sign -1) one build's share of the kept totals."""
        sums = self._sums.get(account_id)
        if sums is None:
            sums = self._sums[account_id] = [0, 0, 0]
        sums[0] += sign * cpu
        sums[1] += sign * (duration_us or 0)
        sums[2] += sign * nar
        self._touch(account_id, create_us, stop_us)
        if account_id in self._full:
            return
        key = (account_id, hour_of(create_us), status)
        delta = self._hour_deltas.get(key)
        if delta is None:
            delta = self._hour_deltas[key] = HourDelta()
        delta.add(sign, cpu, duration_us, nar, start_us, stop_us)
        if stop_us is not None and status in BILLABLE:
            usage = self._usage_deltas.setdefault((account_id, day_of(stop_us)), [0, 0])
            usage[0] += sign
            usage[1] += sign * cpu

    def account_id(self, name: str) -> int:
        if name not in self._accounts:
            (account_id,) = self._conn.execute(
                "INSERT INTO accounts (name, created_us) VALUES (?, ?) RETURNING account_id", (name, self._now_us)
            ).fetchone()
            self._accounts[name] = int(account_id)
        return self._accounts[name]

    def _existing(self, ids: Sequence[int]) -> dict[int, StoredBuild]:
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        rows = self._conn.execute(
            "SELECT build_id, account_id, create_us, stop_us, restart_of_build_id, restarted_as_build_id, body,"
            " status, source_id, start_us, duration_us, cpu_seconds, nar_size_bytes, duration_text, queue_text"
            " FROM builds"
            f" WHERE build_id IN ({marks})",
            list(ids),
        ).fetchall()
        return {row[0]: StoredBuild(*row[1:]) for row in rows}

    def _sources(self, items: list[_Item]) -> dict[tuple[int, str], int]:
        """Build ids of every source id the batch names, per account."""
        wanted: dict[int, set[str]] = {}
        for item in items:
            for source in (getattr(item.record, "source_id", None), getattr(item.record, "restart_of_source_id", None)):
                if source is not None:
                    wanted.setdefault(item.account_id, set()).add(source)
        found: dict[tuple[int, str], int] = {}
        for account_id, sources in wanted.items():
            ordered = sorted(sources)
            for start in range(0, len(ordered), KEYS_CHUNK):
                rows = self._conn.execute(*builds_by_source(account_id, ordered[start : start + KEYS_CHUNK]))
                found.update(((account_id, source), build_id) for source, build_id in rows if build_id is not None)
        return found

    def _new_id(self) -> int | None:
        """The next build id the service assigns: above the highest stored one, or, once a sender named build
        2^63 - 1, below the lowest; never one a build links to; None when none is left."""
        while self._next_id <= MAX_BUILD_ID:
            new, self._next_id = self._next_id, self._next_id + 1
            if new not in self._linked:
                return new
        while self._low_id is not None and self._low_id >= 1:
            new, self._low_id = self._low_id, self._low_id - 1
            if new not in self._linked:
                return new
        return None

    def _note_linked(self, items: list[_Item]) -> None:
        """Ids the batch's records and stored builds link to, where ids are assigned next (see LINKED_ABOVE)."""
        for item in items:
            self._linked.update(i for i in (item.record.restart_of_build_id, item.record.restarted_as_build_id) if i)
        if self._next_id <= MAX_BUILD_ID:
            rows = self._conn.execute(LINKED_ABOVE, (self._next_id, self._next_id)).fetchall()
        else:
            rows = self._conn.execute(LINKED_BELOW, (self._low_id, self._low_id)).fetchall()
        self._linked.update(build_id for (build_id,) in rows)

    def _resolve(self, items: list[_Item]) -> list[_Item]:
        """Give every record its build id and restart link; the records that can be written."""
        sources = self._sources(items) if any(hasattr(item.record, "source_id") for item in items) else {}
        unnamed = [item for item in items if item.record.build_id is None]  # only write records lack a build id
        if any((item.account_id, getattr(item.record, "source_id", None)) not in sources for item in unnamed):
            (stored_max,) = self._conn.execute("SELECT coalesce(max(build_id), 0) FROM builds").fetchone()
            named = max((item.record.build_id or 0 for item in items), default=0)
            self._next_id = max(self._next_id, stored_max + 1, named + 1)
            if self._next_id > MAX_BUILD_ID:
                (stored_min,) = self._conn.execute("SELECT min(build_id) FROM builds").fetchone()
                stored_min = MAX_BUILD_ID + 1 if stored_min is None else stored_min
                lowest = min((item.record.build_id for item in items if item.record.build_id), default=stored_min)
                self._low_id = min(self._low_id if self._low_id is not None else stored_min, stored_min, lowest) - 1
            self._note_linked(items)
        resolved = []
        for item in items:
            record = item.record
            source = getattr(record, "source_id", None)
            known = sources.get((item.account_id, source)) if source is not None else None
            if record.build_id is None:
                if known is None:
                    known = self._new_id()
                if known is None:
                    self._conflict(item.location, "source_id", "no build id is free; name the build by build_id")
                    continue
                item.build_id = known
            elif known is not None and known != record.build_id:
                self._conflict(item.location, "source_id", f"{source!r} already names build {known}")
                continue
            else:
                item.build_id = record.build_id
            item.restart_of = record.restart_of_build_id
            restart_source = getattr(record, "restart_of_source_id", None)
            if restart_source is not None:
                target = sources.get((item.account_id, restart_source))
                reason = None
                if target is None:
                    reason = f"no build {restart_source!r} in this account"
                elif item.restart_of is not None and item.restart_of != target:
                    reason = f"names build {target}, but restart_of_build_id is {item.restart_of}"
                if reason is not None:
                    self._conflict(item.location, "restart_of_source_id", reason)
                    continue
                item.restart_of = target
            resolved.append(item)
        return resolved

    def _write(self, batch: list[_Item]) -> None:
        items = self._resolve(batch)
        if self.build_ids is not None:
            ok = {id(item) for item in items}
            self.build_ids += [item.build_id if id(item) in ok else None for item in batch]
        # One record named a build by its id, another by its source id: each applies after the one before.
        start, seen = 0, set()
        for index, item in enumerate(items):
            if item.build_id in seen:
                self._write_items(items[start:index])
                start, seen = index, set()
            seen.add(item.build_id)
        self._write_items(items[start:])

    def _write_items(self, items: list[_Item]) -> None:
        """Write records of distinct builds."""
        existing = self._existing([item.build_id for item in items])
        rows: list[Row] = []
        for item in items:
            row = self._prepare(item, existing.get(item.build_id))
            if row is not None:
                rows.append(row)
        self._conn.executemany(UPSERT_BUILDS, [row.values() for row in rows])
        for row in rows:
            b = row.build
            self._count(1, row.account_id, row.status, row.create_us, row.start_us, row.duration_us,
                        row.stop_us, b.cpu_seconds, row.nar_size_bytes)
            self._day_delta(row.account_id, row.create_us, row.status).add(
                1, b.cpu_seconds, row.duration_text, row.queue_text
            )
            old = existing.get(b.build_id)
            if old is not None:
                self._take_share(old)
        if self.changes is not None:
            self.changes += [Change(row, existing[row.build.build_id].status if row.build.build_id in existing
                                    else None) for row in rows]
        self._write_tags(rows, existing)
        self._conn.executemany(UPSERT_LOGS, [row.log_values() for row in rows if row.log is not None])
        self._link_peers(rows, {item.build_id for item in items if item.strict})

    def _prepare(self, item: _Item, old: StoredBuild | None) -> Row | None:
        location, account_id, record = item.location, item.account_id, item.record
        build = to_build(record, item.build_id, item.restart_of)
        source = getattr(record, "source_id", None)
        if old is not None:
            if old.account_id != account_id:
                self._conflict(location, "build_id", f"build {build.build_id} belongs to another account")
                return None
            if source is not None and old.source_id is not None and source != old.source_id:
                self._conflict(location, "source_id", f"build {build.build_id} has source_id {old.source_id!r}")
                return None
            if build.build_status in UNFINISHED and BuildStatus(old.status) not in UNFINISHED:
                self.stats.unchanged += 1  # older news: a finished build stays finished
                return None
            build = self._merge_links(location, build, old)
            if build is None:
                return None
        if item.strict:
            self._note_new_links(location, account_id, build, old)
        row = Row.of(location, account_id, build, item.log if item.packed else pack_log(record.log), source)
        self._last_location[account_id] = location
        if old is None:
            self.stats.created += 1
        elif old.body == row.body and (row.log is None or self._same_log(build.build_id, row.log)) and (
            source is None or old.source_id == source
        ):
            self.stats.unchanged += 1
            return None
        else:
            self.stats.updated += 1
        return row

    def _merge_links(self, location: object, build: Build, old: StoredBuild) -> Build | None:
        """Links already stored (set from the other side) are kept; a different link is a conflict."""
        links = {}
        for name, stored in (("restart_of_build_id", old.restart_of), ("restarted_as_build_id", old.restarted_as)):
            given = getattr(build, name)
            if given is not None and stored is not None and given != stored:
                self._conflict(location, name, f"is {given}, but build {build.build_id} is stored with {stored}")
                return None
            links[name] = given if given is not None else stored
        return msgspec.structs.replace(build, **links)

    def _note_new_links(self, location: object, account_id: int, build: Build, old: StoredBuild | None) -> None:
        """A write record's links that are not stored yet, to be checked once the request is written."""
        stored_links = (None, None) if old is None else (old.restart_of, old.restarted_as)
        for name, stored in zip(("restart_of_build_id", "restarted_as_build_id"), stored_links, strict=True):
            given = getattr(build, name)
            if given is not None and given != stored:
                self._new_links.append((location, account_id, name, given))

    def _same_log(self, build_id: int, log: bytes) -> bool:
        row = self._conn.execute("SELECT zlib FROM build_logs WHERE build_id = ?", (build_id,)).fetchone()
        return row is not None and row[0] == log

    def _take_share(self, old: StoredBuild) -> None:
        """Take a stored build's share out of the kept totals and day figures: the old version of a build
        written again, or a build removed."""
        self._count(-1, old.account_id, old.status, old.create_us, old.start_us, old.duration_us,
                    old.stop_us, old.cpu_seconds, old.nar_size_bytes)
        self._day_delta(old.account_id, old.create_us, old.status).add(
            -1, old.cpu_seconds, old.duration_text, old.queue_text
        )

    def _take_tags(self, olds: list[tuple[int, StoredBuild]]) -> None:
        """Delete the tag rows of stored builds (build id, as stored) and take them out of the tag totals."""
        stale, stale_stats = [], []
        for build_id, old in olds:
            old_tags = STORED_JSON.decode(old.body).get("tags") or {}
            figures = (old.status, old.cpu_seconds, old.duration_us, old.nar_size_bytes, old.start_us, old.stop_us,
                       old.duration_text, old.queue_text)
            for k, v in old_tags.items():
                stale.append((old.account_id, k, v, old.create_us, build_id))
                stale_stats.append(figures)
        self._conn.executemany(
            "DELETE FROM build_tags WHERE account_id = ? AND key = ? AND value = ? AND create_us = ? AND build_id = ?",
            stale,
        )
        self._tags.add(-1, stale, stale_stats)

    def remove(self, build_ids: Sequence[int]) -> int:
        """Delete stored builds whole (row, tags, log) as a write takes away a build's old version, so that
        every kept figure follows by the same differences once `finish` runs. A restart link of a build that
        stays to one removed becomes null. How many of `build_ids` were stored."""
        self.flush()
        existing = self._existing(build_ids)
        for old in existing.values():
            self._take_share(old)
        self._take_tags(list(existing.items()))
        gone = [(build_id,) for build_id in existing]
        self._conn.executemany("DELETE FROM build_logs WHERE build_id = ?", gone)
        self._conn.executemany("DELETE FROM builds WHERE build_id = ?", gone)
        if existing:
            marks = ",".join("?" * len(existing))
            for column in ("restart_of_build_id", "restarted_as_build_id"):
                peers = self._conn.execute(
                    f"SELECT build_id FROM builds WHERE {column} IN ({marks})", list(existing)
                ).fetchall()
                for (peer_id,) in peers:
                    set_link(self._conn, peer_id, column, None)
        return len(existing)

    def _write_tags(self, rows: list[Row], existing: dict[int, StoredBuild]) -> None:
        self._take_tags([(row.build.build_id, old) for row in rows if (old := existing.get(row.build.build_id))])
        fresh, fresh_stats = [], []
        for row in rows:
            tags = row.tag_values()
            fresh += tags
            b = row.build
            fresh_stats += [(row.status, b.cpu_seconds, row.duration_us, row.nar_size_bytes, row.start_us, row.stop_us,
                             row.duration_text, row.queue_text)] * len(tags)
        self._conn.executemany(UPSERT_TAGS, fresh)
        self._tags.add(1, fresh, fresh_stats)

    def _link_peers(self, rows: list[Row], strict: set[int]) -> None:
        by_id = {row.build.build_id: row for row in rows}
        link_peers(self._conn, self._conflict, [row.links(row.build.build_id in strict) for row in rows],
                   list(by_id), lambda i: by_id[i].links(i in strict))
