"""`buildreport migrate`: a SQLite database copied whole into PostgreSQL, checked, and served from there as
it was served from the file: the same answers, tokens, links and logs; a copy that fails leaves nothing."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from click.testing import CliRunner
from conftest import NOW, Env, auth, query, record

from buildreport.cli.main import main
from buildreport.http import answers, insights
from buildreport.store import day_figures
from buildreport.store import migrate as migrate_module
from buildreport.store.errors import DatabaseError
from buildreport.store.postgres import schema as pg_schema

# Paths whose answers must be the same, byte for byte, from the file and from its copy.
SAME_ANSWERS = (
    "/builds?create_time_from=2000-01-01&limit=500",
    "/builds?create_time_from=2000-01-01&tags=team:red",
    "/builds/summary?create_time_from=2000-01-01",
    "/builds/summary?create_time_from=2000-01-01&tags=team:red",
    "/builds/stats?create_time_from=2000-01-01&group_by=day",
    "/usage/breakdown?from=2000-01-01&group_by=tag:team",
    "/builds/3",
)


def _records(count: int) -> list[dict]:
    return [
        record(
            n,
            account="acme" if n % 3 else "globex",
            create_time=NOW - timedelta(hours=n),
            build_status="built" if n % 5 else "build_failed",
            cpu_seconds=n * 7,
            tags={"team": "red" if n % 2 else "blue"},
            **({"log": f"log of build {n}\n"} if n % 4 == 0 else {}),
        )
        for n in range(1, count + 1)
    ]


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout + result.stderr


@pytest.fixture
def source(tmp_path) -> Env:
    env = Env(tmp_path, tmp_path / "source.db")
    env.load(_records(60))
    return env


def test_a_copy_answers_as_its_source_with_the_same_tokens_links_and_logs(source, pg_url, serve):
    reader = source.token()
    revoked = source.token(revoked=True)
    before = serve(source.db)
    expected = {path: httpx.get(before.url + path, headers=auth(reader), timeout=10) for path in SAME_ANSWERS}
    link = httpx.get(before.url + "/builds/4/url", headers=auth(reader), timeout=10).json()["url"]
    before.stop()

    code, out = _run("migrate", "--from", str(source.db), "--to", pg_url)
    assert code == 0, out
    assert "copied 60 builds of 2 accounts and 2 tokens" in out and "counts and totals match" in out

    after = serve(pg_url)
    for path, answer in expected.items():
        got = httpx.get(after.url + path, headers=auth(reader), timeout=10)
        assert (got.status_code, got.content) == (answer.status_code, answer.content), path
    assert httpx.get(after.url + "/builds/3", headers=auth(revoked), timeout=10).status_code == 401
    # The signing key came along: a link issued from the file opens on the copy, log included.
    signed = link.split("/b/", 1)[1]
    assert httpx.get(f"{after.url}/b/{signed}", timeout=10).status_code == 200
    log = httpx.get(f"{after.url}/b/{signed}/log", timeout=10)
    assert log.status_code == 200 and log.text == "log of build 4\n"


def test_the_copy_takes_new_builds_and_accounts_after_the_copied_ones(source, pg_url):
    assert _run("migrate", "--from", str(source.db), "--to", pg_url)[0] == 0
    copy = Env(source.tmp, pg_url)
    copy.load([record(1000, account="initech"), record(1001)])
    accounts = dict(query(pg_url, "SELECT name, account_id FROM accounts"))
    assert accounts["initech"] > max(accounts["acme"], accounts["globex"])
    assert query(pg_url, "SELECT count(*) FROM builds") == [(62,)]


def test_a_large_copy_leaves_planner_statistics_and_its_pages_marked_all_visible(tmp_path, pg_url):
    env = Env(tmp_path, tmp_path / "source.db")
    env.load(_records(pg_schema.ANALYZE_AT_LEAST + 50))
    assert _run("migrate", "--from", str(env.db), "--to", pg_url)[0] == 0
    ((described, pages, visible),) = query(
        pg_url, "SELECT reltuples, relpages, relallvisible FROM pg_class WHERE oid = 'builds'::regclass"
    )
    assert described == pg_schema.ANALYZE_AT_LEAST + 50
    # Every page is marked all-visible, so index-only scans need not fetch the rows they read.
    assert pages > 0 and visible == pages


def test_a_target_that_holds_builds_is_refused_and_left_alone(source, pg_url):
    Env(source.tmp, pg_url).load([record(500)])
    code, out = _run("migrate", "--from", str(source.db), "--to", pg_url)
    assert code == 1 and "holds builds already" in out and "Traceback" not in out
    assert query(pg_url, "SELECT build_id FROM builds") == [(500,)]


def test_a_copy_that_fails_half_way_leaves_the_target_empty(source, pg_url, monkeypatch):
    copy_table = migrate_module._copy_table

    def fail_on_logs(src, dst, table, columns):  # type: ignore[no-untyped-def]
        if table == "build_logs":
            raise DatabaseError("the connection was lost")
        return copy_table(src, dst, table, columns)

    monkeypatch.setattr(migrate_module, "_copy_table", fail_on_logs)
    code, out = _run("migrate", "--from", str(source.db), "--to", pg_url)
    assert code == 1 and "the connection was lost" in out
    for table in ("accounts", "builds", "build_tags", "build_logs", "auth.tokens"):
        assert query(pg_url, f"SELECT count(*) FROM {table}") == [(0,)], table


def test_a_copy_that_does_not_match_its_source_is_taken_back(source, pg_url, monkeypatch):
    checks = migrate_module._checks
    calls = []

    def differing(run):  # type: ignore[no-untyped-def]
        calls.append(run)
        found = checks(run)
        return found if len(calls) == 1 else [*found, [(1,)]]

    monkeypatch.setattr(migrate_module, "_checks", differing)
    code, out = _run("migrate", "--from", str(source.db), "--to", pg_url)
    assert code == 1 and "does not match its source" in out
    assert query(pg_url, "SELECT count(*) FROM builds") == [(0,)]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--from", "{tmp}/missing.db", "--to", "{pg}"], "does not exist"),
        (["--from", "{tmp}/not-a-db.db", "--to", "{pg}"], "Error"),
        (["--from", "{tmp}/source.db", "--to", "{tmp}/other.db"], "postgresql:// URL"),
        (["--from", "{pg}", "--to", "{pg}"], "SQLite database file"),
        (["--from", "{tmp}/source.db", "--to", "postgresql://nobody@127.0.0.1:1/none"], "Error"),
        (["--from", "{tmp}", "--to", "{pg}"], "is not a database file"),
        (["--from", "{tmp}/source.db", "--to", "postgresql://u:secret@127.0.0.1:99999/x"], "Error"),
        (["--from", "{tmp}/source.db", "--to", "postgresql://u:secret@[::1/x"], "Error"),
        (["--from", "{tmp}/source.db", "--to", "postgresql://%zz@127.0.0.1/x"], "Error"),
    ],
)
def test_wrong_sources_and_targets_are_one_clear_line(source, pg_url, args, says):
    (source.tmp / "not-a-db.db").write_bytes(b"this is not a database" * 100)
    filled = [a.replace("{tmp}", str(source.tmp)).replace("{pg}", pg_url) for a in args]
    code, out = _run("migrate", *filled)
    assert code != 0 and says in out and "Traceback" not in out and "secret" not in out, out
    assert out.count("Error:") == 1, out
    assert query(pg_url, "SELECT count(*) FROM builds") == [(0,)]

COPIED = ("accounts", "builds", "build_tags", "build_logs", "day_figures", "day_summaries", "hourly_totals",
          "daily_totals", "daily_usage", "tag_pairs", "tag_hourly_totals", "tag_daily_totals", "tag_day_figures")


def _sample_answers(project: str) -> list[str]:
    """Every kind of summary, statistics and usage answer, over whole and partial days, with and without a
    kept tag pair and statuses."""
    whole = "create_time_from=2000-01-01"
    part = "create_time_from=2026-09-20T05:30:00Z&create_time_to=2026-10-11T13:00:00Z"
    narrowings = ("", f"&tags=project:{project}", "&status=built,build_failed", f"&tags=project:{project},os:x")
    answers = []
    for window in (whole, part):
        for narrowing in narrowings:
            answers.append(f"/builds/summary?{window}{narrowing}")
            answers += [f"/builds/stats?{window}{narrowing}&group_by={group}"
                        for group in ("day", "status", "system", "derivation", "tag:project")]
    answers.append(f"/builds/stats?{part}&group_by=hour")
    for dates in ("from=2000-01-01", "from=2026-09-20&to=2026-10-11"):
        answers.append(f"/usage?{dates}")
        answers += [f"/usage/breakdown?{dates}&group_by={group}" for group in ("day", "system", "tag:project")]
    return [*answers, f"/builds?{whole}&limit=10000", f"/builds?{part}&tags=project:{project}"]


def test_a_copy_of_sample_data_answers_every_summary_statistic_and_usage_as_its_source(tmp_path, pg_url, monkeypatch):
    """`sample` data of two accounts over 60 days, its logs, tags and restarts: each answer the same, byte for byte
    (at one moment: a running build stops "now")."""
    for module in (answers, insights):
        monkeypatch.setattr(module, "now_us", lambda: 1_793_000_000_000_000)
    data = tmp_path / "sample.jsonl"
    assert _run("sample", "-o", str(data), "--builds", "3000", "--days", "60", "--accounts", "acme,globex",
                "--seed", "7", "--end", "2026-11-01", "--log-share", "0.2")[0] == 0
    source = Env(tmp_path, tmp_path / "source.db")
    # The first half loaded into an empty database, the second written in batches with small parts: busy days
    # in several parts, each copied as it is.
    lines = data.read_bytes().splitlines(keepends=True)
    halves = [tmp_path / "first.jsonl", tmp_path / "second.jsonl"]
    halves[0].write_bytes(b"".join(lines[: len(lines) // 2]))
    halves[1].write_bytes(b"".join(lines[len(lines) // 2 :]))
    monkeypatch.setattr(day_figures, "PART_BUILDS", 7)
    for half in halves:
        code, out = _run("import", "--db", str(source.db), str(half))
        assert code == 0, out
    ((later_parts,),) = query(source.db, "SELECT count(*) FROM day_figures WHERE part > 0")
    assert later_parts > 0
    tokens = [source.token(account) for account in ("acme", "globex")]
    ((project,),) = query(source.db, "SELECT value FROM tag_pairs WHERE key = 'project' ORDER BY value LIMIT 1")
    paths = _sample_answers(project)
    with source.client() as client:
        expected = {(token, path): client.get(path, headers=auth(token)) for token in tokens for path in paths}
    assert _run("migrate", "--from", str(source.db), "--to", pg_url)[0] == 0
    columns = dict(migrate_module.TABLES)
    for table in COPIED:  # every row as stored, kept figures too
        select = f"SELECT {', '.join(columns[table])} FROM {table}"
        stored = sorted(query(source.db, select), key=repr)
        assert sorted(query(pg_url, select), key=repr) == stored, table
    with Env(tmp_path, pg_url).client() as client:
        for (token, path), answer in expected.items():
            assert answer.status_code == 200, (path, answer.text)
            got = client.get(path, headers=auth(token))
            assert (got.status_code, got.content) == (answer.status_code, answer.content), path


def test_a_copy_has_every_index_of_the_schema_as_the_schema_defines_it(source, pg_url, pg_cluster):
    """Indexes are made after the rows are copied: each is made again from its own definition."""
    indexes = "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname IN ('public', 'auth') ORDER BY 2"
    empty = pg_cluster.create_database()
    try:
        query(pg_cluster.url(empty), "SELECT 1")  # opening the database creates the schema
        defined = query(pg_cluster.url(empty), indexes)
    finally:
        pg_cluster.drop_database(empty)
    assert _run("migrate", "--from", str(source.db), "--to", pg_url)[0] == 0
    assert ("builds", "builds_by_derivation") in {(table, name) for table, name, _ in defined}
    assert query(pg_url, indexes) == defined
