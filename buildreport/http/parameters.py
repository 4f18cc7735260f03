"""The documented query and path parameters that several routes share, and the schema helpers of the others.

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
from buildreport.models import BuildStatus


def integer(low: int, high: int, default: int | None = None, example: int | None = None) -> dict[str, Any]:
    """The documented schema of an integer parameter that the handler reads as text, to validate it itself."""
    extra: dict[str, Any] = {"oneOf": None, "type": OpenAPIType.INTEGER, "minimum": low, "maximum": high}
    if example is not None:
        extra["examples"] = [example]
    return extra if default is None else {**extra, "default": default}


DATE = {"oneOf": None, "type": OpenAPIType.STRING, "format": OpenAPIFormat.DATE}
# What the filters accept, in the schema language: a date or an RFC 3339 date-time; a non-empty derivation path;
# comma-separated KEY:VALUE pairs (the key without a colon, no commas anywhere); comma-separated statuses.
MOMENT = {
    "oneOf": None,
    "type": OpenAPIType.STRING,
    "anyOf": [Schema(format=OpenAPIFormat.DATE), Schema(format=OpenAPIFormat.DATE_TIME)],
}
NON_EMPTY = {"oneOf": None, "type": OpenAPIType.STRING, "minLength": 1}
# Text kept in a column of its own never holds NUL (models.NO_NUL), so no filter on it does either.
PATH = {**NON_EMPTY, "pattern": "^[^\\x00]+$"}
_TAG = "[^,:\\x00]+:[^,\\x00]*"
TAGS = {
    **NON_EMPTY,
    "pattern": f"^{_TAG}(,{_TAG}){{0,{filters.MAX_TAG_PAIRS - 1}}}$",
    "examples": ["GITHUB_REPOSITORY:acme/webshop,project:web"],
}
_ONE_STATUS = "(" + "|".join(s.value for s in BuildStatus) + ")"
STATUSES = {
    **NON_EMPTY,
    "pattern": f"^{_ONE_STATUS}(,{_ONE_STATUS}){{0,{filters.MAX_STATUS_VALUES - 1}}}$",
    "examples": ["build_failed,timeout"],
}


TagsParam = Annotated[
    str | None,
    QueryParameter(
        description="Comma-separated `KEY:VALUE` pairs, split at the first colon; a build must carry every pair. "
        "May be repeated.",
        schema_extra=TAGS,
    ),
]
StatusParam = Annotated[
    str | None,
    QueryParameter(description="One or more comma-separated build statuses. May be repeated.", schema_extra=STATUSES),
]
FromParam = Annotated[
    str | None,
    QueryParameter(
        description="Date (midnight UTC) or date-time; builds created at or after it. Default: 24 hours ago. "
        "Not later than `create_time_to`.",
        schema_extra={**MOMENT, "examples": ["2026-11-01"]},
    ),
]
ToParam = Annotated[
    str | None,
    QueryParameter(
        description="Date (midnight UTC) or date-time; builds created before it. Default: no bound.",
        schema_extra={**MOMENT, "examples": ["2026-12-01T00:00:00Z"]},
    ),
]
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


def path_documented(*declared: Parameter) -> type[Operation]:
    """An operation class documenting `declared` (path parameters, first, in this order) in place of the plain
    text parameters Litestar infers from the path of a handler that does not take them as arguments."""
    names = {parameter.name for parameter in declared}

    @dataclass
    class PathDocumented(Operation):
        def __post_init__(self) -> None:
            if self.parameters:
                others = [given for given in self.parameters if getattr(given, "name", None) not in names]
                self.parameters = [*declared, *others]

    return PathDocumented


def grouping(*names: str) -> dict[str, Any]:
    """The documented schema of `group_by`: one of `names`, or `tag:` and a key."""
    return {**NON_EMPTY, "pattern": f"^({'|'.join(names)}|{filters.TAG_PREFIX}[^\\x00]+)$", "examples": [names[0]]}
