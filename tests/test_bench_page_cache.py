"""The benchmark's page-cache passes: which files hold a database, reading them, and the report's line."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import page_cache
import report


def test_every_byte_of_the_files_that_exist_is_read(tmp_path: Path) -> None:
    db = tmp_path / "b.db"
    db.write_bytes(b"x" * (page_cache.CHUNK + 5))
    done = page_cache.read_files(page_cache.sqlite_files(db))  # no write-ahead log beside it
    assert done["bytes"] == page_cache.CHUNK + 5
    Path(f"{db}-wal").write_bytes(b"y" * 7)
    assert page_cache.read_files(page_cache.sqlite_files(db))["bytes"] == page_cache.CHUNK + 12


def test_a_postgresql_cluster_is_read_from_its_databases_folder_only(tmp_path: Path) -> None:
    (tmp_path / "base" / "1").mkdir(parents=True)
    (tmp_path / "base" / "1" / "16384").write_bytes(b"a" * 10)
    (tmp_path / "base" / "1" / "16385").write_bytes(b"b" * 20)
    (tmp_path / "pg_wal").mkdir()
    (tmp_path / "pg_wal" / "000000010000000000000001").write_bytes(b"w" * 40)
    files = page_cache.postgres_files(tmp_path)
    assert [f.name for f in files] == ["16384", "16385"]
    assert page_cache.read_files(files)["bytes"] == 30


def test_the_report_says_how_much_was_read_and_which_pass_was_slowest() -> None:
    passes = [{"engine": "sqlite", "before": "export", "bytes": 2**30, "seconds": 3.5},
              {"engine": "sqlite", "before": "the 1-worker loads", "bytes": 2**30, "seconds": 1.25}]
    (line, blank) = report.page_cache_line(passes)
    assert "2 passes, 2.0 GiB in 5 s" in line
    assert "slowest export, 3.5 s" in line
    assert blank == ""
    assert report.page_cache_line([]) == []
