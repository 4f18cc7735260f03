"""Read queries behind the insights: figures of groups of builds for statistics, usage by group, export pages.

Like queries.py, SQL is built only from the shape of a request, never from its text. A build's duration and
queue time are read from the columns `duration_text` and `queue_text`, the numbers' own text in the build's
JSON: percentiles repeat exactly the values a client reads from /builds, and no build's JSON is parsed.

Statistics by time, tag and derivation never sort the window's builds in SQLite (on a year of builds the sort
costs more than everything else together). Each group is read on its own, as ranges of an index that holds
every figure it needs:

- time groups (no tag filter): one range of `builds_for_stats` per period and status; a whole day of a
  grouping by day, its row of `day_summaries` (without a status filter; see day_summaries.py) or its parts in
  `day_figures` per status (see day_figures.py), both kept by the writer;
- tag groups: the tag's values, found one by one in the tag index, then each value's tag rows in the window
  (each tag row holds its build's status, CPU seconds, duration and queue time); with a filter on the window
  and statuses alone, a promoted value's whole days from `tag_day_figures` instead (see tag_figures.py);
- derivation groups: likewise, the derivation paths found one by one in `builds_by_derivation`;
- anything else (systems, statuses, time groups under a tag filter) is grouped by SQLite in one pass.

Each row is `(value, status, figures)`; a group may have several, which add up. `figures` is a JSON array (or
the binary value of a row of `day_figures`, or with status null of `day_summaries`; null for a day without such
builds): with a status,
`[builds, cpu seconds, [durations], [queue times]]`; without one (a group read in one range),
`[builds, successful, discarded, unfinished, cpu seconds, unbilled cpu seconds, [durations], [queue times]]`.

The newest build of a derivation path (and its newest failed one), which the dashboard links to, is read
apart for the few paths it shows (`newest_of_paths`), as `"create_us build_id status"`, the numbers
zero-padded to 20 digits so that the greatest text is the newest build.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence

import msgspec

from buildreport.filters import BuildFilter, Cursor, GroupBy, ListQuery, UsageQuery, set_fields
from buildreport.models import BILLABLE, DISCARDED, FAILED, SUCCESSFUL, UNFINISHED, BuildStatus
from buildreport.store import filter_sql, tag_figures
from buildreport.store.build_rows import BILLABLE_TAG_ROWS
from buildreport.store.day_figures import DAY_FIGURES
from buildreport.store.day_summaries import DAY_SUMMARIES
from buildreport.store.dialect import SQLITE
from buildreport.store.filter_sql import BinaryResults, Query, in_list
from buildreport.store.kept import US_PER_DAY, US_PER_HOUR, WINDOW, KeptTable, answers
from buildreport.store.queries import ordered, usage_day_range, usage_days
from buildreport.times import now_us

_PERIODS = {"day": US_PER_DAY, "hour": US_PER_HOUR}
_IDS = msgspec.json.Decoder(list[int])
# Names of the row sources a statistics query makes itself (not tables): scanning them reads no table.
ROW_SOURCES = ("bounds", "periods", "statuses", "tag_values", "paths", "p", "v", "value_groups", "tagged", "stored")


Concat = Callable[[str], str]


def _arrays(alias: str, queues: bool, concat: Concat) -> str:
    """The durations and queue times of the rows, as two JSON arrays (nulls left out); the second empty unless
    `queues`."""
    queue_times = f"coalesce({concat(f'{alias}.queue_text')}, '')" if queues else "''"
    return f"'[' || coalesce({concat(f'{alias}.duration_text')}, '') || '],[' || {queue_times} || ']'"


def figures_by_status(alias: str, queues: bool, concat: Concat = SQLITE.joined) -> str:
    """A group's figures for builds of one status; `concat` is the engine's comma-joining aggregate."""
    arrays = _arrays(alias, queues, concat)
    return f"'[' || count(*) || ',' || coalesce(sum({alias}.cpu_seconds), 0) || ',' || {arrays} || ']'"


def figures_by_kind(alias: str, queues: bool, concat: Concat = SQLITE.joined) -> str:
    """A group's figures for builds of any status: all builds, the successful, discarded and unfinished ones,
    CPU seconds and those of builds that are not billable. Statuses are compared one by one: cheaper per build
    than `IN`, which SQLite answers from a small temporary index."""

    def one_of(statuses: frozenset[BuildStatus]) -> str:
        return " OR ".join(f"{alias}.status = '{s.value}'" for s in sorted(statuses, key=lambda s: s.value))

    def count(statuses: frozenset[BuildStatus]) -> str:
        return f"count(CASE WHEN {one_of(statuses)} THEN 1 END)"

    unbilled = frozenset(BuildStatus) - BILLABLE
    return (
        f"'[' || count(*) || ',' || {count(SUCCESSFUL)} || ',' || {count(DISCARDED)} || ',' || {count(UNFINISHED)}"
        f" || ',' || coalesce(sum({alias}.cpu_seconds), 0)"
        f" || ',' || coalesce(sum(CASE WHEN {one_of(unbilled)} THEN {alias}.cpu_seconds END), 0)"
        f" || ',' || {_arrays(alias, queues, concat)} || ']'"
    )


def _newest(select: str, where: str, order: str, failed: bool) -> str:
    """The newest build of a group (or its newest failed one) as `create_us build_id status`, zero-padded."""
    extra = f" AND b.status IN {in_list(FAILED)}" if failed else ""
    return (
        f"(SELECT printf('%020d %020d ', b.create_us, b.build_id) || b.status {select} WHERE {where}{extra}"
        f" ORDER BY {order} LIMIT 1)"
    )


# The filter fields a tag row answers for itself: it holds its build's creation time and status, and the build's
# other tags are found by its key.
TAG_ROW_FIELDS = WINDOW | {"status", "tags"}
# What a walk of `builds_for_stats` by period and status can filter on; other filters are grouped in one pass.
_BY_PERIOD_FIELDS = WINDOW | {"status"}
# Kept figures whose rows a grouping by their period takes whole periods from, the first that answers.
PERIOD_TABLES = (DAY_SUMMARIES, DAY_FIGURES)


# A grouping by day's whole days (`whole_day`, a condition on `periods`) from each table of PERIOD_TABLES: a day's
# one summary of every status (status NULL), or the parts of each status.
_WHOLE_DAYS = {
    DAY_SUMMARIES.name: "SELECT periods.low, NULL, (SELECT s.figures FROM day_summaries s WHERE s.account_id = ?"
    " AND s.day_us = periods.low) FROM periods WHERE {whole_day}",
    DAY_FIGURES.name: "SELECT periods.low, f.status, f.figures FROM periods, statuses, day_figures f"
    " WHERE {whole_day} AND f.account_id = ? AND f.day_us = periods.low AND f.status = statuses.status",
}


def _kept_table(build_filter: BuildFilter, period: int) -> KeptTable | None:
    return next((t for t in PERIOD_TABLES if t.period_us == period and answers(t, build_filter)), None)


def _time_groups(account_id: int, build_filter: BuildFilter, period: int, queues: bool) -> Query:
    """Figures per period and status, each period of the window read from `builds_for_stats` by status, or
    whole periods from kept figures that answer the filter (`_kept_table`)."""
    low = build_filter.create_from_us
    # Up to the window's end, or now: never to the newest build, which may be dated thousands of years ahead.
    end = build_filter.create_to_us if build_filter.create_to_us is not None else max(now_us(), low)
    bounds, bounds_params = "SELECT ?", [end]
    statuses = list(dict.fromkeys(s.value for s in build_filter.statuses or BuildStatus))  # each status once
    first_end = low - low % period + period
    sql = (
        f"WITH RECURSIVE bounds(end_us) AS ({bounds}),"
        " periods(low, high) AS ("
        " SELECT ?, CASE WHEN ? < end_us THEN ? ELSE end_us END FROM bounds"
        " UNION ALL"
        " SELECT periods.high, CASE WHEN periods.high + ? < end_us THEN periods.high + ? ELSE end_us END"
        " FROM periods, bounds WHERE periods.high < end_us),"
        f" statuses(status) AS (VALUES {','.join('(?)' for _ in statuses)})"
    )
    from_builds = (
        f"(SELECT {figures_by_status('b', queues)} FROM builds b WHERE b.account_id = ? AND b.status = statuses.status"
        " AND b.create_us >= periods.low AND b.create_us < periods.high)"
    )
    sql += f" SELECT periods.low - periods.low % ?, statuses.status, {from_builds} FROM periods, statuses"
    params = [*bounds_params, low, first_end, first_end, period, period, *statuses, period, account_id]
    kept = _kept_table(build_filter, period)
    if kept is None:
        return sql, params
    # Whole days of the window from the kept figures; the edges from the builds, by status.
    whole_day = f"periods.low % {period} = 0 AND periods.high = periods.low + {period}"
    sql += f" WHERE NOT ({whole_day}) UNION ALL {_WHOLE_DAYS[kept.name].format(whole_day=whole_day)}"
    return sql, [*params, account_id]


def _value_groups(name: str, values: str, values_params: list[object], select: str, where: str,
                  where_params: list[object], queues: bool, skip: Query = ("", [])) -> Query:
    """Figures per value of the recursive row source `name` (each value found by one step in an index): one
    subquery per value reads its builds; `where` names the value as `{value}`. `skip`, a condition on `v.value`
    that leaves values out."""
    figures = f"(SELECT {figures_by_kind('b', queues)} {select} WHERE {where.format(value='v.value')})"
    sql = (
        f"WITH RECURSIVE {name}(value) AS ({values}),"
        f" value_groups(value, figures) AS MATERIALIZED (SELECT v.value, {figures} FROM {name} v"
        f" WHERE v.value IS NOT NULL{skip[0]})"
        # A group without builds has figures beginning with its count, 0.
        " SELECT value_groups.value, NULL, value_groups.figures FROM value_groups"
        " WHERE substr(value_groups.figures, 1, 3) <> '[0,'"
    )
    return sql, [*values_params, *where_params, *skip[1]]


def _tag_groups(account_id: int, build_filter: BuildFilter, key: str, queues: bool, promoted: bool | None = None
                ) -> Query:
    """Figures per value of the tag `key`: its values found one by one in the tag index, each value's builds in
    the window one range of the tag table, whose rows hold their build's figures (so it is named `b` here).
    `promoted` True: only the values whose pairs are promoted (found in `tag_pairs`); False: the others.

    Only a filter on a field tag rows do not carry (`TAG_ROW_FIELDS`), such as a derivation path, needs the
    build itself, through `builds_by_time`: there `+` keeps SQLite from reaching the build by its rowid (a read
    of the whole row, JSON included) or from turning the tag row's time into a range of builds."""
    values = (
        "SELECT min(value) FROM build_tags WHERE account_id = ? AND key = ?"
        " UNION ALL"
        " SELECT (SELECT min(t.value) FROM build_tags t"
        " WHERE t.account_id = ? AND t.key = ? AND t.value > tag_values.value)"
        " FROM tag_values WHERE tag_values.value IS NOT NULL"
    )
    values_params: list[object] = [account_id, key, account_id, key]
    skip: Query = ("", [])
    if promoted:
        values, values_params = tag_figures.PROMOTED_VALUES, [account_id, key]
    elif promoted is not None:
        skip = (tag_figures.NOT_PROMOTED, [account_id, key])
    if set_fields(build_filter) <= TAG_ROW_FIELDS:
        tag, select = "b", "FROM build_tags b"
    else:
        tag = "g"
        select = (
            "FROM build_tags g JOIN builds b ON b.account_id = g.account_id AND b.create_us = +g.create_us"
            " AND +b.build_id = g.build_id"
        )
    conditions, condition_params = filter_sql.conditions(account_id, build_filter, "b", f"{tag}.create_us")
    where = f"{tag}.account_id = ? AND {tag}.key = ? AND {tag}.value = {{value}}{conditions}"
    where_params = [account_id, key, *condition_params]
    return _value_groups("tag_values", values, values_params, select, where, where_params, queues, skip)


