"""Large writes into PostgreSQL: rows sent through COPY, and the kept figures of a load into a database with no
builds computed from its builds in the database, set-based.

COPY sends rows as a stream the server reads straight into the table: no statement to parse, no parameters
to bind a row. In binary, a build's JSON (a `bytea`) travels as its bytes rather than as hex text twice its
size. Measured in bench/notes.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from buildreport.models import BILLABLE
from buildreport.store import day_figures
from buildreport.store.build_rows import tags_of_builds
from buildreport.store.filter_sql import in_list
from buildreport.store.kept import SUMMED_FIGURES, US_PER_DAY, US_PER_HOUR

_TYPES = "SELECT attname, atttypid FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped"


def copy_rows(
    conn: psycopg.Connection[Any], table: str, columns: Sequence[str], rows: Iterable[Sequence[object]]
) -> int:
    """Write `rows` (values in the order of `columns`) into `table` through one binary COPY; how many. The names
    come from the store's code, never from input."""
    types = dict(conn.execute(_TYPES, (table,)).fetchall())
    count = 0
    with conn.cursor().copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types([types[name] for name in columns])
        for row in rows:
            copy.write_row(row)
            count += 1
    return count


# The tag rows of every build, as Row.tag_values makes them, read from the builds' JSON once they are all in.
TAGS_OF_BUILDS = tags_of_builds("CROSS JOIN LATERAL json_each_text(convert_from(b.body, 'UTF8')::json -> 'tags') AS t")
# Each account's sums, exact (`numeric`), to refuse a load before totals that would not fit are written.
ACCOUNT_SUMS = (
    "SELECT account_id, sum(cpu_seconds), coalesce(sum(duration_us), 0), sum(nar_size_bytes) FROM builds"
    " GROUP BY account_id"
)
_TOTALS_COLUMNS = (
    "(account_id, period_us, status, builds, cpu_seconds, duration_us, nar_size_bytes, first_start_us, last_stop_us)"
)
# The definitions of store.totals, over every account at once.
_FILL_TOTALS = (
    f"INSERT INTO hourly_totals {_TOTALS_COLUMNS} SELECT account_id, create_us - create_us % {US_PER_HOUR}, status,"
    " count(*), sum(cpu_seconds), coalesce(sum(duration_us), 0), sum(nar_size_bytes), min(start_us), max(stop_us)"
    " FROM builds GROUP BY 1, 2, 3",
    f"INSERT INTO daily_totals {_TOTALS_COLUMNS} SELECT account_id, period_us - period_us % {US_PER_DAY}, status,"
    f" {SUMMED_FIGURES} FROM hourly_totals GROUP BY 1, 2, 3",
    f"INSERT INTO daily_usage (account_id, day_us, builds, cpu_seconds) SELECT account_id,"
    f" stop_us - stop_us % {US_PER_DAY}, count(*), sum(cpu_seconds) FROM builds"
    f" WHERE stop_us IS NOT NULL AND status IN {in_list(BILLABLE)} GROUP BY 1, 2",
)
# Each (account, day, status)'s figures, for day_figures.pack. A duration's text reads as the same double in
# PostgreSQL as in Python (both round correctly), so the packed value equals the writer's.
_DAY_FIGURES = (
    f"SELECT account_id, create_us - create_us % {US_PER_DAY}, status, count(*), sum(cpu_seconds),"
    " array_remove(array_agg(duration_text::float8), NULL), array_remove(array_agg(queue_text::float8), NULL)"
    " FROM builds GROUP BY 1, 2, 3"
)

DAYS_AT_ONCE = 1000  # (account, day, status) groups read and written together


def fill_totals(conn: psycopg.Connection[Any]) -> None:
    """Hourly and daily totals, daily usage and day figures of every build: for a database whose totals tables
    are empty."""
    for statement in _FILL_TOTALS:
        conn.execute(statement)
    # Read through a server-side cursor, some days at a time: every duration of a large load at once would
    # take more memory than the rest of the import.
    with conn.cursor(name="buildreport_day_figures") as groups:
        groups.execute(_DAY_FIGURES)
        while chunk := groups.fetchmany(DAYS_AT_ONCE):
            days = [
                (account_id, day, status, day_figures.pack(builds, cpu, durations, queue_times))
                for account_id, day, status, builds, cpu, durations, queue_times in chunk
            ]
            copy_rows(conn, "day_figures", ("account_id", "day_us", "status", "figures"), days)

# Accounts given their ids by a load: the identity goes on after the highest, for accounts made later.
NEXT_ACCOUNT_ID = (
    "SELECT setval(pg_get_serial_sequence('accounts', 'account_id'), coalesce(max(account_id), 0) + 1, false)"
    " FROM accounts"
)


@contextmanager
def synchronous_commit(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """Around a large write that a vacuum follows (schema.refresh_statistics): its commit waits for its WAL to
    reach the disk, even on a server that commits asynchronously. A vacuum marks a page all-visible only once
    the commit of its rows is flushed, and each row of a page not so marked is fetched by an index-only scan
    that reads it; one flush costs nothing beside a bulk write."""
    conn.execute("SET synchronous_commit = on")
    try:
        yield
    finally:
        conn.execute("RESET synchronous_commit")


def holds_builds(conn: Any) -> bool:
    return conn.execute("SELECT 1 FROM builds LIMIT 1").fetchone() is not None


# A table's indexes other than those of its constraints (the primary key), with their definitions.
_SECONDARY_INDEXES = (
    "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = %s"
    " AND indexname NOT IN (SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass)"
)


@contextmanager
def deferred_indexes(conn: psycopg.Connection[Any], table: str) -> Iterator[None]:
    """Inside the transaction that fills an empty `table` that nothing else reads yet: its secondary indexes are
    dropped, and made again from their own definitions once the rows are in. One pass over sorted rows costs less
    than keeping them up row by row (bench/notes.md). A block that raises leaves them to the rollback."""
    made = conn.execute(_SECONDARY_INDEXES, (table, table)).fetchall()
    for name, _ in made:
        conn.execute(f'DROP INDEX "{name}"')  # names read from the catalog, never from input
    yield
    for _, definition in made:
        conn.execute(definition)
