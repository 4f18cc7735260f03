"""Webhooks and their deliveries: what the `hook` commands manage and what the deliverer leases and records.

Each delivery is sent by one deliverer at a time: it is leased (`leased_until_us`, `owner`) by one atomic
UPDATE that takes only the first pending delivery of each hook, and only while no lease on it runs, so one
hook's deliveries go one at a time, in event order. A deliverer that dies leaves its leases to expire; the
next to look takes them over.
"""

from __future__ import annotations

import secrets
from base64 import b64encode
from typing import Any

import msgspec

from buildreport.events.models import Delivery, DeliveryState, EventType, Hook, HookFormat
from buildreport.store.dialect import dialect_of
from buildreport.times import from_us

SECRET_BYTES = 32
_TAGS = msgspec.json.Decoder(dict[str, str])


class Claimed(msgspec.Struct):
    """A delivery this deliverer leased, with what sending it needs."""

    delivery_id: int
    hook_id: str
    url: str
    secret: str
    format: str
    account_id: int
    event_id: str
    build_id: int
    body: bytes
    attempts: int
    created_us: int


class UnknownHook(LookupError):
    pass


def _account_id(conn: Any, account: str, now_us: int) -> int:
    row = conn.execute("SELECT account_id FROM accounts WHERE name = ?", (account,)).fetchone()
    if row is not None:
        return int(row[0])
    (account_id,) = conn.execute(
        "INSERT INTO accounts (name, created_us) VALUES (?, ?) RETURNING account_id", (account, now_us)
    ).fetchone()
    return int(account_id)


def add_hook(
    conn: Any, account: str, url: str, types: list[EventType], tags: dict[str, str], fmt: HookFormat, now_us: int
) -> tuple[str, str]:
    """Store a new hook; its id and its secret (`whsec_` and base64 of random bytes), which is shown once."""
    hook_id = "hook_" + secrets.token_hex(8)
    secret = "whsec_" + b64encode(secrets.token_bytes(SECRET_BYTES)).decode()
    conn.execute("BEGIN IMMEDIATE")
    try:
        account_id = _account_id(conn, account, now_us)
        conn.execute(
            "INSERT INTO hooks (hook_id, account_id, url, types, tags, format, secret, created_us)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (hook_id, account_id, url, " ".join(t.value for t in types), msgspec.json.encode(tags), fmt.value,
             secret, now_us),
        )
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return hook_id, secret


def list_hooks(conn: Any) -> list[Hook]:
    rows = conn.execute(
        "SELECT h.hook_id, a.name, h.url, h.types, h.tags, h.format, h.created_us, h.disabled_us, h.disabled_reason"
        " FROM hooks h JOIN accounts a USING (account_id) ORDER BY a.name, h.created_us, h.hook_id"
    ).fetchall()
    return [
        Hook(hook_id, account, url, [EventType(t) for t in types.split()], _TAGS.decode(tags), HookFormat(fmt),
             from_us(created), from_us(disabled) if disabled is not None else None, reason)
        for hook_id, account, url, types, tags, fmt, created, disabled, reason in rows
    ]


def remove_hook(conn: Any, hook_id: str) -> bool:
    """Remove a hook and its deliveries; False when there is no such hook."""
    with conn:
        return conn.execute("DELETE FROM hooks WHERE hook_id = ?", (hook_id,)).rowcount > 0


def hook_target(conn: Any, hook_id: str) -> tuple[str, str, str, str]:
    """(url, secret, format, account) of a hook, for a test message."""
    row = conn.execute(
        "SELECT h.url, h.secret, h.format, a.name FROM hooks h JOIN accounts a USING (account_id) WHERE h.hook_id = ?",
        (hook_id,),
    ).fetchone()
    if row is None:
        raise UnknownHook(f"no hook {hook_id}")
    return row


def deliveries(conn: Any, hook_id: str, limit: int) -> list[Delivery]:
    """A hook's latest deliveries, newest first."""
    hook_target(conn, hook_id)
    rows = conn.execute(
        "SELECT d.delivery_id, d.hook_id, d.event_id, e.type, d.state, d.attempts, d.created_us, d.next_us,"
        " d.last_status, d.last_error, d.done_us FROM deliveries d JOIN events e ON e.event_id = d.event_id"
        " WHERE d.hook_id = ? ORDER BY d.delivery_id DESC LIMIT ?",
        (hook_id, limit),
    ).fetchall()
    return [
        Delivery(did, hid, eid, EventType(kind), DeliveryState(state), attempts, from_us(created),
                 from_us(next_us) if state == DeliveryState.pending else None, status, error,
                 from_us(done) if done is not None else None)
        for did, hid, eid, kind, state, attempts, created, next_us, status, error, done in rows
    ]


