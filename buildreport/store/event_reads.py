"""The read queries of events: the feed and the dashboard's latest events."""

from __future__ import annotations

from collections.abc import Sequence


def feed(account_id: int, after: int, types: Sequence[str], limit: int) -> tuple[str, list[object]]:
    """An account's events after position `after`, oldest first: one range of events_by_account."""
    kinds = f" AND type IN ({','.join('?' * len(types))})" if types else ""
    return (
        f"SELECT seq, build_id, body FROM events WHERE account_id = ? AND seq > ?{kinds} ORDER BY seq LIMIT ?",
        [account_id, after, *types, limit],
    )


def recent_events(account_id: int, types: Sequence[str], limit: int) -> tuple[str, list[object]]:
    """An account's latest events of these types, newest first (the dashboard's)."""
    marks = ",".join("?" * len(types))
    return (
        f"SELECT seq, build_id, body FROM events WHERE account_id = ? AND type IN ({marks}) ORDER BY seq DESC LIMIT ?",
        [account_id, *types, limit],
    )