def _derivation_groups(account_id: int, build_filter: BuildFilter, queues: bool, low: str | None = None,
                       high: str | None = None) -> Query:
    """Figures per derivation path, of the paths from `low` (inclusive) to `high` (exclusive) when given: the
    paths found one by one in `builds_by_derivation`, each path's builds in the window read from the same
    index, which holds their figures."""
    conditions, condition_params = filter_sql.conditions(account_id, build_filter)
    # The first path is sought within both bounds; each next one, being greater, only below `high`.
    bounds = [(op, bound) for op, bound in ((">=", low), ("<", high)) if bound is not None]
    first, first_params = "".join(f" AND derivation_path {op} ?" for op, _ in bounds), [b for _, b in bounds]
    below, below_params = ("", []) if high is None else (" AND d.derivation_path < ?", [high])
    values = (
        f"SELECT min(derivation_path) FROM builds WHERE account_id = ?{first}"
        " UNION ALL"
        " SELECT (SELECT min(d.derivation_path) FROM builds d"
        f" WHERE d.account_id = ? AND d.derivation_path > paths.value{below})"
        " FROM paths WHERE paths.value IS NOT NULL"
    )
    where = f"b.account_id = ? AND b.derivation_path = {{value}}{conditions}"
    return _value_groups("paths", values, [account_id, *first_params, account_id, *below_params], "FROM builds b",
                         where, [account_id, *condition_params], queues)


