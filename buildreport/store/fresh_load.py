"""A large import into a database that holds no builds yet, split between two processes.

In such a database every record of an import is a new build (an import names each build once), so nothing
stored needs reading before a row is made: the reading process makes each build's row as the writer would
(`build_rows.Row`) and adds up the hourly figures of tag pairs (`TagTotals`), while this side inserts the rows as they
arrive (`FreshLoad`) with their tag rows, adds up the other totals (`BuildTotals`), keeps restart links
two-way as the writer does, and writes the totals once at the end. The work is split so that each process
keeps a core about equally busy, at less than half the time of the writer alone (bench/store.md).

Into PostgreSQL, builds and logs go through binary COPY, and the tag rows and every total but those of tag pairs
are computed once the builds are in, by set-based SQL in the database (postgres.bulk): a third of the time of
the writer's batched INSERTs (bench/notes.md).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from buildreport.models import BILLABLE
from buildreport.store import day_figures, day_summaries, tag_totals
from buildreport.store.build_rows import BUILD_COLUMNS, UPSERT_BUILDS, UPSERT_LOGS, tags_of_builds
from buildreport.store.engines import Connection
from buildreport.store.links import Conflict, LinkEnds, link_peers
from buildreport.store.queries import US_PER_DAY, US_PER_HOUR
from buildreport.store.totals import (
    DAILY,
    HOUR_UPSERT,
    recompute_totals,
    refuse_oversized,
)

# Past this many (tag pair, hour, status) the reading process sends the figures it has added up so far and starts
# again: the slots and the rows made of them to send stay under some 200 MiB (bench/notes.md). The importing
# process keeps what it is sent in a table of its own and adds it up at the end (FreshLoad.finish).
MAX_TAG_SLOTS = 300_000
_BILLABLE = frozenset(status.value for status in BILLABLE)
# Where a builds row (Row.values) holds each column this module reads.
_ID, _ACCOUNT, _CREATE, _START, _DURATION, _STOP, _STATUS, _CPU, _NAR, _RESTART_OF, _RESTARTED_AS = (
    BUILD_COLUMNS.index(name)
    for name in ("build_id", "account_id", "create_us", "start_us", "duration_us", "stop_us", "status", "cpu_seconds",
                 "nar_size_bytes", "restart_of_build_id", "restarted_as_build_id")
)
_DURATION_TEXT, _QUEUE_TEXT = BUILD_COLUMNS.index("duration_text"), BUILD_COLUMNS.index("queue_text")

# The figures of a totals row, as a list added to in place: builds, CPU seconds, duration (µs), NAR bytes,
# first start, last stop (None while no build has stopped).
Figures = list


def _count(slots: dict, key: tuple, cpu: int, duration: int, nar: int, start: int, stop: int | None) -> None:
    """Add one build to the figures under `key` (a function call per build and tag: no object per add)."""
    figures = slots.get(key)
    if figures is None:
        slots[key] = [1, cpu, duration, nar, start, stop]
        return
    figures[0] += 1
    figures[1] += cpu
    figures[2] += duration
    figures[3] += nar
    if start < figures[4]:
        figures[4] = start
    if stop is not None and (figures[5] is None or stop > figures[5]):
        figures[5] = stop


class TagTotals:
    """The hourly figures of every tag pair of a load's builds, added up in exact integers (as SQLite sums) by the
    reading process, beside the importing process that keeps the other totals (BuildTotals). They are handed on as
    rows of (pair, hour, status, figures), a part at a time (`take`): a pair's hour may be in several parts."""

    def __init__(self) -> None:
        self._slots: dict[tuple[int, str, str, int, str], Figures] = {}  # (pair, hour, status)

    def add(self, row: tuple, tags: dict[str, str]) -> None:
        """A build's row (Row.values) and its tags."""
        if not tags:
            return
        slots = self._slots
        account_id, create_us, status = row[_ACCOUNT], row[_CREATE], row[_STATUS]
        hour = create_us - create_us % US_PER_HOUR
        figures = (row[_CPU], row[_DURATION] or 0, row[_NAR], row[_START], row[_STOP])
        for name, value in tags.items():
            _count(slots, (account_id, name, value, hour, status), *figures)

    @property
    def full(self) -> bool:
        return len(self._slots) > MAX_TAG_SLOTS

    def take(self) -> list[tuple]:
        """The figures added up since the last call, as rows of tag_hourly_totals' columns."""
        rows = [(*key, *figures) for key, figures in self._slots.items()]
        self._slots = {}
        return rows


