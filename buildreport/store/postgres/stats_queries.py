"""The statistics queries of PostgreSQL: what store/stats_queries.py does with SQLite's index walks, with the same
rows (see that module's docstring): `(value, status, [builds, cpu seconds, [durations], [queue times]])`, a day's
kept figures as their binary value (store/day_figures.py, store/day_summaries.py), or a tag value's or a
derivation path's figures of every status.

Both engines answer from the same kept figures and the same index ranges:

- by day (no filter but the window and statuses): the window's whole days from `day_summaries` (no status
  filter) or `day_figures`, its partial days at either edge from the builds, each a range of `builds_by_time`;
  grouped in one pass, a year of builds was read from the table and sorted on disk, fifteen times the cost of
  SQLite's answer;
- by tag (no filter the tag rows cannot answer): the tag's values found one by one in the tag index, then each
  value's tag rows in the window, one range of the index, which holds their figures (an index-only scan); joined
  to the builds, the tag table was read whole; a promoted value's whole days from `tag_day_figures`, as on SQLite;
- anything else is grouped in one pass over the matching builds.

Only these differ between the engines; every other insights query is shared.
"""

from __future__ import annotations

from collections.abc import Sequence

from buildreport.filters import BuildFilter, GroupBy, set_fields
from buildreport.models import FAILED
from buildreport.store import filter_sql, tag_figures
from buildreport.store.day_figures import DAY_FIGURES
from buildreport.store.day_summaries import DAY_SUMMARIES
from buildreport.store.dialect import POSTGRESQL
from buildreport.store.filter_sql import BinaryResults, Query, in_list
from buildreport.store.kept import US_PER_DAY, US_PER_HOUR, answers, whole_and_edges
from buildreport.store.postgres.connection import HashedGrouping
from buildreport.store.stats_queries import TAG_ROW_FIELDS, figures_by_kind, figures_by_status

_GROUP_COLUMNS = {
    "day": f"b.create_us - b.create_us % {US_PER_DAY}",
    "hour": f"b.create_us - b.create_us % {US_PER_HOUR}",
    "system": "b.system",
    "status": "b.status",
    "derivation": "b.derivation_path",
    "derivation_path": "b.derivation_path",
}
# As SQLite's: zero-padded numbers, so that the greatest text is the newest build.
_MARK = "lpad(b.create_us::text, 20, '0') || ' ' || lpad(b.build_id::text, 20, '0') || ' ' || b.status"
_NEWEST = f"(array_agg({_MARK} ORDER BY b.create_us DESC, b.build_id DESC))[1]"
_NEWEST_FAILED = (
    f"(array_agg({_MARK} ORDER BY b.create_us DESC, b.build_id DESC) FILTER (WHERE b.status IN {in_list(FAILED)}))[1]"
)


def _tag_values(account_id: int, key: str) -> Query:
    """The tag's values in order, each found by one step in the tag index (PostgreSQL does not skip through an
    index on its own)."""
    sql = (
        "WITH RECURSIVE tag_values(value) AS ("
        " SELECT min(value) FROM build_tags WHERE account_id = ? AND key = ?"
        " UNION ALL"
        " SELECT (SELECT min(t.value) FROM build_tags t WHERE t.account_id = ? AND t.key = ? AND t.value > v.value)"
        " FROM tag_values v WHERE v.value IS NOT NULL)"
    )
    return sql, [account_id, key, account_id, key]


def _tag_groups(account_id: int, build_filter: BuildFilter, key: str, queues: bool, promoted: bool | None = None
                ) -> Query:
    """Figures per value of the tag `key` from the tag rows alone, which hold their build's status and figures:
    each value's rows in the window are one range of the tag index, summed as one row of every status (grouped
    by status, the rows were sorted first, which cost a third of the answer). `promoted` True: only the values
    whose pairs are promoted (found in `tag_pairs`); False: the others."""
    values, values_params = _tag_values(account_id, key)
    skip, skip_params = "", []
    if promoted:
        values, values_params = f"WITH tag_values(value) AS ({tag_figures.PROMOTED_VALUES})", [account_id, key]
    elif promoted is not None:
        skip, skip_params = tag_figures.NOT_PROMOTED, [account_id, key]
    conditions, condition_params = filter_sql.conditions(account_id, build_filter, "g")
    figures = (
        f"SELECT count(*) AS builds, {figures_by_kind('g', queues, POSTGRESQL.joined)} AS figures FROM build_tags g"
        f" WHERE g.account_id = ? AND g.key = ? AND g.value = v.value{conditions}"
    )
    sql = (
        f"{values} SELECT v.value, NULL, f.figures FROM tag_values v CROSS JOIN LATERAL ({figures}) AS f"
        f" WHERE v.value IS NOT NULL AND f.builds > 0{skip}"
    )
    return sql, [*values_params, account_id, key, *condition_params, *skip_params]


