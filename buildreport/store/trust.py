"""Tokens issued by an OIDC token exchange, and trusted CI identities (policies), in the tokens' storage.

The server reads policies by issuer and stores the tokens it issues (store.reader); the command line manages
policies on a connection to the tokens (store.open_auth). The same SQL serves both engines.
"""

from __future__ import annotations

import msgspec

from buildreport.store.queries import Query

# The schema step of both engines: tokens got by exchanging a CI job's OIDC ID token keep its verified claims
# (JSON); trusted CI identities (`token trust`) let a job whose claims match a policy exchange its ID token with no
# token at all. `{schema}` is where the tokens are (PostgreSQL's schema `auth`; SQLite's tokens file). Taken
# again it changes nothing where the engine can say so (SQLite's ALTER TABLE has no IF NOT EXISTS).
TABLES = """
    ALTER TABLE {schema}tokens ADD COLUMN {if_not_exists}claims TEXT;
    CREATE TABLE IF NOT EXISTS {schema}trust_policies (
        policy_id TEXT PRIMARY KEY,
        account TEXT NOT NULL,
        issuer TEXT NOT NULL,
        claims TEXT NOT NULL,
        scopes TEXT NOT NULL,
        lifetime_s {integer} NOT NULL,
        created_us {integer} NOT NULL
    );
    CREATE INDEX IF NOT EXISTS trust_policies_by_issuer ON {schema}trust_policies (issuer, policy_id);
"""


class NewToken(msgspec.Struct, frozen=True):
    """A token the server issues: only its digest is stored."""

    token_id: str
    account: str
    digest: bytes
    scopes: tuple[str, ...]
    label: str
    created_us: int
    expires_us: int
    claims: str  # the verified claims of the ID token it was exchanged for, as JSON


class Policy(msgspec.Struct, frozen=True):
    """A trusted CI identity: ID tokens of `issuer` whose claims match every pattern get a token of `account`."""

    policy_id: str
    account: str
    issuer: str
    claims: str  # {claim: glob pattern} as JSON
    scopes: str
    lifetime_s: int
    created_us: int


def insert_token(token: NewToken) -> Query:
    return (
        "INSERT INTO tokens (token_id, account, digest, scopes, label, created_us, expires_us, claims)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [token.token_id, token.account, token.digest, " ".join(token.scopes), token.label, token.created_us,
         token.expires_us, token.claims],
    )  # fmt: skip


def policies_of(issuer: str) -> Query:
    """The policies of one issuer, through `trust_policies_by_issuer`."""
    return (
        "SELECT policy_id, account, claims, scopes, lifetime_s FROM auth.trust_policies WHERE issuer = ?"
        " ORDER BY policy_id",
        [issuer],
    )


def add_policy(conn, policy: Policy) -> None:  # type: ignore[no-untyped-def]
    conn.execute(
        "INSERT INTO trust_policies (policy_id, account, issuer, claims, scopes, lifetime_s, created_us)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (policy.policy_id, policy.account, policy.issuer, policy.claims, policy.scopes, policy.lifetime_s,
         policy.created_us),
    )  # fmt: skip


def list_policies(conn) -> list[Policy]:  # type: ignore[no-untyped-def]
    rows = conn.execute(
        "SELECT policy_id, account, issuer, claims, scopes, lifetime_s, created_us FROM trust_policies"
        " ORDER BY created_us, policy_id"
    ).fetchall()
    return [Policy(*row) for row in rows]


def remove_policy(conn, policy_id: str) -> bool:  # type: ignore[no-untyped-def]
    """Remove a policy; False when there is none of that id. Tokens it issued stay until they expire."""
    return conn.execute("DELETE FROM trust_policies WHERE policy_id = ?", (policy_id,)).rowcount > 0
