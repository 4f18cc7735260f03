"""`buildreport token trust`: CI identities an account trusts, whose OIDC ID tokens are exchanged for tokens with
no stored secret."""

from __future__ import annotations

import secrets

import click
import msgspec

from buildreport.claims import MAX_LIFETIME_S, issuer_problem
from buildreport.cli.shared import (
    ACCOUNT_NAME,
    CommandGroup,
    db_option,
    duration_seconds,
    echo_table,
    err,
    open_tokens,
    when,
)
from buildreport.faults import printable
from buildreport.store.trust import Policy, add_policy, list_policies, remove_policy
from buildreport.times import now_us
from buildreport.tokens import SCOPES

POLICY_ID_PREFIX = "pol_"
MAX_CLAIMS = 20
MAX_PATTERN_LENGTH = 500


def _patterns(claims: tuple[str, ...]) -> dict[str, str]:
    patterns: dict[str, str] = {}
    for text in claims:
        key, eq, pattern = text.partition("=")
        key = key.strip()
        if not eq or not key or not pattern:
            raise click.BadParameter(f"{printable(text)!r} is not KEY=PATTERN", param_hint="--claim")
        if len(pattern) > MAX_PATTERN_LENGTH or not pattern.isprintable():
            raise click.BadParameter(f"{printable(text)!r}: a pattern is one line of text", param_hint="--claim")
        if not pattern.strip("*?"):
            raise click.BadParameter(f"{printable(text)!r} would match any value; name what to trust",
                                     param_hint="--claim")  # fmt: skip
        if key in patterns:
            raise click.BadParameter(f"claim {printable(key)!r} is given twice", param_hint="--claim")
        patterns[key] = pattern
    if not patterns:
        raise click.UsageError("give at least one --claim KEY=PATTERN, e.g. --claim repository=acme/web")
    if len(patterns) > MAX_CLAIMS:
        raise click.BadParameter(f"at most {MAX_CLAIMS}", param_hint="--claim")
    return patterns


@click.group("trust", cls=CommandGroup, invoke_without_command=True)
@db_option
@click.option("--account", help="The account whose tokens trusted jobs get.")
@click.option("--issuer", help="The OIDC issuer, e.g. https://token.actions.githubusercontent.com.")
@click.option("--claim", "claims", multiple=True, help="KEY=PATTERN, a glob over the whole value; repeat (all match).")
@click.option("--scope", "scopes", multiple=True, default=("build:read",), show_default=True, help="Repeatable.")
@click.option("--expires-in", default="6h", show_default=True, help="Lifetime of the tokens it issues; at most 6h.")
@click.pass_context
def trust(
    ctx: click.Context, db: str, account: str | None, issuer: str | None, claims: tuple[str, ...],
    scopes: tuple[str, ...], expires_in: str,
) -> None:
    """Trust a CI identity: its OIDC ID tokens, when every --claim matches, get a token of --account."""
    if ctx.invoked_subcommand is not None:
        return
    if account is None or issuer is None:
        raise click.UsageError("give --account, --issuer and --claim (or use `token trust list` / `remove`)")
    if not ACCOUNT_NAME.fullmatch(account):
        raise click.BadParameter("lowercase letters, digits, '_', '.', '-'; at most 63", param_hint="--account")
    if (problem := issuer_problem(issuer)) is not None:
        raise click.BadParameter(f"{printable(issuer)!r}: {problem}", param_hint="--issuer")
    for scope in scopes:
        if scope not in SCOPES:
            raise click.BadParameter(f"{printable(scope)!r}; known scopes: {', '.join(SCOPES)}", param_hint="--scope")
    lifetime = duration_seconds(expires_in)
    if lifetime > MAX_LIFETIME_S:
        raise click.BadParameter("at most 6h", param_hint="--expires-in")
    policy = Policy(
        POLICY_ID_PREFIX + secrets.token_hex(8), account, issuer, msgspec.json.encode(_patterns(claims)).decode(),
        " ".join(dict.fromkeys(scopes)), lifetime, now_us(),
    )  # fmt: skip
    conn = open_tokens(db)
    with conn:
        add_policy(conn, policy)
    conn.close()
    err(f"trusting {issuer} for account {account}; the server must name it with --oidc-issuer")
    click.echo(policy.policy_id)


def claims_text(claims: str) -> str:
    """Claims or claim patterns (JSON) on one line: `key=value …`."""
    decoded = msgspec.json.decode(claims)
    return printable(" ".join(f"{key}={value}" for key, value in decoded.items()))


@trust.command("list")
@db_option
def trust_list(db: str) -> None:
    """List trusted CI identities."""
    conn = open_tokens(db)
    policies = list_policies(conn)
    conn.close()
    header = ("ID", "ACCOUNT", "ISSUER", "CLAIMS", "SCOPES", "LIFETIME", "CREATED")
    table = [header] + [
        (printable(p.policy_id), printable(p.account), printable(p.issuer), claims_text(p.claims),
         printable(",".join(p.scopes.split())), f"{p.lifetime_s}s", when(p.created_us))
        for p in policies
    ]  # fmt: skip
    echo_table(table)


@trust.command("remove")
@db_option
@click.argument("policy_id")
def trust_remove(db: str, policy_id: str) -> None:
    """Stop trusting a CI identity; tokens it was given stay valid until they expire (or are revoked)."""
    conn = open_tokens(db)
    with conn:
        found = remove_policy(conn, policy_id)
    conn.close()
    if not found:
        raise click.ClickException(f"no trusted identity {printable(policy_id)}; `buildreport token trust list`")
    err(f"removed {policy_id}")


def token_claims(claims: str | None) -> str:
    """An exchanged token's claims as `token list` shows them: its issuer's host and subject."""
    if claims is None:
        return "-"
    decoded = msgspec.json.decode(claims)
    host = str(decoded.get("iss", "")).split("://", 1)[-1].split("/", 1)[0]
    return printable(f"{host} sub={decoded.get('sub', '')}")[:120]
