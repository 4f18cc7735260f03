"""`GET /builds/{id}` answered before routing, the commonest request of clients that follow one build.

The answer is the one the API's route gives, byte for byte and header for header: the same token check
(AuthMiddleware's own functions and cache), the same storage call, ETag and rate limit. Only a request that
succeeds is answered here; anything else (no or bad token, missing scope, no such build, a query string, a
rate limit reached, a database error, any other exception) goes on to the router, which answers it in full.
Nothing is counted or noted before the answer is certain, so a request that goes on is counted once.

In process, the routed answer takes 77 to 110 µs and this one 18 to 22 µs: routing, Litestar's request objects and its
middleware cost four times the lookup itself. The served figures are in bench/report.md.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

from buildreport.api import etag_matches, etag_of
from buildreport.auth import AuthMiddleware, bearer_secret, check_token
from buildreport.metrics import ROUTE_METRICS
from buildreport.times import US_PER_SECOND
from buildreport.tokens import READ_SCOPE, digest

if TYPE_CHECKING:
    from litestar import Litestar
    from litestar.types import Receive, Scope, Send

# The route's path template, as the request metrics name it.
TEMPLATE = "/builds/{build_id:str}"
# A build id as the route accepts it: plain decimal, no sign or leading zero; the range is checked below.
_PATH = re.compile(r"/builds/([1-9][0-9]{0,18})")
MAX_BUILD_ID = 2**63 - 1
_JSON = (b"content-type", b"application/json")


class KeyLookup:
    """An ASGI layer in front of the Litestar application `app`; `auth` is the API router's AuthMiddleware."""

    def __init__(self, app: Litestar, auth: AuthMiddleware) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope["query_string"]:
            match = _PATH.fullmatch(scope["path"])
            if match is not None and await self._answer(scope, send, int(match[1])):
                return
        await self.app(scope, receive, send)

    async def _answer(self, scope: Scope, send: Send, build_id: int) -> bool:
        """Answer a request that succeeds and return True; return False, having sent and counted nothing, else."""
        started = time.perf_counter()
        status = await self._respond(scope, send, build_id)
        if status is None:
            return False
        ROUTE_METRICS.answered("GET", TEMPLATE, status, time.perf_counter() - started)
        return True

    async def _respond(self, scope: Scope, send: Send, build_id: int) -> int | None:
        """The status of the answer sent, or None when the request must go on to the router."""
        if build_id > MAX_BUILD_ID:
            return None
        auth, reader = self.auth, getattr(self.app.state, "reader", None)
        if reader is None:  # not started yet
            return None
        now = time.time()
        now_us = int(now * US_PER_SECOND)
        try:
            row = check_token(await auth.tokens.lookup(reader, digest(bearer_secret(scope["headers"]))), now_us)
            if READ_SCOPE not in row.scopes:
                return None
            body = await reader.build(row.account_id, build_id)
            if body is None:
                return None
            limits = auth.limiter.hit(row.token_id, now) if auth.limiter is not None else {}
        except Exception:  # a refusal, a database error or anything else: the router answers it in full
            return None
        auth.touch(reader, row, now_us)
        etag = etag_of(body)
        headers = [(b"etag", etag.encode()), (b"cache-control", b"private, no-cache"), (b"vary", b"Authorization")]
        given = next((v for k, v in scope["headers"] if k == b"if-none-match"), None)
        if given is not None and etag_matches(given.decode("latin-1"), etag):
            status, content = 304, b""
        else:
            status, content = 200, body
            headers += [_JSON, (b"content-length", str(len(body)).encode())]
        headers += [(name.lower().encode(), value.encode()) for name, value in limits.items()]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})
        return status
