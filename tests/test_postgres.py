"""PostgreSQL as the shared database of several servers: what one writes the others read, a revocation holds
everywhere at once, links open on any of them, and servers starting together migrate once."""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import httpx
import psycopg
import pytest
from click.testing import CliRunner
from conftest import NOW, Env, auth, query, record

from buildreport.cli.main import main
from buildreport.filters import BuildFilter, ListQuery
from buildreport.models import BuildStatus
from buildreport.store import queries, stats_queries
from buildreport.store.filter_sql import BinaryResults
from buildreport.store.postgres import stats_queries as postgres_stats
from buildreport.store.postgres.connection import translate
from buildreport.store.postgres.schema import MIGRATIONS, SCHEMA_VERSION
from buildreport.times import to_us


@pytest.fixture
def pg_env(pg_url, tmp_path):
    return Env(tmp_path, pg_url)


def cli(*args: str, expect: int = 0) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == expect, (result.stdout, result.stderr)
    return result.stdout + result.stderr


@pytest.fixture
def two_servers(pg_env, serve):
    pg_env.load([record(1)])
    return serve(pg_env.db), serve(pg_env.db)


def test_a_build_written_through_one_server_is_read_through_the_other(pg_env, two_servers):
    first, second = two_servers
    writer = pg_env.token(scopes=("build:read", "build:write"))
    body = {k: v for k, v in record(2).items() if k not in ("account", "build_id")} | {"source_id": "ci:2"}
    written = httpx.post(first.url + "/builds", json=[body], headers=auth(writer), timeout=10)
    assert written.status_code == 200, written.text
    (build_id,) = written.json()["build_ids"]
    read = httpx.get(f"{second.url}/builds/{build_id}", headers=auth(writer), timeout=10)
    assert read.status_code == 200
    assert read.json()["build_id"] == build_id
    summary = httpx.get(second.url + "/builds/summary?create_time_from=2000-01-01", headers=auth(writer), timeout=10)
    assert summary.json()["build_count"] == 2


def test_a_token_revoked_through_one_is_refused_by_every_server_at_once(pg_env, two_servers):
    first, second = two_servers
    secret = cli("token", "create", "--db", pg_env.db, "--account", "acme").splitlines()[0]
    for server in (first, second):
        assert httpx.get(server.url + "/builds/1", headers=auth(secret), timeout=10).status_code == 200
    ((token_id,),) = query(pg_env.db, "SELECT token_id FROM tokens", tokens=True)
    cli("token", "revoke", "--db", pg_env.db, token_id)
    for server in (first, second):
        refused = httpx.get(server.url + "/builds/1", headers=auth(secret), timeout=10)
        assert refused.status_code == 401
        assert 'error="invalid_token"' in refused.headers["www-authenticate"]


def test_a_link_issued_by_one_server_opens_on_the_other(pg_env, two_servers):
    first, second = two_servers
    secret = pg_env.token()
    link = httpx.get(first.url + "/builds/1/url", headers=auth(secret), timeout=10).json()["url"]
    path = link.split("/b/", 1)[1]
    assert httpx.get(f"{second.url}/b/{path}", timeout=10).status_code == 200


def test_servers_starting_together_migrate_the_database_once(pg_env):
    def start() -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "buildreport", "token", "list", "--db", pg_env.db]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda _: start(), range(6)))
    assert all(result.returncode == 0 for result in results), [r.stderr for r in results]
    assert query(pg_env.db, "SELECT version FROM buildreport_schema") == [(SCHEMA_VERSION,)]


def test_migration_gives_stored_builds_their_system_and_the_indexes_that_carry_it(pg_env):
    pg_env.load([record(1, system="x86_64-linux"), record(2, system="aarch64-darwin")])
    fresh = query(pg_env.db, "SELECT build_id, system FROM builds ORDER BY build_id")
    assert fresh == [(1, "x86_64-linux"), (2, "aarch64-darwin")]
    with psycopg.connect(pg_env.db, autocommit=True) as conn:
        # The schema one step back: dropping the column drops the two indexes that include it.
        _without_tag_stops(conn)
        conn.execute("ALTER TABLE builds DROP COLUMN system")
        conn.execute("CREATE INDEX builds_by_time ON builds (account_id, create_us, build_id)"
                     " INCLUDE (status, cpu_seconds, duration_text, queue_text, derivation_path)")
        conn.execute("CREATE INDEX builds_by_stop ON builds (account_id, stop_us) WHERE stop_us IS NOT NULL")
        conn.execute("UPDATE buildreport_schema SET version = %s", (_step("ADD COLUMN system"),))
    assert query(pg_env.db, "SELECT build_id, system FROM builds ORDER BY build_id") == fresh
    definitions = dict(query(pg_env.db, "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'builds'"))
    assert "system" in definitions["builds_by_time"] and "system" in definitions["builds_by_stop"]


