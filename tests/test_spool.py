"""The spool: whole files only, oldest first, nothing left behind on failure."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from buildreport.record.spool import REJECTED, TEMP_PREFIX, pending_files, write_spool_file


def test_spool_file_holds_one_record_a_line(tmp_path: Path) -> None:
    path = write_spool_file(tmp_path / "spool", [b'{"a":1}', b'{"b":2}'])
    assert path.read_bytes() == b'{"a":1}\n{"b":2}\n'
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_pending_files_are_oldest_first_and_skip_temporary_and_rejected(tmp_path: Path) -> None:
    first = write_spool_file(tmp_path, [b"{}"])
    second = write_spool_file(tmp_path, [b"{}"])
    (tmp_path / (TEMP_PREFIX + "half.jsonl")).write_bytes(b"{")
    (tmp_path / REJECTED).mkdir()
    (tmp_path / REJECTED / "bad.jsonl").write_bytes(b"{}\n")
    assert pending_files(tmp_path) == [first, second]


def test_failed_write_leaves_no_file(tmp_path: Path) -> None:
    def lines():
        yield b"{}"
        raise RuntimeError("recorder failed")

    with pytest.raises(RuntimeError):
        write_spool_file(tmp_path, lines())
    assert os.listdir(tmp_path) == []


def test_pending_files_of_missing_directory_is_empty(tmp_path: Path) -> None:
    assert pending_files(tmp_path / "absent") == []
