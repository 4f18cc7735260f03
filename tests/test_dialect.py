"""The fragments the two engines spell differently give the same rows on each."""

from __future__ import annotations

import pytest
from conftest import ENGINES, new_database

from buildreport.store import open_database
from buildreport.store.dialect import POSTGRESQL, SQLITE, dialect_of


@pytest.mark.parametrize("engine", ENGINES)
def test_a_connection_names_its_dialect_whose_aggregate_joins_values_with_commas_leaving_nulls_out(
    request, engine, tmp_path
):
    conn = open_database(new_database(request, engine, tmp_path))
    try:
        dialect = dialect_of(conn)
        assert dialect is {"sqlite": SQLITE, "postgresql": POSTGRESQL}[engine]
        rows = "SELECT '1.5' AS v UNION ALL SELECT NULL UNION ALL SELECT '2'"
        (joined,) = conn.execute(f"SELECT {dialect.joined('v')} FROM ({rows}) AS r").fetchone()
        assert sorted(joined.split(",")) == ["1.5", "2"]
        (nothing,) = conn.execute(f"SELECT {dialect.joined('v')} FROM ({rows}) AS r WHERE v IS NULL").fetchone()
        assert nothing is None
    finally:
        conn.close()
