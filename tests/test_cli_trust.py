"""`buildreport token trust`: trusted CI identities added, listed and removed; bad input refused in one line."""

from __future__ import annotations

import subprocess

import pytest
from conftest import buildreport_command, query

GITHUB = "https://token.actions.githubusercontent.com"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*buildreport_command(), *args], capture_output=True, text=True, timeout=60)


def test_a_trusted_identity_is_added_listed_and_removed(env):
    env.load([])
    added = run("token", "trust", "--db", str(env.db), "--account", "acme", "--issuer", GITHUB,
                "--claim", "repository=acme/*", "--claim", "ref=refs/heads/main", "--scope", "build:write")  # fmt: skip
    assert added.returncode == 0, added.stderr
    policy_id = added.stdout.strip()
    assert policy_id.startswith("pol_")
    assert query(env.db, "SELECT account, issuer, claims, scopes, lifetime_s FROM trust_policies", tokens=True) == [
        ("acme", GITHUB, '{"repository":"acme/*","ref":"refs/heads/main"}', "build:write", 6 * 3600)
    ]
    listed = run("token", "trust", "list", "--db", str(env.db))
    assert listed.returncode == 0, listed.stderr
    assert policy_id in listed.stdout and "repository=acme/* ref=refs/heads/main" in listed.stdout
    removed = run("token", "trust", "remove", "--db", str(env.db), policy_id)
    assert removed.returncode == 0, removed.stderr
    assert query(env.db, "SELECT count(*) FROM trust_policies", tokens=True) == [(0,)]
    again = run("token", "trust", "remove", "--db", str(env.db), policy_id)
    assert again.returncode != 0 and "no trusted identity" in again.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--issuer", GITHUB, "--claim", "repository=acme/*"), "--account"),
        (("--account", "acme", "--issuer", GITHUB), "--claim"),
        (("--account", "acme", "--issuer", "http://gitlab.example.com", "--claim", "a=b"), "loopback"),
        (("--account", "acme", "--issuer", GITHUB, "--claim", "repository"), "KEY=PATTERN"),
        (("--account", "acme", "--issuer", GITHUB, "--claim", "repository=*"), "would match any value"),
        (("--account", "acme", "--issuer", GITHUB, "--claim", "a=b", "--claim", "a=c"), "twice"),
        (("--account", "acme", "--issuer", GITHUB, "--claim", "a=b", "--expires-in", "7h"), "at most 6h"),
        (("--account", "acme", "--issuer", GITHUB, "--claim", "a=b", "--scope", "admin"), "known scopes"),
        (("--account", "Acme!", "--issuer", GITHUB, "--claim", "a=b"), "lowercase"),
    ],
)
def test_bad_trust_input_is_one_clear_line(tmp_path, args, words):
    done = run("token", "trust", "--db", str(tmp_path / "t.db"), *args)
    assert done.returncode != 0
    assert words in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_serve_refuses_an_issuer_that_is_not_https_and_a_malformed_claim_tag(tmp_path):
    plain = run("serve", "--db", str(tmp_path / "t.db"), "--oidc-issuer", "http://ci.example.com")
    assert plain.returncode == 2 and "loopback" in plain.stderr
    tag = run("serve", "--db", str(tmp_path / "t.db"), "--oidc-claim-tag", "repository")
    assert tag.returncode == 2 and "ISSUER:CLAIM=TAG" in tag.stderr


def test_token_list_shows_an_exchanged_tokens_issuer_and_subject(env):
    from buildreport.store import open_auth, open_database
    from buildreport.store.trust import NewToken, insert_token
    from buildreport.tokens import new_token

    open_database(env.db).close()
    conn = open_auth(str(env.db))
    token_id, _, digest = new_token()
    claims = '{"iss":"https://token.actions.githubusercontent.com","sub":"repo:acme/web:ref:refs/heads/main"}'
    with conn:
        conn.execute(*insert_token(NewToken(token_id, "acme", digest, ("build:read",), "ci", 1, 2**50, claims)))
    conn.close()
    listed = run("token", "list", "--db", str(env.db))
    assert listed.returncode == 0, listed.stderr
    assert "token.actions.githubusercontent.com sub=repo:acme/web:ref:refs/heads/main" in listed.stdout


def test_a_tokens_file_from_before_trusted_identities_is_brought_up_to_date(tmp_path):
    import sqlite3

    from buildreport.store.sqlite.schema import AUTH_MIGRATIONS, auth_path, open_database

    open_database(tmp_path / "t.db").close()
    old = sqlite3.connect(auth_path(tmp_path / "t.db"))
    old.executescript("DROP TABLE trust_policies; ALTER TABLE tokens DROP COLUMN claims;")
    before = next(version for version, step in enumerate(AUTH_MIGRATIONS) if "trust_policies" in step)
    old.execute(f"PRAGMA user_version = {before}")
    old.commit()
    old.close()
    listed = run("token", "trust", "list", "--db", str(tmp_path / "t.db"))
    assert listed.returncode == 0, listed.stderr
    assert run("token", "list", "--db", str(tmp_path / "t.db")).returncode == 0