def redeliver(conn: Any, delivery_id: int, now_us: int) -> int:
    """Queue an event again for the hook of a delivery (after the hook's pending ones); the new delivery's id."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute("SELECT hook_id, event_id FROM deliveries WHERE delivery_id = ?", (delivery_id,)).fetchone()
        if row is None:
            raise UnknownHook(f"no delivery {delivery_id}")
        (new_id,) = conn.execute(
            "INSERT INTO deliveries (hook_id, event_id, state, attempts, created_us, next_us)"
            " VALUES (?, ?, 'pending', 0, ?, ?) RETURNING delivery_id",
            (row[0], row[1], now_us, now_us),
        ).fetchone()
        conn.execute("UPDATE hooks SET disabled_us = NULL, disabled_reason = NULL WHERE hook_id = ?", (row[0],))
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return int(new_id)


# The first pending delivery of each enabled hook, if it is due and not leased: a lookup of deliveries_pending
# per hook.
CLAIM = """
UPDATE deliveries SET leased_until_us = ?, owner = ?, attempts = attempts + 1
WHERE delivery_id IN (
    SELECT d.delivery_id FROM hooks h JOIN deliveries d ON d.delivery_id = (
        SELECT min(p.delivery_id) FROM deliveries p WHERE p.hook_id = h.hook_id AND p.state = 'pending')
    WHERE h.disabled_us IS NULL AND d.next_us <= ? AND (d.leased_until_us IS NULL OR d.leased_until_us <= ?)
    ORDER BY d.delivery_id LIMIT ? {skip_locked}
) AND state = 'pending' AND (leased_until_us IS NULL OR leased_until_us <= ?)
RETURNING delivery_id
"""


def claim(conn: Any, now_us: int, lease_until_us: int, owner: str, limit: int) -> list[Claimed]:
    """Lease up to `limit` deliveries that are due, at most one a hook, and what sending them needs."""
    sql = CLAIM.format(skip_locked=dialect_of(conn).skip_locked)
    with conn:
        ids = [row[0] for row in conn.execute(sql, (lease_until_us, owner, now_us, now_us, limit, now_us))]
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    rows = conn.execute(
        "SELECT d.delivery_id, d.hook_id, h.url, h.secret, h.format, h.account_id, d.event_id, e.build_id, e.body,"
        " d.attempts, d.created_us FROM deliveries d JOIN hooks h ON h.hook_id = d.hook_id"
        f" JOIN events e ON e.event_id = d.event_id WHERE d.delivery_id IN ({marks}) ORDER BY d.delivery_id",
        ids,
    ).fetchall()
    return [Claimed(*row[:8], bytes(row[8]), *row[9:]) for row in rows]


def delivered(conn: Any, delivery_id: int, status: int, now_us: int) -> None:
    with conn:
        conn.execute(
            "UPDATE deliveries SET state = 'delivered', last_status = ?, last_error = NULL, done_us = ?,"
            " leased_until_us = NULL, owner = NULL WHERE delivery_id = ?",
            (status, now_us, delivery_id),
        )


def retry_later(conn: Any, delivery_id: int, status: int | None, error: str, next_us: int) -> None:
    with conn:
        conn.execute(
            "UPDATE deliveries SET next_us = ?, last_status = ?, last_error = ?, leased_until_us = NULL, owner = NULL"
            " WHERE delivery_id = ? AND state = 'pending'",
            (next_us, status, error, delivery_id),
        )


def give_up(conn: Any, delivery_id: int, status: int | None, error: str, now_us: int, disable: bool) -> None:
    """Mark a delivery failed; with `disable` (the receiver answered 410 Gone), its hook sends no more."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute(
            "UPDATE deliveries SET state = 'failed', last_status = ?, last_error = ?, done_us = ?,"
            " leased_until_us = NULL, owner = NULL WHERE delivery_id = ? RETURNING hook_id",
            (status, error, now_us, delivery_id),
        ).fetchone()
        if disable and row is not None:
            conn.execute(
                "UPDATE hooks SET disabled_us = ?, disabled_reason = ? WHERE hook_id = ?",
                (now_us, "the receiver answered 410 Gone", row[0]),
            )
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


def drop_old_events(conn: Any, before_us: int, batch: int) -> int:
    """Delete those of the `batch` oldest events made before `before_us` (their deliveries with them); how many.
    Events are numbered in time order, so the oldest are the first by number: no index on time is needed."""
    with conn:
        oldest = conn.execute("SELECT seq, created_us FROM events ORDER BY seq LIMIT ?", (batch,)).fetchall()
        old = [seq for seq, created_us in oldest if created_us < before_us]
        for start in range(0, len(old), 500):
            chunk = old[start : start + 500]
            conn.execute(f"DELETE FROM events WHERE seq IN ({','.join('?' * len(chunk))})", chunk)
    return len(old)
