"""Hourly and daily totals and daily usage: recomputed from the builds for every period an import touched."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from buildreport.models import BILLABLE
from buildreport.store.queries import US_PER_DAY, US_PER_HOUR, in_list

# Past this many touched periods of one account, one pass over all its builds is cheaper than one query an hour.
FULL_RECOMPUTE_THRESHOLD = 500

# Totals tables and their period; a summary reads whole periods from them.
HOURLY, DAILY = ("hourly_totals", US_PER_HOUR), ("daily_totals", US_PER_DAY)

_TOTALS_SELECT = """
SELECT account_id, create_us - create_us % {period}, status, count(*), sum(cpu_seconds),
       coalesce(sum(duration_us), 0), sum(nar_size_bytes), min(start_us), max(stop_us)
FROM builds WHERE account_id = ? {where} GROUP BY 2, 3
"""
_TOTALS_INSERT = (
    "INSERT INTO {table} (account_id, period_us, status, builds, cpu_seconds, duration_us, nar_size_bytes,"
    " first_start_us, last_stop_us) "
)
_DAILY_SELECT = f"""
SELECT account_id, stop_us - stop_us % {US_PER_DAY}, count(*), sum(cpu_seconds)
FROM builds WHERE account_id = ? AND stop_us IS NOT NULL AND status IN {in_list(BILLABLE)} {{where}} GROUP BY 2
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
    """Rebuild the totals of each (account, period start) from the builds created in that period."""
    table, period = totals
    insert = _TOTALS_INSERT.format(table=table)
    for account_id, starts in _by_account({(a, t - t % period) for a, t in keys}).items():
        if len(starts) > FULL_RECOMPUTE_THRESHOLD:
            conn.execute(f"DELETE FROM {table} WHERE account_id = ?", (account_id,))
            conn.execute(insert + _TOTALS_SELECT.format(period=period, where=""), (account_id,))
            continue
        select = _TOTALS_SELECT.format(period=period, where="AND create_us >= ? AND create_us < ?")
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
_ACCOUNT_TOTALS = (
    "SELECT total(cpu_seconds), total(duration_us), total(nar_size_bytes) FROM daily_totals WHERE account_id = ?"
)
_TOTAL_NAMES = ("cpu_seconds", "duration_seconds", "outputs")


def oversized_totals(conn: sqlite3.Connection, account_id: int) -> str | None:
    """The field whose sum over the account's builds reaches MAX_ACCOUNT_TOTAL, if any (summed as floats)."""
    row = conn.execute(_ACCOUNT_TOTALS, (account_id,)).fetchone()
    for name, value in zip(_TOTAL_NAMES, row, strict=True):
        if value >= MAX_ACCOUNT_TOTAL:
            return name
    return None
