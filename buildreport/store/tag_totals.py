"""Hourly and daily totals per tag pair, kept only for pairs that match many builds.

A summary over one tag pair adds whole days from `tag_daily_totals` and whole hours from `tag_hourly_totals`
to the raw builds at its window's edges, as an untagged summary does with `daily_totals` and `hourly_totals`:
at most an hour of builds is read at each edge, whatever the hour it is asked. A pair gets totals (is
"promoted" into `tag_pairs`) once PROMOTE_AT of an account's builds carry it; a rarer pair is summed from its
builds through the tag index, which costs at most PROMOTE_AT rows. Near-unique values (a CI run id) therefore
never get totals, and what is kept stays bounded: at most one promoted pair per PROMOTE_AT tag rows, and per
promoted pair at most one row per (UTC hour or day, status) with builds, never more rows than it has builds.

A write changes the hourly totals of a promoted pair by the differences of the builds it adds and takes away,
and makes the days it touched again from their hours; a write touching more pairs than TRACK_LIMIT (a large
import) recomputes them all in one pass.
"""

from __future__ import annotations

import sqlite3

import msgspec

from buildreport.filters import BuildFilter
from buildreport.store import tag_figures
from buildreport.store.day_figures import Delta
from buildreport.store.filter_sql import Query
from buildreport.store.kept import SUMMED_FIGURES, US_PER_DAY, US_PER_HOUR, WINDOW, KeptTable
from buildreport.store.totals import HourDelta

# What their totals may answer (kept.answers): builds of one promoted tag pair created in whole hours or days,
# per status.
TAG_HOURLY_TOTALS = KeptTable("tag_hourly_totals", WINDOW | {"status", "tags"}, US_PER_HOUR, tag_pairs=1).check()
TAG_DAILY_TOTALS = KeptTable("tag_daily_totals", WINDOW | {"status", "tags"}, US_PER_DAY, tag_pairs=1).check()
# A pair with this many builds in an account gets hourly and daily totals.
PROMOTE_AT = 500
# Past this many touched pairs, one write tracks no more and recomputes every pair in one pass at the end.
TRACK_LIMIT = 20_000

# A table of totals per promoted tag pair, UTC period of creation (hour or day) and status; the columns of
# hourly_totals and daily_totals.
TABLE = """
    CREATE TABLE {name} (
        account_id INTEGER NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        period_us INTEGER NOT NULL,
        status TEXT NOT NULL,
        builds INTEGER NOT NULL,
        cpu_seconds INTEGER NOT NULL,
        duration_us INTEGER NOT NULL,
        nar_size_bytes INTEGER NOT NULL,
        first_start_us INTEGER NOT NULL,
        last_stop_us INTEGER,
        PRIMARY KEY (account_id, key, value, period_us, status)
    ) WITHOUT ROWID;
"""

_PROMOTE_ALL = """
INSERT INTO tag_pairs (account_id, key, value)
SELECT account_id, key, value FROM build_tags GROUP BY 1, 2, 3 HAVING count(*) >= ?
"""
_COLUMN_NAMES = (
    "(account_id, key, value, period_us, status, builds, cpu_seconds, duration_us, nar_size_bytes, first_start_us,"
    " last_stop_us)"
)


def _columns(period: int) -> str:
    return f"""
t.create_us - t.create_us % {period}, b.status, count(*), sum(b.cpu_seconds), coalesce(sum(b.duration_us), 0),
sum(b.nar_size_bytes), min(b.start_us), max(b.stop_us)
"""


def _totals_all(table: KeptTable) -> str:
    """Every promoted pair's totals in `table`, from its builds."""
    return f"""
INSERT INTO {table.name} {_COLUMN_NAMES} SELECT p.account_id, p.key, p.value, {_columns(table.period_us)}
FROM tag_pairs p CROSS JOIN build_tags t CROSS JOIN builds b
WHERE t.account_id = p.account_id AND t.key = p.key AND t.value = p.value AND b.build_id = t.build_id
GROUP BY p.account_id, p.key, p.value, 4, 5
"""