# The value each grouping of the one-pass query groups by; time groupings, the start of its period.
_GROUP_COLUMNS = {
    "day": f"b.create_us - b.create_us % {US_PER_DAY}",
    "hour": f"b.create_us - b.create_us % {US_PER_HOUR}",
    "system": "b.system",
    "status": "b.status",
}


def _grouped_in_one_pass(account_id: int, build_filter: BuildFilter, group_by: GroupBy, queues: bool) -> Query:
    source, where, params, _ = filter_sql.where(account_id, build_filter, "b")
    sql = (
        f"SELECT {_GROUP_COLUMNS[group_by.kind]} AS g, b.status, {figures_by_status('b', queues)}"
        f" FROM {source} WHERE {where} GROUP BY g, b.status"
    )
    return sql, params


def stats_rows(account_id: int, build_filter: BuildFilter, group_by: GroupBy, queue_times: bool = True) -> Query:
    """The figures of each group of the matching builds (see the module's docstring for the rows); without
    `queue_times` their arrays are left empty."""
    if group_by.kind in _PERIODS and set_fields(build_filter) <= _BY_PERIOD_FIELDS:
        return _time_groups(account_id, build_filter, _PERIODS[group_by.kind], queue_times)
    if group_by.kind == "tag" and group_by.tag_key is not None:
        return _tag_groups(account_id, build_filter, group_by.tag_key, queue_times)
    if group_by.kind in ("derivation", "derivation_path"):
        return _derivation_groups(account_id, build_filter, queue_times)
    return _grouped_in_one_pass(account_id, build_filter, group_by, queue_times)


