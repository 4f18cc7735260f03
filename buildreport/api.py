"""The JSON API: thin handlers from parsed parameters to one storage call to an encoded response."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
from litestar import Request, Response, Router, get, post
from litestar.di import Provide
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import OpenAPIFormat, OpenAPIMediaType, OpenAPIType, Operation, Schema
from litestar.params import PathParameter, QueryParameter

from buildreport import answers, filters, ingestion, metrics
from buildreport.answers import Pairs, RawHeaders, json_headers, raw_headers
from buildreport.auth import AuthMiddleware, Principal, RateLimiter
from buildreport.claims import claim_tags
from buildreport.http.parameters import filter_parameter
from buildreport.models import (
    Build,
    BuildRecord,
    BuildSummary,
    BuildURL,
    InvalidRecordsProblem,
    Problem,
    Usage,
    WriteResult,
)
from buildreport.store.reader import Reader
from buildreport.store.transaction import WriteConflicts
from buildreport.store.writer import Writes
from buildreport.times import now_us
from buildreport.tokens import READ_SCOPE, WRITE_SCOPE

_ENCODE = msgspec.json.encode
def query_pairs(request: Request[Any, Any, Any]) -> Pairs:
    return answers.pairs_of(request.scope["query_string"])


def ask_of(request: Request[Any, Any, Any], build_id: str = "") -> answers.Ask:
    """What a read answer needs, from a request that passed the token check."""
    principal = _principal(request)
    return answers.Ask(query_pairs(request), principal.account_id, _reader(request), request.app.state, build_id,
                       principal.token_id)


# Every JSON answer is the token's own: caches keep it per token and ask again before reusing it.
CACHING = {"Cache-Control": "private, no-cache", "Vary": "Authorization"}


def _etag_of(body: bytes) -> str:
    """The ETag of an answer: a digest of its body (or of what stands for it). SHA-1, which processors with SHA
    instructions compute in 12 µs for a year's breakdown by day (27 KB), where MD5 took 31 µs."""
    return '"' + hashlib.sha1(body, usedforsecurity=False).hexdigest() + '"'


def _etag_matches(header: str | None, etag: str) -> bool:
    if not header:
        return False
    if header.strip() == "*":
        return True
    return any(tag.strip().removeprefix("W/") == etag for tag in header.split(","))


_RAW_CACHING = raw_headers(CACHING)


def json_answer(
    request_headers: RawHeaders, body: bytes, headers: dict[str, str] | None = None, digest_of: bytes | None = None
) -> tuple[int, RawHeaders, bytes]:
    """(status, headers, body) of a JSON answer with an ETag (a digest of the body, or of `digest_of` that stands
    for it): 304 with no body when the request's If-None-Match holds it."""
    etag = _etag_of(body if digest_of is None else digest_of)
    raw = [(b"etag", etag.encode()), *_RAW_CACHING]
    if headers:
        raw += raw_headers(headers)
    # Read straight from the ASGI scope: building a headers object costs more than the whole check.
    given = next((v for k, v in request_headers if k == b"if-none-match"), None)
    if given is not None and _etag_matches(given.decode("latin-1"), etag):
        return 304, raw, b""
    return 200, raw + json_headers(body), body


class Answer(Response[bytes]):
    """An answer whose status, headers and body are final, sent as they are: Litestar's own response object builds
    a case-insensitive header map on every answer, which took about a tenth of a routed request's CPU."""

    __slots__ = ("raw_headers",)

    def __init__(self, status: int, raw_headers: RawHeaders, body: bytes) -> None:
        super().__init__(body, status_code=status)
        self.raw_headers = raw_headers

    def to_asgi_response(self, *args: Any, **kwargs: Any) -> Answer:  # type: ignore[override]
        return self

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send_answer(send, self.status_code, self.raw_headers, self.content)


