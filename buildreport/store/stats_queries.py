"""Read queries behind the insights: per-build rows for statistics, usage by group, export pages.

Like queries.py, SQL is built only from the shape of a request, never from its text. Times and
durations come from the stored JSON as the client sent them (`->` yields a number's own text), so
percentiles repeat the exact values a client reads from /builds.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from buildreport.filters import BuildFilter, Cursor, GroupBy, ListQuery, UsageQuery
from buildreport.models import BILLABLE
from buildreport.store.queries import US_PER_DAY, US_PER_HOUR, Query, _filter_sql, _ordered, in_list

# The value each grouping needs beside a build's figures; time groupings, the start of its period.
_GROUP_COLUMNS = {
    "day": f"b.create_us - b.create_us % {US_PER_DAY}",
    "hour": f"b.create_us - b.create_us % {US_PER_HOUR}",
    "system": "b.body ->> '$.system'",
    "status": "b.status",
    "derivation": "b.derivation_path",
    "derivation_path": "b.derivation_path",
    "tag": "b.body -> '$.tags'",
}


def stats_rows(account_id: int, build_filter: BuildFilter, group_by: GroupBy, exact: bool = True) -> Query:
    """The matching builds summed by grouping value and status, so that no build crosses into Python alone.

    Each row: the value, the status, the builds, their CPU seconds, their durations and queue times as a JSON
    array of the numbers exactly as stored (nulls left out), and the newest build as `create_us build_id`
    (zero-padded, so that the greatest text is the newest build).

    Not `exact` (for the dashboard, which shows durations to the second and no queue times): durations come
    from the `duration_us` column, to the microsecond, queue times are left out, and no build's JSON is read.
    """
    source, where, params = _filter_sql(account_id, build_filter, "b")
    column, column_params = _GROUP_COLUMNS[group_by.kind], []
    if group_by.plain_tag:
        # The tag's value itself, so builds group in SQLite; other keys group by the tags' JSON in Python.
        column, column_params = "b.body ->> ?", [f"$.tags.{group_by.tag_key}"]
    if exact:
        durations = "group_concat(nullif(b.body -> '$.duration_seconds', 'null'))"
        queues = "group_concat(nullif(b.body -> '$.queue_time_seconds', 'null'))"
    else:
        durations, queues = "group_concat(b.duration_us / 1000000.0)", "NULL"
    sql = (
        f"SELECT {column} AS g, b.status, count(*), sum(b.cpu_seconds),"
        f" '[' || coalesce({durations}, '') || ']', '[' || coalesce({queues}, '') || ']',"
        " max(printf('%020d %020d', b.create_us, b.build_id))"
        f" FROM {source} WHERE {where} GROUP BY g, b.status"
    )
    return sql, [*column_params, *params]


def _stopped_billable(query: UsageQuery) -> tuple[str, list[object]]:
    where = f"b.account_id = ? AND b.stop_us IS NOT NULL AND b.stop_us >= ? AND b.status IN {in_list(BILLABLE)}"
    params: list[object] = [query.from_us]
    if query.to_us is not None:
        where += " AND b.stop_us < ?"
        params.append(query.to_us)
    return where, params


def usage_by_day(account_id: int, query: UsageQuery) -> Query:
    """(day start, CPU seconds, builds) for each day with billable builds, ascending."""
    sql = "SELECT day_us, cpu_seconds, builds FROM daily_usage WHERE account_id = ? AND day_us >= ?"
    params: list[object] = [account_id, query.from_us]
    if query.to_us is not None:
        sql += " AND day_us < ?"
        params.append(query.to_us)
    return sql + " ORDER BY day_us", params


def usage_by_system(account_id: int, query: UsageQuery) -> Query:
    """(system, CPU seconds, builds) of the billable builds that stopped in range."""
    where, params = _stopped_billable(query)
    sql = f"SELECT b.body ->> '$.system', sum(b.cpu_seconds), count(*) FROM builds b WHERE {where} GROUP BY 1"
    return sql, [account_id, *params]


def usage_tags(account_id: int, query: UsageQuery) -> Query:
    """(tags as JSON, CPU seconds) of each billable build that stopped in range."""
    where, params = _stopped_billable(query)
    return f"SELECT b.body -> '$.tags', b.cpu_seconds FROM builds b WHERE {where}", [account_id, *params]


def export_page(account_id: int, build_filter: BuildFilter, cursor: Cursor | None, size: int) -> Query:
    """The next `size` builds in list order after `cursor`: (create time, build id, JSON) each."""
    source, where, params, order = _ordered(account_id, ListQuery(filter=build_filter, cursor=cursor))
    keys = "t.create_us, t.build_id" if build_filter.tags else "b.create_us, b.build_id"
    return f"SELECT {keys}, b.body FROM {source} WHERE {where} ORDER BY {order} LIMIT ?", [*params, size]


def iter_export_pages(
    conn: sqlite3.Connection, account_id: int, build_filter: BuildFilter, size: int = 2_000
) -> Iterator[list[bytes]]:
    """Synchronous twin of Reader.export_pages, for the command line; the reads share one transaction so
    the export is one consistent picture of the database."""
    cursor: Cursor | None = None
    conn.execute("BEGIN")
    try:
        while True:
            rows = conn.execute(*export_page(account_id, build_filter, cursor, size)).fetchall()
            if rows:
                yield [row[2] for row in rows]
            if len(rows) < size:
                return
            cursor = Cursor(create_us=rows[-1][0], build_id=rows[-1][1])
    finally:
        conn.execute("ROLLBACK")


def account_id(conn: sqlite3.Connection, name: str) -> int | None:
    row = conn.execute("SELECT account_id FROM accounts WHERE name = ?", (name,)).fetchone()
    return row[0] if row else None


# --- /metrics ----------------------------------------------------------------------------------------
# One row per account: listing every account is the point of these two, so `accounts` is walked whole
# (it holds one short row an account); each account's figures are then read by their primary key.


def account_totals_since(since_us: int) -> Query:
    """(account, status, builds, CPU seconds) of the builds created in the hours from `since_us` on."""
    return (
        "SELECT a.name, h.status, sum(h.builds), sum(h.cpu_seconds) FROM accounts a"
        " JOIN hourly_totals h ON h.account_id = a.account_id AND h.period_us >= ? GROUP BY a.name, h.status",
        [since_us],
    )


def account_build_counts() -> Query:
    """(account, builds stored) for every account."""
    return (
        "SELECT a.name, sum(d.builds) FROM accounts a JOIN daily_totals d ON d.account_id = a.account_id"
        " GROUP BY a.name",
        [],
    )
