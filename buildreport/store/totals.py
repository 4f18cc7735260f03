"""Hourly and daily totals and daily usage: recomputed from the builds for every period an import touched."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence

from buildreport.models import BILLABLE
from buildreport.store.filter_sql import in_list
from buildreport.store.kept import SUMMED_FIGURES, US_PER_DAY, US_PER_HOUR, WINDOW, KeptTable

# Past this many touched periods of one account, one pass over all its builds is cheaper than one query an hour.
FULL_RECOMPUTE_THRESHOLD = 500

# Totals tables and what they may answer (kept.answers): builds created in whole hours or days, of any set of
# statuses; a summary reads whole periods from them.
HOURLY_TOTALS = KeptTable("hourly_totals", WINDOW | {"status"}, US_PER_HOUR).check()
DAILY_TOTALS = KeptTable("daily_totals", WINDOW | {"status"}, US_PER_DAY).check()
# (table, period) of each, as the writer rebuilds them.
HOURLY, DAILY = (HOURLY_TOTALS.name, HOURLY_TOTALS.period_us), (DAILY_TOTALS.name, DAILY_TOTALS.period_us)
# By the day billable builds stopped: /usage and /usage/breakdown by day read it, never a build filter.
DAILY_USAGE = KeptTable("daily_usage", frozenset(), US_PER_DAY).check()

_TOTALS_SELECT = """
SELECT account_id, create_us - create_us % {period}, status, count(*), sum(cpu_seconds),
       coalesce(sum(duration_us), 0), sum(nar_size_bytes), min(start_us), max(stop_us)
