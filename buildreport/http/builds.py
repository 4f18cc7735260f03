"""The JSON API's builds: list, summary, one build, its signed link, and `POST /builds` that records them.

Thin handlers: the token check has run (auth.py); each reads its query through filters.py (answers.py), makes one
storage call and answers encoded JSON with an ETag (responses.py).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
from litestar import Request, Response, get, post
from litestar.di import Provide
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import OpenAPIMediaType, Operation, Schema
from litestar.params import QueryParameter

from buildreport import filters
from buildreport.claims import claim_tags
from buildreport.http import answers, ingestion, metrics
from buildreport.http.answers import ask_of
from buildreport.http.auth import principal
from buildreport.http.parameters import (
    BUILD_ID,
    NON_EMPTY,
    documented,
    filter_parameters,
    integer,
)
from buildreport.http.responses import errors, json_response, success
from buildreport.models import Build, BuildRecord, BuildSummary, BuildURL, InvalidRecordsProblem, WriteResult
from buildreport.store.transaction import WriteConflicts
from buildreport.store.writer import Writes
from buildreport.times import now_us
from buildreport.tokens import WRITE_SCOPE

_ENCODE = msgspec.json.encode


def path_build_id(request: Request[Any, Any, Any]) -> str:
    """The build id of the path, as written."""
    return request.scope["path_params"]["build_id"]


@get(
    "/builds",
    operation_id="listBuilds",
    summary="List builds, newest first",
    description="A plain array of builds. When more match than `limit`, a `Link: <…>; rel=\"next\"` header "
    "points at the next page.",
    operation_class=documented(*filter_parameters(summaries=False)),
    responses={200: success(list[Build], "Builds, newest first."), **errors(400, 401, 403, 429)},
)
async def list_builds(
    request: Request[Any, Any, Any],
    limit: Annotated[
        str | None, QueryParameter(description="1 to 10000; default 500.", schema_extra=integer(1, 10_000, 500, 50))
    ] = None,
    cursor: Annotated[
        str | None,
        QueryParameter(
            description="Opaque: taken from the `Link` header of the previous page.",
            schema_extra={**NON_EMPTY, "pattern": f"^{filters.CURSOR_PATTERN}$"},
        ),
    ] = None,
) -> Response[bytes]:
    return json_response(request, *await answers.build_list(ask_of(request)))


@get(
    "/builds/summary",
    operation_id="summarizeBuilds",
    summary="Counts and totals over the builds a filter selects",
    operation_class=documented(*filter_parameters(summaries=True)),
    responses={200: success(BuildSummary, "The summary."), **errors(400, 401, 403, 429)},
)
async def summarize_builds(
    request: Request[Any, Any, Any],
) -> Response[bytes]:
    return json_response(request, *await answers.summary(ask_of(request)))


@get(
    "/builds/{build_id:str}",
    operation_id="getBuild",
    summary="One build",
    operation_class=documented(BUILD_ID),
    responses={200: success(Build, "The build."), **errors(400, 401, 403, 404, 429)},
)
async def get_build(request: Request[Any, Any, Any]) -> Response[bytes]:
    return json_response(request, *await answers.one_build(ask_of(request, path_build_id(request))))


@get(
    "/builds/{build_id:str}/url",
    operation_id="getBuildUrl",
    summary="A signed, time-limited web link to a build's page and log",
    operation_class=documented(BUILD_ID),
    responses={200: success(BuildURL, "The link."), **errors(400, 401, 403, 404, 429)},
)
async def get_build_url(
    request: Request[Any, Any, Any],
    ttl_seconds: Annotated[
        str | None,
        QueryParameter(
            description="Lifetime, 1 to 604800 seconds; default 3600.", schema_extra=integer(1, 604_800, 3_600, 3_600)
        ),
    ] = None,
) -> Response[bytes]:
    return json_response(request, *await answers.build_url(ask_of(request, path_build_id(request))))


def _documented_body(data: list[BuildRecord]) -> None:
    """Never called: it puts the record type of `POST /builds` into the OpenAPI document, while the handler
    reads the body itself, to bound its size and to report every bad record rather than the first."""


@dataclass
class _RecordsOperation(Operation):
    """The documented body also as JSON Lines: each line one record, as the array's items are."""

    def __post_init__(self) -> None:
        if self.request_body is not None:
            array = self.request_body.content[ingestion.JSON].schema
            if isinstance(array, Schema) and array.items is not None:
                self.request_body.content[ingestion.NDJSON] = OpenAPIMediaType(schema=array.items)  # type: ignore[arg-type]


@post(
    "/builds",
    operation_id="writeBuilds",
    summary="Record builds: create them, or update them by build_id or source_id",
    description="A JSON array of build records (`application/json`) or one record a line "
    "(`application/x-ndjson`), optionally `Content-Encoding: gzip`. Validated whole, written in one "
    "transaction; `build_ids` lists each record's build in request order. Needs the build:write scope.",
    opt={"scope": WRITE_SCOPE},
    request_max_body_size=None,  # bounded by the handler itself, gzip inflation included
    dependencies={"_body": Provide(_documented_body, sync_to_thread=False)},
    status_code=200,
    operation_class=_RecordsOperation,
    responses={
        200: success(WriteResult, "What was written."),
        400: ResponseSpec(
            InvalidRecordsProblem,
            description="Invalid records, each named in `invalid_records`; nothing was written.",
            media_type="application/problem+json",
            generate_examples=False,
        ),
        409: ResponseSpec(
            InvalidRecordsProblem,
            description="Records that contradict stored builds or their own ids, each named in `invalid_records`; "
            "nothing was written.",
            media_type="application/problem+json",
            generate_examples=False,
        ),
        **errors(401, 403, 413, 415, 429, scope=WRITE_SCOPE),
    },
)
async def write_builds(request: Request[Any, Any, Any]) -> Response[bytes]:
    settings = request.app.state.settings
    kind, encoding = ingestion.media_type(request.scope["headers"])
    declared = request.headers.get("content-length")
    body = await ingestion.read_body(
        request.stream(), int(declared) if declared and declared.isdigit() else None, settings.max_body_bytes
    )
    trusted = claim_tags(settings.oidc_claim_tags, principal(request).claims)  # the body cannot override them
    records = await asyncio.to_thread(
        ingestion.decode_body, body, kind, encoding, settings.max_body_bytes, settings.max_records, trusted
    )
    writes: Writes = request.app.state.writes
    try:
        result = await writes.write(principal(request).account, records, now_us())
    except WriteConflicts as exc:
        raise ingestion.InvalidRecords(exc.invalid, status=409) from None
    metrics.count_written(result.created, result.updated, result.unchanged)
    return Response(content=_ENCODE(result), media_type="application/json", headers={"Cache-Control": "no-store"})
