"""The SQL `WHERE` of a build filter: one term builder per field of the filter specification (filter_spec.py),
parameterised, built from the filter's shape and never from its text. Every query that filters builds takes its
conditions from here."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from buildreport.filter_spec import FILTER_FIELDS
from buildreport.filters import BuildFilter
from buildreport.models import BuildStatus

Query = tuple[str, list[object]]


class BinaryResults(str):
    """SQL whose result columns are only integers, text and bytes (stored JSON, kept figures), which an engine
    whose server can send columns in binary form fetches so: PostgreSQL otherwise sends a bytea value as hex of
    twice its size for the client to decode. Never a sum (numeric in PostgreSQL) or JSON: their binary forms
    load as other types than SQLite gives. SQLite has one form and ignores the mark."""


def in_list(statuses: frozenset[BuildStatus]) -> str:
    """A fixed set of statuses as an SQL list: names from the code, never request text."""
    return "(" + ",".join(f"'{s.value}'" for s in sorted(statuses, key=lambda s: s.value)) + ")"


# Keys one statement of `each_key` looks up at most: well inside either engine's bound on parameters.
KEYS_CHUNK = 500


def each_key(columns: tuple[str, ...], count: int) -> str:
    """`WITH wanted(columns) AS (VALUES (?, ...), ...)`: `count` keys as rows, each to be looked up by a correlated
    subquery of its own. A key found by equality is one probe of an index on both engines, whatever the planner
    thinks of the table; an `IN` list on an index's second column may instead be planned as a filter over the
    whole range of its first (PostgreSQL does when its statistics predate the rows)."""
    row = "(" + ", ".join("?" * len(columns)) + ")"
    return f"WITH wanted({', '.join(columns)}) AS (VALUES {', '.join([row] * count)})"


class Rows(NamedTuple):
    """What the terms of a query are written against: the account, the build's alias, the column of creation
    time the window applies to, and whether the read is driven by the tag index's rows of the first tag pair
    (alias `t`), which then match that pair already."""

    account_id: int
    alias: str
    time: str
    tag_driven: bool = False


Terms = tuple[list[str], list[object]]


def _from(build_filter: BuildFilter, rows: Rows) -> Terms:
    return [f"{rows.time} >= ?"], [build_filter.create_from_us]


def _to(build_filter: BuildFilter, rows: Rows) -> Terms:
    if build_filter.create_to_us is None:
        return [], []
    return [f"{rows.time} < ?"], [build_filter.create_to_us]


def _derivation_path(build_filter: BuildFilter, rows: Rows) -> Terms:
    if build_filter.derivation_path is None:
        return [], []
    return [f"{rows.alias}.derivation_path = ?"], [build_filter.derivation_path]


def _statuses(build_filter: BuildFilter, rows: Rows) -> Terms:
    if not build_filter.statuses:
        return [], []
    return [f"{rows.alias}.status IN ({','.join('?' * len(build_filter.statuses))})"], [
        s.value for s in build_filter.statuses
    ]


def _tags(build_filter: BuildFilter, rows: Rows) -> Terms:
    """Each pair one lookup of the tag index by its whole key. Driven by the first pair's rows, the others are
    counted, not tested with EXISTS: PostgreSQL turns EXISTS there into a join that may look a pair up by build
    id alone, reading every entry of the pair."""
    terms: list[str] = []
    params: list[object] = []
    if rows.tag_driven:
        for key, value in build_filter.tags[1:]:
            terms.append(
                "(SELECT count(*) FROM build_tags o WHERE o.account_id = t.account_id AND o.key = ? AND o.value = ?"
                " AND o.create_us = t.create_us AND o.build_id = t.build_id) > 0"
            )
            params += [key, value]
        return terms, params
    for key, value in build_filter.tags:
        terms.append(
            "EXISTS (SELECT 1 FROM build_tags o WHERE o.account_id = ? AND o.key = ? AND o.value = ?"
            f" AND o.create_us = {rows.alias}.create_us AND o.build_id = {rows.alias}.build_id)"
        )
        params += [rows.account_id, key, value]
    return terms, params


# The term builder of each field of the specification, by its name: a field without one fails every query.
TERMS: dict[str, Callable[[BuildFilter, Rows], Terms]] = {
    "create_time_from": _from,
    "create_time_to": _to,
    "derivation_path": _derivation_path,
    "status": _statuses,
    "tags": _tags,
}


def terms(build_filter: BuildFilter, rows: Rows) -> Terms:
    """The conditions of every field of the filter, in the specification's order."""
    found: list[str] = []
    params: list[object] = []
    for field in FILTER_FIELDS:
        more, more_params = TERMS[field.name](build_filter, rows)
        found += more
        params += more_params
    return found, params


class Where(NamedTuple):
    """FROM and WHERE of a filtered read, its parameters, and the (create time, build id) columns that order it."""

    source: str
    sql: str
    params: list[object]
    keys: tuple[str, str]


def where(account_id: int, build_filter: BuildFilter, alias: str = "b") -> Where:
    """The builds of an account a filter selects. With tag pairs the read is driven by the tag index's rows of
    the first pair (the rarest, when the reader ranked them), joined to their builds."""
    if build_filter.tags:
        key, value = build_filter.tags[0]
        source = f"build_tags t CROSS JOIN builds {alias}"
        head = [f"{alias}.build_id = t.build_id", "t.account_id = ?", "t.key = ?", "t.value = ?"]
        head_params: list[object] = [account_id, key, value]
        rows = Rows(account_id, alias, "t.create_us", tag_driven=True)
        keys = ("t.create_us", "t.build_id")
    else:
        source = f"builds {alias}"
        head, head_params = [f"{alias}.account_id = ?"], [account_id]
        rows = Rows(account_id, alias, f"{alias}.create_us")
        keys = (f"{alias}.create_us", f"{alias}.build_id")
    found, params = terms(build_filter, rows)
    return Where(source, " AND ".join(head + found), head_params + params, keys)


def conditions(account_id: int, build_filter: BuildFilter, alias: str = "b", time: str | None = None) -> Terms:
    """The filter as conditions on a build row `alias` that a query reaches its own way (an index walk by tag
    value or derivation path), each appended with ` AND `; the window on `time` (default: the build's own
    creation time), every tag pair looked up by its whole key."""
    found, params = terms(build_filter, Rows(account_id, alias, time or f"{alias}.create_us"))
    return "".join(f" AND {term}" for term in found), params