class BuildTotals:
    """Hourly totals, daily usage, day figures and each account's sums of a load's builds (exact integers)."""

    def __init__(self) -> None:
        self._hours: dict[tuple[int, int, str], Figures] = {}
        self._usage: dict[tuple[int, int], list[int]] = {}
        self._days: dict[tuple[int, int, str], day_figures.Aggregate] = {}
        self.sums: dict[int, list[int]] = {}  # per account: CPU seconds, duration (µs), NAR bytes

    def add(self, builds: Sequence[tuple]) -> None:
        """Rows of builds (Row.values)."""
        hours, usage, days, sums = self._hours, self._usage, self._days, self.sums
        for row in builds:
            account_id, create_us, status, cpu, nar = row[_ACCOUNT], row[_CREATE], row[_STATUS], row[_CPU], row[_NAR]
            duration, stop = row[_DURATION] or 0, row[_STOP]
            _count(hours, (account_id, create_us - create_us % US_PER_HOUR, status), cpu, duration, nar,
                   row[_START], stop)
            if stop is not None and status in _BILLABLE:
                used = usage.setdefault((account_id, stop - stop % US_PER_DAY), [0, 0])
                used[0] += 1
                used[1] += cpu
            key = (account_id, create_us - create_us % US_PER_DAY, status)
            figures = days.get(key)
            if figures is None:
                figures = days[key] = day_figures.Aggregate()
            figures.step(cpu, row[_DURATION_TEXT], row[_QUEUE_TEXT])
            total = sums.get(account_id)
            if total is None:
                total = sums[account_id] = [0, 0, 0]
            total[0] += cpu
            total[1] += duration
            total[2] += nar

    def write(self, conn: sqlite3.Connection) -> None:
        conn.executemany(HOUR_UPSERT, [(*key, *figures) for key, figures in self._hours.items()])
        recompute_totals(conn, DAILY, {(account_id, hour) for account_id, hour, _ in self._hours})
        conn.executemany(_USAGE, [(*key, *used) for key, used in self._usage.items()])
        days = sorted(self._days.items())
        conn.executemany(day_figures.INSERT, [(*key, figures.finalize()) for key, figures in days])  # sorts them
        parts = ((account, day, day_summaries.Part(status, *figures.numbers()))
                 for (account, day, status), figures in days)
        conn.executemany(day_summaries.INSERT, day_summaries.rows_of(parts))


_TAG_TOTALS_COLUMNS = ("account_id", "key", "value", "period_us", "status", "builds", "cpu_seconds", "duration_us",
                       "nar_size_bytes", "first_start_us", "last_stop_us")
# The parts of hourly tag figures the reading process sends, as they arrive: no key, so that adding a part costs
# an append. Its columns are tag_hourly_totals'.
_PARTS = "fresh_tag_hours"
_NEW_PARTS = f"CREATE TEMPORARY TABLE {_PARTS} AS SELECT * FROM tag_hourly_totals LIMIT 0"
_PARTS_ROW = f"INSERT INTO {_PARTS} ({', '.join(_TAG_TOTALS_COLUMNS)}) VALUES ({', '.join('?' * 11)})"
_LOG_COLUMNS = ("build_id", "size_bytes", "zlib")
# A batch's tag rows, as Row.tag_values makes them, read by SQLite from the builds' JSON just inserted:
# binding millions of tag rows as parameters, and sending them from the reading process, would cost more.
_TAGS_OF_BUILDS = tags_of_builds(", json_each(CAST(b.body AS TEXT), '$.tags') AS t WHERE b.build_id IN ({marks})")
_USAGE = "INSERT INTO daily_usage (account_id, day_us, builds, cpu_seconds) VALUES (?, ?, ?, ?)"
# A database with no builds has no totals either; anything left in these tables would be out of step.
_TOTALS_TABLES = ("hourly_totals", "daily_totals", "daily_usage", "day_figures", "day_summaries", "tag_pairs",
                  "tag_hourly_totals", "tag_daily_totals", "tag_day_figures")


