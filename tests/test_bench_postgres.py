"""The benchmark's PostgreSQL helpers (bench/postgres.py): where the ingestion phase writes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import postgres
from pgcluster import PgCluster


def test_with_room_on_the_disk_the_writes_go_into_a_copy_dropped_afterwards(pg_cluster: PgCluster) -> None:
    name = pg_cluster.create_database()
    said: list[str] = []
    try:
        before = pg_cluster.databases()
        with postgres.scratch_or_itself(pg_cluster, name, said) as url:
            copy = url.rsplit("/", 1)[1]
            assert copy != name and copy in pg_cluster.databases()
        assert pg_cluster.databases() == before and said == []
    finally:
        pg_cluster.drop_database(name)


def test_without_room_for_a_copy_the_writes_go_into_the_database_itself_and_the_report_says_so(
    pg_cluster: PgCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres, "SPARE_BYTES", 2**62)
    name = pg_cluster.create_database()
    said: list[str] = []
    try:
        before = pg_cluster.databases()
        with postgres.scratch_or_itself(pg_cluster, name, said) as url:
            assert url == pg_cluster.url(name)
        assert pg_cluster.databases() == before
        assert len(said) == 1 and "into the measured database itself" in said[0], said
    finally:
        pg_cluster.drop_database(name)
