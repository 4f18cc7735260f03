"""The JSON API's insights over builds: counts, success rate and percentiles per group, and every matching build
exported as CSV or JSON Lines."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from litestar import Request, Response, get
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import QueryParameter
from litestar.response import Stream

from buildreport import filters
from buildreport.http import answers
from buildreport.http.answers import ask_of, query_pairs
from buildreport.http.auth import principal
from buildreport.http.parameters import (
    NON_EMPTY,
    documented,
    filter_parameters,
    grouping,
    integer,
)
from buildreport.http.responses import errors, json_response, reader, success
from buildreport.insights import export
from buildreport.models import BuildStatsGroup
from buildreport.times import now_us

GroupByParam = Annotated[
    str | None,
    QueryParameter(
        description="`day` (default), `hour`, `system`, `status`, `derivation` (the store path's name), "
        "`derivation_path` or `tag:KEY`.",
        schema_extra=grouping(*filters.TIME_GROUPINGS, *filters.VALUE_GROUPINGS),
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
    operation_class=documented(*filter_parameters(summaries=True)),
    responses={200: success(list[BuildStatsGroup], "The groups."), **errors(400, 401, 403, 429)},
)
async def build_stats(
    request: Request[Any, Any, Any],
    group_by: GroupByParam = None,
    limit: Annotated[
        str | None,
        QueryParameter(
            description="Most value groups returned: 1 to 1000; default 100. Time groups are always all listed.",
            schema_extra=integer(1, filters.MAX_GROUPS, filters.DEFAULT_GROUPS),
        ),
    ] = None,
) -> Response[bytes]:
    return json_response(request, *await answers.build_stats(ask_of(request)))


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
    operation_class=documented(*filter_parameters(summaries=False)),
    responses={200: _EXPORT_RESPONSE, **errors(400, 401, 403, 429)},
)
async def export_builds(
    request: Request[Any, Any, Any],
    format: Annotated[
        str | None,
        QueryParameter(
            description="`ndjson` (default) or `csv`.",
            schema_extra={**NON_EMPTY, "enum": list(filters.EXPORT_FORMATS)},
        ),
    ] = None,
) -> Stream:
    query = filters.parse_export_query(query_pairs(request), now_us())
    pages = reader(request).export_pages(principal(request).account_id, query.filter)

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
