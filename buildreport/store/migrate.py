"""`buildreport migrate`: a SQLite database copied whole into an empty PostgreSQL database, then checked.

Every table is copied as stored (builds with their JSON, logs, tags, kept totals, accounts, tokens and the
signing key, so that issued links and tokens keep working), in one PostgreSQL transaction: a copy that
fails or does not verify leaves the target as it was. Rows go through binary COPY, and each table's secondary
indexes are made once its rows are in (postgres.bulk); a server already on the target waits for the commit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

from buildreport.store.build_rows import BUILD_COLUMNS, TAG_COLUMNS
from buildreport.store.errors import DatabaseError
from buildreport.store.postgres import bulk
from buildreport.store.postgres.schema import open_database as open_postgres
from buildreport.store.postgres.schema import refresh_statistics
from buildreport.store.sqlite.schema import attach_auth
from buildreport.store.sqlite.schema import open_database as open_sqlite

_TOTALS = ("account_id", "period_us", "status", "builds", "cpu_seconds", "duration_us", "nar_size_bytes",
           "first_start_us", "last_stop_us")  # fmt: skip
# Table, its columns; parents before children.
TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("accounts", ("account_id", "name", "created_us")),
    ("builds", BUILD_COLUMNS),
    ("build_tags", TAG_COLUMNS),
    ("build_logs", ("build_id", "size_bytes", "zlib")),
    ("day_figures", ("account_id", "day_us", "status", "part", "figures")),
    ("day_summaries", ("account_id", "day_us", "figures")),
    ("hourly_totals", _TOTALS),
    ("daily_totals", _TOTALS),
    ("daily_usage", ("account_id", "day_us", "builds", "cpu_seconds")),
    ("kept_usage", ("account_id", "day_us", "builds", "cpu_seconds")),
    ("tag_pairs", ("account_id", "key", "value")),
    ("tag_daily_totals", ("account_id", "key", "value", *_TOTALS[1:])),
    ("tag_hourly_totals", ("account_id", "key", "value", *_TOTALS[1:])),
    ("tag_day_figures", ("account_id", "key", "value", "day_us", "status", "part", "figures")),
    ("auth.tokens", ("token_id", "account", "digest", "scopes", "label", "created_us", "expires_us", "revoked_us",
                     "last_used_us", "claims")),
    ("auth.trust_policies", ("policy_id", "account", "issuer", "claims", "scopes", "lifetime_s", "created_us")),
)  # fmt: skip
BATCH = 5_000
# What must agree after the copy, per account: the builds and their sums, and the kept totals' sums.
_CHECKS = (
    "SELECT account_id, count(*), sum(cpu_seconds), sum(coalesce(duration_us, 0)), sum(nar_size_bytes),"
    " sum(body_hash % 1000003) FROM builds GROUP BY account_id ORDER BY account_id",
    "SELECT account_id, sum(builds), sum(cpu_seconds), sum(duration_us), sum(nar_size_bytes) FROM daily_totals"
    " GROUP BY account_id ORDER BY account_id",
    "SELECT account_id, sum(builds), sum(cpu_seconds) FROM daily_usage GROUP BY account_id ORDER BY account_id",
    "SELECT account_id, sum(builds), sum(cpu_seconds) FROM kept_usage GROUP BY account_id ORDER BY account_id",
    "SELECT count(*), sum(length(key) + length(value)) FROM build_tags",
    "SELECT count(*), sum(size_bytes) FROM build_logs",
    "SELECT count(*) FROM tag_daily_totals",
    "SELECT count(*) FROM tag_hourly_totals",
    "SELECT count(*) FROM auth.tokens",
)


def _checks(run: Callable[[str], list[tuple]]) -> list[list[tuple]]:
    return [[tuple(int(v) if v is not None else None for v in row) for row in run(sql)] for sql in _CHECKS]


def migrate(source: Path | str, target: str, on_table: Callable[[str, int], None] | None = None) -> dict[str, int]:
    """Copy `source` (a SQLite file) into `target` (an empty PostgreSQL database); the rows copied per table."""
    if not Path(source).exists():
        raise DatabaseError(f"{source} does not exist")
    if not Path(source).is_file():
        raise DatabaseError(f"{source} is not a database file")
    src = open_sqlite(source, create=False)
    attach_auth(src, source)
    secret = Path(str(source) + ".secret")
    dst = open_postgres(target)
    try:
        (builds,) = dst.raw.execute("SELECT count(*) FROM builds").fetchone() or (0,)
        (accounts,) = dst.raw.execute("SELECT count(*) FROM accounts").fetchone() or (0,)
        if builds or accounts:
            raise DatabaseError("the target database holds builds already; migrate into an empty database")
        copied: dict[str, int] = {}
        started = time.perf_counter()
        src.execute("BEGIN")  # one consistent picture of the source
        with bulk.synchronous_commit(dst.raw), dst.raw.transaction():
            dst.raw.execute("TRUNCATE auth.tokens, auth.trust_policies, auth.signing_keys")
            for table, columns in TABLES:
                copied[table] = _copy_table(src, dst.raw, table, columns)
                if on_table is not None:
                    on_table(table, copied[table])
            dst.raw.execute(
                "SELECT setval(pg_get_serial_sequence('accounts', 'account_id'), coalesce(max(account_id), 0) + 1,"
                " false) FROM accounts"
            )
            if secret.is_file() and (key := secret.read_text().strip()):
                dst.raw.execute("INSERT INTO auth.signing_keys (name, secret) VALUES ('links', %s)", (key,))
            before = _checks(lambda sql: src.execute(sql).fetchall())
            after = _checks(lambda sql: dst.raw.execute(sql).fetchall())
            if before != after:
                raise DatabaseError("the copy does not match its source; nothing was written")
        src.execute("ROLLBACK")
        refresh_statistics(dst, copied["builds"])
        copied["seconds"] = round(time.perf_counter() - started, 3)  # type: ignore[assignment]
        return copied
    finally:
        src.close()
        dst.close()


def _copy_table(src, dst, table: str, columns: tuple[str, ...]) -> int:  # type: ignore[no-untyped-def]
    cursor = src.execute(f"SELECT {', '.join(columns)} FROM {table}")  # names from TABLES, never from input
    with bulk.deferred_indexes(dst, table):
        return bulk.copy_rows(dst, table, columns, _rows(cursor))


def _rows(cursor) -> Iterator[tuple]:  # type: ignore[no-untyped-def]
    while rows := cursor.fetchmany(BATCH):
        yield from rows
