"""`buildreport hook …`: webhooks, managed by the operator."""

from __future__ import annotations

import secrets
import time
from urllib.parse import urlsplit

import click
import msgspec

from buildreport.cli.shared import CommandGroup, db_option, err, open_db, when
from buildreport.events import sign
from buildreport.events.models import EventType, HookFormat
from buildreport.faults import printable
from buildreport.store import hooks
from buildreport.times import US_PER_SECOND, now_us, to_us

MAX_URL_CHARS = 2000
TEST_TIMEOUT_SECONDS = 10.0


def _check_url(url: str) -> str:
    parts = urlsplit(url)
    if len(url) > MAX_URL_CHARS or parts.scheme not in ("http", "https") or not parts.hostname:
        raise click.BadParameter(f"{printable(url)!r} is not an http:// or https:// address", param_hint="--url")
    if any(c.isspace() or not c.isprintable() for c in url):
        raise click.BadParameter("an address holds no spaces or control characters", param_hint="--url")
    return url


def _check_tags(text: str | None) -> dict[str, str]:
    tags: dict[str, str] = {}
    for pair in text.split(",") if text else []:
        key, colon, value = pair.partition(":")
        if not colon or not key:
            raise click.BadParameter(f"{printable(pair)!r} is not KEY:VALUE", param_hint="--tags")
        tags[key] = value
    return tags


@click.group("hook", cls=CommandGroup)
def hook_group() -> None:
    """Webhooks: events of an account sent to an address, signed (Standard Webhooks)."""


@hook_group.command("add")
@db_option
@click.option("--account", required=True, help="The account whose events are sent.")
@click.option("--url", required=True, help="The receiver's http:// or https:// address.")
@click.option("--event", "types", multiple=True, type=click.Choice([t.value for t in EventType]),
              help="An event type to send; repeat for more. Default: every type.")
@click.option("--tags", help="Only builds carrying every KEY:VALUE pair (comma-separated).")
@click.option("--format", "fmt", type=click.Choice([f.value for f in HookFormat]), default="json", show_default=True,
              help="json: the event; slack: {\"text\": …}, for Slack, Mattermost and Rocket.Chat.")
def add(db: str, account: str, url: str, types: tuple[str, ...], tags: str | None, fmt: str) -> None:
    """Add a webhook; prints its id and its secret, each on a line of its own. The secret is never shown again."""
    conn = open_db(db)
    try:
        hook_id, secret = hooks.add_hook(conn, account, _check_url(url), [EventType(t) for t in dict.fromkeys(types)],
                                         _check_tags(tags), HookFormat(fmt), now_us())
    finally:
        conn.close()
    click.echo(hook_id)
    click.echo(secret)


@hook_group.command("list")
@db_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object a line.")
def list_command(db: str, as_json: bool) -> None:
    """Every webhook (never its secret)."""
    conn = open_db(db)
    try:
        found = hooks.list_hooks(conn)
    finally:
        conn.close()
    for hook in found:
        if as_json:
            click.echo(msgspec.json.encode(hook).decode())
            continue
        state = f"disabled {when(to_us(hook.disabled_at))}: {hook.disabled_reason}" if hook.disabled_at else "enabled"
        kinds = ",".join(hook.events) or "every event"
        tags = ",".join(f"{k}:{v}" for k, v in hook.tags.items())
        click.echo(f"{hook.hook_id}  {hook.account}  {hook.url}  {kinds}  {hook.format}  {tags or '-'}  {state}")


@hook_group.command("remove")
@db_option
@click.argument("hook_id")
def remove(db: str, hook_id: str) -> None:
    """Remove a webhook and its deliveries."""
    conn = open_db(db)
    try:
        if not hooks.remove_hook(conn, hook_id):
            raise click.ClickException(f"no hook {printable(hook_id)}")
    finally:
        conn.close()
    err(f"removed {hook_id}")


@hook_group.command("deliveries")
@db_option
@click.argument("hook_id")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--json", "as_json", is_flag=True, help="One JSON object a line.")
def deliveries_command(db: str, hook_id: str, limit: int, as_json: bool) -> None:
    """A webhook's latest deliveries, newest first."""
    conn = open_db(db)
    try:
        found = hooks.deliveries(conn, hook_id, limit)
    except hooks.UnknownHook as exc:
        raise click.ClickException(printable(str(exc))) from exc
    finally:
        conn.close()
    for d in found:
        if as_json:
            click.echo(msgspec.json.encode(d).decode())
            continue
        last = d.last_error or (f"HTTP {d.last_status}" if d.last_status else "-")
        click.echo(f"{d.delivery_id}  {d.event_id}  {d.event_type}  {d.state}  {d.attempts} attempts  "
                   f"{when(to_us(d.created_at))}  {printable(last)}")


@hook_group.command("redeliver")
@db_option
@click.argument("delivery_id", type=click.IntRange(1))
def redeliver(db: str, delivery_id: int) -> None:
    """Send a delivery's event again (with the same webhook-id), after the hook's pending ones."""
    conn = open_db(db)
    try:
        new_id = hooks.redeliver(conn, delivery_id, now_us())
    except hooks.UnknownHook as exc:
        raise click.ClickException(printable(str(exc))) from exc
    finally:
        conn.close()
    click.echo(new_id)


@hook_group.command("test")
@db_option
@click.argument("hook_id")
def test(db: str, hook_id: str) -> None:
    """Send a signed test message (type `hook.test`) to a webhook now, and say how the receiver answered."""
    conn = open_db(db)
    try:
        url, secret, fmt, account = hooks.hook_target(conn, hook_id)
    except hooks.UnknownHook as exc:
        raise click.ClickException(printable(str(exc))) from exc
    finally:
        conn.close()
    message_id = "test_" + secrets.token_hex(8)
    if fmt == HookFormat.slack:
        body = msgspec.json.encode({"text": f"buildreport: a test message for account {account}"})
    else:
        body = msgspec.json.encode({"id": message_id, "type": "hook.test", "account": account})
    import httpx  # only this command sends: every other command starts without the HTTP client

    started = time.perf_counter()
    try:
        answer = httpx.post(url, content=body, timeout=TEST_TIMEOUT_SECONDS,
                            headers=sign.headers(secret, message_id, now_us() // US_PER_SECOND, body))
    except httpx.HTTPError as exc:
        raise click.ClickException(f"{printable(url)}: {printable(str(exc) or type(exc).__name__)}") from exc
    ms = (time.perf_counter() - started) * 1000
    if not 200 <= answer.status_code < 300:
        raise click.ClickException(f"{printable(url)} answered HTTP {answer.status_code} in {ms:.0f} ms")
    click.echo(f"HTTP {answer.status_code} in {ms:.0f} ms")