_PAIR = "account_id = ? AND key = ? AND value = ?"
# One pair's hourly totals from its builds: all of them, or one (hour, status).
_HOURS_OF_PAIR = f"""
INSERT INTO tag_hourly_totals {_COLUMN_NAMES} SELECT t.account_id, t.key, t.value, {_columns(US_PER_HOUR)}
FROM build_tags t CROSS JOIN builds b
WHERE b.build_id = t.build_id AND t.account_id = ? AND t.key = ? AND t.value = ? {{where}} GROUP BY 1, 2, 3, 4, 5
"""
_PAIR_HOURS = _HOURS_OF_PAIR.format(where="")
_RECOMPUTE_HOUR = _HOURS_OF_PAIR.format(where="AND t.create_us >= ? AND t.create_us < ? AND b.status = ?")
# Days are their hours added up: sums add; the first start and last stop are the least and greatest of the
# hours'. That reads at most 24 rows per status where the day's builds would be read.
_DAYS_FROM_HOURS = f"""
INSERT INTO tag_daily_totals {_COLUMN_NAMES}
SELECT account_id, key, value, period_us - period_us % {US_PER_DAY}, status, {SUMMED_FIGURES}
FROM tag_hourly_totals {{where}} GROUP BY 1, 2, 3, 4, 5
"""
_ALL_DAYS = _DAYS_FROM_HOURS.format(where="")
_PAIR_DAYS = _DAYS_FROM_HOURS.format(where=f"WHERE {_PAIR}")
_DAY_OF_PAIR = _DAYS_FROM_HOURS.format(where=f"WHERE {_PAIR} AND period_us >= ? AND period_us < ?")
# At most PROMOTE_AT index entries are read to tell whether a pair has reached it.
_REACHED = f"SELECT count(*) FROM (SELECT 1 FROM build_tags WHERE {_PAIR} LIMIT ?) AS reached"

# What a migration to schema 5 ran to give an existing database its daily tag totals; the hourly ones came
# later (add_hourly).
MIGRATION = (
    """
    -- Tag pairs that PROMOTE_AT or more builds of an account carry: their totals are kept below.
    CREATE TABLE tag_pairs (
        account_id INTEGER NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (account_id, key, value)
    ) WITHOUT ROWID;
"""
    + TABLE.format(name="tag_daily_totals")
    + _PROMOTE_ALL.replace("?", str(PROMOTE_AT))
    + ";\n"
    + _totals_all(TAG_DAILY_TOTALS)
    + ";\n"
)
# Every promoted pair's hourly totals, from its builds.
FILL_HOURLY = _totals_all(TAG_HOURLY_TOTALS)


def add_hourly(conn: sqlite3.Connection, table: str) -> None:
    """The migration step that gives the pairs already promoted their hourly totals, made anew whatever a
    database taken back to an earlier step still holds; `table` is the engine's definition of the table."""
    conn.execute("DROP TABLE IF EXISTS tag_hourly_totals")
    conn.execute(table)
    conn.execute(FILL_HOURLY)


def recompute_all(conn: sqlite3.Connection) -> None:
    """Promote every pair that has reached PROMOTE_AT and rebuild all tag totals from the builds."""
    conn.execute("DELETE FROM tag_hourly_totals")
    conn.execute("DELETE FROM tag_daily_totals")
    conn.execute("DELETE FROM tag_pairs")
    conn.execute(_PROMOTE_ALL, (PROMOTE_AT,))
    conn.execute(FILL_HOURLY)
    fill_from_hours(conn)


def promote_from_parts(conn: sqlite3.Connection, parts: str) -> None:
    """Promote the pairs whose rows in the table `parts` (the columns of tag_hourly_totals, one pair's hour in any
    number of rows; a name from the store's code) add up to PROMOTE_AT builds, and give them their hourly totals,
    each hour the sum of its rows. What follows is `fill_from_hours`."""
    conn.execute(
        f"INSERT INTO tag_pairs (account_id, key, value) SELECT account_id, key, value FROM {parts}"
        " GROUP BY 1, 2, 3 HAVING sum(builds) >= ?",
        (PROMOTE_AT,),
    )
    conn.execute(
        f"INSERT INTO tag_hourly_totals {_COLUMN_NAMES} SELECT h.account_id, h.key, h.value, h.period_us, h.status,"
        f" {SUMMED_FIGURES} FROM {parts} h JOIN tag_pairs p"
        " ON p.account_id = h.account_id AND p.key = h.key AND p.value = h.value GROUP BY 1, 2, 3, 4, 5"
    )


