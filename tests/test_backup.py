"""Backup and restore of a SQLite database: a consistent, checked archive taken while a server writes."""

from __future__ import annotations

import gzip
import sqlite3
import tarfile
import threading
import time
from datetime import timedelta
from pathlib import Path

import httpx
import msgspec
import pytest
from click.testing import CliRunner
from conftest import NOW, Env, auth, record
from test_prune import check_figures

from buildreport.cli.main import main
from buildreport.models import BuildRecord
from buildreport.store import DatabaseError
from buildreport.store.sqlite.backup import DATABASE, MANIFEST, backup, in_use, read_manifest, restore
from buildreport.store.sqlite.writelock import WriterLock
from buildreport.store.transaction import WriteSession
from buildreport.times import to_us


def run(*args: str, expect: int = 0):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == expect, (result.stdout, result.stderr)
    return result


def filled(tmp_path: Path, builds: int = 60) -> Env:
    env = Env(tmp_path)
    env.load([record(i, create_time=NOW - timedelta(minutes=i), tags={"project": f"p{i % 3}"}, log=f"log {i}\n",
                     account=("acme", "globex")[i % 2]) for i in range(1, builds + 1)])
    return env


ANSWERS = ("/builds?limit=100", "/builds/summary", "/usage?from=2000-01-01", "/builds/stats?group_by=day",
           "/usage/breakdown?from=2000-01-01&group_by=day", "/builds/4")


def answers(env: Env, token: str) -> list[tuple[int, str]]:
    with env.client() as client:
        got = [(r.status_code, r.text) for r in (client.get(path, headers=auth(token)) for path in ANSWERS)]
    assert [status for status, _ in got] == [200] * len(ANSWERS), got
    return got


def test_a_restored_backup_gives_every_answer_the_database_gave(tmp_path):
    (tmp_path / "a").mkdir()
    env = filled(tmp_path / "a")
    token = env.token("acme")
    Path(str(env.db) + ".secret").write_text("a signing key kept beside the database\n")
    before = answers(env, token)
    written = backup(env.db, tmp_path / "b.tar")
    assert written.manifest.builds == {"acme": 30, "globex": 30} and written.manifest.tokens == 1
    (tmp_path / "r").mkdir()
    restored = Env(tmp_path / "r", tmp_path / "r" / "restored.db")
    restore(tmp_path / "b.tar", restored.db)
    assert answers(restored, token) == before  # the same token works: the tokens file came along
    assert (Path(str(restored.db) + ".secret")).read_text() == Path(str(env.db) + ".secret").read_text()


def test_a_backup_taken_while_a_server_writes_is_consistent_and_restores(tmp_path):
    env = filled(tmp_path, 200)
    session = WriteSession(env.db)  # as the server's write process does, taking the writers' turn
    stop, written_ids = threading.Event(), []

    def write() -> None:
        build_id = 10_000
        while not stop.is_set() and build_id < 14_000:  # bounded
            bodies = [record(build_id + i, log="x" * 500) for i in range(5)]
            batch = [msgspec.convert({k: v for k, v in b.items() if k != "account"}, BuildRecord, strict=False)
                     for b in bodies]
            session.write("acme", batch, to_us(NOW))
            written_ids.extend(b.build_id for b in batch)
            build_id += 5

    writer = threading.Thread(target=write)
    writer.start()
    try:
        while not written_ids and writer.is_alive():
            stop.wait(0.01)
        archive = backup(env.db, tmp_path / "live.tar.gz", gzip=True)
        during = len(written_ids)
        stop.wait(0.2)  # the server goes on writing after it
    finally:
        stop.set()
        writer.join()
        session.close()
    assert 0 < during < len(written_ids), "the server wrote before and after the backup"
    with gzip.open(tmp_path / "live.tar.gz") as raw:
        assert raw.read(2)  # a gzip stream, as asked
    restored = tmp_path / "restored.db"
    restore(tmp_path / "live.tar.gz", restored)
    conn = sqlite3.connect(restored)
    # One snapshot: every kept figure agrees with the builds copied, and those are builds of the source.
    check_figures(conn, promote_at=500)
    copied = dict(conn.execute("SELECT build_id, body FROM builds").fetchall())
    counts = dict(conn.execute("SELECT a.name, count(*) FROM builds JOIN accounts a USING (account_id) GROUP BY 1"))
    conn.close()
    assert counts == archive.manifest.builds
    source = sqlite3.connect(env.db)
    stored = dict(source.execute("SELECT build_id, body FROM builds").fetchall())
    source.close()
    assert copied.items() <= stored.items()
    assert set(range(1, 201)) <= set(copied)
    assert len(copied) < len(stored)  # what the server wrote after the backup is not in it


def test_restore_refuses_an_existing_database_without_force_and_one_in_use_even_with_it(tmp_path):
    env = filled(tmp_path, 10)
    backup(env.db, tmp_path / "b.tar")
    (tmp_path / "o").mkdir()
    other = filled(tmp_path / "o", 3)
    with pytest.raises(DatabaseError, match="exists; give --force"):
        restore(tmp_path / "b.tar", other.db)
    reader = sqlite3.connect(other.db)  # a server keeps its connections open
    reader.execute("SELECT count(*) FROM builds").fetchone()
    assert in_use(other.db)
    with pytest.raises(DatabaseError, match="in use"):
        restore(tmp_path / "b.tar", other.db, force=True)
    reader.close()
    assert not in_use(other.db)
    lock = WriterLock(other.db)  # a server's write under way
    with lock.held():
        assert in_use(other.db)
    lock.close()
    assert sqlite3.connect(other.db).execute("SELECT count(*) FROM builds").fetchone() == (3,)
    restore(tmp_path / "b.tar", other.db, force=True)
    assert sqlite3.connect(other.db).execute("SELECT count(*) FROM builds").fetchone() == (10,)
    assert sorted(p.name for p in other.db.parent.iterdir() if p.name.startswith(".")) == []  # no leftovers


