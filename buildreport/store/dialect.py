"""What differs between the SQL of the two engines: the fragments of shared queries that SQLite and PostgreSQL
spell differently. Whole queries that differ (statistics) live in the engine's folder; everything else the
store says is the same SQL on both."""

from __future__ import annotations

from typing import Any

import msgspec


class Dialect(msgspec.Struct, frozen=True):
    name: str
    # A build's derivation name (stats.derivation_name: `/nix/store/<hash>-hello-2.12.drv` gives `hello-2.12`), from
    # `derivation_path`; the index `builds_by_name` is over this very expression.
    derivation_name: str = ""
    # Rows a deliverer is about to lease: PostgreSQL passes over those another server is leasing right now.
    skip_locked: str = ""
    # The aggregate that joins a column's values with commas, nulls left out; `{}` is the column.
    comma_joined: str = "group_concat({})"

    def joined(self, column: str) -> str:
        """The engine's aggregate joining `column`'s values with commas."""
        return self.comma_joined.format(column)


def _sqlite_derivation_name() -> str:
    """Built-in functions only, so that the index over it needs nothing registered. Each write computes it for
    the index, and SQLite repeats every copy of a subexpression, so each part appears as few times as it can:

    - the base name is what follows the last `/`: past the default store folder's prefix when the rest holds no
      `/` (almost every path), otherwise found by `rtrim`, which strips every character but `/` from the end and
      costs a comparison per character of the path for each character of the base;
    - less `.drv` at its end: the base holds no `/`, so one added `/` marks where it ends;
    - then what follows its first `-`, unless that is nothing."""
    path = "derivation_path"
    store = "/nix/store/"
    rest = f"substr({path}, {len(store) + 1})"
    anywhere = f"substr({path}, length(rtrim({path}, replace({path}, '/', ''))) + 1)"
    base = (
        f"(CASE WHEN substr({path}, 1, {len(store)}) = '{store}' AND instr({rest}, '/') = 0"
        f" THEN {rest} ELSE {anywhere} END)"
    )
    stem = f"rtrim(replace({base} || '/', '.drv/', ''), '/')"
    return f"coalesce(nullif(substr({stem}, instr({stem}, '-') + 1), ''), {stem})"


SQLITE = Dialect(
    name="sqlite",
    derivation_name=_sqlite_derivation_name(),
)

POSTGRESQL = Dialect(
    name="postgresql",
    derivation_name=(
        r"regexp_replace(regexp_replace(regexp_replace(derivation_path, '^.*/', ''), '\.drv$', ''),"
        r" '^[^-]*-(.+)$', '\1')"
    ),
    skip_locked="FOR UPDATE OF d SKIP LOCKED",
    comma_joined="string_agg({}, ',')",
)


def dialect_of(conn: Any) -> Dialect:
    """The dialect of a synchronous connection of either engine (a PostgreSQL one names its engine)."""
    return POSTGRESQL if getattr(conn, "engine", None) == "postgresql" else SQLITE