def test_migration_keeps_each_days_figures_as_its_first_part(pg_env, monkeypatch):
    from buildreport.store import tag_totals
    from buildreport.store.postgres.schema import _keep_figures_in_parts

    monkeypatch.setattr(tag_totals, "PROMOTE_AT", 2)  # so that a pair has kept figures too
    pg_env.load([record(1, tags={"project": "web"}), record(2, build_status="build_failed", tags={"project": "web"})])
    tables = {"day_figures": "account_id, day_us, status", "tag_day_figures": "account_id, key, value, day_us, status"}
    fresh = {table: query(pg_env.db, f"SELECT {key}, part, figures FROM {table} ORDER BY {key}")
             for table, key in tables.items()}
    assert all(len(rows) == 2 and all(row[-2] == 0 for row in rows) for rows in fresh.values())
    with psycopg.connect(pg_env.db, autocommit=True) as conn:
        _without_tag_stops(conn)
        for table, key in tables.items():  # the schema one step back: keyed without a part number
            conn.execute(f"ALTER TABLE {table} DROP COLUMN part")
            conn.execute(f"ALTER TABLE {table} ADD PRIMARY KEY ({key})")
        conn.execute("UPDATE buildreport_schema SET version = %s", (MIGRATIONS.index(_keep_figures_in_parts),))
    for table, key in tables.items():
        assert query(pg_env.db, f"SELECT {key}, part, figures FROM {table} ORDER BY {key}") == fresh[table]
        (definition,) = query(pg_env.db, "SELECT pg_get_indexdef(indexrelid) FROM pg_index"
                                         f" WHERE indrelid = '{table}'::regclass AND indisprimary")
        assert definition[0].endswith("status, part)"), definition


def _without_tag_stops(conn: psycopg.Connection) -> None:
    """Undo the schema's latest step, which cannot run twice: tag rows without their build's stop time."""
    conn.execute("DROP INDEX build_tags_by_stop")
    conn.execute("ALTER TABLE build_tags DROP COLUMN stop_us")


def test_migration_gives_tag_rows_their_builds_stop_time_and_the_index_of_usage_by_tag(pg_env):
    pg_env.load([record(1, tags={"project": "web"}), record(2, build_status="running", tags={"project": "ml"}),
                 record(3, build_status="internal_error", tags={"run": "r3"})])
    rows = "SELECT t.build_id, t.stop_us, b.stop_us FROM build_tags t JOIN builds b USING (build_id) ORDER BY 1"
    fresh = query(pg_env.db, rows)
    assert [row[0] for row in fresh] == [1, 2, 3] and all(row[1] == row[2] for row in fresh)
    assert fresh[0][1] is not None and fresh[1][1] is None
    with psycopg.connect(pg_env.db, autocommit=True) as conn:
        _without_tag_stops(conn)
        conn.execute("UPDATE buildreport_schema SET version = %s", (_step("ADD COLUMN stop_us"),))
    assert query(pg_env.db, rows) == fresh
    ((definition,),) = query(pg_env.db, "SELECT indexdef FROM pg_indexes WHERE indexname = 'build_tags_by_stop'")
    assert "(account_id, key, stop_us, status, value, cpu_seconds)" in definition and "built" in definition


def _step(text: str) -> int:
    """The schema version just before the migration step whose SQL holds `text`."""
    return next(i for i, step in enumerate(MIGRATIONS) if isinstance(step, str) and text in step)