async def send_answer(send: Any, status: int, headers: RawHeaders, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def json_response(
    request: Request[Any, Any, Any], body: bytes, headers: dict[str, str] | None = None, digest_of: bytes | None = None
) -> Answer:
    """A JSON answer with an ETag (see json_answer)."""
    return Answer(*json_answer(request.scope["headers"], body, headers, digest_of))


def _principal(request: Request[Any, Any, Any]) -> Principal:
    return request.scope["auth"]


def _reader(request: Request[Any, Any, Any]) -> Reader:
    return request.app.state.reader


def _ok(container: Any, description: str) -> ResponseSpec:
    """A success response; Litestar's generated examples are random values that contradict the schema."""
    return ResponseSpec(container, description=description, generate_examples=False)


def _integer(low: int, high: int, default: int | None = None, example: int | None = None) -> dict[str, Any]:
    """The documented schema of an integer parameter that the handler reads as text, to validate it itself."""
    extra: dict[str, Any] = {"oneOf": None, "type": OpenAPIType.INTEGER, "minimum": low, "maximum": high}
    if example is not None:
        extra["examples"] = [example]
    return extra if default is None else {**extra, "default": default}


_DATE = {"oneOf": None, "type": OpenAPIType.STRING, "format": OpenAPIFormat.DATE}
_NON_EMPTY = {"oneOf": None, "type": OpenAPIType.STRING, "minLength": 1}


def _errors(*codes: int, scope: str = READ_SCOPE) -> dict[int, ResponseSpec]:
    described = {
        400: "Invalid parameters; `invalid_params` names each.",
        401: "Missing, unknown, expired or revoked token.",
        403: f"The token lacks the {scope} scope.",
        404: "No such build for this account.",
        413: "The body, inflated, or its number of records is over the limit.",
        415: "The body is neither application/json nor application/x-ndjson, or not gzip-encoded.",
        429: "Rate limit reached; see Retry-After.",
    }
    return {
        code: ResponseSpec(
            Problem, description=described[code], media_type="application/problem+json", generate_examples=False
        )
        for code in codes
    }


TagsParam = filter_parameter("tags")
StatusParam = filter_parameter("status")
FromParam = filter_parameter("create_time_from")
ToParam = filter_parameter("create_time_to")
PathParam = filter_parameter("derivation_path")


@get(
    "/builds",
    operation_id="listBuilds",
    summary="List builds, newest first",
    description="A plain array of builds. When more match than `limit`, a `Link: <…>; rel=\"next\"` header "
    "points at the next page.",
    responses={200: _ok(list[Build], "Builds, newest first."), **_errors(400, 401, 403, 429)},
)
async def list_builds(
    request: Request[Any, Any, Any],
    tags: TagsParam = None,
    create_time_from: FromParam = None,
    create_time_to: ToParam = None,
    status: StatusParam = None,
    limit: Annotated[
        str | None, QueryParameter(description="1 to 10000; default 500.", schema_extra=_integer(1, 10_000, 500, 50))
    ] = None,
    derivation_path: PathParam = None,
    cursor: Annotated[
        str | None,
        QueryParameter(
            description="Opaque: taken from the `Link` header of the previous page.",
            schema_extra={**_NON_EMPTY, "pattern": f"^{filters.CURSOR_PATTERN}$"},
        ),
    ] = None,
) -> Response[bytes]:
    return json_response(request, *await answers.build_list(ask_of(request)))


@get(
    "/builds/summary",
    operation_id="summarizeBuilds",
    summary="Counts and totals over the builds a filter selects",
    responses={200: _ok(BuildSummary, "The summary."), **_errors(400, 401, 403, 429)},
)
async def summarize_builds(
    request: Request[Any, Any, Any],
    tags: TagsParam = None,
    create_time_from: FromParam = None,
    create_time_to: ToParam = None,
    status: StatusParam = None,
) -> Response[bytes]:
    return json_response(request, *await answers.summary(ask_of(request)))


BuildIdParam = Annotated[
    str,
    PathParameter(
        description="Positive 64-bit build identifier.", schema_extra=_integer(1, 2**63 - 1, example=102948)
    ),
]


@get(
    "/builds/{build_id:str}",
    operation_id="getBuild",
    summary="One build",
    responses={200: _ok(Build, "The build."), **_errors(400, 401, 403, 404, 429)},
)
async def get_build(request: Request[Any, Any, Any], build_id: BuildIdParam) -> Response[bytes]:
    return json_response(request, *await answers.one_build(ask_of(request, build_id)))


@get(
    "/builds/{build_id:str}/url",
    operation_id="getBuildUrl",
    summary="A signed, time-limited web link to a build's page and log",
    responses={200: _ok(BuildURL, "The link."), **_errors(400, 401, 403, 404, 429)},
)
async def get_build_url(
    request: Request[Any, Any, Any],
    build_id: BuildIdParam,
    ttl_seconds: Annotated[
        str | None,
        QueryParameter(
            description="Lifetime, 1 to 604800 seconds; default 3600.", schema_extra=_integer(1, 604_800, 3_600, 3_600)
        ),
    ] = None,
) -> Response[bytes]:
    return json_response(request, *await answers.build_url(ask_of(request, build_id)))


@get(
    "/usage",
    operation_id="getUsage",
    summary="Billable usage by stop date",
    responses={200: _ok(Usage, "Usage in the range."), **_errors(400, 401, 403, 429)},
)
async def get_usage(
    request: Request[Any, Any, Any],
    from_: Annotated[
        str | None,
        QueryParameter(
            name="from", description="Date YYYY-MM-DD; default: first day of this month (UTC). Not later than `to`.",
            schema_extra={**_DATE, "examples": ["2026-10-01"]},
        ),
    ] = None,
    to: Annotated[
        str | None,
        QueryParameter(
            description="Date YYYY-MM-DD, exclusive; default: no bound.",
            schema_extra={**_DATE, "examples": ["2026-11-01"]},
        ),
    ] = None,
) -> Response[bytes]:
    return json_response(request, *await answers.usage(ask_of(request)))


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
        200: _ok(WriteResult, "What was written."),
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
        **_errors(401, 403, 413, 415, 429, scope=WRITE_SCOPE),
    },
)
async def write_builds(request: Request[Any, Any, Any]) -> Response[bytes]:
    settings = request.app.state.settings
    kind, encoding = ingestion.media_type(request.scope["headers"])
    declared = request.headers.get("content-length")
    body = await ingestion.read_body(
        request.stream(), int(declared) if declared and declared.isdigit() else None, settings.max_body_bytes
    )
    trusted = claim_tags(settings.oidc_claim_tags, _principal(request).claims)  # the body cannot override them
    records = await asyncio.to_thread(
        ingestion.decode_body, body, kind, encoding, settings.max_body_bytes, settings.max_records, trusted
    )
    writes: Writes = request.app.state.writes
    try:
        result = await writes.write(_principal(request).account, records, now_us())
    except WriteConflicts as exc:
        raise ingestion.InvalidRecords(exc.invalid, status=409) from None
    metrics.count_written(result.created, result.updated, result.unchanged)
    return Response(content=_ENCODE(result), media_type="application/json", headers={"Cache-Control": "no-store"})


def api_auth(rate_limit: int) -> AuthMiddleware:
    """The token check of the API's routes, with its rate limit (none for 0)."""
    return AuthMiddleware("reader", RateLimiter(rate_limit) if rate_limit > 0 else None)


def api_router(auth: AuthMiddleware) -> Router:
    from buildreport.badges import get_badge_url
    from buildreport.events.feed import list_events  # it answers with this module's Answer
    from buildreport.exchange import exchange_handlers
    from buildreport.insights_api import insight_handlers  # it builds on this module's helpers

    return Router(
        path="/",
        route_handlers=[
            list_builds, summarize_builds, get_build, get_build_url, get_usage, write_builds, *insight_handlers(),
            *exchange_handlers(),
            get_badge_url,
            list_events,
        ],
        middleware=[auth],
        opt={"scope": READ_SCOPE},
        tags=["builds"],
        security=[{"bearer": []}],
    )
