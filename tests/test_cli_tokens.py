"""`buildreport token …`: the secret printed once, listing without secrets, expiry, revocation."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner
from conftest import auth, query, record

from buildreport.cli.main import main


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