def stats_rows(account_id: int, build_filter: BuildFilter, group_by: GroupBy, queue_times: bool = True) -> Query:
    """The figures of each group of the matching builds, read from the builds (and the tag rows)."""
    if group_by.kind == "tag" and group_by.tag_key is not None:
        if set_fields(build_filter) <= TAG_ROW_FIELDS:
            return _tag_groups(account_id, build_filter, group_by.tag_key, queue_times)
        # A matching build's tag row is looked up by its whole key, once for each of the tag's values (a
        # handful); known by build alone, the tag's rows of every build were read. Builds without the tag are
        # in no group.
        values, values_params = _tag_values(account_id, group_by.tag_key)
        source, where, params, _ = filter_sql.where(account_id, build_filter, "b")
        source += (
            " CROSS JOIN tag_values v JOIN build_tags g ON g.account_id = b.account_id AND g.key = ?"
            " AND g.value = v.value AND g.create_us = b.create_us AND g.build_id = b.build_id"
        )
        return (
            f"{values} SELECT v.value, b.status, {figures_by_status('b', queue_times, POSTGRESQL.joined)} FROM {source}"
            f" WHERE {where} AND v.value IS NOT NULL GROUP BY v.value, b.status",
            [*values_params, group_by.tag_key, *params],
        )
    source, where, params, _ = filter_sql.where(account_id, build_filter, "b")
    column = _GROUP_COLUMNS[group_by.kind]
    by_path = group_by.kind in ("derivation", "derivation_path")
    if by_path:
        # One row a path of every status, as SQLite gives: a path's builds are mostly of one or two statuses, and
        # a row a status made as many rows again for Python to decode and merge.
        figures = figures_by_kind("b", queue_times, POSTGRESQL.joined)
        sql = f"SELECT {column} AS g, NULL, {figures} FROM {source} WHERE {where} GROUP BY 1"
    else:
        figures = figures_by_status("b", queue_times, POSTGRESQL.joined)
        sql = f"SELECT {column} AS g, b.status, {figures} FROM {source} WHERE {where} GROUP BY 1, 2"
    # Thousands of derivation paths are what the planner overprices; its own transaction costs three more round trips.
    return (HashedGrouping(sql) if by_path and not build_filter.tags else sql), params


def kept_days(account_id: int, build_filter: BuildFilter, first: int, end: int) -> Query:
    """`(day start, status, kept figures)` of the days from `first` to `end` (whole days), one range of
    `day_summaries` (status null: every status) when they answer the filter, else of `day_figures`."""
    if answers(DAY_SUMMARIES, build_filter):
        sql = "SELECT s.day_us, NULL, s.figures FROM day_summaries s WHERE s.account_id = ? AND s.day_us >= ?"
        return BinaryResults(sql + " AND s.day_us < ?"), [account_id, first, end]
    sql = "SELECT f.day_us, f.status, f.figures FROM day_figures f WHERE f.account_id = ? AND f.day_us >= ?"
    sql += " AND f.day_us < ?"
    params: list[object] = [account_id, first, end]
    if build_filter.statuses:
        sql += " AND f.status = ANY(?)"
        params.append(sorted({s.value for s in build_filter.statuses}))
    return BinaryResults(sql), params


def _day_parts(account_id: int, build_filter: BuildFilter, queue_times: bool) -> list[Query] | None:
    """A grouping by day as the window's whole days from kept figures and its edges from the builds; None when
    the kept figures do not answer the filter or the window holds no whole day."""
    split = whole_and_edges(DAY_FIGURES, build_filter) if answers(DAY_FIGURES, build_filter) else None
    if split is None:
        return None
    first, end, edges = split
    return [kept_days(account_id, build_filter, first, end),
            *(stats_rows(account_id, edge, GroupBy("day"), queue_times) for edge in edges)]


def stats_parts(
    account_id: int, build_filter: BuildFilter, group_by: GroupBy, queue_times: bool = True
) -> list[Query]:
    """Queries whose rows together are the figures of each group of the matching builds, for the reader to run
    at once: a grouping by day as its kept figures and its edges from the builds (`_day_parts`), anything else
    as one query. Nothing is split in halves as SQLite's walks are: two server processes and the request's own
    work then contend for the cores, and on two cores answers by day and by tag took a fifth longer than in one
    query each (measured at a million builds)."""
    parts = None
    if group_by.kind == "day":
        parts = _day_parts(account_id, build_filter, queue_times)
    elif group_by.kind == "tag" and group_by.tag_key is not None:
        parts = tag_figures.kept_parts(
            account_id, build_filter, group_by.tag_key,
            lambda part, promoted: _tag_groups(account_id, part, group_by.tag_key, queue_times, promoted))
    return parts if parts is not None else [stats_rows(account_id, build_filter, group_by, queue_times)]


def newest_of_paths(account_id: int, build_filter: BuildFilter, paths: Sequence[str], failed: bool) -> Query:
    """`(path, newest)` of each derivation path given: its newest matching build (or newest failed one); null or
    left out when it has none.

    Without a tag filter, a step back from the end of the path's range of `builds_by_derivation` (aggregated over
    each path's builds instead, a month's took a third of the dashboard's time at three million builds). With
    one, the tag's rows lead and the matching builds of the paths are aggregated: walked back from its end, a path
    whose builds mostly lack the tag was read whole."""
    if build_filter.tags:
        source, where, params, _ = filter_sql.where(account_id, build_filter, "b")
        mark = _NEWEST_FAILED if failed else _NEWEST
        sql = f"SELECT b.derivation_path, {mark} FROM {source} WHERE {where} AND b.derivation_path = ANY(?) GROUP BY 1"
        return sql, [*params, list(paths)]
    conditions, condition_params = filter_sql.conditions(account_id, build_filter)
    extra = f" AND b.status IN {in_list(FAILED)}" if failed else ""
    newest = (
        f"(SELECT {_MARK} FROM builds b WHERE b.account_id = ? AND b.derivation_path = p.value{conditions}{extra}"
        " ORDER BY b.create_us DESC, b.build_id DESC LIMIT 1)"
    )
    return f"SELECT p.value, {newest} FROM unnest(?::text[]) AS p(value)", [account_id, *condition_params,
                                                                            list(paths)]