def test_migration_makes_every_write_of_builds_announce_itself(pg_env):
    pg_env.load([record(1)])
    with psycopg.connect(pg_env.db, autocommit=True) as conn:
        _without_tag_stops(conn)
        conn.execute("DROP TRIGGER builds_changed ON builds")
        conn.execute("DROP FUNCTION builds_changed()")
        conn.execute("UPDATE buildreport_schema SET version = %s", (_step("builds_changed"),))
    assert query(pg_env.db, "SELECT version FROM buildreport_schema") == [(SCHEMA_VERSION,)]
    triggers = query(pg_env.db, "SELECT tgname FROM pg_trigger WHERE tgrelid = 'builds'::regclass AND NOT tgisinternal")
    assert triggers == [("builds_changed",)]
    with psycopg.connect(pg_env.db, autocommit=True) as conn:
        conn.execute("LISTEN buildreport_builds")
        with psycopg.connect(pg_env.db) as writer:
            writer.execute("UPDATE builds SET body = body")
            writer.execute("DELETE FROM builds WHERE build_id = -1")
        assert [n.channel for n in conn.notifies(timeout=5, stop_after=1)] == ["buildreport_builds"]
        assert list(conn.notifies(timeout=0.2)) == []  # one notification for the whole transaction


def test_a_database_of_another_application_is_refused(pg_env):
    import psycopg

    with psycopg.connect(pg_env.db, autocommit=True) as conn:
        conn.execute("CREATE TABLE things (x integer)")
    out = cli("token", "list", "--db", pg_env.db, expect=1)
    assert "tables of another application" in out and "Traceback" not in out


def test_an_unreachable_server_is_one_clear_line(pg_env):
    url = pg_env.db.rsplit("/", 1)[0].rsplit(":", 1)[0] + ":1/nowhere"
    source = Env(pg_env.tmp, pg_env.tmp / "source.db")
    source.load([record(1)])  # a source that exists, so that the target is what fails
    for command in (["token", "list", "--db", url], ["migrate", "--from", str(source.db), "--to", url]):
        out = cli(*command, expect=1)
        assert out.startswith("Error: ") and ":1/nowhere" in out and "Traceback" not in out, out
        # The server's fault and its hint read as one line, without escaped line breaks or tabs.
        assert out.count("\n") == 1 and "\\n" not in out and "\\t" not in out, out
        assert "Connection refused" in out and "Is the server running" in out, out


def test_commands_on_a_sqlite_file_never_load_the_postgresql_driver(tmp_path):
    """`record` forks Nix from its own process: every megabyte it loads shows in the build's peak memory."""
    probe = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from buildreport.cli.main import main\n"
        f"result = CliRunner().invoke(main, ['token', 'list', '--db', {str(tmp_path / 'x.db')!r}])\n"
        "assert result.exit_code == 0, result.output\n"
        "print(sorted(name for name in sys.modules if name.startswith('psycopg')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_server_keeps_answering_after_the_database_drops_its_connections(pg_env, serve, pg_cluster):
    """A restart or failover ends every connection: the next read and write each open a new one."""
    pg_env.load([record(1)])
    secret = pg_env.token(scopes=("build:read", "build:write"))
    server = serve(pg_env.db)
    body = {k: v for k, v in record(2).items() if k not in ("account", "build_id")}

    def write(source: str) -> httpx.Response:
        records = [{**body, "source_id": source}]
        return httpx.post(server.url + "/builds", json=records, headers=auth(secret), timeout=10)

    assert write("ci:a").status_code == 200
    for path in ("/builds/1", "/builds/summary"):
        assert httpx.get(server.url + path, headers=auth(secret), timeout=10).status_code == 200
    dbname = pg_env.db.rsplit("/", 1)[1]
    ended = pg_cluster.admin().execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s", (dbname,)
    ).fetchone()
    assert ended[0] >= 2  # the server's read pool and its write connection
    assert write("ci:b").status_code == 200
    for path in ("/builds/1", "/builds/summary", "/healthz"):
        assert httpx.get(server.url + path, headers=auth(secret), timeout=10).status_code == 200


