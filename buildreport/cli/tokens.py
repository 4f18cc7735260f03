"""`buildreport token …`: create, list and revoke API tokens (and `token trust`, from cli/trust.py)."""

from __future__ import annotations

import click

from buildreport.cli.shared import (
    ACCOUNT_NAME,
    check_label,
    db_option,
    duration_seconds,
    echo_table,
    err,
    open_tokens,
    when,
)
from buildreport.cli.trust import token_claims, trust
from buildreport.faults import printable
from buildreport.times import US_PER_SECOND, format_us, now_us


@click.group("token")
def token() -> None:
    """Create, list and revoke API tokens."""


@token.command("create")
@db_option
@click.option("--account", required=True, help="Account the token reads.")
@click.option(
    "--scope", "scopes", multiple=True, default=("build:read",), show_default=True,
    help="Repeatable. build:read reads the account's builds; build:write sends builds to it; metrics:read is "
    "the operator's: /metrics shows every account's figures, whichever account the token names.",
)
@click.option("--expires-in", default="1000d", show_default=True, help="Lifetime: 30d, 12h, 90m or 3600s.")
@click.option("--label", default="", help="What the token is for.")
def token_create(db: str, account: str, scopes: tuple[str, ...], expires_in: str, label: str) -> None:
    """Create a token; its secret is printed once, alone on standard output."""
    from buildreport.store.admin import insert_token
    from buildreport.tokens import SCOPES, new_token

    for scope in scopes:
        if scope not in SCOPES:
            raise click.BadParameter(f"{printable(scope)!r}; known scopes: {', '.join(SCOPES)}", param_hint="--scope")
    if not ACCOUNT_NAME.fullmatch(account):
        raise click.BadParameter("lowercase letters, digits, '_', '.', '-'; at most 63", param_hint="--account")
    lifetime = duration_seconds(expires_in)
    label = check_label(label)
    conn = open_tokens(db)
    with conn:
        now = now_us()
        conn.execute("BEGIN IMMEDIATE")
        token_id, secret, token_digest = new_token()
        insert_token(
            conn,
            token_id=token_id,
            account=account,
            digest=token_digest,
            scopes=tuple(dict.fromkeys(scopes)),
            label=label,
            now_us=now,
            expires_us=now + lifetime * US_PER_SECOND,
        )
    conn.close()
    err(f"created {token_id} for account {account}, expires {format_us(now + lifetime * US_PER_SECOND)}")
    click.echo(secret)


@token.command("list")
@db_option
def token_list(db: str) -> None:
    """List tokens (never their secrets)."""
    from buildreport.store.admin import list_tokens

    conn = open_tokens(db)
    rows = list_tokens(conn)
    conn.close()
    header = ("ID", "ACCOUNT", "SCOPES", "LABEL", "OIDC", "CREATED", "EXPIRES", "LAST USED", "REVOKED")
    table = [header] + [
        (
            printable(t.token_id),
            printable(t.account),
            printable(",".join(t.scopes.split())),
            printable(t.label) or "-",
            token_claims(t.claims),
            when(t.created_us),
            when(t.expires_us),
            when(t.last_used_us),
            when(t.revoked_us),
        )
        for t in rows
    ]
    echo_table(table)


token.add_command(trust)


@token.command("revoke")
@db_option
@click.argument("token_id")
def token_revoke(db: str, token_id: str) -> None:
    """Revoke a token at once."""
    from buildreport.store.admin import revoke_token

    conn = open_tokens(db)
    with conn:
        found = revoke_token(conn, token_id, now_us())
    conn.close()
    if not found:
        raise click.ClickException(f"no token {printable(token_id)}; `buildreport token list` shows them")
    err(f"revoked {token_id}")
