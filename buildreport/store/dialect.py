"""What differs between the SQL of the two engines: the fragments of shared queries that SQLite and PostgreSQL
spell differently. Whole queries that differ (statistics) live in the engine's folder; everything else the
store says is the same SQL on both."""

from __future__ import annotations

import msgspec


class Dialect(msgspec.Struct, frozen=True):
    name: str
    # The stored JSON of a page's builds joined into one array, in the page's order (`k1`, `k2` descending).
    body_array: str
    # The pages' body digests joined with commas, in the same order.
    hash_list: str
    # Rows a deliverer is about to lease: PostgreSQL passes over those another server is leasing right now.
    skip_locked: str = ""


SQLITE = Dialect(
    name="sqlite",
    body_array="CAST('[' || group_concat(body, ',') || ']' AS BLOB)",
    hash_list="group_concat(body_hash)",
)

# Aggregates in PostgreSQL keep no input order of their own: it is asked for.
POSTGRESQL = Dialect(
    name="postgresql",
    body_array="'['::bytea || coalesce(string_agg(body, ','::bytea ORDER BY k1 DESC, k2 DESC), '') || ']'::bytea",
    hash_list="string_agg(body_hash::text, ',' ORDER BY k1 DESC, k2 DESC)",
    skip_locked="FOR UPDATE OF d SKIP LOCKED",
)