def fill_from_hours(conn: sqlite3.Connection) -> None:
    """Every promoted pair's daily totals, from its hourly totals, and its day figures, from its tag rows (the
    daily totals must hold none yet): what follows once `tag_pairs` and the hourly totals are complete."""
    conn.execute(_ALL_DAYS)
    tag_figures.fill_all(conn)


_ROW = (
    "SELECT builds, cpu_seconds, duration_us, nar_size_bytes, first_start_us, last_stop_us FROM tag_hourly_totals"
    f" WHERE {_PAIR} AND period_us = ? AND status = ?"
)
_DELETE = f"DELETE FROM tag_hourly_totals WHERE {_PAIR} AND period_us = ? AND status = ?"
_UPSERT = (
    f"INSERT INTO tag_hourly_totals {_COLUMN_NAMES} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (account_id, key, value, period_us, status) DO UPDATE SET builds = excluded.builds,"
    " cpu_seconds = excluded.cpu_seconds, duration_us = excluded.duration_us,"
    " nar_size_bytes = excluded.nar_size_bytes, first_start_us = excluded.first_start_us,"
    " last_stop_us = excluded.last_stop_us"
)

Pair = tuple[int, str, str]  # (account id, key, value)
# status, cpu, duration_us, nar, start_us, stop_us, and the duration's and queue time's text
Stats = tuple[str, int, int | None, int, int, int | None, str | None, str | None]


