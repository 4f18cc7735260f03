"""Every query that serves a request is backed by an index: EXPLAIN QUERY PLAN shows no table scan.

The checks run on small, empty databases here, and `make bench` runs them again on the database it measured, at
any number of builds (bench/plans.py): BUILDREPORT_PLANS_SQLITE or BUILDREPORT_PLANS_POSTGRESQL then names that
database, only the checks of its engine run, and BUILDREPORT_PLANS_DAYS may narrow the windows to the last days.
There PostgreSQL plans with the data's own statistics and table scans are not priced out, so the plans are the
ones requests get; a table read whole fails unless it holds few rows.
"""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

from buildreport.events.models import Series
from buildreport.filters import BadgeSeries, BuildFilter, Cursor, GroupBy, ListQuery, UsageQuery
from buildreport.models import BuildStatus
from buildreport.store import (
    badges,
    day_figures,
    day_summaries,
    event_reads,
    hooks,
    prune,
    queries,
    stats_queries,
    tag_figures,
    tag_totals,
    trust,
)
from buildreport.store import events as store_events
from buildreport.store.build_rows import builds_by_source
from buildreport.store.dialect import POSTGRESQL, SQLITE
from buildreport.store.links import LINKED_ABOVE, LINKED_BELOW
from buildreport.store.postgres import stats_queries as postgres_stats
from buildreport.store.queries import US_PER_DAY, US_PER_HOUR
from buildreport.store.sqlite.schema import attach_auth, auth_path, open_database
from buildreport.times import now_us

PLANS_SQLITE = os.environ.get("BUILDREPORT_PLANS_SQLITE")
PLANS_POSTGRESQL = os.environ.get("BUILDREPORT_PLANS_POSTGRESQL")
# The windows' start: all of history, or, on a measured database given BUILDREPORT_PLANS_DAYS, that many days
# before now (its data ends today): a planner with statistics reads a table whole for a window that holds most
# of it, and by an index for one that does not.
_DAYS = os.environ.get("BUILDREPORT_PLANS_DAYS")
START = now_us() - int(_DAYS) * US_PER_DAY if _DAYS and (PLANS_SQLITE or PLANS_POSTGRESQL) else 1
# The operator's tables (accounts, webhooks, trusted identities): few rows, which a plan may read whole.
SMALL_TABLE_ROWS = 10_000

FILTERS = {
    "window": BuildFilter(create_from_us=START, create_to_us=None),
    "closed window": BuildFilter(create_from_us=START, create_to_us=START + 1),
    "status": BuildFilter(create_from_us=START, statuses=(BuildStatus.built, BuildStatus.timeout)),
    "one tag": BuildFilter(create_from_us=START, tags=(("project", "web"),)),
    "two tags and status": BuildFilter(
        create_from_us=START, tags=(("a", "1"), ("b", "2")), statuses=(BuildStatus.built,)
    ),
    "derivation": BuildFilter(create_from_us=START, derivation_path="/nix/store/x.drv"),
}

