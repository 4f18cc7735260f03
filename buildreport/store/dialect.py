"""What differs between the SQL of the two engines: the fragments of shared queries that SQLite and PostgreSQL
spell differently. Whole queries that differ (statistics) live in the engine's folder; everything else the
store says is the same SQL on both."""

from __future__ import annotations

import msgspec


class Dialect(msgspec.Struct, frozen=True):
    name: str
    # A build's derivation name (stats.derivation_name: `/nix/store/<hash>-hello-2.12.drv` gives `hello-2.12`), from
    # `derivation_path`; the index `builds_by_name` is over this very expression.
    derivation_name: str = ""
    # A build's `system`, from its stored JSON `body`.
    system: str = ""
    # Rows a deliverer is about to lease: PostgreSQL passes over those another server is leasing right now.
    skip_locked: str = ""


def _sqlite_derivation_name() -> str:
    """Built-in functions only, so that the index over it needs nothing registered: the base name is what follows
    the last `/` (rtrim strips every character but `/` from the end), less `.drv`, then what follows its first `-`."""
    base = "substr(derivation_path, length(rtrim(derivation_path, replace(derivation_path, '/', ''))) + 1)"
    stem = f"(CASE WHEN substr({base}, -4) = '.drv' THEN substr({base}, 1, length({base}) - 4) ELSE {base} END)"
    return (
        f"(CASE WHEN instr({stem}, '-') BETWEEN 1 AND length({stem}) - 1"
        f" THEN substr({stem}, instr({stem}, '-') + 1) ELSE {stem} END)"
    )


SQLITE = Dialect(
    name="sqlite",
    derivation_name=_sqlite_derivation_name(),
    system="body ->> '$.system'",
)

POSTGRESQL = Dialect(
    name="postgresql",
    derivation_name=(
        r"regexp_replace(regexp_replace(regexp_replace(derivation_path, '^.*/', ''), '\.drv$', ''),"
        r" '^[^-]*-(.+)$', '\1')"
    ),
    system="convert_from(body, 'UTF8')::json ->> 'system'",
    skip_locked="FOR UPDATE OF d SKIP LOCKED",
)