# Where the two halves of a walk over derivation paths meet: store paths' hashes are spread evenly over Nix's
# base-32 alphabet (0-9, then a-z without e, o, u, t), and "h" begins its second half.
PATH_SPLIT = "/nix/store/h"
# A grouping by tag over a window at least this long is read as two halves of time.
SPLIT_WINDOW_US = 2 * US_PER_DAY


def stats_parts(
    account_id: int, build_filter: BuildFilter, group_by: GroupBy, queue_times: bool = True
) -> list[Query]:
    """`stats_rows` as queries whose rows together are its rows, for the reader to run at once on connections
    of their own, each on a core: the walks by derivation path and by tag value, which cost most, in two
    halves (by path, or by time), everything else as one query."""
    if group_by.kind in ("derivation", "derivation_path") and build_filter.derivation_path is None:
        return [
            _derivation_groups(account_id, build_filter, queue_times, high=PATH_SPLIT),
            _derivation_groups(account_id, build_filter, queue_times, low=PATH_SPLIT),
        ]
    if group_by.kind == "tag" and group_by.tag_key is not None:
        kept = tag_figures.kept_parts(
            account_id, build_filter, group_by.tag_key,
            lambda part, promoted: _tag_groups(account_id, part, group_by.tag_key, queue_times, promoted))
        if kept is not None:
            return kept
    if group_by.kind == "tag":
        low = build_filter.create_from_us
        high = build_filter.create_to_us if build_filter.create_to_us is not None else now_us()
        if high - low >= SPLIT_WINDOW_US:
            middle = low + (high - low) // 2
            halves = (
                msgspec.structs.replace(build_filter, create_to_us=middle),
                msgspec.structs.replace(build_filter, create_from_us=middle),
            )
            return [stats_rows(account_id, half, group_by, queue_times) for half in halves]
    return [stats_rows(account_id, build_filter, group_by, queue_times)]


