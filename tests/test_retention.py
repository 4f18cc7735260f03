"""The server's daily retention and the `prune` command, on both engines."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from click.testing import CliRunner
from conftest import NOW, auth, query, record
from test_prune import check_figures

from buildreport import retention
from buildreport.cli.main import main
from buildreport.store import open_database

DAY = timedelta(days=1)


def run(*args: str, expect: int = 0):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == expect, (result.stdout, result.stderr)
    return result


def old_and_new(env) -> None:
    """Builds 1-10 forty days old (with logs), 11-15 a day old; build 11 is a restart of build 1."""
    env.load([record(i, create_time=NOW - 40 * DAY - timedelta(minutes=i), log=f"log {i}") for i in range(1, 11)]
             + [record(i, create_time=NOW - DAY - timedelta(minutes=i), log=f"log {i}",
                       restart_of_build_id=1 if i == 11 else None) for i in range(11, 16)])


def count(env, sql: str) -> int:
    return query(env.db, sql)[0][0]


def test_retention_setting_prunes_with_the_servers_policy(env):
    old_and_new(env)
    settings = env.settings(retention_us=30 * 86_400_000_000)
    done = retention.run_once(settings, retention.policy_of(settings))
    assert (done.builds, done.logs) == (10, 10)
    assert [row[0] for row in query(env.db, "SELECT build_id FROM builds ORDER BY 1")] == list(range(11, 16))
    assert query(env.db, "SELECT restart_of_build_id FROM builds WHERE build_id = 11") == [(None,)]
    conn = open_database(env.db)
    check_figures(conn, promote_at=500)
    conn.close()


def test_retention_of_logs_only_keeps_the_builds(env):
    old_and_new(env)
    settings = env.settings(retention_us=30 * 86_400_000_000, retention_logs_only=True)
    done = retention.run_once(settings, retention.policy_of(settings))
    assert (done.builds, done.logs) == (0, 10)
    assert count(env, "SELECT count(*) FROM builds") == 15
    assert count(env, "SELECT count(*) FROM build_logs") == 5


def test_the_server_thread_prunes_and_stops(env):
    old_and_new(env)
    stop = retention.start(env.settings(retention_us=30 * 86_400_000_000), first=0.01, every=3600)
    try:
        deadline = time.monotonic() + 20
        while count(env, "SELECT count(*) FROM builds") > 5 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
    assert count(env, "SELECT count(*) FROM builds") == 5
    assert retention.policy_of(env.settings()) is None  # no setting, no pruning


def test_usage_of_pruned_builds_is_kept_or_dropped_as_asked(env):
    token = env.token("acme")
    for keep, expected in (("--keep-usage", 15), ("--drop-usage", 5)):
        old_and_new(env)
        run("prune", "--db", str(env.db), "--older-than", "30d", keep)
        with env.client() as client:
            usage = client.get("/usage", params={"from": "2000-01-01"}, headers=auth(token)).json()
            by_day = client.get("/usage/breakdown", params={"from": "2000-01-01", "group_by": "day"},
                                headers=auth(token)).json()
        assert usage["billable_build_count"] == expected
        assert sum(group["billable_build_count"] for group in by_day) == expected
        run("prune", "--db", str(env.db), "--older-than", "1s", "--drop-usage")  # empty for the next round
        query(env.db, "DELETE FROM kept_usage")


def test_prune_command_dry_run_account_and_errors(env):
    old_and_new(env)
    env.load([record(100, account="globex", create_time=NOW - 40 * DAY)])
    dry = run("prune", "--db", str(env.db), "--older-than", "30d", "--dry-run").stderr
    assert "would remove 11 builds and 10 logs" in dry
    assert count(env, "SELECT count(*) FROM builds") == 16
    out = run("prune", "--db", str(env.db), "--older-than", "30d", "--account", "globex").stderr
    assert "removed 1 builds" in out
    assert count(env, "SELECT count(*) FROM builds") == 15
    for args, message in ((("--older-than", "soon"), "not a duration"), (("--older-than", "0d"), "not a duration"),
                          (("--older-than", "1d", "--account", "nobody"), "no account 'nobody'")):
        result = run("prune", "--db", str(env.db), *args, expect=2 if "duration" in message else 1)
        assert message in result.stderr
    assert count(env, "SELECT count(*) FROM builds") == 15


def test_an_older_file_gives_space_back_once_switched_with_vacuum(tmp_path):
    import secrets
    import sqlite3

    from conftest import Env

    def size_on_disk() -> int:
        conn = sqlite3.connect(env.db)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        return env.db.stat().st_size

    env = Env(tmp_path)
    env.load([record(i, create_time=NOW - 40 * DAY, log=secrets.token_hex(20_000)) for i in range(1, 41)])
    conn = sqlite3.connect(env.db)
    conn.execute("PRAGMA auto_vacuum = NONE")
    conn.execute("VACUUM")  # as a file made before incremental vacuum
    conn.close()
    size = size_on_disk()
    kept = run("prune", "--db", str(env.db), "--older-than", "30d", "--logs-only").stderr
    assert "keeps its size" in kept and "--vacuum" in kept
    assert size_on_disk() == size
    out = run("prune", "--db", str(env.db), "--older-than", "30d", "--logs-only", "--vacuum").stderr
    assert "switched the database to incremental vacuum" in out
    assert query(env.db, "PRAGMA auto_vacuum") == [(2,)]
    assert size_on_disk() < size / 4
    env.load([record(i, create_time=NOW - 40 * DAY, log=secrets.token_hex(20_000)) for i in range(1, 41)])
    size = size_on_disk()
    assert "KiB" in run("prune", "--db", str(env.db), "--older-than", "30d", "--logs-only").stderr.split("gave back")[1]
    assert size_on_disk() < size / 4


def test_serve_takes_the_retention_settings(tmp_path, serve):
    import httpx
    from conftest import Env

    env = Env(tmp_path)
    env.load([record(1)])
    server = serve(env.db, "--retention", "30d", "--retention-logs-only", "--drop-usage")
    assert httpx.get(server.url + "/healthz").status_code == 200
    refused = run("serve", "--db", str(env.db), "--retention", "forever", expect=2).stderr
    assert "not a duration" in refused


@pytest.mark.sqlite_only
def test_a_servers_prune_is_done_by_its_one_writer(env, monkeypatch):
    """Under `serve` the prune goes to the server's writer: the serving process opens no connection for it."""
    import sqlite3

    from buildreport.store.writer import shared_writer

    old_and_new(env)
    settings = env.settings(retention_us=30 * 86_400_000_000)
    opened: list[object] = []
    real_connect = sqlite3.connect

    def counting(*args, **kwargs):
        opened.append(args[0])
        return real_connect(*args, **kwargs)

    with shared_writer(str(env.db)) as writer:
        monkeypatch.setattr(sqlite3, "connect", counting)
        done = retention.run_once(settings, retention.policy_of(settings))
        assert writer.pid is not None
    assert (done.builds, done.logs) == (10, 10) and opened == []
    assert count(env, "SELECT count(*) FROM builds") == 5
