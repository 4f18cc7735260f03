"""The documented query and path parameters of the routes: the filter's from the filter specification
(filter_spec.py), the build id of the path, and the schema helpers of the others.

Handlers read their query themselves (filters.py parses and validates it), so these declarations are what the
OpenAPI document says about each parameter: its schema, examples and description.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from litestar.enums import ParamType
from litestar.openapi.spec import OpenAPIFormat, OpenAPIType, Operation, Parameter, Schema
from litestar.params import QueryParameter

from buildreport import filters
from buildreport.filter_spec import FIELDS_BY_NAME, FILTER_FIELDS, FilterField


def integer(low: int, high: int, default: int | None = None, example: int | None = None) -> dict[str, Any]:
    """The documented schema of an integer parameter that the handler reads as text, to validate it itself."""
    extra: dict[str, Any] = {"oneOf": None, "type": OpenAPIType.INTEGER, "minimum": low, "maximum": high}
    if example is not None:
        extra["examples"] = [example]
    return extra if default is None else {**extra, "default": default}


DATE = {"oneOf": None, "type": OpenAPIType.STRING, "format": OpenAPIFormat.DATE}
DATE = {"oneOf": None, "type": OpenAPIType.STRING, "format": OpenAPIFormat.DATE}
NON_EMPTY = {"oneOf": None, "type": OpenAPIType.STRING, "minLength": 1}


def schema_of(field: FilterField) -> dict[str, Any]:
    """The JSON-schema facts of a field, as Litestar's `schema_extra` of a text parameter the handler reads itself."""
    extra: dict[str, Any] = {"oneOf": None, "type": OpenAPIType.STRING}
    if field.min_length is not None:
        extra["minLength"] = field.min_length
    if field.pattern is not None:
        extra["pattern"] = field.pattern
    if len(field.formats) == 1:
        extra["format"] = OpenAPIFormat(field.formats[0])
    elif field.formats:  # one of several formats, e.g. a date or a date-time
        extra["anyOf"] = [Schema(format=OpenAPIFormat(name)) for name in field.formats]
    if field.examples:
        extra["examples"] = list(field.examples)
    return extra


def filter_parameter(name: str) -> Any:
    """`Annotated[str | None, QueryParameter(...)]` of the filter field `name`, for a handler's signature."""
    field = FIELDS_BY_NAME[name]
    return Annotated[str | None, QueryParameter(description=field.description, schema_extra=schema_of(field))]


TagsParam = filter_parameter("tags")  # the badge link's series, documented as the filter's own
_BUILD_ID = "Positive 64-bit build identifier."
# The path's build id, which handlers read from the path as written and validate themselves
# (filters.parse_build_id), so Litestar converts nothing for it.
BUILD_ID = Parameter(
    name="build_id",
    param_in=ParamType.PATH,
    schema=Schema(type=OpenAPIType.INTEGER, maximum=2**63 - 1, minimum=1, description=_BUILD_ID, examples=[102948]),
    description=_BUILD_ID,
    required=True,
    deprecated=False,
)


def _schema(field: FilterField) -> Schema:
    """The schema of a filter field's text, as `schema_of` states it."""
    many = len(field.formats) > 1  # one of several formats, e.g. a date or a date-time
    return Schema(
        type=OpenAPIType.STRING,
        description=field.description,
        min_length=field.min_length,
        pattern=field.pattern,
        format=OpenAPIFormat(field.formats[0]) if len(field.formats) == 1 else None,
        any_of=[Schema(format=OpenAPIFormat(name)) for name in field.formats] if many else None,
        examples=list(field.examples) or None,
    )


def filter_parameters(*, summaries: bool) -> tuple[Parameter, ...]:
    """The query parameters of the filter fields a route takes: all of them (a list, an export) or, with
    `summaries`, those summaries and statistics take; in the specification's order."""
    return tuple(
        Parameter(
            name=field.name,
            param_in=ParamType.QUERY,
            schema=_schema(field),
            description=field.description,
            required=False,
            deprecated=False,
            allow_empty_value=False,
            allow_reserved=False,
        )
        for field in FILTER_FIELDS
        if field.summaries or not summaries
    )


def documented(*declared: Parameter) -> type[Operation]:
    """An operation class documenting `declared` (first, in this order) beside what the handler's signature
    declares: the parameters a handler reads itself from the path or the query (the build id, the filter), which
    Litestar then neither converts nor documents on its own."""
    names = {parameter.name for parameter in declared}

    @dataclass
    class Documented(Operation):
        def __post_init__(self) -> None:
            others = [given for given in self.parameters or () if getattr(given, "name", None) not in names]
            self.parameters = [*declared, *others]

    return Documented


def grouping(*names: str) -> dict[str, Any]:
    """The documented schema of `group_by`: one of `names`, or `tag:` and a key."""
    return {**NON_EMPTY, "pattern": f"^({'|'.join(names)}|{filters.TAG_PREFIX}[^\\x00]+)$", "examples": [names[0]]}
