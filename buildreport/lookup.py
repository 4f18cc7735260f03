"""The API's read requests answered before routing: the commonest requests of clients and CI jobs.

The answer is the one the API's route gives, byte for byte and header for header: the same token check
(AuthMiddleware's own functions and cache), the same answer function (answers.py), ETag and rate limit.
Only a request that succeeds is answered here; anything else (no or bad token, missing scope, a bad
parameter, no such build, a rate limit reached, a database error, any other exception) goes on to the
router, which answers it in full. Nothing is counted or noted before the answer is certain, so a request
that goes on is counted once.

In process, a routed `/usage` took about 95 µs of the event loop's CPU beyond its parameters, query and
encoding, and this path about 50 µs: routing, Litestar's request objects, its middleware and its parameter
parsing cost the difference. The served figures are in bench/report.md.

The signed build page (`/b/{token}`) is answered here too, as its route answers it: the page, or the page
that says why not (an invalid or expired link, a build that is gone), counted against the client's pages a
minute (web.py's LinkLimits, the router's own). A client whose pages a minute are used up, and any exception,
go on to the router. On a million builds, one client, a page with a log took 1.34 ms (p50) and 1.35 ms of the
server's CPU routed, and 1.23 ms and 1.22 ms answered here.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, NamedTuple

from buildreport.http import answers
from buildreport.http.auth import AuthMiddleware, with_headers
from buildreport.http.builds import json_answer, send_answer
from buildreport.http.metrics import ROUTE_METRICS
from buildreport.http.pages import client_of, page_answer, raw_page_headers
from buildreport.tokens import READ_SCOPE

if TYPE_CHECKING:
    from litestar import Litestar
    from litestar.types import Receive, Scope, Send

    from buildreport.http.linklimits import LinkLimits
    from buildreport.store.reader import Reader

Answer = Callable[[answers.Ask], Awaitable[answers.Json]]


class Route(NamedTuple):
    path: str  # as the route is declared
    answer: Answer


# Paths matched whole; any other path under /builds/ is a build id (or a build's /url).
_PLAIN = {
    route.path: route
    for route in (
        Route("/builds", answers.build_list),
        Route("/builds/summary", answers.summary),
        Route("/builds/stats", answers.build_stats),
        Route("/usage", answers.usage),
        Route("/usage/breakdown", answers.usage_breakdown),
    )
}
_ONE_BUILD = Route("/builds/{build_id:str}", answers.one_build)
_BUILD_URL = Route("/builds/{build_id:str}/url", answers.build_url)
_BY_ID = re.compile(r"/builds/([^/]+)(/url)?")
HEALTH = "/healthz"
PAGE = "/b/{token:str}"  # the signed build page; `/b/static` is no token but the folder of its static files
_PAGE_PATH = re.compile(r"/b/(?!static$)([^/]+)")


def route_of(path: str) -> tuple[Route, str] | None:
    """The route a GET of `path` would reach, with the build id it names (empty when none); None for paths
    only the router serves."""
    route = _PLAIN.get(path)
    if route is not None:
        return route, ""
    match = _BY_ID.fullmatch(path)
    if match is None:
        return None
    return (_BUILD_URL if match[2] else _ONE_BUILD), match[1]


class ReadAnswers:
    """An ASGI layer in front of the Litestar application `app`; `auth` is the API router's AuthMiddleware.
    `/healthz`, which takes no token, is answered here too, always (200 or 503), as its route answers it."""

    def __init__(self, app: Litestar, auth: AuthMiddleware) -> None:
        self.app = app
        self.auth = auth
        # The route templates the request metrics name, as the router's own metrics do.
        formats = {route.path: route.path_format for route in app.routes}
        paths = [HEALTH, PAGE, *(route.path for route in (*_PLAIN.values(), _ONE_BUILD, _BUILD_URL))]
        self.templates = {path: formats[path] for path in paths}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            await self._get(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _get(self, scope: Scope, receive: Receive, send: Send) -> None:
        reader = getattr(self.app.state, "reader", None)  # None until the application has started
        if reader is not None:
            path = scope["path"]
            if path == HEALTH:
                if await self._answer(HEALTH, self._health(send, reader)):
                    return
            elif (page := _PAGE_PATH.fullmatch(path)) is not None:
                if await self._answer(PAGE, self._page(scope, send, page[1])):
                    return
            else:
                found = route_of(path)
                if found is not None and await self._answer(found[0].path, self._read(scope, send, reader, *found)):
                    return
        await self.app(scope, receive, send)

    async def _answer(self, path: str, respond: Awaitable[int | None]) -> bool:
        """Answer through `respond` and return True; return False, having sent and counted nothing, when it
        leaves the request to the router."""
        started = time.perf_counter()
        status = await respond
        if status is None:
            return False
        ROUTE_METRICS.answered("GET", self.templates[path], status, time.perf_counter() - started)
        return True

    async def _read(self, scope: Scope, send: Send, reader: Reader, route: Route, build_id: str) -> int | None:
        """The status of the answer sent, or None when the request must go on to the router."""
        auth, now = self.auth, time.time()
        try:
            row = await auth.authenticate(reader, scope["headers"], READ_SCOPE, now)
            if auth.spent(row, now):  # the router refuses it (429) without the answer's query
                return None
            ask = answers.Ask(answers.pairs_of(scope["query_string"]), row.account_id, reader, self.app.state, build_id,
                              row.token_id)
            json = await route.answer(ask)
            limits = auth.admit(reader, row, now)
        except Exception:  # a refusal, a bad parameter, a database error or anything else: the router answers it
            return None
        status, headers, content = json_answer(scope["headers"], *json)
        if limits:
            send = with_headers(send, limits)
        await send_answer(send, status, headers, content)
        return status

    async def _page(self, scope: Scope, send: Send, token: str) -> int | None:
        """The status of the page sent, or None when the request must go on to the router."""
        state = self.app.state
        limits: LinkLimits = state.link_limits
        client = client_of(scope)
        if not limits.admits(client):  # the router refuses it (429) without rendering the page
            return None
        try:
            status, headers, body = await page_answer(state, token)
            limits.count_request(client)  # another of its requests may have taken the last one meanwhile
        except Exception:  # a refusal, a database error or anything else: the router answers it
            return None
        await send_answer(send, status, raw_page_headers(headers, body), body)
        return status

    async def _health(self, send: Send, reader: Reader) -> int | None:
        try:
            status, headers, body = await answers.health(reader)
        except Exception:  # anything but a database error (which is a 503 answer): the router answers it
            return None
        await send_answer(send, status, headers, body)
        return status
