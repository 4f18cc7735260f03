"""The read queries, as parameterised SQL built only from the shape of a filter, never from its text."""

from __future__ import annotations

import msgspec

from buildreport.filters import BuildFilter, ListQuery, UsageQuery
from buildreport.models import BILLABLE, DISCARDED, FAILED, SUCCESSFUL, UNFINISHED, BuildStatus

Query = tuple[str, list[object]]
US_PER_HOUR = 3_600_000_000
US_PER_DAY = 24 * US_PER_HOUR


def in_list(statuses: frozenset[BuildStatus]) -> str:
    # Fixed status names from the code, never request text.
    return "(" + ",".join(f"'{s.value}'" for s in sorted(statuses, key=lambda s: s.value)) + ")"


def _filter_sql(account_id: int, build_filter: BuildFilter, alias: str) -> tuple[str, str, list[object]]:
    """FROM and WHERE clauses for a filter; a tag filter is driven by the tag index."""
    params: list[object] = []
    where: list[str] = []
    time_col = f"{alias}.create_us"
    if build_filter.tags:
        key, value = build_filter.tags[0]
        source = f"build_tags t CROSS JOIN builds {alias}"
        where += [f"{alias}.build_id = t.build_id", "t.account_id = ?", "t.key = ?", "t.value = ?"]
        params += [account_id, key, value]
        time_col = "t.create_us"
        for key, value in build_filter.tags[1:]:
            # Each other pair is one lookup of the tag index by its whole key. A count, not EXISTS: PostgreSQL
            # turns EXISTS into a join that may look a pair up by build id alone, reading every entry of the
            # pair (600 ms instead of 0.6 ms for three pairs over a million builds).
            where.append(
                "(SELECT count(*) FROM build_tags o WHERE o.account_id = t.account_id AND o.key = ? AND o.value = ?"
                " AND o.create_us = t.create_us AND o.build_id = t.build_id) > 0"
            )
            params += [key, value]
    else:
        source = f"builds {alias}"
        where.append(f"{alias}.account_id = ?")
        params.append(account_id)
    if build_filter.derivation_path is not None:
        where.append(f"{alias}.derivation_path = ?")
        params.append(build_filter.derivation_path)
    where.append(f"{time_col} >= ?")
    params.append(build_filter.create_from_us)
    if build_filter.create_to_us is not None:
        where.append(f"{time_col} < ?")
        params.append(build_filter.create_to_us)
    if build_filter.statuses:
        where.append(f"{alias}.status IN ({','.join('?' * len(build_filter.statuses))})")
        params += [s.value for s in build_filter.statuses]
    return source, " AND ".join(where), params


def list_builds(account_id: int, query: ListQuery) -> Query:
    """A page of builds, newest first: each build's stored JSON and stored digest (for the ETag), in list order.

    The reader joins them into the page's JSON array: only ORDER BY promises an order, which no aggregate over
    a subquery keeps in SQLite (and SQLite before 3.44 takes no ORDER BY inside an aggregate)."""
    source, where, params, order = _ordered(account_id, query)
    sql = f"SELECT b.body, b.body_hash FROM {source} WHERE {where} ORDER BY {order} LIMIT ?"
    return sql, [*params, query.limit]


def page_end(account_id: int, query: ListQuery) -> Query:
    """The position of a full page's last build and, when more match, of the next one: two rows at most."""
    source, where, params, order = _ordered(account_id, query)
    keys = "t.create_us, t.build_id" if query.filter.tags else "b.create_us, b.build_id"
    sql = f"SELECT {keys} FROM {source} WHERE {where} ORDER BY {order} LIMIT 2 OFFSET ?"
    return sql, [*params, query.limit - 1]


def _ordered(account_id: int, query: ListQuery) -> tuple[str, str, list[object], str]:
    source, where, params = _filter_sql(account_id, query.filter, "b")
    first, second = ("t.create_us", "t.build_id") if query.filter.tags else ("b.create_us", "b.build_id")
    if query.cursor is not None:
        where += f" AND ({first}, {second}) < (?, ?)"
        params += [query.cursor.create_us, query.cursor.build_id]
    return source, where, params, f"{first} DESC, {second} DESC"


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
    source, where, params = _filter_sql(account_id, build_filter, "b")
    return f"SELECT {SUMMARY_COLUMNS} FROM {source} WHERE {where}", params


def _totals_summary(
    account_id: int, build_filter: BuildFilter, table: str, low: int, high: int | None, tag: bool = False
) -> Query:
    sql = f"SELECT {TOTALS_COLUMNS} FROM {table} h WHERE h.account_id = ?"
    params: list[object] = [account_id]
    if tag:
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


