"""What differs between the SQL of the two engines, in one place: the few fragments that SQLite and PostgreSQL
spell differently. Everything else the store says is the same SQL on both."""

from __future__ import annotations

import msgspec


class Dialect(msgspec.Struct, frozen=True):
    name: str
    # The stored JSON of a page's builds joined into one array, in the page's order (`k1`, `k2` descending).
    body_array: str
    # The pages' body digests joined with commas, in the same order.
    hash_list: str
    # A build's stored JSON as JSON the engine can take apart (`->`, `->>`).
    json_body: str
    # `->>` path of a top-level field: SQLite takes a JSON path, PostgreSQL the key.
    json_key_prefix: str


SQLITE = Dialect(
    name="sqlite",
    body_array="CAST('[' || group_concat(body, ',') || ']' AS BLOB)",
    hash_list="group_concat(body_hash)",
    json_body="b.body",
    json_key_prefix="$.",
)

# Aggregates in PostgreSQL keep no input order of their own: it is asked for.
POSTGRESQL = Dialect(
    name="postgresql",
    body_array="'['::bytea || coalesce(string_agg(body, ','::bytea ORDER BY k1 DESC, k2 DESC), '') || ']'::bytea",
    hash_list="string_agg(body_hash::text, ',' ORDER BY k1 DESC, k2 DESC)",
    json_body="convert_from(b.body, 'UTF8')::json",
    json_key_prefix="",
)


def of(conn: object) -> Dialect:
    """The dialect of a synchronous connection of either engine."""
    return POSTGRESQL if getattr(conn, "engine", "sqlite") == "postgresql" else SQLITE
