"""The tables of events and webhooks, the same on both engines but for their types (see the schemas' MIGRATIONS).

Events are numbered in the order they were committed (every write transaction takes the one write lock, on
PostgreSQL too), so a feed's cursor never skips one written later with a smaller number."""

TABLES = """
-- What each series of builds (account, derivation name, system) needs for its next events (events/derive.py).
CREATE TABLE IF NOT EXISTS event_series (
    account_id {integer} NOT NULL,
    derivation TEXT NOT NULL,
    system TEXT NOT NULL,
    state {blob} NOT NULL,
    PRIMARY KEY (account_id, derivation, system)
);
CREATE TABLE IF NOT EXISTS events (
    seq {serial},
    event_id TEXT NOT NULL UNIQUE,
    account_id {integer} NOT NULL,
    type TEXT NOT NULL,
    created_us {integer} NOT NULL,
    build_id {integer} NOT NULL,
    body {blob} NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_account ON events (account_id, seq, type);
-- Webhooks, managed by the operator; the secret signs every delivery, so it is kept as given out.
CREATE TABLE IF NOT EXISTS hooks (
    hook_id TEXT PRIMARY KEY,
    account_id {integer} NOT NULL,
    url TEXT NOT NULL,
    types TEXT NOT NULL,
    tags {blob} NOT NULL,
    format TEXT NOT NULL,
    secret TEXT NOT NULL,
    created_us {integer} NOT NULL,
    disabled_us {integer},
    disabled_reason TEXT
);
CREATE INDEX IF NOT EXISTS hooks_by_account ON hooks (account_id);
-- One row an event and hook, written with the event; a deliverer leases one (leased_until_us, owner) to send it.
CREATE TABLE IF NOT EXISTS deliveries (
    delivery_id {serial},
    hook_id TEXT NOT NULL REFERENCES hooks(hook_id) ON DELETE CASCADE,
    event_id TEXT NOT NULL REFERENCES events(event_id) ON DELETE CASCADE,
    state TEXT NOT NULL,
    attempts {integer} NOT NULL DEFAULT 0,
    created_us {integer} NOT NULL,
    next_us {integer} NOT NULL,
    leased_until_us {integer},
    owner TEXT,
    last_status {integer},
    last_error TEXT,
    done_us {integer}
);
CREATE INDEX IF NOT EXISTS deliveries_pending ON deliveries (hook_id, delivery_id) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS deliveries_by_hook ON deliveries (hook_id, delivery_id);
CREATE INDEX IF NOT EXISTS deliveries_by_event ON deliveries (event_id);
"""
