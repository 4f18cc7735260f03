"""The read queries, as parameterised SQL built only from the shape of a filter, never from its text."""

from __future__ import annotations

import msgspec

from buildreport.filters import BuildFilter, ListQuery, UsageQuery
from buildreport.models import BILLABLE, DISCARDED, FAILED, SUCCESSFUL, UNFINISHED, BuildStatus
from buildreport.store import filter_sql
from buildreport.store.filter_sql import BinaryResults, Query, in_list

# The periods are also read from here by other store modules.
from buildreport.store.kept import US_PER_DAY as US_PER_DAY
from buildreport.store.kept import US_PER_HOUR as US_PER_HOUR
from buildreport.store.kept import KeptTable, answers, whole_periods
from buildreport.store.tag_totals import TAG_DAILY_TOTALS, TAG_HOURLY_TOTALS
from buildreport.store.totals import DAILY_TOTALS, HOURLY_TOTALS


def list_builds(account_id: int, query: ListQuery) -> Query:
    """A page of builds, newest first: each build's stored JSON, stored digest (for the ETag) and position
    (creation time, build id), in list order, and one build more when more match, so that the page knows
    whether it has a next one (and where it starts) without a second query.

    The reader joins them into the page's JSON array: only ORDER BY promises an order, which no aggregate over
    a subquery keeps in SQLite (and SQLite before 3.44 takes no ORDER BY inside an aggregate)."""
    source, where, params, keys = ordered(account_id, query)
    columns = f"b.body, b.body_hash, {', '.join(keys)}"
    sql = f"SELECT {columns} FROM {source} WHERE {where} ORDER BY {_order(keys)} LIMIT ?"
    return BinaryResults(sql), [*params, query.limit + 1]


def ordered(account_id: int, query: ListQuery) -> tuple[str, str, list[object], tuple[str, str]]:
    """FROM, WHERE and parameters of the builds after the query's cursor, and the (create time, build id)
    columns of the list order (newest first: see `_order`)."""
    source, where, params, keys = filter_sql.where(account_id, query.filter, "b")
    if query.cursor is not None:
        where += f" AND ({keys[0]}, {keys[1]}) < (?, ?)"
        params += [query.cursor.create_us, query.cursor.build_id]
    return source, where, params, keys


def _order(keys: tuple[str, str]) -> str:
    return f"{keys[0]} DESC, {keys[1]} DESC"


def _summary_columns(alias: str, weight: str, first_start: str, last_stop: str) -> str:
    """The twelve columns every part of a summary yields; reader.merge_summary_rows combines the parts.

    Over builds each row weighs 1; over totals a row stands for `builds` builds.
    """

    def count(statuses: frozenset[BuildStatus]) -> str:
        return f"coalesce(sum(CASE WHEN {alias}.status IN {in_list(statuses)} THEN {weight} END), 0)"

    return f"""
    coalesce(sum({weight}), 0), {count(SUCCESSFUL)}, {count(FAILED)}, {count(DISCARDED)}, {count(UNFINISHED)},
    coalesce(sum({alias}.cpu_seconds), 0),
    coalesce(sum(CASE WHEN {alias}.status IN {in_list(BILLABLE)} THEN {alias}.cpu_seconds END), 0),
    coalesce(sum({alias}.duration_us), 0),
    min({alias}.{first_start}),
    max({alias}.{last_stop}),
    coalesce(max(CASE WHEN {alias}.status IN {in_list(UNFINISHED)} THEN 1 ELSE 0 END), 0),
    coalesce(sum({alias}.nar_size_bytes), 0)
    """


SUMMARY_COLUMNS = _summary_columns("b", "1", "start_us", "stop_us")
TOTALS_COLUMNS = _summary_columns("h", "h.builds", "first_start_us", "last_stop_us")


def _raw_summary(account_id: int, build_filter: BuildFilter) -> Query:
    source, where, params, _ = filter_sql.where(account_id, build_filter, "b")
    return f"SELECT {SUMMARY_COLUMNS} FROM {source} WHERE {where}", params


def _totals_summary(account_id: int, build_filter: BuildFilter, table: KeptTable, low: int, high: int | None) -> Query:
    """The part `[low, high)` (whole periods of the table) of a summary, from the table's rows."""
    sql = f"SELECT {TOTALS_COLUMNS} FROM {table.name} h WHERE h.account_id = ?"
    params: list[object] = [account_id]
    if table.tag_pairs:
        sql += " AND h.key = ? AND h.value = ?"
        params += list(build_filter.tags[0])
    sql += " AND h.period_us >= ?"
    params.append(low)
    if high is not None:
        sql += " AND h.period_us < ?"
        params.append(high)
    if build_filter.statuses:
        sql += f" AND h.status IN ({','.join('?' * len(build_filter.statuses))})"
        params += [s.value for s in build_filter.statuses]
    return sql, params