# A window of whole days with a partial day at each edge.
WHOLE_DAYS = BuildFilter(create_from_us=US_PER_DAY // 2, create_to_us=10 * US_PER_DAY + 5)

BADGE_SERIES = {
    "derivation name": BadgeSeries("hello-2.12"),
    "system and tags": BadgeSeries("hello-2.12", "x86_64-linux", (("branch", "main"), ("ci", "1"))),
}

QUERIES = {
    **{f"list, {name}": queries.list_builds(1, ListQuery(filter=f)) for name, f in FILTERS.items()},
    **{
        f"list page 2, {name}": queries.list_builds(1, ListQuery(filter=f, cursor=Cursor(5, 6)))
        for name, f in FILTERS.items()
    },
    **{f"summary, {name}": queries.summary(1, f) for name, f in FILTERS.items() if f.derivation_path is None},
    **{
        f"summary from tag totals, {name}": queries.summary(1, f, promoted=True)
        for name, f in FILTERS.items()
        if len(f.tags) == 1
    },
    "summary from tag totals, closed window": queries.summary(
        1,
        BuildFilter(create_from_us=START, create_to_us=START + 10 * US_PER_DAY, tags=(("project", "web"),)),
        promoted=True,
    ),
    "tag pair size, open": tag_totals.pair_sizes(1, FILTERS["one tag"]),
    "tag pair size, closed": tag_totals.pair_sizes(
        1, BuildFilter(create_from_us=START, create_to_us=START + 1, tags=(("project", "web"),))
    ),
    "tag pair sizes, two pairs": tag_totals.pair_sizes(1, FILTERS["two tags and status"]),
    "tag pair reached the threshold (writes)": (tag_totals._REACHED, [1, "project", "web", 500]),
    "tag totals of one hour and status (writes)": (tag_totals._RECOMPUTE_HOUR,
                                                   [1, "project", "web", 0, US_PER_HOUR, "built"]),
    "tag totals row (writes)": (tag_totals._ROW, [1, "project", "web", 0, "built"]),
    # Run once, as a pair reaches PROMOTE_AT builds: a value the planner's statistics do not hold as common, as
    # on a measured database "project:web" is (thousands of builds, which PostgreSQL joins by reading every build).
    "tag totals of one pair (writes)": (tag_totals._PAIR_HOURS, [1, "project", "reaching-promotion"]),
    "tag totals of one pair's day from its hours (writes)": (tag_totals._DAY_OF_PAIR,
                                                             [1, "project", "web", 0, US_PER_DAY]),
    "tag totals of one pair's days from its hours (writes)": (tag_totals._PAIR_DAYS, [1, "project", "web"]),
    # (named as the engines' own statistics are: PostgreSQL's is its own below)
    "stats by tag, one pair's day from its tag rows (writes)": (tag_figures.day_rows(SQLITE),
                                                                 [1, "project", "web", 0, US_PER_DAY]),
    "next day of one pair (writes)": (tag_figures._NEXT, [1, "project", "web", 0]),
    **{
        f"kept figures of {whose} day and status, {what} (writes)": (getattr(kept, what), key)
        for whose, kept, key in (
            ("one pair's", tag_figures.KEPT_DAYS, [1, "project", "web", 0, "built"]),
            ("one", day_figures.KEPT_DAYS, [1, 0, "built"]),
        )
        for what in ("last", "parts", "delete")
    },
    "builds of one day (writes)": (day_figures._DAY_BUILDS, [1, 0, US_PER_DAY]),
    "kept figures of one day (writes)": (day_figures._DELETE, [1, 0]),
    "kept figures of one day, every status (writes)": (day_summaries._DAY_FIGURES, [1, 0]),
    "summary of one day (writes)": (day_summaries._DELETE, [1, 0]),
    "prune, next builds (writes)": prune.batch_query(1, US_PER_DAY, None, 200),
    "prune, next builds whose logs go (writes)": prune.batch_query(1, US_PER_DAY, (5, 6), 200),
    "prune, what would go": prune.preview_query(1, US_PER_DAY),
    "usage, open": queries.usage(1, UsageQuery(from_us=START)),
    "usage, closed": queries.usage(1, UsageQuery(from_us=START, to_us=START + 1)),
    "one build": queries.get_build(1, 5),
    "log": queries.get_log(1, 5),
    "token": queries.token_by_digest(b"x" * 32),
    "trusted CI identities of an issuer": trust.policies_of("https://token.actions.githubusercontent.com"),
    **{f"badge, {name}": badges.newest_finished(1, series, SQLITE) for name, series in BADGE_SERIES.items()},
    "token by id (a signed link's token)": queries.token_by_id("tok_0123456789abcdef"),
    "builds by source id (POST /builds)": builds_by_source(1, ["runner-1:a", "runner-1:b"]),
    "ids linked to above the highest (POST /builds)": (LINKED_ABOVE, [5, 5]),
    "ids linked to below the lowest (POST /builds)": (LINKED_BELOW, [5, 5]),
    **{
        f"stats by {kind}, {name}": stats_queries.stats_rows(1, f, GroupBy(kind, "project" if kind == "tag" else None))
        for name, f in FILTERS.items()
        for kind in ("day", "system", "tag")
    },
    **{
        f"stats by {kind}, {name}": stats_queries.stats_rows(1, f, GroupBy(kind))
        for name, f in FILTERS.items()
        for kind in ("hour", "status", "derivation", "derivation_path")
    },
    # What a request by tag sends: the promoted values' whole days from kept figures, the edges and the other
    # values from the tag rows.
    **{
        f"stats by tag, {name}, part {i}": part
        for name, f in {**FILTERS, "whole days and edges": WHOLE_DAYS}.items()
        for i, part in enumerate(stats_queries.stats_parts(1, f, GroupBy("tag", "project")))
    },
    **{
        f"newest builds of derivation paths, {name}, failed {failed}": stats_queries.newest_of_paths(
            1, f, ["/nix/store/a.drv", "b"], failed
        )
        for name, f in FILTERS.items()
        for failed in (False, True)
    },
    **{
        f"usage by {kind}, {name}": query(1, UsageQuery(from_us=START, to_us=to))
        for kind, query in (
            ("day", stats_queries.usage_by_day),
            ("system", stats_queries.usage_by_system),
            ("tag", lambda account_id, usage: stats_queries.usage_by_tag(account_id, usage, "project")),
        )
        for name, to in (("open", None), ("closed", START + 1))
    },
    **{f"export keys, {name}": stats_queries.export_keys(1, f, Cursor(5, 6), 2000) for name, f in FILTERS.items()},
    "export bodies by id": stats_queries.bodies_by_id([3, 1, 2]),
    **{f"export bodies, half {i}": part for i, part in enumerate(stats_queries.body_parts([3, 1, 2, 4]))},
    "series states of a write's builds (writes)": store_events.series_states(
        1, [Series("hello-2.12", "x86_64-linux"), Series("linux-6.6", "aarch64-linux")]
    ),
    "an account's webhooks (writes)": store_events.live_hooks(1),
    "events feed": event_reads.feed(1, 5, [], 100),
    "events feed, some types": event_reads.feed(1, 5, ["build.failed", "build.recovered"], 100),
    "latest events (dashboard)": event_reads.recent_events(1, ["build.failed", "build.recovered"], 10),
}


def _read_only(path: str) -> sqlite3.Connection:
    """The measured database and its tokens file, opened so that nothing can change them."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    connection.execute("ATTACH DATABASE ? AS auth", (f"file:{auth_path(path)}?mode=ro",))
    return connection


def measured(engine: str) -> str | None:
    """The database `make bench` names for this engine's checks, if any; when it names only the other engine's,
    this engine's checks do not run."""
    named = {"sqlite": PLANS_SQLITE, "postgresql": PLANS_POSTGRESQL}
    if any(named.values()) and not named[engine]:
        pytest.skip(f"checking the plans of the measured {'PostgreSQL' if engine == 'sqlite' else 'SQLite'} database")
    return named[engine]


@pytest.fixture(scope="module")
def conn(tmp_path_factory):
    if (db := measured("sqlite")) is not None:
        connection = _read_only(db)
        yield connection
        connection.close()
        return
    path = tmp_path_factory.mktemp("plans") / "plans.db"
    connection = open_database(path)
    attach_auth(connection, path)  # as the server's connection has it
    yield connection
    connection.close()


@pytest.mark.parametrize("name", list(QUERIES))
def test_query_is_served_by_an_index(conn, name):
    sql, params = QUERIES[name]
    plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
    # Scanning the rows a subquery produced (named or not), or the one row of a SELECT without FROM, is fine;
    # scanning a table or index is not.
    allowed = (
        "SCAN (subquery", "SCAN CONSTANT ROW", "SCAN page", "SCAN reached", "SCAN usage_days", "SCAN wanted",
        *(f"SCAN {name}" for name in stats_queries.ROW_SOURCES),
    )  # fmt: skip
    scans = [
        step
        for step in plan
        if step.startswith("SCAN") and not step.startswith(allowed) and not step.endswith("CONSTANT ROWS")
    ]
    assert not scans, f"{name}: {plan}"
    assert any(step.startswith("SEARCH") for step in plan), f"{name}: {plan}"


def test_deliveries_are_leased_by_one_lookup_a_hook(conn):
    """The deliverer lists the hooks (a handful, made by the operator) and finds each one's first pending
    delivery in the index of pending deliveries; nothing else is read whole."""
    sql = hooks.CLAIM.format(skip_locked="")
    plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", [1, "me", 1, 1, 10, 1])]
    scans = [step for step in plan if step.startswith("SCAN") and not step.startswith("SCAN h")]
    assert not scans, plan
    assert any("deliveries_pending" in step for step in plan), plan


def test_source_ids_are_looked_up_one_by_one(conn):
    """Each source id of a write is one lookup in the unique index; a range would read all of the account's."""
    sql, params = builds_by_source(1, ["runner-1:a", "runner-1:b", "runner-1:c"])
    plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
    searches = [step for step in plan if step.startswith(("SEARCH", "SCAN"))]
    assert searches == ["SCAN 3 CONSTANT ROWS", "SCAN wanted",
                        "SEARCH builds USING COVERING INDEX builds_by_source (account_id=? AND source_id=?)"], plan


def test_lists_need_no_sort_step(conn):
    """Rows come out of the index in list order, so a page costs its own size, not the window's."""
    for name, f in FILTERS.items():
        sql, params = queries.list_builds(1, ListQuery(filter=f))
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
        assert not any("TEMP B-TREE" in step for step in plan), f"{name}: {plan}"


def test_export_pages_need_no_sort_step(conn):
    """An export reads each page's keys straight from the index in list order, whatever the window's size, and
    their JSON in id order from the table itself."""
    for name, f in FILTERS.items():
        sql, params = stats_queries.export_keys(1, f, Cursor(5, 6), 2000)
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
        assert not any("TEMP B-TREE" in step for step in plan), f"{name}: {plan}"
    for sql, params in [stats_queries.bodies_by_id([3, 1, 2]), *stats_queries.body_parts([3, 1, 2, 4])]:
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
        assert not any("TEMP B-TREE" in step for step in plan), plan


@pytest.mark.parametrize(
    "query", [stats_queries.account_totals_since(1), stats_queries.account_build_counts()], ids=["last day", "stored"]
)
def test_metrics_walk_only_the_accounts_and_read_totals_by_key(conn, query):
    """/metrics answers one row per account, so it lists the accounts; each one's figures come by their key."""
    sql, params = query
    plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
    scans = [step for step in plan if step.startswith("SCAN")]
    assert all(step.startswith("SCAN a") for step in scans), plan
    assert any(step.startswith("SEARCH") and "PRIMARY KEY" in step for step in plan), plan


# --- the same on PostgreSQL: its list and statistics queries where they differ, every other query as shared ----

_ENGINE_OWN = ("stats by ", "usage by ", "newest builds", "export bodies,", "badge, ")
PG_QUERIES = {
    # SQLite's statistics walk its indexes (store/stats_queries.py); PostgreSQL has its own (store/postgres/).
    # The export's keys and bodies by id stay: the command line's export reads them on either engine.
    **{name: query for name, query in QUERIES.items() if not name.startswith(_ENGINE_OWN)},
    **{f"list, {name}": queries.list_builds(1, ListQuery(filter=f)) for name, f in FILTERS.items()},
    **{
        f"list page 2, {name}": queries.list_builds(1, ListQuery(filter=f, cursor=Cursor(5, 6)))
        for name, f in FILTERS.items()
    },
    **{
        f"stats by {kind}, {name}": postgres_stats.stats_rows(1, f, GroupBy(kind, "project" if kind == "tag" else None))
        for name, f in FILTERS.items()
        for kind in ("day", "hour", "system", "status", "derivation", "tag")
    },
    # What a request sends: whole days from kept figures and the edges from the builds; a tag's two halves.
    **{
        f"stats by {kind}, {name}, part {i}": part
        for name, f in {**FILTERS, "whole days and edges": WHOLE_DAYS}.items()
        for kind in ("day", "tag")
        for i, part in enumerate(postgres_stats.stats_parts(1, f, GroupBy(kind, "project" if kind == "tag" else None)))
    },
    **{
        f"newest builds of derivation paths, {name}, failed {failed}": postgres_stats.newest_of_paths(
            1, f, ["/nix/store/a.drv", "b"], failed
        )
        for name, f in FILTERS.items()
        for failed in (False, True)
    },
    **{
        f"usage by {kind}, {name}": query(1, UsageQuery(from_us=START, to_us=to))
        for kind, query in (
            ("day", stats_queries.usage_by_day),
            ("system", stats_queries.usage_by_system),
            ("tag", lambda account_id, usage: stats_queries.usage_by_tag(account_id, usage, "project")),
        )
        for name, to in (("open", None), ("closed", START + 1))
    },
    **{
        f"export page, {name}": stats_queries.export_keys(1, f, Cursor(5, 6), 2000, bodies=True)
        for name, f in FILTERS.items()
    },
    "stats by tag, one pair's day from its tag rows (writes)": (tag_figures.day_rows(POSTGRESQL),
                                                                 [1, "project", "web", 0, US_PER_DAY]),
    **{f"badge, {name}": badges.newest_finished(1, series, POSTGRESQL) for name, series in BADGE_SERIES.items()},
}


def _scans(plan: dict) -> list[str]:
    """The tables a plan reads whole (sequential scans), anywhere in its tree."""
    found = [plan["Relation Name"]] if plan.get("Node Type") == "Seq Scan" else []
    for child in plan.get("Plans", ()):
        found += _scans(child)
    return found


def _large_scans(conn, plan: dict) -> list[str]:
    """The tables a plan reads whole; on a measured database, only those with more than a few rows."""
    scans = _scans(plan)
    if not PLANS_POSTGRESQL:
        return scans  # table scans are priced out (pg_conn): any that remains is one no index can replace
    rows = {table: conn.execute("SELECT reltuples FROM pg_class WHERE oid = ?::regclass", (table,)).fetchone()[0]
            for table in set(scans)}
    return [table for table in scans if rows[table] > SMALL_TABLE_ROWS]


@pytest.fixture(scope="module")
def pg_conn(request):
    from buildreport.store import open_database as open_any

    if (url := measured("postgresql")) is not None:
        connection = open_any(url)
        yield connection
        connection.close()
        return
    pg_cluster = request.getfixturevalue("pg_cluster")
    name = pg_cluster.create_database()
    connection = open_any(pg_cluster.url(name))
    # With table scans priced out, a scan that remains is one no index can replace.
    connection.execute("SET enable_seqscan = off")
    yield connection
    connection.close()
    pg_cluster.drop_database(name)


@pytest.mark.parametrize("name", list(PG_QUERIES))
def test_query_is_served_by_an_index_on_postgresql(pg_conn, name):
    sql, params = PG_QUERIES[name]
    ((plan,),) = pg_conn.execute(f"EXPLAIN (FORMAT JSON) {sql}", params).fetchall()
    document = json.loads(plan) if isinstance(plan, str) else plan
    assert not _large_scans(pg_conn, document[0]["Plan"]), f"{name}: {document}"


def _index_conditions(plan: dict) -> list[str]:
    found = [plan["Index Cond"]] if "Index Cond" in plan else []
    for child in plan.get("Plans", ()):
        found += _index_conditions(child)
    return found


def _node_types(plan: dict, relation: str) -> list[str]:
    """The kinds of read of `relation` anywhere in a plan."""
    found = [plan["Node Type"]] if plan.get("Relation Name") == relation else []
    for child in plan.get("Plans", ()):
        found += _node_types(child, relation)
    return found


@pytest.mark.parametrize("name", ["window", "status", "one tag", "two tags and status"])
def test_statistics_by_tag_read_only_the_tag_index_on_postgresql(pg_conn, name):
    """A tag's rows are read from its index alone, which holds their figures, never fetched from the table."""
    for sql, params in postgres_stats.stats_parts(1, FILTERS[name], GroupBy("tag", "project")):
        ((plan,),) = pg_conn.execute(f"EXPLAIN (FORMAT JSON) {sql}", params).fetchall()
        document = json.loads(plan) if isinstance(plan, str) else plan
        reads = _node_types(document[0]["Plan"], "build_tags")
        if "FROM tag_day_figures" in sql or "JOIN tag_day_figures" in sql:  # the kept figures of whole days
            assert not reads and _node_types(document[0]["Plan"], "tag_day_figures"), f"{name}: {document}"
        else:
            assert reads and set(reads) == {"Index Only Scan"}, f"{name}: {document}"


@pytest.mark.parametrize("kind", ["derivation_path", "status", "hour", "day"])
def test_groupings_of_a_window_read_builds_only_from_an_index_on_postgresql(pg_conn, kind):
    """A window's builds grouped by derivation path (the dashboard), status or hour, and a grouping by day's
    partial days, are read from an index alone (the time or the derivation index, which both hold what they
    group by and sum): fetched from the table, each build's row is read, JSON and all."""
    window = WHOLE_DAYS if kind == "day" else FILTERS["closed window"]
    reads = []
    for sql, params in postgres_stats.stats_parts(1, window, GroupBy(kind)):
        ((plan,),) = pg_conn.execute(f"EXPLAIN (FORMAT JSON) {sql}", params).fetchall()
        document = json.loads(plan) if isinstance(plan, str) else plan
        reads += _node_types(document[0]["Plan"], "builds")
    assert reads and set(reads) == {"Index Only Scan"}, reads


@pytest.mark.parametrize("kind", ["summary", "list"])
def test_each_further_tag_pair_is_one_lookup_by_its_whole_key_on_postgresql(pg_conn, kind):
    """Planned without statistics (a table just filled), every pair after the first is still looked up by its
    whole key: a lookup by build id alone reads every entry of a common pair."""
    three = BuildFilter(create_from_us=START, tags=(("GITHUB_RUN_ID", "1"), ("GITHUB_RUN_ATTEMPT", "1"), ("repo", "x")))
    if kind == "summary":
        sql, params = queries.summary(1, three)
    else:
        sql, params = queries.list_builds(1, ListQuery(filter=three))
    ((plan,),) = pg_conn.execute(f"EXPLAIN (FORMAT JSON) {sql}", params).fetchall()
    document = json.loads(plan) if isinstance(plan, str) else plan
    conditions = _index_conditions(document[0]["Plan"])
    for key in ("GITHUB_RUN_ATTEMPT", "repo"):
        (lookup,) = [c for c in conditions if f"'{key}'" in c]
        assert "create_us = t.create_us" in lookup and "build_id = t.build_id" in lookup, conditions


@pytest.mark.parametrize("name", list(BADGE_SERIES))
def test_a_badge_walks_the_derivation_name_index_newest_first(conn, pg_conn, name):
    """The newest finished build of a derivation name is the first of its index range, on either engine."""
    sql, params = badges.newest_finished(1, BADGE_SERIES[name], SQLITE)
    plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
    assert plan[0].startswith("SEARCH builds USING INDEX builds_by_name"), plan
    assert not any("TEMP B-TREE" in step for step in plan), plan
    sql, params = badges.newest_finished(1, BADGE_SERIES[name], POSTGRESQL)
    ((document,),) = pg_conn.execute(f"EXPLAIN (FORMAT JSON) {sql}", params).fetchall()
    text = document if isinstance(document, str) else json.dumps(document)
    assert "builds_by_name" in text and '"Sort"' not in text, text


def test_deliveries_are_leased_by_one_lookup_a_hook_on_postgresql(pg_conn):
    sql = hooks.CLAIM.format(skip_locked=POSTGRESQL.skip_locked)
    ((plan,),) = pg_conn.execute(f"EXPLAIN (FORMAT JSON) {sql}", [1, "me", 1, 1, 10, 1]).fetchall()
    document = json.loads(plan) if isinstance(plan, str) else plan
    assert set(_large_scans(pg_conn, document[0]["Plan"])) <= {"hooks"}, document


def _filters(plan: dict) -> list[str]:
    found = [plan["Filter"]] if "Filter" in plan else []
    for child in plan.get("Plans", ()):
        found += _filters(child)
    return found


def test_a_writes_keys_are_each_one_lookup_on_postgresql_whose_statistics_predate_them(request):
    """A write finds its source ids and its series' states one probe each, also in a database analysed before
    they were written: planned from such statistics, a list of keys is a filter over every source id (or series)
    of the account, a read that grows with every write."""
    import msgspec
    from records import record

    from buildreport.models import BuildRecord
    from buildreport.store import open_database as open_any
    from buildreport.store.transaction import write_records

    if PLANS_SQLITE or PLANS_POSTGRESQL:
        pytest.skip("it writes a database of its own, not the one `make bench` measured")
    conn = open_any(request.getfixturevalue("pg_url"))
    try:
        def write(first: int, count: int, source: bool) -> None:
            dicts = []
            for n in range(first, first + count):
                one = record(0, derivation_path=f"/nix/store/{n:032d}-p{n}.drv")
                for key in ("account", "build_id"):
                    one.pop(key)
                if source:
                    one["source_id"] = f"s:{n}"
                dicts.append(one)
            write_records(conn, "acme", msgspec.json.decode(msgspec.json.encode(dicts), type=list[BuildRecord]), 0)

        write(0, 200, source=False)
        conn.execute("ANALYZE")
        for first in range(200, 1200, 500):
            write(first, 500, source=True)
        (account_id,) = conn.execute("SELECT account_id FROM accounts WHERE name = 'acme'").fetchone()
        lookups = {
            "source_id": builds_by_source(account_id, [f"s:{n}" for n in range(300, 800)]),
            "derivation": store_events.series_states(account_id, [Series(f"p{n}", "x86_64-linux") for n in range(500)]),
        }
        for column, (sql, params) in lookups.items():
            ((plan,),) = conn.execute(f"EXPLAIN (FORMAT JSON) {sql}", params).fetchall()
            document = json.loads(plan) if isinstance(plan, str) else plan
            conditions = _index_conditions(document[0]["Plan"])
            assert any(f"{column} = " in c for c in conditions), document
            assert not any(column in f for f in _filters(document[0]["Plan"])), document
            assert len(conn.execute(sql, params).fetchall()) == 500
    finally:
        conn.close()
