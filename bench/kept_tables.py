"""What each kept (derived) table buys: the answer time of the queries it serves, with it and without it.

    python bench/kept_tables.py DB [RUNS]

DB is a SQLite database imported from `buildreport sample` data (e.g. bench/data's 1,000,000 builds; its
newest builds end at the next midnight after the import). Each case runs in process, on one connection, the
query the server runs and what the server does with its rows (merging a summary's parts, building the
statistics groups), RUNS times after one warm-up; the p50 is printed beside the target of bench/report.md.
"Without" a table is the same request answered the way the store answers it when the table may not
(store/kept.py): the declaration is replaced by one that answers nothing, so the store's own fallback runs.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

from buildreport.filters import BuildFilter, GroupBy, StatsQuery, UsageQuery
from buildreport.insights import stats
from buildreport.models import BuildStatus
from buildreport.store import open_database, queries, stats_queries, tag_totals
from buildreport.store.day_figures import DAY_FIGURES
from buildreport.store.kept import US_PER_DAY, KeptTable
from buildreport.store.reader import merge_summary_rows

TARGETS_MS = {
    "/builds/summary 365 days": 20,
    "/builds/summary 30 days": None,
    "/builds/summary 365 days, project:web": 20,
    "/builds/summary 30 days, project:web": 5,
    "/builds/stats group_by=day, 30 days": 50,
    "/builds/stats group_by=day, 365 days": 500,
    "/builds/stats group_by=day, 30 days, status built": None,
    "/usage one month": 10,
    "/usage one year": 20,
    "/usage/breakdown group_by=day, one year": 20,
}


def nothing(table: KeptTable) -> KeptTable:
    """The table declared as answering no filter at all."""
    return table._replace(fields=frozenset(), tag_pairs=-1)


@contextmanager
def without(module: Any, name: str, value: Any) -> Any:
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


def p50_ms(run: Callable[[], object], runs: int) -> float:
    run()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 3)


def main(db: str, runs: int) -> None:
    conn = open_database(db)
    (account_id,) = conn.execute("SELECT account_id FROM accounts WHERE name = 'acme'").fetchone()
    (newest,) = conn.execute("SELECT max(create_us) FROM builds").fetchone()
    end = newest - newest % US_PER_DAY + US_PER_DAY  # the sample's next midnight

    def rows(query: tuple[str, list[object]]) -> list[tuple]:
        return conn.execute(*query).fetchall()

    def summary(days: int, tags: tuple[tuple[str, str], ...] = ()) -> Callable[[], object]:
        build_filter = BuildFilter(create_from_us=end - days * US_PER_DAY, tags=tags)

        def run() -> object:
            ranked, promoted = build_filter, False
            if tags:
                (sizes,) = rows(tag_totals.pair_sizes(account_id, build_filter))
                ranked, promoted = tag_totals.ranked(build_filter, list(sizes))
            return merge_summary_rows(rows(queries.summary(account_id, ranked, promoted)))

        return run

    def by_day(days: int, statuses: tuple = ()) -> Callable[[], object]:
        build_filter = BuildFilter(create_from_us=end - days * US_PER_DAY, create_to_us=end, statuses=statuses)
        query = StatsQuery(filter=build_filter, group_by=GroupBy("day"), end_us=end)
        return lambda: stats.build_stats(rows(stats_queries.stats_rows(account_id, build_filter, query.group_by)),
                                         query)

    def usage(days: int, grouped: bool, kept: bool) -> Callable[[], object]:
        query = UsageQuery(from_us=end - days * US_PER_DAY)
        if kept:
            sql = stats_queries.usage_by_day(account_id, query) if grouped else queries.usage(account_id, query)
            return lambda: rows(sql)
        # Without daily usage: the billable builds that stopped in range, from the builds themselves.
        where, params = stats_queries.stopped_billable(query)
        select = (f"SELECT b.stop_us - b.stop_us % {US_PER_DAY}, sum(b.cpu_seconds), count(*)" if grouped
                  else "SELECT coalesce(sum(b.cpu_seconds), 0), count(*)")
        sql = f"{select} FROM builds b WHERE {where}" + (" GROUP BY 1 ORDER BY 1" if grouped else "")
        return lambda: rows((sql, [account_id, *params]))

    web = (("project", "web"),)
    results: list[dict[str, Any]] = []

    def measure(table: str, name: str, with_it: Callable[[], object], without_it: Callable[[], object]) -> None:
        result = {"table": table, "request": name, "with_ms": p50_ms(with_it, runs),
                  "without_ms": p50_ms(without_it, runs), "target_ms": TARGETS_MS.get(name)}
        results.append(result)
        print(json.dumps(result), flush=True)

    def totals_off(run: Callable[[], object]) -> Callable[[], object]:
        def off() -> object:
            with without(queries, "HOURLY_TOTALS", nothing(queries.HOURLY_TOTALS)), \
                    without(queries, "DAILY_TOTALS", nothing(queries.DAILY_TOTALS)):
                return run()
        return off

    def tag_totals_off(run: Callable[[], object]) -> Callable[[], object]:
        def off() -> object:
            with without(queries, "TAG_HOURLY_TOTALS", nothing(queries.TAG_HOURLY_TOTALS)), \
                    without(queries, "TAG_DAILY_TOTALS", nothing(queries.TAG_DAILY_TOTALS)):
                return run()
        return off

    def period_tables(tables: tuple, run: Callable[[], object]) -> Callable[[], object]:
        def off() -> object:
            with without(stats_queries, "PERIOD_TABLES", tables):
                return run()
        return off

    for days in (365, 30):
        measure("hourly_totals + daily_totals", f"/builds/summary {days} days", summary(days),
                totals_off(summary(days)))
        measure("tag_pairs + tag_hourly_totals + tag_daily_totals", f"/builds/summary {days} days, project:web",
                summary(days, web), tag_totals_off(summary(days, web)))
    for days in (365, 30):
        name = f"/builds/stats group_by=day, {days} days"
        measure("day_summaries", name, by_day(days), period_tables((DAY_FIGURES,), by_day(days)))
        measure("day_summaries + day_figures", name, by_day(days), period_tables((), by_day(days)))
    built = (BuildStatus.built,)
    measure("day_figures", "/builds/stats group_by=day, 30 days, status built", by_day(30, built),
            period_tables((), by_day(30, built)))
    measure("day_figures", "/builds/stats group_by=day, 365 days, status built", by_day(365, built),
            period_tables((), by_day(365, built)))
    for days, name in ((30, "/usage one month"), (365, "/usage one year")):
        measure("daily_usage", name, usage(days, False, True), usage(days, False, False))
    measure("daily_usage", "/usage/breakdown group_by=day, one year", usage(365, True, True), usage(365, True, False))
    conn.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 15)
