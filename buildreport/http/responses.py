"""What every JSON route answers with: encoded answers sent as they are, ETags, the documented responses, and the
reader a handler reads through. (Who is asking, `auth.principal`, is the token check's.)"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

from litestar import Request, Response
from litestar.openapi.datastructures import ResponseSpec

from buildreport.models import Problem
from buildreport.store.reader import Reader
from buildreport.tokens import READ_SCOPE

RawHeaders = list[tuple[bytes, bytes]]
_JSON_TYPE = (b"content-type", b"application/json")


def raw_headers(headers: dict[str, str]) -> RawHeaders:
    """Headers as an ASGI answer carries them: lower-case names, bytes."""
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]


def json_headers(body: bytes) -> RawHeaders:
    """The type and length of a JSON body."""
    return [_JSON_TYPE, (b"content-length", b"%d" % len(body))]


# Every JSON answer is the token's own: caches keep it per token and ask again before reusing it.
CACHING = {"Cache-Control": "private, no-cache", "Vary": "Authorization"}
_RAW_CACHING = raw_headers(CACHING)


# Answers up to this size have their ETags remembered (a thousand at most): a client following a build asks
# for the same bytes again and again, which the reader keeps (store/reader.py, KeptBuilds).
REMEMBERED_ETAG_BYTES = 4096


def etag_of(body: bytes) -> str:
    """The ETag of an answer: a digest of its body (or of what stands for it)."""
    return _remembered_etag(body) if len(body) <= REMEMBERED_ETAG_BYTES else _etag(body)


def _etag(body: bytes) -> str:
    """SHA-1: fast where processors have SHA instructions, and an ETag needs no resistance to collisions."""
    return '"' + hashlib.sha1(body, usedforsecurity=False).hexdigest() + '"'


_remembered_etag = functools.lru_cache(maxsize=1024)(_etag)


def etag_matches(header: str | None, etag: str) -> bool:
    """Whether an If-None-Match header names `etag` (weak or strong) or is `*`."""
    if not header:
        return False
    if header.strip() == "*":
        return True
    return any(tag.strip().removeprefix("W/") == etag for tag in header.split(","))


def json_answer(
    request_headers: RawHeaders, body: bytes, headers: dict[str, str] | None = None, digest_of: bytes | None = None
) -> tuple[int, RawHeaders, bytes]:
    """(status, headers, body) of a JSON answer with an ETag (a digest of the body, or of `digest_of` that stands
    for it): 304 with no body when the request's If-None-Match holds it."""
    etag = etag_of(body if digest_of is None else digest_of)
    raw = [(b"etag", etag.encode()), *_RAW_CACHING]
    if headers:
        raw += raw_headers(headers)
    # Read straight from the ASGI scope: a headers object would be built for this one header.
    for name, given in request_headers:
        if name == b"if-none-match":
            if etag_matches(given.decode("latin-1"), etag):
                return 304, raw, b""
            break
    raw += json_headers(body)
    return 200, raw, body


class Answer(Response[bytes]):
    """An answer whose status, headers and body are final, sent as they are: no header map is built for it, as
    Litestar's own response object does on every answer."""

    __slots__ = ("raw_headers",)

    def __init__(self, status: int, raw_headers: RawHeaders, body: bytes) -> None:
        # Only what `to_asgi_response` and `__call__` read: Response.__init__ would build the header map and
        # cookie list this answer never uses.
        self.content = body
        self.status_code = status
        self.background = None
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


def reader(request: Request[Any, Any, Any]) -> Reader:
    """The database reader of this worker, opened at start-up."""
    return request.app.state.reader


def success(container: Any, description: str) -> ResponseSpec:
    """A success response; Litestar's generated examples are random values that contradict the schema."""
    return ResponseSpec(container, description=description, generate_examples=False)


_DESCRIBED = {
    400: "Invalid parameters; `invalid_params` names each.",
    401: "Missing, unknown, expired or revoked token.",
    403: "The token lacks the {scope} scope.",
    404: "No such build for this account.",
    413: "The body, inflated, or its number of records is over the limit.",
    415: "The body is neither application/json nor application/x-ndjson, or not gzip-encoded.",
    429: "Rate limit reached; see Retry-After.",
}


def errors(*codes: int, scope: str = READ_SCOPE) -> dict[int, ResponseSpec]:
    """The documented problem responses `codes` of a route that needs `scope`."""
    return {
        code: ResponseSpec(
            Problem,
            description=_DESCRIBED[code].format(scope=scope),
            media_type="application/problem+json",
            generate_examples=False,
        )
        for code in codes
    }