def _between(build_filter: BuildFilter, low: int, high: int | None) -> BuildFilter:
    return msgspec.structs.replace(build_filter, create_from_us=low, create_to_us=high)


def _joined(parts: list[Query]) -> Query:
    return " UNION ALL ".join(sql for sql, _ in parts), [p for _, params in parts for p in params]


def summary(account_id: int, build_filter: BuildFilter, promoted: bool = False) -> Query:
    """One row per part: whole periods come from kept totals where they may answer the filter (kept.answers),
    the window's ragged edges and everything else from the builds.

    A window `[low, high)` splits into raw builds up to the first whole hour, hourly totals up to the first whole
    day, daily totals to the last whole day, and back through hours to raw builds at the end. The totals are the
    account's, or with one tag pair whose totals are kept (`promoted`, see tag_totals) that pair's. Other tag
    filters read the builds of their first pair (the rarest: see tag_totals.ranked) and check the others.
    """
    hourly, daily = (TAG_HOURLY_TOTALS, TAG_DAILY_TOTALS) if promoted else (HOURLY_TOTALS, DAILY_TOTALS)
    low, high = build_filter.create_from_us, build_filter.create_to_us
    hours = whole_periods(hourly, low, high)
    if hours is None or not (answers(hourly, build_filter) and answers(daily, build_filter)):
        return _raw_summary(account_id, build_filter)
    first_hour, end_hour = hours
    parts = [_raw_summary(account_id, _between(build_filter, low, first_hour))]
    days = whole_periods(daily, low, high)
    if days is not None:
        first_day, end_day = days
        parts += [
            _totals_summary(account_id, build_filter, hourly, first_hour, first_day),
            _totals_summary(account_id, build_filter, daily, first_day, end_day),
        ]
        if end_day is not None:
            parts.append(_totals_summary(account_id, build_filter, hourly, end_day, end_hour))
    else:
        parts.append(_totals_summary(account_id, build_filter, hourly, first_hour, end_hour))
    if end_hour is not None:
        parts.append(_raw_summary(account_id, _between(build_filter, end_hour, high)))
    return _joined(parts)


def usage_day_range(account_id: int, query: UsageQuery) -> tuple[str, list[object]]:
    """The condition on a table of usage by day (daily_usage, kept_usage) that picks the query's days."""
    where = "account_id = ? AND day_us >= ?" + (" AND day_us < ?" if query.to_us is not None else "")
    return where, [account_id, query.from_us] + ([query.to_us] if query.to_us is not None else [])


def usage_days(account_id: int, query: UsageQuery) -> Query:
    """(day_us, cpu_seconds, builds) rows of the query's days: the daily usage of the builds stored, and the
    usage that `prune` kept of builds it removed (kept_usage)."""
    where, params = usage_day_range(account_id, query)
    sql = (
        f"SELECT day_us, cpu_seconds, builds FROM daily_usage WHERE {where}"
        f" UNION ALL SELECT day_us, cpu_seconds, builds FROM kept_usage WHERE {where}"
    )
    return sql, params * 2


def usage(account_id: int, query: UsageQuery) -> Query:
    """Billable builds by the UTC day they stopped: a sum over whole days of the daily usage."""
    days, params = usage_days(account_id, query)
    return f"SELECT coalesce(sum(cpu_seconds), 0), coalesce(sum(builds), 0) FROM ({days}) AS usage_days", params


def get_build(account_id: int, build_id: int) -> Query:
    return BinaryResults("SELECT body FROM builds WHERE build_id = ? AND account_id = ?"), [build_id, account_id]


def token_by_digest(digest: bytes) -> Query:
    return (
        # An account without builds has no id yet: 0 matches no build.
        "SELECT t.token_id, coalesce(a.account_id, 0), t.account, t.scopes, t.expires_us, t.revoked_us,"
        " t.last_used_us, t.claims FROM auth.tokens t LEFT JOIN accounts a ON a.name = t.account WHERE t.digest = ?",
        [digest],
    )


def token_by_id(token_id: str) -> Query:
    return "SELECT expires_us, revoked_us FROM auth.tokens WHERE token_id = ?", [token_id]


def touch_token(token_id: str, now_us: int) -> Query:
    return "UPDATE tokens SET last_used_us = ? WHERE token_id = ?", [now_us, token_id]


def get_log(account_id: int, build_id: int) -> Query:
    return (
        "SELECT l.size_bytes, l.zlib FROM build_logs l JOIN builds b USING (build_id)"
        " WHERE l.build_id = ? AND b.account_id = ?",
        [build_id, account_id],
    )
