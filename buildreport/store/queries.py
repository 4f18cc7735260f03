"""The read queries, as parameterised SQL built only from the shape of a filter, never from its text."""

from __future__ import annotations

from buildreport.filters import BuildFilter, ListQuery, UsageQuery
from buildreport.models import BILLABLE, DISCARDED, FAILED, SUCCESSFUL, UNFINISHED, BuildStatus

Query = tuple[str, list[object]]


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
        source = f"build_tags t CROSS JOIN builds {alias} ON {alias}.build_id = t.build_id"
        where += ["t.account_id = ?", "t.key = ?", "t.value = ?"]
        params += [account_id, key, value]
        time_col = "t.create_us"
        for key, value in build_filter.tags[1:]:
            where.append(
                "EXISTS (SELECT 1 FROM build_tags o WHERE o.account_id = t.account_id AND o.key = ? AND o.value = ?"
                " AND o.create_us = t.create_us AND o.build_id = t.build_id)"
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
    """Builds newest first, one more than the limit so the caller knows whether a next page exists."""
    source, where, params = _filter_sql(account_id, query.filter, "b")
    order_cols = ("t.create_us", "t.build_id") if query.filter.tags else ("b.create_us", "b.build_id")
    if query.cursor is not None:
        where += f" AND ({order_cols[0]}, {order_cols[1]}) < (?, ?)"
        params += [query.cursor.create_us, query.cursor.build_id]
    sql = (
        f"SELECT b.create_us, b.build_id, b.body FROM {source} WHERE {where}"
        f" ORDER BY {order_cols[0]} DESC, {order_cols[1]} DESC LIMIT ?"
    )
    return sql, [*params, query.limit + 1]


SUMMARY_COLUMNS = f"""
    count(*),
    coalesce(sum(b.status IN {in_list(SUCCESSFUL)}), 0),
    coalesce(sum(b.status IN {in_list(FAILED)}), 0),
    coalesce(sum(b.status IN {in_list(DISCARDED)}), 0),
    coalesce(sum(b.status IN {in_list(UNFINISHED)}), 0),
    coalesce(sum(b.cpu_seconds), 0),
    coalesce(sum(CASE WHEN b.status IN {in_list(BILLABLE)} THEN b.cpu_seconds END), 0),
    coalesce(sum(b.duration_us), 0),
    min(b.start_us),
    max(b.stop_us),
    coalesce(max(b.stop_us IS NULL), 0),
    coalesce(sum(b.nar_size_bytes), 0)
"""


def summary(account_id: int, build_filter: BuildFilter) -> Query:
    source, where, params = _filter_sql(account_id, build_filter, "b")
    return f"SELECT {SUMMARY_COLUMNS} FROM {source} WHERE {where}", params


def usage(account_id: int, query: UsageQuery) -> Query:
    sql = (
        "SELECT coalesce(sum(cpu_seconds), 0), count(*) FROM builds"
        f" WHERE account_id = ? AND stop_us >= ? AND status IN {in_list(BILLABLE)}"
    )
    params: list[object] = [account_id, query.from_us]
    if query.to_us is not None:
        sql += " AND stop_us < ?"
        params.append(query.to_us)
    return sql, params


def get_build(account_id: int, build_id: int) -> Query:
    return "SELECT body FROM builds WHERE build_id = ? AND account_id = ?", [build_id, account_id]


def token_by_digest(digest: bytes) -> Query:
    return (
        "SELECT t.token_id, t.account_id, a.name, t.scopes, t.expires_us, t.revoked_us, t.last_used_us"
        " FROM tokens t JOIN accounts a USING (account_id) WHERE t.digest = ?",
        [digest],
    )


def touch_token(token_id: str, now_us: int) -> Query:
    return "UPDATE tokens SET last_used_us = ? WHERE token_id = ?", [now_us, token_id]


def get_log(account_id: int, build_id: int) -> Query:
    return (
        "SELECT l.size_bytes, l.zlib FROM build_logs l JOIN builds b USING (build_id)"
        " WHERE l.build_id = ? AND b.account_id = ?",
        [build_id, account_id],
    )
