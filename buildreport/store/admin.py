"""Accounts and tokens, as the command line manages them."""

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


def ensure_account(conn: sqlite3.Connection, name: str, now_us: int) -> int:
    conn.execute("INSERT OR IGNORE INTO accounts (name, created_us) VALUES (?, ?)", (name, now_us))
    return conn.execute("SELECT account_id FROM accounts WHERE name = ?", (name,)).fetchone()[0]


def insert_token(
    conn: sqlite3.Connection,
    *,
    token_id: str,
    account_id: int,
    digest: bytes,
    scopes: tuple[str, ...],
    label: str,
    now_us: int,
    expires_us: int,
) -> None:
    conn.execute(
        "INSERT INTO tokens (token_id, account_id, digest, scopes, label, created_us, expires_us)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (token_id, account_id, digest, " ".join(scopes), label, now_us, expires_us),
    )


def list_tokens(conn: sqlite3.Connection) -> list[TokenInfo]:
    rows = conn.execute(
        "SELECT t.token_id, a.name, t.scopes, t.label, t.created_us, t.expires_us, t.revoked_us, t.last_used_us"
        " FROM tokens t JOIN accounts a USING (account_id) ORDER BY t.created_us, t.token_id"
    ).fetchall()
    return [TokenInfo(*row) for row in rows]


def revoke_token(conn: sqlite3.Connection, token_id: str, now_us: int) -> bool:
    """Revoke a token; False when no such token exists. Revoking twice keeps the first time."""
    cur = conn.execute(
        "UPDATE tokens SET revoked_us = coalesce(revoked_us, ?) WHERE token_id = ?", (now_us, token_id)
    )
    return cur.rowcount > 0