FROM builds WHERE account_id = ? {where} GROUP BY 1, 2, 3
"""
# A day's totals are its hours' totals added up: sums add, and the first start and last stop are the least and
# greatest of its hours'. That reads at most 24 rows where the day's builds would be read: a large import is
# spared one pass over every build of the account.
_DAYS_FROM_HOURS = f"""
SELECT account_id, period_us - period_us % {US_PER_DAY}, status, {SUMMED_FIGURES}
FROM hourly_totals WHERE account_id = ? {{where}} GROUP BY 1, 2, 3
"""
_TOTALS_INSERT = (
    "INSERT INTO {table} (account_id, period_us, status, builds, cpu_seconds, duration_us, nar_size_bytes,"
    " first_start_us, last_stop_us) "
)
_DAILY_SELECT = f"""
SELECT account_id, stop_us - stop_us % {US_PER_DAY}, count(*), sum(cpu_seconds)
FROM builds WHERE account_id = ? AND stop_us IS NOT NULL AND status IN {in_list(BILLABLE)} {{where}} GROUP BY 1, 2
"""
_DAILY_INSERT = "INSERT INTO daily_usage (account_id, day_us, builds, cpu_seconds) "


def hour_of(us: int) -> int:
    return us - us % US_PER_HOUR


def day_of(us: int) -> int:
    return us - us % US_PER_DAY


def _by_account(keys: Iterable[tuple[int, int]]) -> dict[int, list[int]]:
    grouped: dict[int, list[int]] = {}
    for account_id, start in sorted(keys):
        grouped.setdefault(account_id, []).append(start)
    return grouped


def recompute_totals(conn: sqlite3.Connection, totals: tuple[str, int], keys: Iterable[tuple[int, int]]) -> None:
    """Rebuild the totals of each (account, period start) from the builds created in that period; daily totals
    from the hourly ones, which must be in step first."""
    table, period = totals
    insert = _TOTALS_INSERT.format(table=table)
    if totals == DAILY:
        source, column = _DAYS_FROM_HOURS, "period_us"
    else:
        source, column = _TOTALS_SELECT.format(period=period, where="{where}"), "create_us"
    for account_id, starts in _by_account({(a, t - t % period) for a, t in keys}).items():
        if len(starts) > FULL_RECOMPUTE_THRESHOLD:
            conn.execute(f"DELETE FROM {table} WHERE account_id = ?", (account_id,))
            conn.execute(insert + source.format(where=""), (account_id,))
            continue
        select = source.format(where=f"AND {column} >= ? AND {column} < ?")
        for start in starts:
            conn.execute(f"DELETE FROM {table} WHERE account_id = ? AND period_us = ?", (account_id, start))
            conn.execute(insert + select, (account_id, start, start + period))


def recompute_days(conn: sqlite3.Connection, keys: Iterable[tuple[int, int]]) -> None:
    """Rebuild the daily usage of each (account, day) from the billable builds that stopped that day."""
    for account_id, days in _by_account(keys).items():
        if len(days) > FULL_RECOMPUTE_THRESHOLD:
            conn.execute("DELETE FROM daily_usage WHERE account_id = ?", (account_id,))
            conn.execute(_DAILY_INSERT + _DAILY_SELECT.format(where=""), (account_id,))
            continue
        select = _DAILY_SELECT.format(where="AND stop_us >= ? AND stop_us < ?")
        for day in days:
            conn.execute("DELETE FROM daily_usage WHERE account_id = ? AND day_us = ?", (account_id, day))
            conn.execute(_DAILY_INSERT + select, (account_id, day, day + US_PER_DAY))


# Every account's totals stay below this, so that a sum over any of its builds fits in a 64-bit integer.
MAX_ACCOUNT_TOTAL = 2**62
_FLOAT_SUM = "coalesce(sum(CAST({} AS DOUBLE PRECISION)), 0)"  # as floats: a sum this large cannot overflow
_ACCOUNT_TOTALS = (
    f"SELECT {_FLOAT_SUM.format('cpu_seconds')}, {_FLOAT_SUM.format('duration_us')},"
    f" {_FLOAT_SUM.format('nar_size_bytes')} FROM daily_totals WHERE account_id = ?"
)
TOTAL_NAMES = ("cpu_seconds", "duration_seconds", "outputs")
OVERSIZED = "the account's total would reach 2^62; sums over it could overflow"


def oversized_totals(conn: sqlite3.Connection, account_id: int, change: Sequence[int]) -> str | None:
    """The field whose sum over the account's builds would reach MAX_ACCOUNT_TOTAL, if any: the stored totals
    (summed as floats) with `change` added, the exact differences a write makes to the account's CPU seconds,
    duration (µs) and NAR bytes. Asked before the totals are written: past it, a sum may not fit a column."""
    row = conn.execute(_ACCOUNT_TOTALS, (account_id,)).fetchone()
    for name, stored, changed in zip(TOTAL_NAMES, row, change, strict=True):
        if stored + changed >= MAX_ACCOUNT_TOTAL:
            return name
    return None


def refuse_oversized(
    conn: sqlite3.Connection,
    conflict: Callable[[object, str, str], None],
    last_location: dict[int, object],
    changes: dict[int, list[int]],
) -> bool:
    """Before a write's totals are written: tell `conflict` of each account (at its last record) whose totals the
    write's `changes` would take to MAX_ACCOUNT_TOTAL (oversized_totals); whether there was any."""
    refused = False
    for account_id, location in last_location.items():
        field = oversized_totals(conn, account_id, changes.get(account_id, (0, 0, 0)))
        if field is not None:
            conflict(location, field, OVERSIZED)
            refused = True
    return refused


# --- kept in step by differences -------------------------------------------------------------------
# A write of a few builds changes a few totals rows by the builds it adds and removes: reading and
# rewriting those rows costs the same however many builds the hour or day already holds, where a
# recomputation reads them all. Sums take differences exactly; a period's first start and last stop
# are recomputed only when a build that may have held one of them is taken away.


class HourDelta:
    """What the builds written add to, and take from, one (account, hour of creation, status)."""

    __slots__ = ("builds", "cpu", "duration", "first_added", "first_removed", "last_added", "last_removed", "nar")

    def __init__(self) -> None:
        self.builds = self.cpu = self.duration = self.nar = 0
        self.first_added: int | None = None  # earliest start among the builds added
        self.last_added: int | None = None  # latest stop among them
        self.first_removed: int | None = None
        self.last_removed: int | None = None

    def add(self, sign: int, cpu: int, duration_us: int | None, nar: int, start_us: int, stop_us: int | None) -> None:
        self.builds += sign
        self.cpu += sign * cpu
        self.duration += sign * (duration_us or 0)
        self.nar += sign * nar
        if sign > 0:
            self.first_added = start_us if self.first_added is None else min(self.first_added, start_us)
            if stop_us is not None:
                self.last_added = stop_us if self.last_added is None else max(self.last_added, stop_us)
        else:
            self.first_removed = start_us if self.first_removed is None else min(self.first_removed, start_us)
            if stop_us is not None:
                self.last_removed = stop_us if self.last_removed is None else max(self.last_removed, stop_us)


