"""Tokens, as the command line manages them: in the tokens file beside the database (see schema.AUTH_SUFFIX)."""

from __future__ import annotations

import sqlite3

import msgspec


class TokenInfo(msgspec.Struct):
    token_id: str
    account: str
    scopes: str
    label: str
    created_us: int
    expires_us: int
    revoked_us: int | None
    last_used_us: int | None
    claims: str | None = None  # of a token got by an OIDC token exchange (JSON)


def insert_token(
    conn: sqlite3.Connection,
    *,
    token_id: str,
    account: str,
    digest: bytes,
    scopes: tuple[str, ...],
    label: str,
    now_us: int,
    expires_us: int,
) -> None:
    """Store a token on a connection to the tokens file (schema.open_auth)."""
    conn.execute(
        "INSERT INTO tokens (token_id, account, digest, scopes, label, created_us, expires_us)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (token_id, account, digest, " ".join(scopes), label, now_us, expires_us),
    )


def list_tokens(conn: sqlite3.Connection) -> list[TokenInfo]:
    rows = conn.execute(
        "SELECT token_id, account, scopes, label, created_us, expires_us, revoked_us, last_used_us, claims"
        " FROM tokens ORDER BY created_us, token_id"
    ).fetchall()
    return [TokenInfo(*row) for row in rows]


def revoke_token(conn: sqlite3.Connection, token_id: str, now_us: int) -> bool:
    """Revoke a token; False when no such token exists. Revoking twice keeps the first time."""
    cur = conn.execute(
        "UPDATE tokens SET revoked_us = coalesce(revoked_us, ?) WHERE token_id = ?", (now_us, token_id)
    )
    return cur.rowcount > 0


def account_id(conn: sqlite3.Connection, name: str) -> int | None:
    """The id of an account of the builds database, or None before its first build."""
    row = conn.execute("SELECT account_id FROM accounts WHERE name = ?", (name,)).fetchone()
    return row[0] if row is not None else None


def account_names(conn: sqlite3.Connection) -> list[str]:
    """The accounts of the builds database, in the order they first had builds."""
    return [row[0] for row in conn.execute("SELECT name FROM accounts ORDER BY account_id").fetchall()]


def newest_failed_build(conn: sqlite3.Connection, account: str) -> tuple[int, int] | None:
    """(account id, build id) of the account's newest build that failed, if any."""
    row = conn.execute(
        "SELECT b.account_id, b.build_id FROM builds b JOIN accounts a USING (account_id)"
        " WHERE a.name = ? AND b.status = 'build_failed' ORDER BY b.create_us DESC, b.build_id DESC LIMIT 1",
        (account,),
    ).fetchone()
    return (row[0], row[1]) if row is not None else None
