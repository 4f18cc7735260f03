"""A large import into a database with no builds reads its records in a process of its own: what it stores,
how it refuses, and that the reading process never outlives the import or leaves half of it written."""

from __future__ import annotations

import contextlib
import gzip
import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import time

import pytest
from conftest import buildreport_command, record, write_jsonl
from test_fresh_load import contents, pg_contents, pg_database, pg_outcome, writer_path

from buildreport.imports import files
from buildreport.imports import load as ingest
from buildreport.imports import reader as import_reader
from buildreport.imports.files import ImportFailed
from buildreport.imports.load import import_files
from buildreport.imports.reader import ReadingStopped
from buildreport.store import open_database
from buildreport.store.build_rows import BATCH_SIZE

NOW_US = 1_790_000_000_000_000


@pytest.fixture
def two_processes(monkeypatch):
    """Every import into a database with no builds reads in a process of its own; the calls are counted."""
    calls = []
    real = import_reader.load

    def counted(*args):  # type: ignore[no-untyped-def]
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(ingest, "TWO_PROCESS_BYTES", 0)
    monkeypatch.setattr(import_reader, "load", counted)
    return calls


def many(count: int, first: int = 1, **fields) -> list[dict]:  # type: ignore[no-untyped-def]
    """Builds of two accounts, each restarting the one before it in its account, with tags and some logs."""
    return [
        record(i, account=("acme", "globex")[i % 2], tags={"project": ("web", "api")[i % 3 == 0], "run": str(i)},
               restart_of_build_id=i - 2 if i - 2 >= first else None, **({"log": f"line {i}\n"} if i % 5 == 0 else {}),
               **fields)
        for i in range(first, first + count)
    ]


def test_builds_read_in_a_process_of_their_own_are_stored_as_the_writer_stores_them(tmp_path, two_processes):
    """Several batches over two files, restart links that cross batches and files."""
    paths = [write_jsonl(tmp_path / "a.jsonl", many(BATCH_SIZE + 500)),
             write_jsonl(tmp_path / "b.jsonl", many(BATCH_SIZE, first=BATCH_SIZE + 501))]
    progress: list[int] = []
    conn = open_database(tmp_path / "fresh.db")
    result = import_files(conn, paths, NOW_US, on_progress=progress.append)
    conn.close()
    assert len(two_processes) == 1
    assert result.records == result.stats.created == 2 * BATCH_SIZE + 500
    assert progress == sorted(progress) and progress[-1] == result.records
    with writer_path():
        conn = open_database(tmp_path / "writer.db")
        import_files(conn, paths, NOW_US)
        conn.close()
    assert contents(tmp_path / "fresh.db") == contents(tmp_path / "writer.db")
    assert multiprocessing.active_children() == []


def test_every_bad_record_is_named_and_nothing_is_written(tmp_path, two_processes):
    records = many(3 * BATCH_SIZE)
    for i in range(100, len(records), 2):
        records[i]["build_status"] = "unknown"
    conn = open_database(tmp_path / "t.db")
    with pytest.raises(ImportFailed) as refused:
        import_files(conn, [write_jsonl(tmp_path / "a.jsonl", records)], NOW_US)
    assert refused.value.total == len(range(100, len(records), 2))
    assert len(refused.value.errors) == files.MAX_REPORTED_ERRORS
    assert str(refused.value.errors[0]).endswith("a.jsonl:101: build_status: invalid enum value 'unknown'")
    assert conn.execute("SELECT count(*) FROM builds").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM accounts").fetchone() == (0,)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


def test_a_link_that_conflicts_across_batches_is_refused_as_by_the_writer(tmp_path, two_processes):
    records = many(BATCH_SIZE + 10)
    assert records[-1]["account"] == records[1]["account"]
    records[-1]["restart_of_build_id"] = 2  # build 4 restarted build 2 already
    path = write_jsonl(tmp_path / "a.jsonl", records)
    refusals = []
    for name, path_of_writes in (("fresh", contextlib.nullcontext), ("writer", writer_path)):
        with path_of_writes():
            conn = open_database(tmp_path / f"{name}.db")
            with pytest.raises(ImportFailed) as refused:
                import_files(conn, [path], NOW_US)
            conn.close()
        refusals.append([str(e) for e in refused.value.errors])
    assert refusals[0] == refusals[1] == [
        f"{path}:{len(records)}: restart_of_build_id: build 2 already has restarted_as_build_id 4"
    ]
    assert sqlite3.connect(tmp_path / "fresh.db").execute("SELECT count(*) FROM builds").fetchone() == (0,)
    assert len(two_processes) == 1


