"""The insight endpoints: grouped statistics, usage by group and export. Thin handlers like api.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from litestar import Request, Response, get
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import QueryParameter
from litestar.response import Stream

from buildreport import export, filters
from buildreport.http import answers
from buildreport.http.builds import (
    _DATE,
    _NON_EMPTY,
    _PATH,
    FromParam,
    StatusParam,
    TagsParam,
    ToParam,
    _errors,
    _integer,
    _ok,
    _principal,
    _reader,
    ask_of,
    json_response,
    query_pairs,
)
from buildreport.models import BuildStatsGroup, UsageBreakdownGroup
from buildreport.times import now_us


def _grouping(*names: str) -> dict[str, Any]:
    """The documented schema of `group_by`: one of `names`, or `tag:` and a key."""
    return {**_NON_EMPTY, "pattern": f"^({'|'.join(names)}|{filters.TAG_PREFIX}[^\\x00]+)$", "examples": [names[0]]}


GroupByParam = Annotated[
    str | None,
    QueryParameter(
        description="`day` (default), `hour`, `system`, `status`, `derivation` (the store path's name), "
        "`derivation_path` or `tag:KEY`.",
        schema_extra=_grouping(*filters.TIME_GROUPINGS, *filters.VALUE_GROUPINGS),
    ),
]


@get(
    "/builds/stats",
    operation_id="buildStats",
    summary="Counts, success rate, CPU and exact percentiles per group of builds",
    description="The filters of `/builds/summary`. Time groups (`day`, `hour`) list every period of the window in "
    "ascending time, empty ones with zero counts; other groups come by `build_count` descending, ties by key, at "
    "most `limit` of them. Percentiles are exact, by the nearest-rank method. A `tag:KEY` grouping leaves out "
    "builds without the tag.",
    responses={200: _ok(list[BuildStatsGroup], "The groups."), **_errors(400, 401, 403, 429)},
)
async def build_stats(
    request: Request[Any, Any, Any],
    tags: TagsParam = None,
    create_time_from: FromParam = None,
    create_time_to: ToParam = None,
    status: StatusParam = None,
    group_by: GroupByParam = None,
    limit: Annotated[
        str | None,
        QueryParameter(
            description="Most value groups returned: 1 to 1000; default 100. Time groups are always all listed.",
            schema_extra=_integer(1, filters.MAX_GROUPS, filters.DEFAULT_GROUPS),
        ),
    ] = None,
) -> Response[bytes]:
    return json_response(request, *await answers.build_stats(ask_of(request)))


@get(
    "/usage/breakdown",
    operation_id="getUsageBreakdown",
    summary="Billable usage by stop day, system or tag",
    description="The range of `/usage`; the groups add up to it. Days come in ascending order (days without "
    "billable builds are left out); systems and tag values by billable CPU seconds descending. Under `tag:KEY`, "
    "builds without the tag form one group with a null key.",
    responses={200: _ok(list[UsageBreakdownGroup], "The groups."), **_errors(400, 401, 403, 429)},
)
async def usage_breakdown(
    request: Request[Any, Any, Any],
    from_: Annotated[
        str | None,
        QueryParameter(
            name="from", description="Date YYYY-MM-DD; default: first day of this month (UTC).", schema_extra=_DATE
        ),
    ] = None,
    to: Annotated[
        str | None, QueryParameter(description="Date YYYY-MM-DD, exclusive; default: no bound.", schema_extra=_DATE)
    ] = None,
    group_by: Annotated[
        str | None,
        QueryParameter(description="`day` (default), `system` or `tag:KEY`.", schema_extra=_grouping("day", "system")),
    ] = None,
) -> Response[bytes]:
    return json_response(request, *await answers.usage_breakdown(ask_of(request)))


_EXPORT_RESPONSE = ResponseSpec(
    str,
    description="Every matching build, newest first: JSON Lines (one Build a line) or CSV with a header row, "
    "nested values (outputs, tags) as JSON in their cells.",
    media_type="application/x-ndjson",
    generate_examples=False,
)


@get(
    "/builds/export",
    operation_id="exportBuilds",
    summary="Every matching build as CSV or JSON Lines, streamed",
    responses={200: _EXPORT_RESPONSE, **_errors(400, 401, 403, 429)},
)
async def export_builds(
    request: Request[Any, Any, Any],
    tags: TagsParam = None,
    create_time_from: FromParam = None,
    create_time_to: ToParam = None,
    status: StatusParam = None,
    derivation_path: Annotated[
        str | None, QueryParameter(description="Exact derivation path.", schema_extra=_PATH)
    ] = None,
    format: Annotated[
        str | None,
        QueryParameter(
            description="`ndjson` (default) or `csv`.",
            schema_extra={**_NON_EMPTY, "enum": list(filters.EXPORT_FORMATS)},
        ),
    ] = None,
) -> Stream:
    query = filters.parse_export_query(query_pairs(request), now_us())
    pages = _reader(request).export_pages(_principal(request).account_id, query.filter)

    async def body() -> AsyncIterator[bytes]:
        yield export.header(query.format)
        async for bodies in pages:
            yield export.page(bodies, query.format)

    extension = "csv" if query.format == "csv" else "ndjson"
    return Stream(
        body(),
        media_type=export.MEDIA_TYPES[query.format],
        headers={
            "Content-Disposition": f'attachment; filename="builds.{extension}"',
            "Cache-Control": "no-store",
            "Vary": "Authorization",
        },
    )


def insight_handlers() -> list[HTTPRouteHandler]:
    from buildreport.http.dashboard import get_dashboard_url  # the page's link, beside the page's code

    return [build_stats, usage_breakdown, export_builds, get_dashboard_url]
