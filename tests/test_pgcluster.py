"""The throwaway PostgreSQL cluster the suite starts: reachable on 127.0.0.1 only, run by a non-root user, a
database per test that starts empty and sees no other, and stopped by its pid with nothing left behind."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from pgcluster import HOST, PgCluster, PostgresMissing, find_bin_dir, require_postgres

TESTS = Path(__file__).resolve().parent


def user_tables(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY table_name"
        ).fetchall()
    return [row[0] for row in rows]


def processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line contains `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found


def running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie has ended; only its parent has yet to collect it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def refuses(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return False
    except OSError:
        return True


def test_cluster_listens_on_127_0_0_1_only(pg_cluster: PgCluster) -> None:
    with psycopg.connect(pg_cluster.url()) as conn:
        assert conn.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
        assert conn.execute("SHOW port").fetchone() == (str(pg_cluster.port),)
    assert not refuses(HOST, pg_cluster.port)
    # Other loopback addresses reach this machine too, but nothing listens there.
    assert refuses("127.0.0.2", pg_cluster.port)
    assert refuses("::1", pg_cluster.port)


def test_cluster_trusts_only_its_socket_and_127_0_0_1(pg_cluster: PgCluster) -> None:
    with psycopg.connect(pg_cluster.url()) as conn:
        rules = conn.execute("SELECT type, address, netmask FROM pg_hba_file_rules ORDER BY line_number").fetchall()
    assert rules == [
        ("local", None, None), ("host", "127.0.0.1", "255.255.255.255"), ("host", "127.0.0.1", "255.255.255.255")
    ]


def test_unix_socket_lives_in_the_cluster_folder(pg_cluster: PgCluster) -> None:
    assert (pg_cluster.folder / f".s.PGSQL.{pg_cluster.port}").is_socket()
    with psycopg.connect(host=str(pg_cluster.folder), port=pg_cluster.port, user="postgres", dbname="postgres") as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_server_runs_as_a_non_root_user(pg_cluster: PgCluster) -> None:
    status = Path(f"/proc/{pg_cluster.pid}/status").read_text()
    uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
    assert pg_cluster.pid == pg_cluster.process.pid  # the postmaster itself, no wrapper in between
    assert "0" not in uids
    assert {int(uid) for uid in uids} == {pg_cluster.user.pw_uid if pg_cluster.user else os.geteuid()}


def test_cluster_trades_durability_for_speed(pg_cluster: PgCluster) -> None:
    with psycopg.connect(pg_cluster.url()) as conn:
        assert conn.execute("SHOW fsync").fetchone() == ("off",)
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",)


def test_test_database_starts_empty(pg_url: str) -> None:
    assert user_tables(pg_url) == []
    with psycopg.connect(pg_url) as conn:
        conn.execute("CREATE TABLE builds (id bigint PRIMARY KEY)")
    assert user_tables(pg_url) == ["builds"]


def test_test_databases_see_nothing_of_each_other(pg_cluster: PgCluster, pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        conn.execute("CREATE TABLE builds (id bigint PRIMARY KEY)")
        conn.execute("INSERT INTO builds VALUES (1)")
    other = pg_cluster.create_database()
    try:
        assert pg_url.rsplit("/", 1)[1] != other
        assert user_tables(pg_cluster.url(other)) == []
    finally:
        pg_cluster.drop_database(other)


def test_dropping_a_database_ends_sessions_left_open(pg_cluster: PgCluster) -> None:
    name = pg_cluster.create_database()
    leftover = psycopg.connect(pg_cluster.url(name))
    try:
        pg_cluster.drop_database(name)
        assert name not in pg_cluster.databases()
        with pytest.raises(psycopg.OperationalError):
            leftover.execute("SELECT 1")
    finally:
        leftover.close()


def test_database_from_a_template_copies_its_tables(pg_cluster: PgCluster) -> None:
    template = pg_cluster.create_database()
    copy = None
    try:
        with psycopg.connect(pg_cluster.url(template)) as conn:
            conn.execute("CREATE TABLE schema_version (version int)")
            conn.execute("INSERT INTO schema_version VALUES (7)")
        copy = pg_cluster.create_database(template=template)
        with psycopg.connect(pg_cluster.url(copy)) as conn:
            assert conn.execute("SELECT version FROM schema_version").fetchall() == [(7,)]
    finally:
        for name in (copy, template):
            if name is not None:
                pg_cluster.drop_database(name)


def test_settings_given_to_start_override_the_test_settings() -> None:
    cluster = PgCluster.start(require_postgres(), settings={"fsync": "on", "shared_buffers": "32MB"})
    with cluster, psycopg.connect(cluster.url()) as conn:
        assert conn.execute("SHOW fsync").fetchone() == ("on",)
        assert conn.execute("SHOW shared_buffers").fetchone() == ("32MB",)
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",)  # the rest stays as it was
        assert conn.execute("SHOW listen_addresses").fetchone() == (HOST,)


def test_stop_ends_the_postmaster_by_pid_and_removes_its_folder() -> None:
    cluster = PgCluster.start(require_postgres())
    pid, folder, port = cluster.pid, cluster.folder, cluster.port
    with psycopg.connect(cluster.url()):  # a session still open does not hold the shutdown up
        assert processes_mentioning(str(folder))
        with pytest.raises(RuntimeError), cluster:
            raise RuntimeError("a failing test inside the cluster's block")
    assert cluster.process.returncode == 0  # a clean fast shutdown, not a kill
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert processes_mentioning(str(folder)) == []
    assert not folder.exists()
    assert refuses(HOST, port)


def test_a_session_using_the_fixtures_leaves_nothing_behind(tmp_path: Path) -> None:
    """pytest in a child process, with the suite's fixtures: when it ends, its cluster is gone."""
    require_postgres()
    report = tmp_path / "report.json"
    (tmp_path / "test_uses_postgres.py").write_text(
        "import json, os\n"
        "import psycopg\n\n"
        "def test_uses_postgres(pg_cluster, pg_url):\n"
        "    with psycopg.connect(pg_url) as conn:\n"
        "        conn.execute('CREATE TABLE t (x int)')\n"
        "    report = {'pid': pg_cluster.pid, 'folder': str(pg_cluster.folder), 'port': pg_cluster.port}\n"
        "    with open(os.environ['PG_REPORT'], 'w') as handle:\n"
        "        json.dump(report, handle)\n"
    )
    env = {**os.environ, "PG_REPORT": str(report), "PYTHONPATH": str(TESTS)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest", "test_uses_postgres.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(report.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(seen["pid"], 0)
    assert processes_mentioning(seen["folder"]) == []
    assert not Path(seen["folder"]).exists()
    assert refuses(HOST, seen["port"])


def test_cluster_stops_when_the_process_that_started_it_is_killed(tmp_path: Path) -> None:
    """A test process killed outright (no finalizer runs) still leaves no server behind."""
    require_postgres()
    starter = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(TESTS)!r})\n"
        "from pgcluster import PgCluster\n"
        "cluster = PgCluster.start()\n"
        "print(cluster.pid, cluster.folder, flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    done = subprocess.run([sys.executable, "-c", starter], capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    pid_text, folder = done.stdout.split()
    try:
        deadline = time.monotonic() + 30
        # An exiting process loses its command line before it has ended: wait for both.
        while (processes_mentioning(folder) or running(int(pid_text))) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_mentioning(folder) == []
        assert not running(int(pid_text))  # its new parent (init) may not have collected it yet
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # its own cleanup never ran


def make_server_bin(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name in ("initdb", "postgres"):
        (folder / name).write_text("#!/bin/sh\n")
        (folder / name).chmod(0o755)
    return folder


def test_newest_debian_version_is_chosen(tmp_path: Path) -> None:
    make_server_bin(tmp_path / "13" / "bin")
    newest = make_server_bin(tmp_path / "16" / "bin")
    (tmp_path / "17" / "bin").mkdir(parents=True)  # a client-only version has no server
    assert find_bin_dir(tmp_path, path="") == newest


def test_server_on_path_serves_when_debian_has_none(tmp_path: Path) -> None:
    on_path = make_server_bin(tmp_path / "elsewhere")
    assert find_bin_dir(tmp_path / "none", path=str(on_path)) == on_path


def test_missing_postgres_skips_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install postgresql"):
        require_postgres(tmp_path, path="")


def test_missing_postgres_fails_under_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true, so they may not be skipped"):
        require_postgres(tmp_path, path="")
    with pytest.raises(PostgresMissing):
        find_bin_dir(tmp_path, path="")