def newest_of_paths(account_id: int, build_filter: BuildFilter, paths: Sequence[str], failed: bool) -> Query:
    """`(path, newest)` of each derivation path given: its newest matching build (or newest failed one), a step
    back from the end of the path's range of `builds_by_derivation`; null when it has none."""
    conditions, condition_params = filter_sql.conditions(account_id, build_filter)
    where = f"b.account_id = ? AND b.derivation_path = p.value{conditions}"
    newest = _newest("FROM builds b", where, "b.create_us DESC, b.build_id DESC", failed)
    sql = f"WITH p(value) AS (VALUES {','.join(['(?)'] * len(paths))}) SELECT p.value, {newest} FROM p"
    return sql, [*paths, account_id, *condition_params]


def _stopped_billable(query: UsageQuery) -> tuple[str, list[object]]:
    where = f"b.account_id = ? AND b.stop_us IS NOT NULL AND b.stop_us >= ? AND b.status IN {in_list(BILLABLE)}"
    params: list[object] = [query.from_us]
    if query.to_us is not None:
        where += " AND b.stop_us < ?"
        params.append(query.to_us)
    return where, params


def usage_by_day(account_id: int, query: UsageQuery) -> Query:
    """(day start, CPU seconds, builds) for each day with billable builds, ascending; with the usage kept of
    builds that were pruned."""
    days, params = usage_days(account_id, query)
    sql = f"SELECT day_us, sum(cpu_seconds), sum(builds) FROM ({days}) AS usage_days GROUP BY day_us ORDER BY day_us"
    return sql, params


def usage_by_system(account_id: int, query: UsageQuery) -> Query:
    """(system, CPU seconds, builds) of the billable builds that stopped in range."""
    where, params = _stopped_billable(query)
    sql = f"SELECT b.system, sum(b.cpu_seconds), count(*) FROM builds b WHERE {where} GROUP BY 1"
    return sql, [account_id, *params]


def usage_by_tag(account_id: int, query: UsageQuery, key: str) -> Query:
    """(value, CPU seconds, builds) of each value of the tag `key` among the billable builds that stopped in
    range, from one range of `build_tags_by_stop`; then (null, ...) of those without the tag, if any: the daily
    usage of the range (the builds stored) less the tagged."""
    to = query.to_us is not None
    tagged = (
        "SELECT value, sum(cpu_seconds) AS cpu_seconds, count(*) AS builds FROM build_tags"
        f" WHERE account_id = ? AND key = ? AND stop_us >= ?{' AND stop_us < ?' if to else ''}"
        f" AND {BILLABLE_TAG_ROWS} GROUP BY value"
    )
    days, day_params = usage_day_range(account_id, query)
    stored = (
        "SELECT coalesce(sum(cpu_seconds), 0) AS cpu_seconds, coalesce(sum(builds), 0) AS builds FROM daily_usage"
        f" WHERE {days}"
    )
    sql = (
        f"WITH tagged AS ({tagged}), stored AS ({stored})"
        " SELECT value, cpu_seconds, builds FROM tagged UNION ALL"
        " SELECT NULL, stored.cpu_seconds - (SELECT coalesce(sum(cpu_seconds), 0) FROM tagged),"
        " stored.builds - (SELECT coalesce(sum(builds), 0) FROM tagged) FROM stored"
        " WHERE stored.builds > (SELECT coalesce(sum(builds), 0) FROM tagged)"
    )
    stops = day_params[1:]  # the range's bounds, as stop times: a day's usage is of the builds that stopped in it
    return sql, [account_id, key, *stops, *day_params]


