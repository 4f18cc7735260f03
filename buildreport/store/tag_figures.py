"""Each day's figures per status for every promoted tag pair, kept by the writer for statistics by tag.

A row of `tag_day_figures` holds, for one promoted tag pair (see tag_totals.py), UTC day, status and part, what
a row of `day_figures` holds for an account (day_figures.py): the count of the pair's builds created that day, their
CPU seconds, and their durations and queue times, sorted. Statistics by tag over a month then read some 30 rows
per status for each common value (a value of the tag that reaches PROMOTE_AT builds) instead of every build,
and only the window's partial days at either edge, and the rare values, from the tag rows. Pairs that are not
promoted have no rows, so what is kept stays as bounded as the pairs' totals are.

Rows are made from the pair's tag rows, which carry their build's status and figures: a whole pair when it is
promoted, every promoted pair in one pass after a large import, a day when a write takes out what its value
does not hold; otherwise a write brings the days it touched in step by their differences (day_figures.apply_to).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from buildreport.filters import BuildFilter
from buildreport.store.day_figures import Delta, KeptDays, apply_to, pack
from buildreport.store.dialect import Dialect, dialect_of
from buildreport.store.filter_sql import BinaryResults, Query
from buildreport.store.kept import US_PER_DAY, WINDOW, KeptTable, answers, whole_and_edges

# What it may answer (kept.answers) for a grouping by tag: builds created in whole days, per status; the
# grouping's key names the pairs, so the filter names none.
TAG_DAY_FIGURES = KeptTable("tag_day_figures", WINDOW | {"status"}, US_PER_DAY).check()

# The table (a rowid table, as day_figures: its values run to many kilobytes).
TABLE = """
    CREATE TABLE tag_day_figures (
        account_id {integer} NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        day_us {integer} NOT NULL,
        status TEXT NOT NULL,
        part INTEGER NOT NULL DEFAULT 0,
        figures {blob} NOT NULL,
        PRIMARY KEY (account_id, key, value, day_us, status, part)
    );"""

Pair = tuple[int, str, str]  # (account id, key, value)
_PAIR = "account_id = ? AND key = ? AND value = ?"
_INSERT = "INSERT INTO tag_day_figures (account_id, key, value, day_us, status, figures) VALUES (?, ?, ?, ?, ?, ?)"
# A day of a pair's tag rows (one range of the tag index, which holds each build's status and figures) summed by
# status, the durations and queue times as the numbers' text joined by commas: the engine reads and joins them,
# where taking each row into Python cost a large import three times as much (bench/notes.md).
_DAY_ROWS = (
    "SELECT status, count(*), CAST(sum(cpu_seconds) AS BIGINT), {durations}, {queue_times}"
    f" FROM build_tags WHERE {_PAIR} AND create_us >= ? AND create_us < ? GROUP BY status"
)
_NUMBERS = msgspec.json.Decoder(list[float])
# The promoted values of a tag (account id and key as parameters), and a condition that leaves them out of the
# values `v` of a grouping: the two halves of the values in a grouping by tag that reads kept figures.
PROMOTED_VALUES = "SELECT value FROM tag_pairs WHERE account_id = ? AND key = ?"
NOT_PROMOTED = " AND NOT EXISTS (SELECT 1 FROM tag_pairs p WHERE p.account_id = ? AND p.key = ? AND p.value = v.value)"
# The first of a pair's builds created at or after a time: the days of a pair are found one by one.
_NEXT = f"SELECT min(create_us) FROM build_tags WHERE {_PAIR} AND create_us >= ?"


def day_rows(dialect: Dialect) -> str:
    """The statement that sums one day of a pair's tag rows by status, in the engine's dialect."""
    return _DAY_ROWS.format(durations=dialect.joined("duration_text"), queue_times=dialect.joined("queue_text"))


def _numbers(joined: str | None) -> list[float]:
    return _NUMBERS.decode(f"[{joined}]") if joined else []


def _insert_day(conn: Any, sql: str, pair: Pair, day: int) -> None:
    """Insert one day of a pair from its tag rows (`sql`: day_rows in the engine's dialect); it has no rows yet."""
    rows = [
        (*pair, day, status, pack(builds, cpu_seconds, _numbers(durations), _numbers(queue_times)))
        for status, builds, cpu_seconds, durations, queue_times in conn.execute(
            sql, (*pair, day, day + US_PER_DAY)
        ).fetchall()
    ]
    conn.executemany(_INSERT, rows)


def recompute(conn: Any, days: set[tuple]) -> None:
    """Make each (account, key, value, day start) anew from the pair's tag rows of that day."""
    sql = day_rows(dialect_of(conn))
    for account_id, key, value, day in sorted(days):
        conn.execute(f"DELETE FROM tag_day_figures WHERE {_PAIR} AND day_us = ?", (account_id, key, value, day))
        _insert_day(conn, sql, (account_id, key, value), day)


def _insert_pair(conn: Any, sql: str, pair: Pair) -> None:
    """Insert every day of a pair, which has no rows yet, a day at a time (the memory of one day's builds)."""
    start = 0  # no build is created before 1970
    while (first := conn.execute(_NEXT, (*pair, start)).fetchone()[0]) is not None:
        day = first - first % US_PER_DAY
        _insert_day(conn, sql, pair, day)
        start = day + US_PER_DAY


def fill_pair(conn: Any, pair: Pair) -> None:
    """Make every day of a pair anew from its tag rows."""
    conn.execute(f"DELETE FROM tag_day_figures WHERE {_PAIR}", pair)
    _insert_pair(conn, day_rows(dialect_of(conn)), pair)


def fill_all(conn: Any) -> None:
    """Make the figures of every promoted pair anew (`tag_pairs` must be complete)."""
    conn.execute("DELETE FROM tag_day_figures")
    sql = day_rows(dialect_of(conn))
    for pair in conn.execute("SELECT account_id, key, value FROM tag_pairs ORDER BY 1, 2, 3").fetchall():
        _insert_pair(conn, sql, tuple(pair))


KEPT_DAYS = KeptDays("tag_day_figures", "account_id, key, value, day_us, status", recompute)


def apply(conn: Any, pair: Pair, deltas: dict[tuple[int, str], Delta]) -> None:
    """Bring a promoted pair's (day start, status) touched by a write in step by their differences."""
    apply_to(conn, KEPT_DAYS, {(*pair, day, status): delta for (day, status), delta in deltas.items()})


def kept_days(account_id: int, key: str, build_filter: BuildFilter, first: int, end: int) -> Query:
    """`(value, status, kept figures)` of the promoted values of the tag `key` over the whole days from `first`
    to `end`: each promoted pair found in `tag_pairs`, its days one range of `tag_day_figures`."""
    sql = (
        "SELECT f.value, f.status, f.figures FROM tag_pairs p JOIN tag_day_figures f ON f.account_id = p.account_id"
        " AND f.key = p.key AND f.value = p.value AND f.day_us >= ? AND f.day_us < ?"
        " WHERE p.account_id = ? AND p.key = ?"
    )
    params: list[object] = [first, end, account_id, key]
    statuses = sorted({s.value for s in build_filter.statuses or ()})
    if statuses:
        sql += f" AND f.status IN ({', '.join('?' * len(statuses))})"
        params.extend(statuses)
    return BinaryResults(sql), params


def kept_parts(account_id: int, build_filter: BuildFilter, key: str,
               tag_groups: Callable[[BuildFilter, bool], Query]) -> list[Query] | None:
    """A grouping by the tag `key` as queries whose rows together are its groups: the promoted values' whole
    days from kept figures, their edges from the tag rows, and the other values over the whole window from the
    tag rows; `tag_groups(filter, promoted)` is the engine's grouping of the promoted values (or of the others)
    from the tag rows. None when the kept figures do not answer the filter or the window holds no whole day."""
    if not answers(TAG_DAY_FIGURES, build_filter):
        return None
    split = whole_and_edges(TAG_DAY_FIGURES, build_filter)
    if split is None:
        return None
    first, end, edges = split
    return [
        kept_days(account_id, key, build_filter, first, end),
        tag_groups(build_filter, False),
        *(tag_groups(edge, True) for edge in edges),
    ]