def _least(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _most(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


_HOUR_ROW = (
    "SELECT builds, cpu_seconds, duration_us, nar_size_bytes, first_start_us, last_stop_us FROM hourly_totals"
    " WHERE account_id = ? AND period_us = ? AND status = ?"
)
_HOUR_DELETE = "DELETE FROM hourly_totals WHERE account_id = ? AND period_us = ? AND status = ?"
HOUR_UPSERT = (
    "INSERT INTO hourly_totals (account_id, period_us, status, builds, cpu_seconds, duration_us,"
    " nar_size_bytes, first_start_us, last_stop_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (account_id, period_us, status) DO UPDATE SET builds = excluded.builds,"
    " cpu_seconds = excluded.cpu_seconds, duration_us = excluded.duration_us,"
    " nar_size_bytes = excluded.nar_size_bytes, first_start_us = excluded.first_start_us,"
    " last_stop_us = excluded.last_stop_us"
)
_HOUR_RECOMPUTE = _TOTALS_INSERT.format(table="hourly_totals") + _TOTALS_SELECT.format(
    period=US_PER_HOUR, where="AND create_us >= ? AND create_us < ? AND status = ?"
)
_DAY_FROM_HOURS = (
    "INSERT INTO daily_totals (account_id, period_us, status, builds, cpu_seconds, duration_us, nar_size_bytes,"
    f" first_start_us, last_stop_us) SELECT account_id, ?, status, {SUMMED_FIGURES} FROM hourly_totals"
    " WHERE account_id = ? AND period_us >= ? AND period_us < ? GROUP BY account_id, status"
)


def apply_hour_deltas(conn: sqlite3.Connection, deltas: dict[tuple[int, int, str], HourDelta]) -> None:
    """Bring hourly totals, and the daily totals made of them, in step with the builds written."""
    days: set[tuple[int, int]] = set()
    for (account_id, hour, status), delta in deltas.items():
        days.add((account_id, day_of(hour)))
        key = (account_id, hour, status)
        row = conn.execute(_HOUR_ROW, key).fetchone() or (0, 0, 0, 0, None, None)
        builds = row[0] + delta.builds
        if builds <= 0:
            conn.execute(_HOUR_DELETE, key)
            continue
        first = _least(row[4], delta.first_added)
        last = _most(row[5], delta.last_added)
        # A build taken away may have held the first start or the last stop: only then read the hour again.
        if (delta.first_removed is not None and first is not None and delta.first_removed <= first) or (
            delta.last_removed is not None and last is not None and delta.last_removed >= last
        ):
            conn.execute(_HOUR_DELETE, key)
            conn.execute(_HOUR_RECOMPUTE, (account_id, hour, hour + US_PER_HOUR, status))
            continue
        sums = (row[1] + delta.cpu, row[2] + delta.duration, row[3] + delta.nar)
        conn.execute(HOUR_UPSERT, (*key, builds, *sums, first, last))
    for account_id, day in days:
        conn.execute("DELETE FROM daily_totals WHERE account_id = ? AND period_us = ?", (account_id, day))
        conn.execute(_DAY_FROM_HOURS, (day, account_id, day, day + US_PER_DAY))


def apply_usage_deltas(conn: sqlite3.Connection, deltas: dict[tuple[int, int], list[int]]) -> None:
    """Add (builds, cpu seconds) differences to the daily usage of each (account, stop day)."""
    for (account_id, day), (builds, cpu) in deltas.items():
        if not builds and not cpu:
            continue
        row = conn.execute(
            "SELECT builds, cpu_seconds FROM daily_usage WHERE account_id = ? AND day_us = ?", (account_id, day)
        ).fetchone() or (0, 0)
        if row[0] + builds <= 0:
            conn.execute("DELETE FROM daily_usage WHERE account_id = ? AND day_us = ?", (account_id, day))
        else:
            conn.execute(
                "INSERT INTO daily_usage (account_id, day_us, builds, cpu_seconds) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (account_id, day_us) DO UPDATE SET builds = excluded.builds,"
                " cpu_seconds = excluded.cpu_seconds",
                (account_id, day, row[0] + builds, row[1] + cpu),
            )
