"""Events stored with the builds they come from: derived (events/derive.py) inside the write's transaction,
each with a delivery row for every webhook that wants it, so that an event is never lost or half-written.

A write of many builds costs a few statements, whatever its size: one read of its series' states, one
write of each kind of row.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec

from buildreport.events.derive import Rules, SeriesState, derive, series_of
from buildreport.events.models import EventType, Series, StoredEvent
from buildreport.models import BuildStatus
from buildreport.store.build_rows import Change
from buildreport.store.filter_sql import KEYS_CHUNK, each_key
from buildreport.times import from_us

_STATE = msgspec.json.Decoder(SeriesState)
_TAGS = msgspec.json.Decoder(dict[str, str])
_ENCODER = msgspec.json.Encoder()

UPSERT_SERIES = (
    "INSERT INTO event_series (account_id, derivation, system, state) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (account_id, derivation, system) DO UPDATE SET state = excluded.state"
)
INSERT_EVENT = (
    "INSERT INTO events (event_id, account_id, type, created_us, build_id, body) VALUES (?, ?, ?, ?, ?, ?)"
)
INSERT_DELIVERY = (
    "INSERT INTO deliveries (hook_id, event_id, state, attempts, created_us, next_us) VALUES (?, ?, 'pending', 0, ?, ?)"
)


def series_states(account_id: int, series: Sequence[Series]) -> tuple[str, list[object]]:
    """The stored states of an account's series, each one lookup by its primary key; a series not stored yet
    comes back with a null state."""
    return (
        f"{each_key(('derivation', 'system'), len(series))} SELECT derivation, system, (SELECT state FROM event_series"
        " WHERE account_id = ? AND event_series.derivation = wanted.derivation AND event_series.system = wanted.system)"
        " FROM wanted",
        [*(value for one in series for value in (one.derivation, one.system)), account_id],
    )


def live_hooks(account_id: int) -> tuple[str, list[object]]:
    return "SELECT hook_id, types, tags FROM hooks WHERE account_id = ? AND disabled_us IS NULL", [account_id]


def event_ids(now_us: int) -> Iterator[str]:
    """Unique event ids for one write: its time, a random part of its own and a count, so that ids of one write
    follow each other in the unique index rather than landing all over it."""
    prefix = f"evt_{now_us:014x}{secrets.token_hex(5)}"
    return (f"{prefix}{n:05x}" for n in itertools.count())


def _load_states(conn: Any, account_id: int, series: set[Series]) -> dict[Series, SeriesState]:
    wanted = sorted(series, key=lambda one: (one.derivation, one.system))
    states: dict[Series, SeriesState] = {}
    for start in range(0, len(wanted), KEYS_CHUNK):
        for derivation, system, state in conn.execute(*series_states(account_id, wanted[start : start + KEYS_CHUNK])):
            if state is not None:
                states[Series(derivation, system)] = _STATE.decode(state)
    return states


def _wanted(types: str, tags: dict[str, str], event: EventType, build_tags: dict[str, str]) -> bool:
    """Whether a hook wants an event: its type among the hook's (none listed: every type), and every tag pair."""
    return (not types or event.value in types.split()) and all(build_tags.get(k) == v for k, v in tags.items())


def record_events(
    conn: Any, account: str, account_id: int, changes: Sequence[Change], now_us: int, rules: Rules
) -> int:
    """Derive, store and queue for delivery the events of builds just written to one account; how many."""
    if not changes:
        return 0
    of_series = [series_of(change.row.build) for change in changes]
    states = _load_states(conn, account_id, set(of_series))
    touched: dict[Series, SeriesState] = {}
    events: list[tuple] = []
    tags_of: list[dict[str, str]] = []
    ids, time = event_ids(now_us), from_us(now_us)
    for change, series in zip(changes, of_series, strict=True):
        build = change.row.build
        state = states.setdefault(series, SeriesState())
        derived = derive(build, BuildStatus(change.before) if change.before else None, state, rules)
        if derived and derived[0].type is EventType.finished:
            touched[series] = state
        for item in derived:
            event = StoredEvent(next(ids), item.type, time, account, series, msgspec.Raw(change.row.body),
                                item.previous, item.regression)
            events.append((event.id, account_id, item.type.value, now_us, build.build_id, _ENCODER.encode(event)))
            tags_of.append(build.tags)
    if touched:
        conn.executemany(UPSERT_SERIES, [(account_id, s.derivation, s.system, _ENCODER.encode(state))
                                         for s, state in touched.items()])
    if events:
        conn.executemany(INSERT_EVENT, events)
    if not events:
        return 0
    hooks = [(hook_id, types, _TAGS.decode(tags)) for hook_id, types, tags in conn.execute(*live_hooks(account_id))]
    deliveries = [
        (hook_id, row[0], now_us, now_us)
        for row, build_tags in zip(events, tags_of, strict=True)
        for hook_id, types, tags in hooks
        if _wanted(types, tags, EventType(row[2]), build_tags)
    ]
    if deliveries:
        conn.executemany(INSERT_DELIVERY, deliveries)
    return len(events)

