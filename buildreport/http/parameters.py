"""OpenAPI query parameters made from the filter specification (filter_spec.py): a route that takes a filter
field declares it with `filter_parameter(name)`, so its documentation is the specification's, not a copy."""

from __future__ import annotations

from typing import Annotated, Any

from litestar.openapi.spec import OpenAPIFormat, OpenAPIType, Schema
from litestar.params import QueryParameter

from buildreport.filter_spec import FIELDS_BY_NAME, FilterField


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
