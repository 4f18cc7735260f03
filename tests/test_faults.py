"""Faults: full disks, read-only files, another writer's lock, damaged logs, files deleted under the server,
files at rest readable by their owner only, and tokens revoked while a long import runs."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import auth, buildreport_command, query, record, write_jsonl

from buildreport.cli.main import main
from buildreport.config import secret_path
from buildreport.store.sqlite import schema
from buildreport.store.sqlite.schema import auth_path

PRIVATE = 0o600


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def assert_one_clear_line(result, *needles: str) -> None:
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


def count(db: Path, table: str = "builds") -> int:
    return query(db, f"SELECT count(*) FROM {table}")[0][0]


def with_pragma(monkeypatch, *pragmas: str) -> None:
    """Every connection buildreport opens from now on also runs these pragmas."""
    monkeypatch.setattr(schema, "CONNECTION_PRAGMAS", (*schema.CONNECTION_PRAGMAS, *pragmas))


# --- files at rest -------------------------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.sqlite_only
def test_database_tokens_and_secret_files_are_created_private(env):
    old = os.umask(0o022)
    try:
        env.load([record(1)])
        env.token()
        with env.client(secret_keys=()) as client:  # the signing key is generated into DB.secret
            assert client.get("/healthz").status_code == 200
            files = [env.db, Path(f"{env.db}-wal"), Path(f"{env.db}-shm"), auth_path(env.db),
                     Path(f"{auth_path(env.db)}-wal"), Path(f"{auth_path(env.db)}-shm"), secret_path(str(env.db))]
            for path in files:
                assert path.exists(), path
                assert mode(path) == PRIVATE, f"{path}: {oct(mode(path))}"
    finally:
        os.umask(old)


def test_the_command_line_creates_private_files(tmp_path):
    db = tmp_path / "cli.db"
    assert invoke("token", "create", "--db", str(db), "--account", "acme").exit_code == 0
    assert mode(db) == PRIVATE and mode(auth_path(db)) == PRIVATE


# --- full disk, read-only file, another writer ------------------------------------------------------


def big_import(env, builds: int, name: str = "big.jsonl") -> Path:
    log = "compiling something rather long\n" * 20
    return write_jsonl(env.tmp / name, [record(i, log=log) for i in range(1, builds + 1)])


@pytest.mark.sqlite_only
def test_import_on_a_full_disk_is_one_line_and_changes_nothing(env, monkeypatch):
    env.load([record(1)])
    with_pragma(monkeypatch, "PRAGMA max_page_count = 64")  # the file may not grow past 64 pages: a full disk
    result = invoke("import", "--db", str(env.db), str(big_import(env, 3000)))
    assert_one_clear_line(result, "is full", "nothing was changed")
    monkeypatch.undo()
    assert count(env.db) == 1


def _mount_tmpfs(folder: Path, size: str) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    return done.returncode == 0


@pytest.fixture
def small_disk(tmp_path):
    """A real 1 MiB file system (a tmpfs, unmounted afterwards), where this machine allows mounting one."""
    folder = tmp_path / "small"
    folder.mkdir()
    if not _mount_tmpfs(folder, "1m"):
        pytest.skip("mounting a tmpfs needs root and CAP_SYS_ADMIN; the simulated full disk covers the message")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.mark.sqlite_only
def test_import_on_a_really_full_disk_is_one_line(env, small_disk):
    db = small_disk / "b.db"
    assert invoke("token", "list", "--db", str(db)).exit_code == 0
    filler = small_disk / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as handle:
        while True:  # fill the disk to the last byte
            handle.write(b"\0" * 4096)
            handle.flush()
    result = invoke("import", "--db", str(db), str(big_import(env, 2000)))
    assert_one_clear_line(result, "nothing was changed")
    assert "is full" in result.stderr or "disk I/O error" in result.stderr
    filler.unlink()
    assert count(db) == 0


@pytest.mark.sqlite_only
def test_import_into_a_read_only_database_is_one_line(env, monkeypatch):
    env.load([record(1)])
    with_pragma(monkeypatch, "PRAGMA query_only = 1")  # what SQLite answers for a file it may not write
    result = invoke("import", "--db", str(env.db), str(write_jsonl(env.tmp / "one.jsonl", [record(2)])))
    assert_one_clear_line(result, "read-only")
    monkeypatch.undo()
    assert count(env.db) == 1


@pytest.mark.sqlite_only
def test_import_into_a_read_only_file_is_one_line(env, tmp_path):
    env.load([record(1)])
    data = write_jsonl(env.tmp / "one.jsonl", [record(2)])
    if os.geteuid() != 0:
        for path in (env.db, tmp_path):
            os.chmod(path, 0o500 if path.is_dir() else 0o400)
        try:
            result = invoke("import", "--db", str(env.db), str(data))
        finally:
            os.chmod(tmp_path, 0o700)
    else:  # root writes any file: make the file system read-only instead
        folder = tmp_path / "ro"
        folder.mkdir()
        if not _mount_tmpfs(folder, "8m"):
            pytest.skip("root cannot be denied a write without mounting a read-only file system")
        try:
            for name in os.listdir(tmp_path):
                if name.startswith("test.db"):
                    shutil.copy(tmp_path / name, folder / name)
            subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
            result = invoke("import", "--db", str(folder / "test.db"), str(data))
        finally:
            subprocess.run(["umount", "-l", str(folder)], check=False)
    assert isinstance(result.exception, SystemExit) and result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert "read-only" in result.stderr or "cannot write" in result.stderr or "cannot be opened" in result.stderr


@pytest.mark.sqlite_only
def test_import_waiting_on_another_writer_says_another_process_is_writing(env, monkeypatch):
    env.load([record(1)])
    with_pragma(monkeypatch, "PRAGMA busy_timeout = 200")
    holder = sqlite3.connect(env.db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        result = invoke("import", "--db", str(env.db), str(write_jsonl(env.tmp / "one.jsonl", [record(2)])))
    finally:
        holder.rollback()
        holder.close()
    assert_one_clear_line(result, "another process", "is writing")


@pytest.mark.sqlite_only
@pytest.mark.parametrize("command", [["token", "create", "--account", "acme"], ["token", "revoke", "tok_x"]])
def test_token_commands_waiting_on_another_writer_say_so(env, monkeypatch, command):
    env.token()
    with_pragma(monkeypatch, "PRAGMA busy_timeout = 200")
    holder = sqlite3.connect(auth_path(env.db), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        result = invoke(*command, "--db", str(env.db))
    finally:
        holder.rollback()
        holder.close()
    assert_one_clear_line(result, "another process")


@pytest.mark.sqlite_only
def test_tokens_are_created_and_revoked_at_once_while_the_builds_are_locked(env):
    env.load([record(1)])
    holder = sqlite3.connect(env.db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # as an import holds it, for as long as it writes
    try:
        started = time.monotonic()
        created = invoke("token", "create", "--db", str(env.db), "--account", "acme")
        token_id = created.stderr.split()[1]
        revoked = invoke("token", "revoke", "--db", str(env.db), token_id)
        elapsed = time.monotonic() - started
    finally:
        holder.rollback()
        holder.close()
    assert created.exit_code == 0 and revoked.exit_code == 0, (created.output, revoked.output)
    assert elapsed < 2


def _holds_write_lock(db: Path) -> bool:
    probe = sqlite3.connect(db, isolation_level=None, timeout=0)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.rollback()
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        probe.close()


@pytest.mark.sqlite_only
def test_a_token_is_revoked_and_created_within_a_second_during_a_real_import(env):
    env.load([record(1)])
    secret = env.token()
    data = big_import(env, 40_000)
    importer = subprocess.Popen(
        [*buildreport_command(), "import", "--db", str(env.db), str(data)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        with env.client() as client:
            assert client.get("/builds/1", headers=auth(secret)).status_code == 200
            deadline = time.monotonic() + 30
            while not _holds_write_lock(env.db):
                assert importer.poll() is None, importer.communicate()
                assert time.monotonic() < deadline, "the import never took the write lock"
                time.sleep(0.02)
            token_id = re.search(r"tok_[0-9a-f]{16}", invoke("token", "list", "--db", str(env.db)).stdout)[0]
            started = time.monotonic()
            revoked = invoke("token", "revoke", "--db", str(env.db), token_id)
            created = invoke("token", "create", "--db", str(env.db), "--account", "acme")
            elapsed = time.monotonic() - started
            assert revoked.exit_code == 0 and created.exit_code == 0, (revoked.output, created.output)
            assert elapsed < 1, elapsed
            assert client.get("/builds/1", headers=auth(secret)).status_code == 401
            assert client.get("/builds/1", headers=auth(created.stdout.strip())).status_code == 200
            assert importer.poll() is None, "the import ended before the token changes: it proves nothing"
        _, err = importer.communicate(timeout=120)
        assert importer.returncode == 0, err
    finally:
        if importer.poll() is None:
            importer.kill()
            importer.wait()
    assert count(env.db) == 40_000


# --- damaged logs --------------------------------------------------------------------------------


def damage_log(db: Path, build_id: int) -> None:
    ((blob,),) = query(db, "SELECT zlib FROM build_logs WHERE build_id = ?", (build_id,))
    damaged = blob[:2] + bytes(b ^ 0x5A for b in blob[2:])
    query(db, "UPDATE build_logs SET zlib = ? WHERE build_id = ?", (damaged, build_id))


def test_a_damaged_log_leaves_the_page_readable_and_the_raw_log_503(env):
    env.load([record(1, log="".join(f"line {i} of a log that compresses well\n" for i in range(5000)),
                     build_status="build_failed", status_message="exit 1")])
    damage_log(env.db, 1)
    secret = env.token()
    with env.client() as client:
        url = client.get("/builds/1/url", headers=auth(secret)).json()["url"].removeprefix("http://testserver.local")
        page = client.get(url)
        assert page.status_code == 200
        assert "The log cannot be read" in page.text
        assert "exit 1" in page.text and "hello-2.12.1" in page.text
        for raw in (url + "/log", url + "/log?tail=10"):
            response = client.get(raw)
            assert response.status_code == 503, raw
            assert "cannot be read" in response.text
            assert response.headers["content-type"].startswith("text/html")


def test_a_truncated_log_is_refused_before_the_first_byte(env):
    env.load([record(1, log="x" * 100_000 + "\n")])
    ((blob,),) = query(env.db, "SELECT zlib FROM build_logs")
    query(env.db, "UPDATE build_logs SET zlib = ?", (blob[:-8],))
    secret = env.token()
    with env.client() as client:
        url = client.get("/builds/1/url", headers=auth(secret)).json()["url"].removeprefix("http://testserver.local")
        assert client.get(url + "/log").status_code == 503


# --- the database deleted or replaced under the server --------------------------------------------


@pytest.mark.sqlite_only
def test_healthz_says_when_the_database_was_deleted_and_nothing_is_recreated(env):
    env.load([record(1)])
    secret = env.token()
    with env.client() as client:
        assert client.get("/healthz").status_code == 200
        os.unlink(env.db)
        response = client.get("/healthz")
        assert response.status_code == 503
        assert "deleted" in response.json()["status"]
        client.get("/builds/1", headers=auth(secret))
        assert not env.db.exists()


@pytest.mark.sqlite_only
def test_healthz_says_when_the_database_was_replaced(env):
    env.load([record(1)])
    with env.client() as client:
        assert client.get("/healthz").status_code == 200
        copy = env.tmp / "copy.db"
        shutil.copy(env.db, copy)
        os.replace(copy, env.db)
        response = client.get("/healthz")
        assert response.status_code == 503
        assert "replaced" in response.json()["status"]


@pytest.mark.sqlite_only
def test_a_missing_database_is_not_created_by_the_app(env):
    from buildreport.http.app import create_app
    from buildreport.store.sqlite.schema import DatabaseError

    with pytest.raises(DatabaseError):
        create_app(env.settings())
    assert not env.db.exists()


def test_a_stored_build_outside_todays_ranges_is_a_503_page_and_still_reimports(env):
    env.load([record(1, tags={"a": "1"}), record(2, restart_of_build_id=3)])
    # As an older version, without the ranges, could have stored it.
    ((body,),) = query(env.db, "SELECT body FROM builds WHERE build_id = 1")
    query(env.db, "UPDATE builds SET body = ? WHERE build_id IN (1, 2)",
          (body.replace(b'"cpu_seconds":120', b'"cpu_seconds":4611686018427387904'),))
    secret = env.token()
    with env.client() as client:
        url = client.get("/builds/1/url", headers=auth(secret)).json()["url"].removeprefix("http://testserver.local")
        response = client.get(url)
        assert response.status_code == 503 and "cannot be shown" in response.text
    env.load([record(1, tags={"b": "2"}), record(3)])  # re-import over it, and link build 2 to a new build
    assert count(env.db, "build_tags") == 1


@pytest.mark.sqlite_only
def test_every_worker_reports_a_deleted_database(env, serve):
    import httpx

    env.load([record(1)])
    server = serve(env.db, "--workers", "2")
    # Both workers running before the file goes: a worker still starting would find no database to open.
    deadline = time.monotonic() + 20
    while server.log.read_text().count("Application startup complete.") < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.log.read_text().count("Application startup complete.") == 2, server.log.read_text()[-2000:]
    os.unlink(env.db)
    answers = [httpx.get(server.url + "/healthz", timeout=5) for _ in range(8)]
    assert {a.status_code for a in answers} == {503}
    assert all("deleted" in a.json()["status"] for a in answers)
    assert not env.db.exists()


# --- tokens move out of a database made before they had a file of their own ------------------------


@pytest.mark.sqlite_only
def test_tokens_of_an_older_database_move_to_the_tokens_file(env):
    from buildreport.store.sqlite.schema import APPLICATION_ID, MIGRATIONS, open_database

    conn = sqlite3.connect(env.db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.executescript(MIGRATIONS[0])
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 1")
    conn.execute("INSERT INTO accounts (name, created_us) VALUES ('acme', 0)")
    from buildreport.tokens import new_token

    token_id, secret, digest = new_token()
    conn.execute(
        "INSERT INTO tokens (token_id, account_id, digest, scopes, label, created_us, expires_us)"
        " VALUES (?, 1, ?, 'build:read', 'old', 0, ?)", (token_id, digest, 2**62))
    conn.close()
    open_database(env.db).close()
    tables = {r[0] for r in sqlite3.connect(env.db).execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    assert "tokens" not in tables
    moved = sqlite3.connect(auth_path(env.db)).execute("SELECT token_id, account, label FROM tokens").fetchall()
    assert moved == [(token_id, "acme", "old")]
    env.load([record(1)])
    with env.client() as client:
        assert client.get("/builds/1", headers=auth(secret)).status_code == 200