def test_a_running_server_keeps_its_database_from_being_restored_over(tmp_path, serve):
    env = filled(tmp_path, 5)
    backup(env.db, tmp_path / "b.tar")
    server = serve(env.db)
    result = run("restore", "--db", str(env.db), "--from", str(tmp_path / "b.tar"), "--force", expect=1)
    assert "in use" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert httpx.get(server.url + "/healthz").status_code == 200  # it went on serving its database


def test_a_damaged_backup_is_refused_and_changes_nothing(tmp_path):
    env = filled(tmp_path, 20)
    backup(env.db, tmp_path / "b.tar")
    data = bytearray((tmp_path / "b.tar").read_bytes())
    with tarfile.open(tmp_path / "b.tar") as archive:
        at = next(m for m in archive.getmembers() if m.name == DATABASE).offset_data
    data[at + 5000] ^= 0xFF
    (tmp_path / "bad.tar").write_bytes(bytes(data))
    (tmp_path / "cut.tar").write_bytes(bytes(data[: len(data) // 2]))
    target = tmp_path / "t" / "x.db"
    target.parent.mkdir()
    for name, reason in (("bad.tar", "checksum"), ("cut.tar", "damaged|incomplete")):
        with pytest.raises(DatabaseError, match=reason):
            restore(tmp_path / name, target)
        assert list(target.parent.iterdir()) == []
    (tmp_path / "notes.txt").write_text("not a backup")
    with pytest.raises(DatabaseError, match="not a buildreport backup"):
        restore(tmp_path / "notes.txt", target)


def test_a_backup_replaces_its_file_only_once_complete(tmp_path):
    env = filled(tmp_path, 5)
    (tmp_path / "b.tar").write_text("the previous backup")
    written = backup(env.db, tmp_path / "b.tar")
    assert read_manifest(tmp_path / "b.tar", verify=True) == written.manifest
    with tarfile.open(tmp_path / "b.tar") as archive:
        assert archive.getnames()[0] == MANIFEST
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    with pytest.raises(DatabaseError, match="does not exist"):
        backup(tmp_path / "missing.db", tmp_path / "c.tar")
    assert not (tmp_path / "c.tar").exists()
    for own in (env.db, Path(str(env.db) + "-auth")):
        with pytest.raises(DatabaseError, match="a file of the database itself"):
            backup(env.db, own)
    assert sqlite3.connect(env.db).execute("SELECT count(*) FROM builds").fetchone() == (5,)


def test_backup_and_restore_commands_say_what_they_did_in_one_line(tmp_path):
    env = filled(tmp_path, 8)
    out = run("backup", "--db", str(env.db), "--to", str(tmp_path / "b.tgz"), "--gzip").stderr
    assert "wrote" in out and "8 builds in 2 accounts" in out and "integrity checked" in out
    out = run("restore", "--db", str(tmp_path / "r.db"), "--from", str(tmp_path / "b.tgz")).stderr
    assert "restored" in out and "8 builds" in out
    again = run("restore", "--db", str(tmp_path / "r.db"), "--from", str(tmp_path / "b.tgz"), expect=1).stderr
    assert again.strip().count("\n") == 0 and "--force" in again


def test_on_postgres_both_commands_point_to_pg_dump(pg_url, tmp_path):
    for args in (("backup", "--to", str(tmp_path / "b.tar")), ("restore", "--from", str(tmp_path / "b.tar"))):
        result = run(*args, "--db", pg_url, expect=1)
        assert "pg_dump" in result.stderr and "pg_restore" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_a_server_killed_during_a_backup_leaves_it_whole(tmp_path, serve):
    env = filled(tmp_path, 300)
    token = env.token("acme", ("build:read", "build:write"))
    server = serve(env.db)
    stop, outcome = threading.Event(), {}

    def send() -> None:  # a runner posting builds until the server goes away (bounded)
        with httpx.Client(base_url=server.url, headers=auth(token), timeout=5) as client:
            for n in range(2_000):
                if stop.is_set():
                    return
                body = [{k: v for k, v in record(0, log="y" * 300).items() if k not in ("account", "build_id")}
                        | {"source_id": f"kill:{n}:{i}"} for i in range(10)]
                try:
                    outcome.setdefault("statuses", set()).add(client.post("/builds", json=body).status_code)
                except httpx.HTTPError:
                    return

    sender = threading.Thread(target=send)
    sender.start()
    taking = threading.Thread(target=lambda: outcome.update(written=backup(env.db, tmp_path / "b.tar")))
    try:
        deadline = time.monotonic() + 20
        while not outcome.get("statuses") and sender.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)  # the server's write process is started and writing
        taking.start()
        server.process.kill()  # mid-write, mid-backup or just after: the backup must be whole either way
        taking.join()
    finally:
        stop.set()
        sender.join()
    restore(tmp_path / "b.tar", tmp_path / "restored.db")
    conn = sqlite3.connect(tmp_path / "restored.db")
    check_figures(conn, promote_at=500)
    counts = dict(conn.execute("SELECT a.name, count(*) FROM builds JOIN accounts a USING (account_id) GROUP BY 1"))
    conn.close()
    assert counts == outcome["written"].manifest.builds and counts["acme"] >= 150
    assert outcome["statuses"] == {200}  # the server was writing when it was killed