def test_a_reading_process_that_dies_fails_the_import_and_nothing_is_written(tmp_path, two_processes):
    def kill_reader(read: int) -> None:
        for child in multiprocessing.active_children():
            if child.name == "buildreport-import-reader":
                os.kill(child.pid, signal.SIGKILL)

    conn = open_database(tmp_path / "t.db")
    with pytest.raises(ReadingStopped, match=r"ended early \(exit code -9\); nothing was imported"):
        import_files(conn, [write_jsonl(tmp_path / "a.jsonl", many(20 * BATCH_SIZE))], NOW_US, on_progress=kill_reader)
    assert conn.execute("SELECT count(*) FROM builds").fetchone() == (0,)
    conn.close()
    assert multiprocessing.active_children() == []


def test_a_large_import_at_the_command_line_ends_with_its_reading_process(tmp_path):
    """kill -9 of the import: its reading process ends too, and the database is left whole and empty."""
    path = write_jsonl(tmp_path / "big.jsonl", many(60_000))
    assert path.stat().st_size >= ingest.TWO_PROCESS_BYTES
    db = tmp_path / "t.db"
    process = subprocess.Popen([*buildreport_command(), "import", "--db", str(db), str(path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        reader = _wait_for_reader(process.pid)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(reader) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(reader), "the reading process outlived the import"
    finally:
        process.kill()
        process.wait(timeout=10)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert conn.execute("SELECT count(*) FROM builds").fetchone() == (0,)
    conn.close()


def test_builds_read_in_a_process_of_their_own_into_postgresql_are_stored_as_the_writer_stores_them(
    tmp_path, two_processes, pg_cluster
):
    """Through COPY, links across batches kept two-way as the writer keeps them."""
    paths = [write_jsonl(tmp_path / "a.jsonl", many(BATCH_SIZE + 500))]
    with pg_database(pg_cluster) as by_copy, pg_database(pg_cluster) as by_writer:
        assert isinstance(pg_outcome(by_copy, paths), dict)
        assert len(two_processes) == 1
        with writer_path():
            assert pg_outcome(by_writer, paths) == pg_contents(by_copy)
    assert multiprocessing.active_children() == []


def test_a_large_import_at_the_command_line_stores_every_build(tmp_path):
    path = write_jsonl(tmp_path / "big.jsonl", many(40_000))
    assert path.stat().st_size >= ingest.TWO_PROCESS_BYTES
    done = subprocess.run([*buildreport_command(), "import", "--db", str(tmp_path / "t.db"), str(path)],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert "imported 40000 builds from 1 file (40000 new, 0 updated, 0 unchanged)" in done.stderr
    conn = sqlite3.connect(tmp_path / "t.db")
    assert conn.execute("SELECT count(*), count(restart_of_build_id), count(restarted_as_build_id) FROM builds"
                        ).fetchone() == (40_000, 39_998, 39_998)
    conn.close()


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            with open(f"/proc/{parent}/task/{parent}/children") as f:
                children = [int(c) for c in f.read().split()]
        except OSError:
            continue
        found += children
        todo += children
    return found


def _wait_for_reader(pid: int) -> int:
    """The reading process among the import's descendants (the one-file executable adds a bootloader)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for child in _descendants(pid):
            try:
                with open(f"/proc/{child}/cmdline", "rb") as f:
                    if b"multiprocessing" in f.read():
                        return child
            except OSError:
                continue
        time.sleep(0.02)
    raise AssertionError("no reading process started")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_the_size_that_decides_is_of_the_lines_a_file_holds(tmp_path):
    lines = b"".join(json.dumps(r).encode() + b"\n" for r in many(3000))
    plain = tmp_path / "a.jsonl"
    plain.write_bytes(lines)
    packed = tmp_path / "a.jsonl.gz"
    packed.write_bytes(gzip.compress(lines))
    assert files.lines_size(plain) == files.lines_size(packed) == len(lines) > 3 * packed.stat().st_size
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress(lines)[:100])  # its last bytes are not gzip's size: never less than the file
    assert files.lines_size(cut) >= 100
    assert files.lines_size(tmp_path / "missing.jsonl") == 0


def test_a_large_file_given_as_standard_input_is_read_in_full(tmp_path):
    """`import /dev/stdin < FILE`: the reading process is given the same standard input."""
    path = write_jsonl(tmp_path / "big.jsonl", many(40_000))
    assert path.stat().st_size >= ingest.TWO_PROCESS_BYTES
    with path.open("rb") as stdin:
        done = subprocess.run([*buildreport_command(), "import", "--db", str(tmp_path / "t.db"), "/dev/stdin"],
                              stdin=stdin, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "imported 40000 builds from 1 file (40000 new" in done.stderr
