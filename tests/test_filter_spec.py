"""The filter specification drives everything a filter field touches: each field is parsed, documented in the
OpenAPI parameters of every route that takes the filter, turned into SQL, and named by the kept tables only as a
field of the specification. A field added to the specification and missed by any of these fails here."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from conftest import Env
from test_kept import KEPT_TABLES

from buildreport.filter_spec import FIELDS_BY_NAME, FILTER_FIELDS, FilterField
from buildreport.filters import (
    BuildFilter,
    parse_export_query,
    parse_list_query,
    parse_stats_query,
    parse_summary_query,
    set_fields,
)
from buildreport.models import BuildStatus
from buildreport.store import filter_sql

NOW_US = 1_800_000_000_000_000
# A valid query value of each kind of field, and the BuildFilter value it reads as.
SAMPLES: dict[str, tuple[str, Any]] = {
    "moment": ("2026-11-01", 1_793_491_200_000_000),
    "store_path": ("/nix/store/x-hello.drv", "/nix/store/x-hello.drv"),
    "statuses": ("built,timeout", (BuildStatus.built, BuildStatus.timeout)),
    "tags": ("project:web", (("project", "web"),)),
}
# The routes that take the filter, with the parser each uses: all of it, or the fields summaries take.
ROUTES = {
    "/builds": (parse_list_query, False),
    "/builds/export": (parse_export_query, False),
    "/builds/summary": (parse_summary_query, True),
    "/builds/stats": (parse_stats_query, True),
}
field_names = pytest.mark.parametrize("field", FILTER_FIELDS, ids=[field.name for field in FILTER_FIELDS])


def takes(route: str, field: FilterField) -> bool:
    return field.summaries or not ROUTES[route][1]


def set_by(field: FilterField) -> BuildFilter:
    """A filter with the field set (the window's end after its start)."""
    _, value = SAMPLES[field.kind]
    base = BuildFilter(create_from_us=0)
    return msgspec.structs.replace(base, **{field.attr: value})


@pytest.fixture(scope="module")
def openapi(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    with Env(tmp_path_factory.mktemp("openapi")).client() as client:
        return client.get("/docs/openapi.json").json()


@field_names
def test_every_field_sets_an_attribute_of_the_build_filter_and_has_a_parser_kind(field):
    assert field.attr in BuildFilter.__struct_fields__
    assert field.kind in SAMPLES
    assert FIELDS_BY_NAME[field.name] is field


@field_names
@pytest.mark.parametrize("route", list(ROUTES))
def test_every_route_that_takes_the_filter_parses_each_field_by_its_kind(route, field):
    parse, _ = ROUTES[route]
    text, value = SAMPLES[field.kind]
    pairs = [(field.name, text)]
    if field.name == "create_time_to":
        pairs.append(("create_time_from", "2026-10-01"))
    if not takes(route, field):
        with pytest.raises(Exception, match="unknown parameter"):
            parse(pairs, NOW_US)
        return
    parsed = parse(pairs, NOW_US)
    build_filter = parsed if isinstance(parsed, BuildFilter) else parsed.filter
    assert getattr(build_filter, field.attr) == value
    assert field.name in set_fields(build_filter)


@field_names
@pytest.mark.parametrize("route", list(ROUTES))
def test_every_route_that_takes_the_filter_documents_each_field_from_the_specification(openapi, route, field):
    parameters = {p["name"]: p for p in openapi["paths"][route]["get"]["parameters"] if p["in"] == "query"}
    if not takes(route, field):
        assert field.name not in parameters
        return
    documented = parameters[field.name]
    assert documented["description"] == field.description
    schema = documented["schema"]
    assert schema.get("pattern") == field.pattern
    assert schema.get("minLength") == field.min_length
    assert schema.get("examples", []) == list(field.examples)
    formats = [schema["format"]] if "format" in schema else [s["format"] for s in schema.get("anyOf", [])]
    assert formats == list(field.formats)


def without(build_filter: BuildFilter, field: FilterField) -> BuildFilter:
    """The filter less the field (the window's start, always set, moved instead; of tags, the last pair)."""
    if field.name == "create_time_from":
        return msgspec.structs.replace(build_filter, create_from_us=build_filter.create_from_us + 1)
    if field.name == "tags":
        return msgspec.structs.replace(build_filter, tags=build_filter.tags[:-1])
    return msgspec.structs.replace(build_filter, **{field.attr: getattr(BuildFilter(create_from_us=0), field.attr)})


@field_names
@pytest.mark.parametrize("other_tags", [(), (("a", "b"),)], ids=["untagged", "tag-driven"])
def test_every_field_is_a_term_of_the_sql_where(field, other_tags):
    assert field.name in filter_sql.TERMS
    given = set_by(field)
    given = msgspec.structs.replace(given, tags=(*other_tags, *given.tags))
    assert filter_sql.where(1, given) != filter_sql.where(1, without(given, field))
    assert filter_sql.conditions(1, given) != filter_sql.conditions(1, without(given, field))


def test_every_kept_table_names_only_fields_of_the_filter_specification():
    for table in KEPT_TABLES:
        assert table.fields <= FIELDS_BY_NAME.keys(), table.name