def _ceil(us: int, period: int) -> int:
    return -(-us // period) * period


def _between(build_filter: BuildFilter, low: int, high: int | None) -> BuildFilter:
    return msgspec.structs.replace(build_filter, create_from_us=low, create_to_us=high)


def summary(account_id: int, build_filter: BuildFilter, promoted: bool = False) -> Query:
    """One row per part: whole days and hours come from the totals, the window's ragged edges from the builds.

    A window `[low, high)` splits into raw builds up to the first whole hour, hourly totals up to the first
    whole day, daily totals to the last whole day, and back through hours to raw builds at the end.
    With one tag pair whose totals are kept (`promoted`, see tag_totals), whole days come from its daily
    totals and the rest of the window from its builds. Other tag filters read the builds of their first pair
    (the rarest: see tag_order) and check the others.
    """
    low, high = build_filter.create_from_us, build_filter.create_to_us
    if build_filter.derivation_path is not None or (build_filter.tags and not promoted):
        return _raw_summary(account_id, build_filter)
    if build_filter.tags:
        if len(build_filter.tags) != 1:
            raise ValueError("tag totals answer a filter of one tag pair")
        first_day = _ceil(low, US_PER_DAY)
        end_day = None if high is None else high // US_PER_DAY * US_PER_DAY
        if end_day is not None and end_day <= first_day:
            return _raw_summary(account_id, build_filter)
        parts = [
            _raw_summary(account_id, _between(build_filter, low, first_day)),
            _totals_summary(account_id, build_filter, "tag_daily_totals", first_day, end_day, tag=True),
        ]
        if end_day is not None:
            parts.append(_raw_summary(account_id, _between(build_filter, end_day, high)))
        return " UNION ALL ".join(sql for sql, _ in parts), [p for _, params in parts for p in params]
    first_hour, first_day = _ceil(low, US_PER_HOUR), _ceil(low, US_PER_DAY)
    end_hour = None if high is None else high // US_PER_HOUR * US_PER_HOUR
    end_day = None if high is None else high // US_PER_DAY * US_PER_DAY
    if end_hour is not None and end_hour <= first_hour:
        return _raw_summary(account_id, build_filter)
    parts = [_raw_summary(account_id, msgspec.structs.replace(build_filter, create_to_us=first_hour))]
    if end_day is None or first_day < end_day:
        parts += [
            _totals_summary(account_id, build_filter, "hourly_totals", first_hour, first_day),
            _totals_summary(account_id, build_filter, "daily_totals", first_day, end_day),
        ]
        if end_day is not None:
            parts.append(_totals_summary(account_id, build_filter, "hourly_totals", end_day, end_hour))
    else:
        parts.append(_totals_summary(account_id, build_filter, "hourly_totals", first_hour, end_hour))
    if end_hour is not None:
        parts.append(_raw_summary(account_id, msgspec.structs.replace(build_filter, create_from_us=end_hour)))
    return " UNION ALL ".join(sql for sql, _ in parts), [p for _, params in parts for p in params]


def tag_pair_size(account_id: int, key: str, value: str, build_filter: BuildFilter, cap: int) -> Query:
    """-1 for a pair whose totals are kept (it matches many builds); otherwise how many of its builds lie in
    the filter's window, counted up to `cap` (a pair without totals has fewer builds than that in all)."""
    window = "create_us >= ?" + (" AND create_us < ?" if build_filter.create_to_us is not None else "")
    params: list[object] = [account_id, key, value, account_id, key, value, build_filter.create_from_us]
    if build_filter.create_to_us is not None:
        params.append(build_filter.create_to_us)
    sql = (
        "SELECT CASE WHEN EXISTS (SELECT 1 FROM tag_pairs WHERE account_id = ? AND key = ? AND value = ?) THEN -1"
        " ELSE (SELECT count(*) FROM (SELECT 1 FROM build_tags WHERE account_id = ? AND key = ? AND value = ?"
        f" AND {window} LIMIT ?) AS reached) END"
    )
    return sql, [*params, cap]


def usage_days(account_id: int, query: UsageQuery) -> Query:
    """(day_us, cpu_seconds, builds) rows of the query's days: the daily usage of the builds stored, and the
    usage that `prune` kept of builds it removed (kept_usage)."""
    where = "account_id = ? AND day_us >= ?" + (" AND day_us < ?" if query.to_us is not None else "")
    params: list[object] = [account_id, query.from_us] + ([query.to_us] if query.to_us is not None else [])
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
    return "SELECT body FROM builds WHERE build_id = ? AND account_id = ?", [build_id, account_id]


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