def _least(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _most(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _apply_delta(conn: sqlite3.Connection, pair: Pair, hour: int, status: str, delta: HourDelta) -> None:
    """Add one (pair, hour, status)'s differences; read its builds again only when a build taken away may
    have held the first start or the last stop."""
    key = (*pair, hour, status)
    row = conn.execute(_ROW, key).fetchone() or (0, 0, 0, 0, None, None)
    builds = row[0] + delta.builds
    if builds <= 0:
        conn.execute(_DELETE, key)
        return
    first, last = _least(row[4], delta.first_added), _most(row[5], delta.last_added)
    if (delta.first_removed is not None and first is not None and delta.first_removed <= first) or (
        delta.last_removed is not None and last is not None and delta.last_removed >= last
    ):
        conn.execute(_DELETE, key)
        conn.execute(_RECOMPUTE_HOUR, (*pair, hour, hour + US_PER_HOUR, status))
        return
    sums = (row[1] + delta.cpu, row[2] + delta.duration, row[3] + delta.nar)
    conn.execute(_UPSERT, (*key, builds, *sums, first, last))


def _promote(conn: sqlite3.Connection, pair: Pair) -> None:
    """Make a pair that reached PROMOTE_AT a promoted one, its totals and day figures computed from its builds
    once."""
    conn.execute("INSERT INTO tag_pairs (account_id, key, value) VALUES (?, ?, ?)", pair)
    conn.execute(f"DELETE FROM tag_hourly_totals WHERE {_PAIR}", pair)
    conn.execute(f"DELETE FROM tag_daily_totals WHERE {_PAIR}", pair)
    conn.execute(_PAIR_HOURS, pair)
    conn.execute(_PAIR_DAYS, pair)
    tag_figures.fill_pair(conn, pair)


def apply_touched(
    conn: sqlite3.Connection,
    touched: dict[Pair, dict[tuple[int, str], HourDelta]],
    figures: dict[Pair, dict[tuple[int, str], Delta]],
) -> None:
    """Bring the totals and day figures of every pair a write touched in step by differences (`touched` by
    hour and status, `figures` by day and status), hours first and then the days made of them; promote pairs
    that reached PROMOTE_AT."""
    for pair, deltas in touched.items():
        if conn.execute(f"SELECT 1 FROM tag_pairs WHERE {_PAIR}", pair).fetchone() is None:
            (count,) = conn.execute(_REACHED, (*pair, PROMOTE_AT)).fetchone()
            if count >= PROMOTE_AT:
                _promote(conn, pair)
            continue
        days = set()
        for (hour, status), delta in deltas.items():
            _apply_delta(conn, pair, hour, status, delta)
            days.add(hour - hour % US_PER_DAY)
        for day in sorted(days):
            conn.execute(f"DELETE FROM tag_daily_totals WHERE {_PAIR} AND period_us = ?", (*pair, day))
            conn.execute(_DAY_OF_PAIR, (*pair, day, day + US_PER_DAY))
        tag_figures.apply(conn, pair, figures[pair])


class TagTouches:
    """What the builds a write adds and takes away change in each (pair, hour, status), and in each (pair, day,
    status)'s figures, until there are too many pairs to track."""

    def __init__(self) -> None:
        self.touched: dict[Pair, dict[tuple[int, str], HourDelta]] = {}
        self.figures: dict[Pair, dict[tuple[int, str], Delta]] = {}
        self.overflow = False

    def add(self, sign: int, tags: list[tuple[int, str, str, int, int]], stats: list[Stats]) -> None:
        """Rows of build_tags, (account id, key, value, create_us, build id, ...), each with its build's figures."""
        if self.overflow:
            return
        touched, figures = self.touched, self.figures
        for (account_id, key, value, create_us, *_), (status, cpu, duration, nar, start, stop, duration_text,
                                                       queue_text) in zip(tags, stats, strict=True):
            pair = (account_id, key, value)
            hours = touched.get(pair)
            if hours is None:
                hours = touched[pair] = {}
                figures[pair] = {}
            slot = (create_us - create_us % US_PER_HOUR, status)
            delta = hours.get(slot)
            if delta is None:
                delta = hours[slot] = HourDelta()
            delta.add(sign, cpu, duration, nar, start, stop)
            days = figures[pair]
            day = (create_us - create_us % US_PER_DAY, status)
            change = days.get(day)
            if change is None:
                change = days[day] = Delta()
            change.add(sign, cpu, duration_text, queue_text)
        if len(touched) > TRACK_LIMIT:
            self.overflow, self.touched, self.figures = True, {}, {}

    def apply(self, conn: sqlite3.Connection) -> None:
        if self.overflow:
            recompute_all(conn)
        else:
            apply_touched(conn, self.touched, self.figures)


def _pair_size(account_id: int, key: str, value: str, build_filter: BuildFilter, cap: int) -> Query:
    """-1 for a pair whose totals are kept (it matches many builds); otherwise how many of its builds lie in
    the filter's window, counted up to `cap` (a pair without totals has fewer builds than that in all)."""
    window = "create_us >= ?" + (" AND create_us < ?" if build_filter.create_to_us is not None else "")
    params: list[object] = [account_id, key, value, account_id, key, value, build_filter.create_from_us]
    if build_filter.create_to_us is not None:
        params.append(build_filter.create_to_us)
    sql = (
        "CASE WHEN EXISTS (SELECT 1 FROM tag_pairs WHERE account_id = ? AND key = ? AND value = ?) THEN -1"
        " ELSE (SELECT count(*) FROM (SELECT 1 FROM build_tags WHERE account_id = ? AND key = ? AND value = ?"
        f" AND {window} LIMIT ?) AS reached) END"
    )
    return sql, [*params, cap]


def pair_sizes(account_id: int, build_filter: BuildFilter) -> Query:
    """One row with a column per tag pair of the filter: -1 when its totals are kept, else its builds in the
    window counted up to PROMOTE_AT (pairs without totals have fewer builds than that, so each reads few
    entries). One statement for all the pairs: a summary asks once, whatever the number of its pairs."""
    sizes = [_pair_size(account_id, key, value, build_filter, PROMOTE_AT) for key, value in build_filter.tags]
    return "SELECT " + ", ".join(sql for sql, _ in sizes), [p for _, params in sizes for p in params]


def ranked(build_filter: BuildFilter, sizes: list[int]) -> tuple[BuildFilter, bool]:
    """The filter with its rarest tag pair first, and whether it is one pair with kept totals; pairs with
    totals (size -1) come last, in the order given."""
    order = sorted((size < 0, size, index) for index, size in enumerate(sizes))
    tags = tuple(build_filter.tags[index] for _, _, index in order)
    promoted = len(tags) == 1 and order[0][0]
    return msgspec.structs.replace(build_filter, tags=tags), promoted
