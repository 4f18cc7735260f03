"""The command line: tokens, import and its errors, sample, and clear errors for unusable databases."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import auth, query, record, write_jsonl

from buildreport.cli.main import main
from buildreport.store.postgres.schema import SCHEMA_VERSION as PG_SCHEMA_VERSION
from buildreport.store.sqlite.schema import SCHEMA_VERSION


def run(*args: str, expect: int = 0):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == expect, (result.stdout, result.stderr)
    return result


def test_token_create_prints_the_secret_alone_on_stdout(env):
    result = run("token", "create", "--db", str(env.db), "--account", "acme", "--label", "ci")
    assert re.fullmatch(r"brt_[A-Za-z0-9_-]{43}\n", result.stdout)
    assert "created tok_" in result.stderr
    env.load([record(1)])
    with env.client() as client:
        assert client.get("/builds", headers=auth(result.stdout.strip())).status_code == 200


def test_token_list_never_shows_secrets(env):
    secret = run("token", "create", "--db", str(env.db), "--account", "acme", "--label", "deploy").stdout.strip()
    listing = run("token", "list", "--db", str(env.db)).stdout
    assert "acme" in listing and "deploy" in listing and "build:read" in listing
    assert secret not in listing and secret[4:20] not in listing


def test_revoked_token_is_refused_at_once(env):
    env.load([record(1)])
    secret = run("token", "create", "--db", str(env.db), "--account", "acme").stdout.strip()
    with env.client() as client:
        assert client.get("/builds", headers=auth(secret)).status_code == 200
        token_id = re.search(r"tok_[0-9a-f]{16}", run("token", "list", "--db", str(env.db)).stdout)[0]
        run("token", "revoke", "--db", str(env.db), token_id)
        response = client.get("/builds", headers=auth(secret))
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]


def test_token_expiry_option(env):
    run("token", "create", "--db", str(env.db), "--account", "acme", "--expires-in", "2h")
    ((created, expires),) = query(env.db, "SELECT created_us, expires_us FROM tokens", tokens=True)
    assert expires - created == 2 * 3600 * 1_000_000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--scope", "build:admin"), "known scopes"),
        (("--expires-in", "soon"), "not a duration"),
        (("--expires-in", "0d"), "not a duration"),
    ],
)
def test_token_create_rejects_bad_options(env, args, message):
    result = run("token", "create", "--db", str(env.db), "--account", "acme", *args, expect=2)
    assert message in result.stderr


def test_revoking_an_unknown_token_fails(env):
    result = run("token", "revoke", "--db", str(env.db), "tok_0000000000000000", expect=1)
    assert "no token tok_0000000000000000" in result.stderr


def test_import_reports_every_bad_record_and_exits_non_zero(env, tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [record(1), {**record(2), "cpu_count": "four"}, {"build_id": 3}])
    result = run("import", "--db", str(env.db), str(path), expect=1)
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"{path}:2: cpu_count: expected `int`, got `str`")
    assert lines[1].startswith(f"{path}:3: ")
    assert "nothing was imported" in result.stderr
    assert query(env.db, "SELECT count(*) FROM builds") == [(0,)]


def test_import_closing_line_counts_builds(env, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [record(1), record(2)])
    assert (
        "imported 2 builds from 1 file (2 new, 0 updated, 0 unchanged)"
        in run("import", "--db", str(env.db), str(path)).stderr
    )
    assert "(0 new, 0 updated, 2 unchanged)" in run("import", "--db", str(env.db), str(path)).stderr


def test_import_of_a_missing_file_fails_clearly(env, tmp_path):
    result = run("import", "--db", str(env.db), str(tmp_path / "nope.jsonl"), expect=2)
    assert "does not exist" in result.stderr


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


def test_sample_command_with_its_defaults_reproduces_the_committed_sample(tmp_path):
    from buildreport.sample import SAMPLE_PATH

    out = tmp_path / "builds.jsonl.gz"
    run("sample", "-o", str(out))
    committed = Path(__file__).resolve().parent.parent / SAMPLE_PATH
    assert out.read_bytes() == committed.read_bytes()


def test_token_list_shows_when_a_token_was_last_used(env):
    import time

    env.load([record(1)])
    secret = run("token", "create", "--db", str(env.db), "--account", "acme").stdout.strip()
    assert run("token", "list", "--db", str(env.db)).stdout.splitlines()[1].split()[-2:] == ["-", "-"]
    with env.client() as client:
        assert client.get("/builds", headers=auth(secret)).status_code == 200
        deadline = time.monotonic() + 5
        while query(env.db, "SELECT last_used_us FROM tokens", tokens=True) == [(None,)]:
            assert time.monotonic() < deadline, "last use was never recorded"
            time.sleep(0.05)
    row = run("token", "list", "--db", str(env.db)).stdout.splitlines()[1]
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+-$", row), row


def test_import_of_deeply_nested_lines_names_them_and_exits_non_zero(env, tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps(record(1)) + "\n" + "[" * 10_000 + "]" * 10_000 + "\n")
    result = run("import", "--db", str(env.db), str(path), expect=1)
    assert result.stderr.splitlines()[0] == f"{path}:2: (record): arrays and objects are nested more than 32 deep;" \
        " no build record is"
    assert "Traceback" not in result.stderr
    assert query(env.db, "SELECT count(*) FROM builds") == [(0,)]
