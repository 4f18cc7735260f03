"""Hourly totals and daily usage: recomputed from the builds table for every hour and day an import touched."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from buildreport.models import BILLABLE
from buildreport.store.queries import US_PER_HOUR, in_list

US_PER_DAY = 24 * US_PER_HOUR
# Past this many touched hours of one account, one pass over all its builds is cheaper than one query an hour.
FULL_RECOMPUTE_THRESHOLD = 500

_HOURLY_SELECT = """
SELECT account_id, create_us - create_us % {hour}, status, count(*), sum(cpu_seconds), coalesce(sum(duration_us), 0),
       sum(nar_size_bytes), min(start_us), max(stop_us)
FROM builds WHERE account_id = ? {where} GROUP BY 2, 3
""".replace("{hour}", str(US_PER_HOUR))
_HOURLY_INSERT = (
    "INSERT INTO hourly_totals (account_id, hour_us, status, builds, cpu_seconds, duration_us, nar_size_bytes,"
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


def recompute_hours(conn: sqlite3.Connection, keys: Iterable[tuple[int, int]]) -> None:
    """Rebuild the hourly totals of each (account, hour) from the builds created in that hour."""
    for account_id, hours in _by_account(keys).items():
        if len(hours) > FULL_RECOMPUTE_THRESHOLD:
            conn.execute("DELETE FROM hourly_totals WHERE account_id = ?", (account_id,))
            conn.execute(_HOURLY_INSERT + _HOURLY_SELECT.format(where=""), (account_id,))
            continue
        select = _HOURLY_SELECT.format(where="AND create_us >= ? AND create_us < ?")
        for hour in hours:
            conn.execute("DELETE FROM hourly_totals WHERE account_id = ? AND hour_us = ?", (account_id, hour))
            conn.execute(_HOURLY_INSERT + select, (account_id, hour, hour + US_PER_HOUR))


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
