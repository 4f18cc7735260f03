"""Restart links, kept two-way: a build's `restart_of_build_id` and the `restarted_as_build_id` of the build it
names, set from whichever side is written; and the ids that links name, which the service never assigns.

Setting a link from the other side rewrites that build's stored JSON, so its digest (`body_hash`) lives here.
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

Conflict = Callable[[object, str, str], None]  # (location, field, reason)
_ENCODER = msgspec.json.Encoder()
_STORED = msgspec.json.Decoder(dict[str, Any])

# Ids that stored builds link to from this id up (or down): the service never assigns one of them, so that a
# link waiting for its build (an import may name a build not imported yet) never ties a new build of another
# account to it.
LINKED_ABOVE = (
    "SELECT restart_of_build_id FROM builds WHERE restart_of_build_id >= ?"
    " UNION SELECT restarted_as_build_id FROM builds WHERE restarted_as_build_id >= ?"
)
LINKED_BELOW = (
    "SELECT restart_of_build_id FROM builds WHERE restart_of_build_id <= ?"
    " UNION SELECT restarted_as_build_id FROM builds WHERE restarted_as_build_id <= ?"
)


def body_hash(body: bytes) -> int:
    """A 64-bit digest of a build's JSON, stored beside it so that ETags of long lists cost no hashing."""
    return (zlib.crc32(body) << 32 | zlib.adler32(body)) - (1 << 63)


class LinkEnds(msgspec.Struct, array_like=True):
    """A build just written and its restart links, as written: what keeping the links two-way needs of it."""

    location: object
    account_id: int
    build_id: int
    restart_of: int | None
    restarted_as: int | None
    strict: bool = False  # a write record's: its answers never name another account's builds


def link_peers(
    conn: sqlite3.Connection,
    conflict: Conflict,
    linking: Sequence[LinkEnds],
    ids: Sequence[int],
    end_of: Callable[[int], LinkEnds],
) -> None:
    """Make every restart link hold in both directions, once both builds are stored: the links that the builds
    just written (`ids`) name, of which `linking` holds at least those that name any, and the links to them
    that stored builds name. `end_of` gives the LinkEnds of any of them by build id."""
    for ends in linking:
        if ends.restart_of is not None:
            _link(conn, conflict, ends, ends.restart_of, "restart_of_build_id", "restarted_as_build_id")
        if ends.restarted_as is not None:
            _link(conn, conflict, ends, ends.restarted_as, "restarted_as_build_id", "restart_of_build_id")
    if not ids:
        return
    marks = ",".join("?" * len(ids))
    # (the peers' column, the written build's field, that field in LinkEnds)
    pairs = (("restart_of_build_id", "restarted_as_build_id", "restarted_as"),
             ("restarted_as_build_id", "restart_of_build_id", "restart_of"))
    linked: set[tuple[int, str]] = set()  # (build id, field) set here from the other side
    written = set(ids)
    for column, own, own_end in pairs:
        peers = conn.execute(f"SELECT build_id, {column}, account_id FROM builds WHERE {column} IN ({marks})", ids)
        for peer_id, target, peer_account in peers.fetchall():
            ends = end_of(target)
            named = getattr(ends, own_end)
            if peer_account != ends.account_id:
                peer = "a build" if ends.strict else f"build {peer_id}"
                conflict(ends.location, own, f"{peer} of another account links to build {target}; name another")
            elif named is None and (target, own) not in linked:
                set_link(conn, target, own, peer_id)
                linked.add((target, own))
            elif named not in (None, peer_id) and peer_id not in written:
                # A build written before names this one, which names another: the loop above saw only the links
                # of the builds written now.
                conflict(ends.location, own, f"build {peer_id} already has {column} {target}")


def _link(
    conn: sqlite3.Connection, conflict: Conflict, ends: LinkEnds, peer_id: int, field: str, peer_field: str
) -> None:
    build_id = ends.build_id
    if peer_id == build_id:
        conflict(ends.location, field, "a build cannot be linked to itself")
        return
    peer = conn.execute(f"SELECT account_id, {peer_field} FROM builds WHERE build_id = ?", (peer_id,)).fetchone()
    if peer is None:
        return  # the other build has not been written yet; writing it completes the link
    peer_account, peer_link = peer
    if peer_account != ends.account_id:
        if not ends.strict:  # a write record's link is refused once the request is written (_check_new_links)
            conflict(ends.location, field, f"build {peer_id} belongs to another account")
    elif peer_link is None:
        set_link(conn, peer_id, peer_field, build_id)
    elif peer_link != build_id:
        conflict(ends.location, field, f"build {peer_id} already has {peer_field} {peer_link}")


def set_link(conn: sqlite3.Connection, build_id: int, field: str, value: int | None) -> None:
    (body,) = conn.execute("SELECT body FROM builds WHERE build_id = ?", (build_id,)).fetchone()
    stored = _STORED.decode(body)
    stored[field] = value
    body = _ENCODER.encode(stored)
    conn.execute(
        f"UPDATE builds SET {field} = ?, body = ?, body_hash = ? WHERE build_id = ?",
        (value, body, body_hash(body), build_id),
    )
