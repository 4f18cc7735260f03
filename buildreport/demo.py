"""The demo: sample data shifted to end now, a token for each account, and lines to try."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import msgspec

from buildreport.config import Settings, load_secret_keys
from buildreport.imports.files import open_lines
from buildreport.imports.load import import_files
from buildreport.models import ImportRecord
from buildreport.signing import DashboardClaims, DashboardSigner, LinkClaims, LinkSigner
from buildreport.store import Connection, admin, describe, open_auth
from buildreport.store.admin import insert_token
from buildreport.times import US_PER_DAY, US_PER_SECOND, to_us
from buildreport.tokens import new_token

DEMO_LINK_TTL_US = US_PER_DAY


def sample_data_path() -> Path:
    """The sample dataset shipped inside the package (and so inside the executable)."""
    from importlib.resources import files

    from buildreport import sample as gen

    return Path(str(files("buildreport").joinpath(*gen.SAMPLE_PATH.parts[1:])))


def newest_us(path: Path) -> int:
    """The latest creation or start time in a sample file (a queued build starts after it was created)."""
    decoder = msgspec.json.Decoder(ImportRecord)
    newest = 0
    with open_lines(path) as lines:
        for line in lines:
            if line.strip():
                record = decoder.decode(line)
                newest = max(newest, to_us(record.create_time), to_us(record.start_time))
    return newest


def prepare_demo(conn: Connection, settings: Settings, sample: Path, now_us: int) -> list[str]:
    """Load the sample into `conn` and return what to print: tokens, curl lines, a signed link.

    Times are shifted so that the latest moment in the sample is now: nothing starts in the future.
    """
    shift = timedelta(microseconds=now_us - newest_us(sample))

    def shifted(record: ImportRecord) -> ImportRecord:
        return msgspec.structs.replace(
            record, create_time=record.create_time + shift, start_time=record.start_time + shift
        )

    result = import_files(conn, [sample], now_us, transform=shifted, events=True)  # the feed has history too
    accounts = admin.account_names(conn)
    base = settings.base_url
    lines = [f"buildreport demo: {result.records} sample builds in {describe(settings.db)}", ""]
    first_secret = ""
    auth = open_auth(settings.db)
    with auth:
        auth.execute("BEGIN IMMEDIATE")
        for name in accounts:
            token_id, secret, digest = new_token()
            insert_token(
                auth,
                token_id=token_id,
                account=name,
                digest=digest,
                scopes=("build:read",),
                label="demo",
                now_us=now_us,
                expires_us=now_us + 30 * US_PER_DAY,
            )
            first_secret = first_secret or secret
            lines.append(f"token for account {name}: {secret}")
        if accounts:
            # Runners send builds with a token of their own that may only write (see POST /builds).
            token_id, secret, digest = new_token()
            insert_token(
                auth,
                token_id=token_id,
                account=accounts[0],
                digest=digest,
                scopes=("build:write",),
                label="demo runner",
                now_us=now_us,
                expires_us=now_us + 30 * US_PER_DAY,
            )
            lines.append(f"token that writes builds to account {accounts[0]}: {secret}")
    auth.close()
    lines += [
        "",
        "Try:",
        f"  export TOKEN={first_secret}",
        f'  curl -H "Authorization: Bearer $TOKEN" "{base}/builds?limit=3"',
        f'  curl -H "Authorization: Bearer $TOKEN" "{base}/builds?status=build_failed,timeout&limit=5"',
        f'  curl -H "Authorization: Bearer $TOKEN" "{base}/builds/summary?create_time_from=2000-01-01"',
        f'  curl -H "Authorization: Bearer $TOKEN" "{base}/usage"',
        f"  API docs: {base}/docs",
    ]
    link = _demo_link(conn, settings, accounts[0] if accounts else None, now_us)
    if link:
        lines.append(f"  A build page (no token needed): {link}")
    dashboard = _dashboard_link(conn, settings, accounts[0], now_us) if accounts else None
    if dashboard:
        lines.append(f"  The dashboard (no token needed): {dashboard}")
    lines.append("")
    return lines


def _demo_link(conn: Connection, settings: Settings, account: str | None, now_us: int) -> str | None:
    """A signed link to the newest failed build of the first account, valid for a day."""
    if account is None:
        return None
    newest = admin.newest_failed_build(conn, account)
    if newest is None:
        return None
    expires_us = (now_us + DEMO_LINK_TTL_US) // US_PER_SECOND * US_PER_SECOND
    claims = LinkClaims(newest[0], newest[1], expires_us)
    return LinkSigner(load_secret_keys(settings)).link_url(settings.base_url, claims)


def _dashboard_link(conn: Connection, settings: Settings, account: str, now_us: int) -> str | None:
    """A signed link to the first account's dashboard, valid for a day."""
    account_id = admin.account_id(conn, account)
    if account_id is None:
        return None
    expires_us = (now_us + DEMO_LINK_TTL_US) // US_PER_SECOND * US_PER_SECOND
    signer = DashboardSigner(load_secret_keys(settings))
    return signer.link_url(settings.base_url, DashboardClaims(account_id, expires_us))
