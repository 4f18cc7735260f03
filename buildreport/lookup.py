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

from buildreport.api import json_answer, send_answer
from buildreport.auth import AuthMiddleware, with_headers
from buildreport.filters import parse_build_id
from buildreport.metrics import ROUTE_METRICS
from buildreport.tokens import READ_SCOPE

if TYPE_CHECKING:
    from litestar import Litestar
    from litestar.types import Receive, Scope, Send

# The route's path template, as the request metrics name it.
TEMPLATE = "/builds/{build_id:str}"
# The route's path; the id is then read as the route reads it.
_PATH = re.compile(r"/builds/([^/]+)")


class KeyLookup:
    """An ASGI layer in front of the Litestar application `app`; `auth` is the API router's AuthMiddleware."""

    def __init__(self, app: Litestar, auth: AuthMiddleware) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope["query_string"]:
            match = _PATH.fullmatch(scope["path"])
            if match is not None and await self._answer(scope, send, match[1]):
                return
        await self.app(scope, receive, send)

    async def _answer(self, scope: Scope, send: Send, build_id: str) -> bool:
        """Answer a request that succeeds and return True; return False, having sent and counted nothing, else."""
        started = time.perf_counter()
        status = await self._respond(scope, send, build_id)
        if status is None:
            return False
        ROUTE_METRICS.answered("GET", TEMPLATE, status, time.perf_counter() - started)
        return True

    async def _respond(self, scope: Scope, send: Send, build_id: str) -> int | None:
        """The status of the answer sent, or None when the request must go on to the router."""
        auth, reader = self.auth, getattr(self.app.state, "reader", None)
        if reader is None:  # not started yet
            return None
        now = time.time()
        try:
            number = parse_build_id(build_id)
            row = await auth.authenticate(reader, scope["headers"], READ_SCOPE, now)
            body = await reader.build(row.account_id, number)
            if body is None:
                return None
            limits = auth.admit(reader, row, now)
        except Exception:  # a refusal, a database error or anything else: the router answers it in full
            return None
        status, headers, content = json_answer(scope["headers"], body)
        if limits:
            send = with_headers(send, limits)
        await send_answer(send, status, headers, content)
        return status