def test_reads_go_to_a_replica_and_token_checks_to_the_primary(pg_cluster, tmp_path, serve):
    """With `--read-db`, lists come from the replica (here held back by pausing its replay), while a build by
    id, the token check and writes go to the primary: a revocation holds at once whatever the replica lags."""
    import psycopg

    name = pg_cluster.create_database()
    env = Env(tmp_path, pg_cluster.url(name))
    env.load([record(1)])
    secret = env.token()
    replica = pg_cluster.start_replica()
    try:
        replica_db = replica.url(name)
        deadline = time.monotonic() + 30
        while query(replica_db, "SELECT count(*) FROM builds") != [(1,)]:
            assert time.monotonic() < deadline, "the replica never caught up"
            time.sleep(0.1)
        server = serve(env.db, "--read-db", replica_db)
        with psycopg.connect(replica.url(), autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_pause()")
        env.load([record(2)])
        listed = httpx.get(server.url + "/builds?create_time_from=2000-01-01", headers=auth(secret), timeout=10)
        assert [b["build_id"] for b in listed.json()] == [1]  # the replica has not replayed build 2 yet
        assert httpx.get(server.url + "/builds/2", headers=auth(secret), timeout=10).status_code == 200
        ((token_id,),) = query(env.db, "SELECT token_id FROM tokens", tokens=True)
        cli("token", "revoke", "--db", env.db, token_id)
        assert httpx.get(server.url + "/builds", headers=auth(secret), timeout=10).status_code == 401
        with psycopg.connect(replica.url(), autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_resume()")
        fresh = env.token()
        while len(httpx.get(server.url + "/builds?create_time_from=2000-01-01", headers=auth(fresh)).json()) != 2:
            assert time.monotonic() < deadline + 30, "the replica never replayed build 2"
            time.sleep(0.1)
    finally:
        replica.stop()


def test_read_db_needs_a_postgresql_primary(tmp_path):
    out = cli("serve", "--db", str(tmp_path / "x.db"), "--read-db", "postgresql://127.0.0.1/x", expect=2)
    assert "--read-db" in out and "Traceback" not in out


def test_a_large_import_leaves_planner_statistics_and_a_small_one_leaves_them_be(pg_env):
    """After a bulk import the planner knows the table it filled (a three-tag summary planned on an empty
    table's guesses scanned 600k index entries); a small import costs no ANALYZE."""
    from records import write_jsonl

    from buildreport.store.postgres.schema import ANALYZE_AT_LEAST

    def described() -> float:
        return query(pg_env.db, "SELECT reltuples FROM pg_class WHERE oid = 'builds'::regclass")[0][0]

    pg_env.load([record(n) for n in range(1, 11)])
    assert described() == -1  # never analysed: ten builds are not a bulk write
    path = write_jsonl(pg_env.tmp / "bulk.jsonl", [record(n) for n in range(100, 100 + ANALYZE_AT_LEAST)])
    cli("import", "--db", pg_env.db, str(path))
    assert described() == ANALYZE_AT_LEAST + 10
    ((pages, visible),) = query(pg_env.db, "SELECT relpages, relallvisible FROM pg_class WHERE relname = 'builds'")
    assert pages > 0 and visible == pages  # vacuumed: index-only scans fetch no rows


def test_connections_run_their_queries_without_jit_compilation(pg_url):
    from buildreport.store import open_database

    conn = open_database(pg_url)
    try:
        assert conn.execute("SHOW jit").fetchall() == [("off",)]
    finally:
        conn.close()


def test_a_statement_given_no_rows_sends_nothing_to_the_server(pg_url, tmp_path):
    """A write's statements for rows it may not have (stale tags, logs) cost no round trip when it has none:
    a request of many records naming one build writes them one after another."""
    from buildreport.store import open_database

    def traced(rows: list[tuple[int]]) -> str:
        path = tmp_path / "trace"
        with path.open("w") as trace:
            conn.raw.pgconn.trace(trace.fileno())  # libpq's PQtrace: every message to and from the server
            try:
                conn.executemany("DELETE FROM build_logs WHERE build_id = ?", rows)
            finally:
                conn.raw.pgconn.untrace()
        return path.read_text()

    conn = open_database(pg_url)
    try:
        assert traced([]) == ""
        assert "build_logs" in traced([(1,), (2,)])
    finally:
        conn.close()


@pytest.mark.parametrize("url", ["postgresql://u:secret@127.0.0.1:99999/x", "postgresql://u:secret@[::1/x",
                                 "postgresql://u:secret@%zz/x"])
@pytest.mark.parametrize("command", [["token", "list"], ["export", "--account", "a"], ["import"]])
def test_a_malformed_url_is_one_line_without_its_password(url, command):
    args = [*command, "--db", url] if command[0] != "import" else ["import", "--db", url, "/dev/null"]
    result = CliRunner().invoke(main, args)
    out = result.stdout + result.stderr
    assert result.exit_code == 1 and out.startswith("Error: cannot use postgresql://"), out
    assert "Traceback" not in out and "secret" not in out and out.count("\n") == 1, out


def test_statements_read_in_binary_form_give_the_rows_their_text_form_gives(pg_env):
    """A page of builds, one build, an export page and kept day figures are read in PostgreSQL's binary form
    (bytea as its bytes, not hex): each gives the same rows as in text, so the form never changes an answer."""
    pg_env.load([record(1), record(2, create_time=NOW - timedelta(days=3)), record(3, build_status="build_failed")])
    ((account_id,),) = query(pg_env.db, "SELECT account_id FROM accounts WHERE name = 'acme'")
    window = BuildFilter(create_from_us=0)
    statements = [
        queries.list_builds(account_id, ListQuery(filter=window, limit=2)),
        queries.get_build(account_id, 2),
        stats_queries.export_keys(account_id, window, None, 3, bodies=True),
        postgres_stats.kept_days(account_id, window, 0, to_us(NOW)),
        postgres_stats.kept_days(account_id, BuildFilter(create_from_us=0, statuses=(BuildStatus.built,)), 0,
                                 to_us(NOW)),
    ]
    with psycopg.connect(pg_env.db) as conn:
        for sql, params in statements:
            assert isinstance(sql, BinaryResults), sql
            text, binary = (
                conn.cursor(binary=form).execute(translate(sql), params).fetchall() for form in (False, True)
            )
            assert binary == text and binary, sql


def test_a_grouping_by_derivation_path_is_never_sorted_and_only_that_read_gets_the_memory(pg_env):
    """The planner prices each group of comma-joined figures at 8 kB: with thousands of derivation paths in a
    window it sorted the window's rows on disk rather than hash them (bench/notes.md). The reader runs such a
    grouping with GROUPING_WORK_MEM, in its own transaction, where its rows are hashed or read in the order of
    the derivation index, never sorted; every other read keeps the server's setting, and a filter by tag (a
    join) is not marked."""
    import asyncio

    from buildreport.filters import GroupBy
    from buildreport.store import open_reader
    from buildreport.store.postgres.connection import GROUPING_WORK_MEM, HashedGrouping

    pg_env.load([record(n, derivation_path=f"/nix/store/{n:032d}-p{n}.drv") for n in range(1, 3001)])
    ((account_id,),) = query(pg_env.db, "SELECT account_id FROM accounts WHERE name = 'acme'")
    with psycopg.connect(pg_env.db, autocommit=True) as conn:
        conn.execute("ANALYZE builds")
    window = BuildFilter(create_from_us=0)
    sql, params = postgres_stats.stats_rows(account_id, window, GroupBy("derivation_path"), queue_times=False)
    assert isinstance(sql, HashedGrouping)
    tagged = BuildFilter(create_from_us=0, tags=(("project", "web"),))
    assert not isinstance(postgres_stats.stats_rows(account_id, tagged, GroupBy("derivation"))[0], HashedGrouping)
    assert not isinstance(postgres_stats.stats_rows(account_id, window, GroupBy("status"))[0], HashedGrouping)

    def node_types(plan: dict) -> list[str]:
        return [plan["Node Type"], *(kind for child in plan.get("Plans", ()) for kind in node_types(child))]

    with psycopg.connect(pg_env.db) as conn:  # one transaction: SET LOCAL holds until it ends
        conn.execute(GROUPING_WORK_MEM)
        ((plan,),) = conn.execute(f"EXPLAIN (FORMAT JSON) {translate(sql)}", params).fetchall()
    top = plan[0]["Plan"]
    assert top["Node Type"] == "Aggregate" and "Sort" not in node_types(top), plan

    async def settings() -> list[object]:
        reader = await open_reader(pg_env.db)
        try:
            shown = "SELECT current_setting('work_mem')"
            grouped = await reader.stats_rows(account_id, window, GroupBy("derivation_path"), queue_times=False)
            return [await reader._rows((HashedGrouping(shown), [])), await reader._rows((shown, [])), len(grouped)]
        finally:
            await reader.close()

    hashed, plain, groups = asyncio.run(settings())
    assert GROUPING_WORK_MEM.endswith(f"'{hashed[0][0]}'") and plain != hashed
    assert groups == 3000
