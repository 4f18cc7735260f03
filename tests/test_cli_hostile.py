"""Every command, driven with hostile values: a clear one-line error, a non-zero exit, never a traceback."""

from __future__ import annotations

import sqlite3

import pytest
from click.testing import CliRunner

from buildreport.cli.main import main
from buildreport.store.sqlite.schema import auth_path


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def assert_refused(result, *needles: str) -> None:
    """Refused with a message, not a crash: click's SystemExit with status 1 or 2, no traceback."""
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (1, 2), result.output
    assert "Traceback" not in result.output
    message = result.stderr.strip()
    assert message.startswith(("Error", "Usage")), message
    assert "\x1b" not in message and "\r" not in message
    for needle in needles:
        assert needle in message, message


@pytest.fixture
def paths(tmp_path):
    not_db = tmp_path / "notes.txt"
    not_db.write_text("these are not builds\n" * 100)
    folder = tmp_path / "folder"
    folder.mkdir()
    return {
        "db": str(tmp_path / "b.db"),
        "not a database": str(not_db),
        "a directory": str(folder),
        "in a missing directory": str(tmp_path / "missing" / "b.db"),
        "empty name": "",
    }


DB_CASES = ["not a database", "a directory", "in a missing directory"]
COMMANDS = {
    "token create": ["token", "create", "--account", "acme"],
    "token list": ["token", "list"],
    "token revoke": ["token", "revoke", "tok_0000000000000000"],
    "import": ["import", "FILE"],
    "serve": ["serve", "--port", "0"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("db_case", DB_CASES)
def test_every_command_refuses_a_database_it_cannot_use(paths, tmp_path, command, db_case):
    data = tmp_path / "x.jsonl"
    data.write_text("")
    args = [str(data) if a == "FILE" else a for a in COMMANDS[command]]
    assert_refused(invoke(*args, "--db", paths[db_case]))


TOKEN_CREATE = {
    "a lifetime past the year 9999": (["--expires-in", "3000000d"], "at most 36500d"),
    "an astronomically long lifetime": (["--expires-in", "99999999999999999999999d"], "--expires-in"),
    "a zero lifetime": (["--expires-in", "0d"], "--expires-in"),
    "a negative lifetime": (["--expires-in", "-1d"], "--expires-in"),
    "an empty lifetime": (["--expires-in", ""], "--expires-in"),
    "a unit that does not exist": (["--expires-in", "1y"], "--expires-in"),
    "a newline in the label": (["--label", "ci\nFAKE ROW"], "--label"),
    "an escape code in the label": (["--label", "\x1b[31mred"], "--label"),
    "a right-to-left override in the label": (["--label", "abc\u202edef"], "--label"),
    "a carriage return in the label": (["--label", "a\rb"], "--label"),
    "an overlong label": (["--label", "x" * 201], "at most 200"),
    "an unknown scope": (["--scope", "admin:all"], "--scope"),
    "an empty scope": (["--scope", ""], "--scope"),
}


@pytest.mark.parametrize("name", list(TOKEN_CREATE))
def test_token_create_refuses_hostile_values_before_storing_anything(paths, name):
    extra, needle = TOKEN_CREATE[name]
    assert_refused(invoke("token", "create", "--db", paths["db"], "--account", "acme", *extra), needle)
    tokens = auth_path(paths["db"])
    assert not tokens.exists() or sqlite3.connect(tokens).execute("SELECT count(*) FROM tokens").fetchone() == (0,)


@pytest.mark.parametrize("account", ["", "ACME", "a" * 64, "acme\n", "../etc", "-a"])
def test_token_create_refuses_bad_account_names(paths, account):
    assert_refused(invoke("token", "create", "--db", paths["db"], "--account", account), "--account")


def test_the_longest_lifetime_is_accepted_and_listed(paths):
    result = invoke("token", "create", "--db", paths["db"], "--account", "acme", "--expires-in", "36500d")
    assert result.exit_code == 0, result.output
    assert invoke("token", "list", "--db", paths["db"]).exit_code == 0


def test_token_list_escapes_what_older_versions_stored(paths):
    assert invoke("token", "create", "--db", paths["db"], "--account", "acme").exit_code == 0
    conn = sqlite3.connect(auth_path(paths["db"]))
    conn.execute(
        "UPDATE tokens SET label = ?, expires_us = ?", ("ok\ntok_fake  acme  build:read\x1b[2J\r\u202e", 2**62)
    )
    conn.commit()
    conn.close()
    result = invoke("token", "list", "--db", paths["db"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 2  # the header and one row: the label forged none
    assert "\x1b" not in result.stdout and "\r" not in result.stdout and "\u202e" not in result.stdout
    assert "\\n" in lines[1] and "\\x1b" in lines[1]


@pytest.mark.parametrize("token_id", ["", "tok_\x1b[2Jgone", "x" * 10_000, "tok_'; DROP TABLE tokens; --"])
def test_token_revoke_of_an_unknown_id_says_so(paths, token_id):
    result = invoke("token", "revoke", "--db", paths["db"], token_id)
    assert_refused(result, "no token")


@pytest.mark.parametrize("case", ["a missing file", "a directory", "no file"])
def test_import_refuses_files_it_cannot_read(paths, tmp_path, case):
    files = {"a missing file": [str(tmp_path / "nope.jsonl")], "a directory": [str(tmp_path)], "no file": []}[case]
    assert_refused(invoke("import", "--db", paths["db"], *files))


SAMPLE = {
    "zero builds": ["--builds", "0"],
    "a huge number of builds": ["--builds", str(10**20)],
    "negative days": ["--days", "-1"],
    "a century too many days": ["--days", "100000"],
    "a negative seed": ["--seed", "-1"],
    "a seed past 2^63": ["--seed", str(2**70)],
    "an empty end": ["--end", ""],
    "an end past 9999": ["--end", "99999-01-01"],
    "an end in year 1": ["--end", "0001-01-01"],
    "an end before 1970 with its days": ["--end", "1970-01-02", "--days", "30"],
    "an empty account list": ["--accounts", ","],
    "a bad account name": ["--accounts", "acme,Bad Name\n"],
    "a log share of NaN": ["--log-share", "nan"],
    "a log share above 1": ["--log-share", "2"],
}


@pytest.mark.parametrize("name", list(SAMPLE))
def test_sample_refuses_hostile_values(tmp_path, name):
    out = tmp_path / "s.jsonl"
    assert_refused(invoke("sample", "-o", str(out), "--builds", "5", *SAMPLE[name]))
    assert not out.exists()


def test_sample_into_a_directory_is_refused(tmp_path):
    assert_refused(invoke("sample", "-o", str(tmp_path), "--builds", "5"))


SERVE = {
    "a port past 65535": ["--port", "70000"],
    "a negative port": ["--port", "-1"],
    "an empty host": ["--host", ""],
    "a newline in the host": ["--host", "127.0.0.1\nx"],
    "an overlong host": ["--host", "a" * 300],
    "a public URL that is not http": ["--public-url", "javascript:alert(1)"],
    "a newline in the public URL": ["--public-url", "http://x\ny"],
    "a rate limit past a billion": ["--rate-limit", str(10**20)],
    "a negative rate limit": ["--rate-limit", "-1"],
    "zero workers": ["--workers", "0"],
    "a thousand workers": ["--workers", "1000"],
}


@pytest.mark.parametrize("command", ["serve", "demo"])
@pytest.mark.parametrize("name", list(SERVE))
def test_serve_and_demo_refuse_hostile_options(tmp_path, command, name):
    db = tmp_path / "d.db"
    assert_refused(invoke(command, "--db", str(db), *SERVE[name]))
    assert not db.exists()


def test_demo_refuses_an_existing_database(paths):
    assert invoke("token", "list", "--db", paths["db"]).exit_code == 0
    assert_refused(invoke("demo", "--db", paths["db"], "--port", "0"), "exists")