def export_keys(
    account_id: int, build_filter: BuildFilter, cursor: Cursor | None, size: int, bodies: bool = False
) -> Query:
    """The next `size` builds in list order after `cursor`: (create time, build id) each from the index, and with
    `bodies` each build's stored JSON after them, fetched from its row as the index is walked."""
    source, where, params, keys = ordered(account_id, ListQuery(filter=build_filter, cursor=cursor))
    columns = ", ".join([*keys, "b.body"] if bodies else keys)
    order = f"{keys[0]} DESC, {keys[1]} DESC"
    return BinaryResults(f"SELECT {columns} FROM {source} WHERE {where} ORDER BY {order} LIMIT ?"), [*params, size]


def bodies_by_id(build_ids: Sequence[int]) -> Query:
    """(build id, stored JSON) of builds by id, in id order: the command line's export reads a page with this.

    An export takes a page's ids from the index newest first, then reads their JSON oldest first: the builds
    table is laid out by id, ids grow with time, and the file read forwards is read ahead by the kernel
    (measured in bench/notes.md)."""
    marks = ",".join("?" * len(build_ids))
    return f"SELECT build_id, body FROM builds WHERE build_id IN ({marks}) ORDER BY build_id", list(build_ids)


def body_parts(build_ids: Sequence[int]) -> list[Query]:
    """A server's export page as two queries over the two halves of its ids, which the reader runs at once.

    Each answers one row: its build ids as a JSON array and their JSON joined by newlines, both in id
    order (the subquery's LIMIT keeps the order for the aggregates). One row instead of one a build: rows
    handed over one at a time contend with the request's thread for the interpreter lock at each step.
    A page's JSON lines are read forwards, as `bodies_by_id` says; two halves at once keep the disk busier
    (measured in bench/notes.md)."""
    ids = sorted(build_ids)
    middle = len(ids) // 2
    return [_joined_bodies(half) for half in (ids[:middle], ids[middle:]) if half]


def _joined_bodies(build_ids: list[int]) -> Query:
    marks = ",".join("?" * len(build_ids))
    page = f"SELECT build_id, body FROM builds WHERE build_id IN ({marks}) ORDER BY build_id LIMIT ?"
    sql = f"SELECT json_group_array(build_id), CAST(group_concat(body, char(10)) AS BLOB) FROM ({page})"
    return sql, [*build_ids, len(build_ids)]


def in_key_order(keys: list[tuple], bodies: list[tuple]) -> list[bytes]:
    """A page's JSON in the order of its keys (create time, build id), from rows of (build id, JSON)."""
    by_id = dict(bodies)
    return [by_id[build_id] for _, build_id in keys if build_id in by_id]


def joined_in_key_order(keys: list[tuple], parts: list[tuple]) -> list[bytes]:
    """A page's JSON in the order of its keys, from the rows of `body_parts` (ids as JSON, joined JSON).
    Stored JSON is compact, so a newline only ever separates two builds."""
    bodies: list[tuple[int, bytes]] = []
    for ids, joined in parts:
        found = _IDS.decode(ids) if ids else []
        if found:
            bodies += zip(found, joined.split(b"\n"), strict=True)
    return in_key_order(keys, bodies)


def iter_export_pages(
    conn: sqlite3.Connection, account_id: int, build_filter: BuildFilter, size: int = 5_000
) -> Iterator[list[bytes]]:
    """Synchronous twin of Reader.export_pages, for the command line; the reads share one transaction so
    the export is one consistent picture of the database."""
    cursor: Cursor | None = None
    conn.execute("BEGIN")
    try:
        while True:
            keys = conn.execute(*export_keys(account_id, build_filter, cursor, size)).fetchall()
            if keys:
                yield in_key_order(keys, conn.execute(*bodies_by_id([key[1] for key in keys])).fetchall())
            if len(keys) < size:
                return
            cursor = Cursor(create_us=keys[-1][0], build_id=keys[-1][1])
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
