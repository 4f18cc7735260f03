"""The JSON API's billable usage: totals by stop date over a range, and the same range broken down by day, system
or tag."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request, Response, get
from litestar.params import QueryParameter

from buildreport.http import answers
from buildreport.http.answers import ask_of
from buildreport.http.parameters import DATE, grouping
from buildreport.http.responses import errors, json_response, success
from buildreport.models import Usage, UsageBreakdownGroup


@get(
    "/usage",
    operation_id="getUsage",
    summary="Billable usage by stop date",
    responses={200: success(Usage, "Usage in the range."), **errors(400, 401, 403, 429)},
)
async def get_usage(
    request: Request[Any, Any, Any],
    from_: Annotated[
        str | None,
        QueryParameter(
            name="from", description="Date YYYY-MM-DD; default: first day of this month (UTC). Not later than `to`.",
            schema_extra={**DATE, "examples": ["2026-10-01"]},
        ),
    ] = None,
    to: Annotated[
        str | None,
        QueryParameter(
            description="Date YYYY-MM-DD, exclusive; default: no bound.",
            schema_extra={**DATE, "examples": ["2026-11-01"]},
        ),
    ] = None,
) -> Response[bytes]:
    return json_response(request, *await answers.usage(ask_of(request)))


@get(
    "/usage/breakdown",
    operation_id="getUsageBreakdown",
    summary="Billable usage by stop day, system or tag",
    description="The range of `/usage`; the groups add up to it. Days come in ascending order (days without "
    "billable builds are left out); systems and tag values by billable CPU seconds descending. Under `tag:KEY`, "
    "builds without the tag form one group with a null key.",
    responses={200: success(list[UsageBreakdownGroup], "The groups."), **errors(400, 401, 403, 429)},
)
async def usage_breakdown(
    request: Request[Any, Any, Any],
    from_: Annotated[
        str | None,
        QueryParameter(
            name="from", description="Date YYYY-MM-DD; default: first day of this month (UTC).", schema_extra=DATE
        ),
    ] = None,
    to: Annotated[
        str | None, QueryParameter(description="Date YYYY-MM-DD, exclusive; default: no bound.", schema_extra=DATE)
    ] = None,
    group_by: Annotated[
        str | None,
        QueryParameter(description="`day` (default), `system` or `tag:KEY`.", schema_extra=grouping("day", "system")),
    ] = None,
) -> Response[bytes]:
    return json_response(request, *await answers.usage_breakdown(ask_of(request)))