class FreshLoad:
    """Inserts a load's rows into a database with no builds, inside a transaction the caller owns; like the
    writer, it tells `conflict` of every record it cannot write and raises nothing for them."""

    def __init__(self, conn: Connection, conflict: Conflict, now_us: int) -> None:
        self._conn = conn
        self._conflict = conflict
        self._now_us = now_us
        self._last_location: dict[int, object] = {}
        self._totals = BuildTotals()
        # PostgreSQL takes the rows through COPY and computes the totals from them at the end (postgres.bulk).
        self._postgres = getattr(conn, "engine", None) == "postgresql"
        self.created = 0
        # The accounts there already, by name: the reading process gives new ones the ids after them.
        self.accounts: dict[str, int] = dict(conn.execute("SELECT name, account_id FROM accounts").fetchall())
        for table in _TOTALS_TABLES:
            conn.execute(f"DELETE FROM {table}")  # a name from _TOTALS_TABLES, never from input
        conn.execute(f"DROP TABLE IF EXISTS {_PARTS}")  # left by a load this connection gave up
        conn.execute(_NEW_PARTS)

    def add(
        self,
        accounts: Sequence[tuple[int, str]],
        builds: Sequence[tuple],
        logs: Sequence[tuple],
        locations: list,
        tag_hours: Sequence[tuple] = (),
    ) -> None:
        """New accounts (id, name), then the rows of builds (Row.values) and build_logs (Row.log_values);
        `locations` names each build's record, for conflicts. Their tag rows are made from their JSON.
        `tag_hours` are parts of the hourly figures of tag pairs (TagTotals.take)."""
        conn = self._conn
        self._add_tag_hours(tag_hours)
        if accounts:
            conn.executemany(
                "INSERT INTO accounts (account_id, name, created_us) VALUES (?, ?, ?)",
                [(account_id, name, self._now_us) for account_id, name in accounts],
            )
        ids = [row[_ID] for row in builds]
        if self._postgres:
            from buildreport.store.postgres import bulk

            bulk.copy_rows(conn.raw, "builds", BUILD_COLUMNS, builds)
            bulk.copy_rows(conn.raw, "build_logs", _LOG_COLUMNS, logs)
        else:
            conn.executemany(UPSERT_BUILDS, builds)
            conn.execute(_TAGS_OF_BUILDS.format(marks=",".join("?" * len(ids))), ids)
            conn.executemany(UPSERT_LOGS, logs)
            self._totals.add(builds)
        self.created += len(builds)
        for row, location in zip(builds, locations, strict=True):
            self._last_location[row[_ACCOUNT]] = location
        index = {build_id: position for position, build_id in enumerate(ids)}

        def ends(build_id: int) -> LinkEnds:
            row = builds[index[build_id]]
            return LinkEnds(locations[index[build_id]], row[_ACCOUNT], build_id, row[_RESTART_OF], row[_RESTARTED_AS])

        linking = [ends(row[0]) for row in builds if row[_RESTART_OF] is not None or row[_RESTARTED_AS] is not None]
        link_peers(conn, self._conflict, linking, ids, ends)

    def _add_tag_hours(self, rows: Sequence[tuple]) -> None:
        if not rows:
            return
        if self._postgres:
            from buildreport.store.postgres import bulk

            bulk.copy_rows(self._conn.raw, _PARTS, _TAG_TOTALS_COLUMNS, rows)
        else:
            self._conn.executemany(_PARTS_ROW, rows)

    def finish(self, tag_hours: Sequence[tuple]) -> None:
        """Write the totals, with the last part of the tag pairs' hourly figures the reading process added up. An
        account whose sums reach MAX_ACCOUNT_TOTAL is a conflict, as in the writer."""
        conn = self._conn
        self._add_tag_hours(tag_hours)
        if not (self._totals_postgres() if self._postgres else self._totals_sqlite()):
            return  # the load fails, and its totals might not fit their columns
        tag_totals.promote_from_parts(conn, _PARTS)
        conn.execute(f"DROP TABLE {_PARTS}")
        tag_totals.fill_from_hours(conn)

    def _totals_sqlite(self) -> bool:
        """The totals but those of tag pairs, as added up here; False when an account's are refused."""
        if refuse_oversized(self._conn, self._conflict, self._last_location, self._totals.sums):
            return False
        self._totals.write(self._conn)
        return True

    def _totals_postgres(self) -> bool:
        """As `_totals_sqlite`, in PostgreSQL: the tag rows and totals are computed from the stored builds,
        set-based."""
        from buildreport.store.postgres import bulk

        conn, raw = self._conn, self._conn.raw
        raw.execute(bulk.NEXT_ACCOUNT_ID)
        sums = {account_id: [cpu, duration, nar] for account_id, cpu, duration, nar in raw.execute(bulk.ACCOUNT_SUMS)}
        if refuse_oversized(conn, self._conflict, self._last_location, sums):
            return False
        raw.execute(bulk.TAGS_OF_BUILDS)
        bulk.fill_totals(raw)
        day_summaries.fill(conn)
        return True
