"""The statistics queries of PostgreSQL: what store/stats_queries.py does with SQLite's index walks, one
grouped pass here, with the same rows (see that module's docstring) in the one-status form:
`(value, status, [builds, cpu seconds, [durations], [queue times]])`.

Only these differ between the engines; every other insights query is shared.
"""

from __future__ import annotations

from collections.abc import Sequence

from buildreport.filters import BuildFilter, GroupBy, UsageQuery
from buildreport.models import FAILED
from buildreport.store import filter_sql
from buildreport.store.filter_sql import Query, in_list
from buildreport.store.kept import US_PER_DAY, US_PER_HOUR
from buildreport.store.stats_queries import stopped_billable

JSON = "convert_from(b.body, 'UTF8')::json"  # a build's stored JSON, taken apart only where a figure needs it
_GROUP_COLUMNS = {
    "day": f"b.create_us - b.create_us % {US_PER_DAY}",
    "hour": f"b.create_us - b.create_us % {US_PER_HOUR}",
    "system": f"{JSON} ->> 'system'",
    "status": "b.status",
    "derivation": "b.derivation_path",
    "derivation_path": "b.derivation_path",
}
_QUEUES = "coalesce(string_agg(b.queue_text, ','), '')"
_FIGURES = (
    "'[' || count(*) || ',' || coalesce(sum(b.cpu_seconds), 0) || ',[' || coalesce(string_agg(b.duration_text, ','),"
    f" '') || '],[' || {_QUEUES} || ']]'"
)
# As SQLite's: zero-padded numbers, so that the greatest text is the newest build.
_MARK = "lpad(b.create_us::text, 20, '0') || ' ' || lpad(b.build_id::text, 20, '0') || ' ' || b.status"
_NEWEST = f"(array_agg({_MARK} ORDER BY b.create_us DESC, b.build_id DESC))[1]"
_NEWEST_FAILED = (
    f"(array_agg({_MARK} ORDER BY b.create_us DESC, b.build_id DESC) FILTER (WHERE b.status IN {in_list(FAILED)}))[1]"
)


def stats_rows(account_id: int, build_filter: BuildFilter, group_by: GroupBy, queue_times: bool = True) -> Query:
    source, where, params, _ = filter_sql.where(account_id, build_filter, "b")
    figures = _FIGURES if queue_times else _FIGURES.replace(_QUEUES, "''")
    if group_by.kind == "tag" and group_by.tag_key is not None:
        # The tag's value from the tag index: builds without the tag are in no group.
        source += " JOIN build_tags g ON g.account_id = b.account_id AND g.build_id = b.build_id AND g.key = ?"
        return (
            f"SELECT g.value, b.status, {figures} FROM {source} WHERE {where} GROUP BY g.value, b.status",
            [group_by.tag_key, *params],
        )
    column = _GROUP_COLUMNS[group_by.kind]
    sql = f"SELECT {column} AS g, b.status, {figures} FROM {source} WHERE {where} GROUP BY 1, 2"
    return sql, params


def stats_parts(
    account_id: int, build_filter: BuildFilter, group_by: GroupBy, queue_times: bool = True
) -> list[Query]:
    """One query: PostgreSQL spreads a large grouped pass over its own parallel workers."""
    return [stats_rows(account_id, build_filter, group_by, queue_times)]


def body_parts(build_ids: Sequence[int]) -> list[Query]:
    """One query, of the row `stats_queries.body_parts` describes: PostgreSQL reads ahead on its own."""
    sql = ("SELECT json_agg(build_id ORDER BY build_id)::text, string_agg(body, '\\x0a'::bytea ORDER BY build_id)"
           " FROM builds WHERE build_id = ANY(?)")
    return [(sql, [list(build_ids)])]


def newest_of_paths(account_id: int, build_filter: BuildFilter, paths: Sequence[str], failed: bool) -> Query:
    """`(path, newest)` of each given derivation path with matching builds (or matching failed builds)."""
    source, where, params, _ = filter_sql.where(account_id, build_filter, "b")
    mark = _NEWEST_FAILED if failed else _NEWEST
    sql = f"SELECT b.derivation_path, {mark} FROM {source} WHERE {where} AND b.derivation_path = ANY(?) GROUP BY 1"
    return sql, [*params, list(paths)]


def usage_by_system(account_id: int, query: UsageQuery) -> Query:
    where, params = stopped_billable(query)
    sql = f"SELECT {JSON} ->> 'system', sum(b.cpu_seconds), count(*) FROM builds b WHERE {where} GROUP BY 1"
    return sql, [account_id, *params]


def usage_tags(account_id: int, query: UsageQuery) -> Query:
    where, params = stopped_billable(query)
    return f"SELECT {JSON} -> 'tags', b.cpu_seconds FROM builds b WHERE {where}", [account_id, *params]
