"""The command line as a whole: clear errors for unusable databases, and the database the environment names."""

from __future__ import annotations

import sqlite3

from click.testing import CliRunner
from conftest import query

from buildreport.cli.main import main
from buildreport.store.postgres.schema import SCHEMA_VERSION as PG_SCHEMA_VERSION
from buildreport.store.sqlite.schema import SCHEMA_VERSION


def run(*args: str, expect: int = 0):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == expect, (result.stdout, result.stderr)
    return result


def test_a_file_that_is_not_a_database_is_refused(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("shopping list\n" * 100)
    result = run("token", "list", "--db", str(path), expect=1)
    assert "is not a buildreport database" in result.stderr


def test_another_applications_database_is_refused(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE things (x)")
    conn.commit()
    conn.close()
    assert "is not a buildreport database" in run("token", "list", "--db", str(path), expect=1).stderr


def test_a_newer_schema_is_refused(env):
    run("token", "list", "--db", str(env.db))
    if env.engine == "sqlite":
        conn = sqlite3.connect(env.db)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        conn.close()
    else:
        query(env.db, "UPDATE buildreport_schema SET version = ?", (PG_SCHEMA_VERSION + 1,))
    result = run("token", "list", "--db", str(env.db), expect=1)
    assert "newer than this buildreport understands" in result.stderr


def test_a_database_in_a_missing_directory_is_refused(tmp_path):
    result = run("token", "list", "--db", str(tmp_path / "missing" / "x.db"), expect=1)
    assert "does not exist" in result.stderr


def test_db_defaults_to_the_environment_variable(env, monkeypatch):
    monkeypatch.setenv("BUILDREPORT_DB", str(env.db))
    run("token", "create", "--account", "acme")
    assert query(env.db, "SELECT count(*) FROM tokens", tokens=True) == [(1,)]
