"""The outermost ASGI layer: a request id on every response and log line, HEAD served as GET, access log,
and the path prefix of the public URL (`/api/v1`), served with ASGI `root_path` semantics: the routes below
see paths without it, and anything outside it is a 404."""

from __future__ import annotations

import contextvars
import itertools
import json
import logging
import re
import secrets
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the `serve --workers N` supervisor never imports Litestar
    from litestar.types import ASGIApp, Message, Receive, Scope, Send

REQUEST_ID_HEADER = b"x-request-id"
_REASONABLE_ID = re.compile(rb"[A-Za-z0-9._:/+=-]{1,128}")
request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
access_log = logging.getLogger("buildreport.access")
# A random prefix per process and a counter: unique ids without a system call per request.
_PREFIX = secrets.token_hex(6)
_COUNTER = itertools.count(1)


def new_request_id() -> str:
    return f"{_PREFIX}{next(_COUNTER):010x}"


class RequestIdFilter(logging.Filter):
    """Puts the current request id on every log record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


def configure_logging() -> None:
    """Log lines to standard error, each with the request id; called in the server and in every worker."""
    handler = logging.StreamHandler()
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)


_OUTSIDE = json.dumps({
    "type": "https://buildreport.dev/problems/not-found", "title": "Not found", "status": 404,
    "detail": "No such resource",
}).encode()


async def _not_found(send: Send) -> None:
    headers = [(b"content-type", b"application/problem+json"), (b"content-length", str(len(_OUTSIDE)).encode())]
    await send({"type": "http.response.start", "status": 404, "headers": headers})
    await send({"type": "http.response.body", "body": _OUTSIDE})


class Envelope:
    def __init__(self, app: ASGIApp, *, log_requests: bool = True, prefix: str = "") -> None:
        self.app = app
        self.log_requests = log_requests
        self.prefix = prefix.rstrip("/")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k == REQUEST_ID_HEADER), None)
        rid = given.decode() if given is not None and _REASONABLE_ID.fullmatch(given) else new_request_id()
        token = request_id.set(rid)
        method = scope["method"]
        head = method == "HEAD"
        if head:
            scope = {**scope, "method": "GET"}
        elif method == "OPTIONS":
            # The API answers GET and HEAD only; the router would otherwise answer OPTIONS on every path itself.
            scope = {**scope, "method": "OPTIONS-NOT-SERVED"}
        path = scope["path"]
        inside = True
        if self.prefix:
            inside = path == self.prefix or path.startswith(self.prefix + "/")
            if inside:
                rest = path[len(self.prefix) :] or "/"
                raw = scope.get("raw_path") or path.encode()
                raw = raw[len(self.prefix) :] if raw.startswith(self.prefix.encode()) else rest.encode()
                scope = {**scope, "path": rest, "raw_path": raw or b"/", "root_path": self.prefix}
        started = time.perf_counter()
        status = 0

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (REQUEST_ID_HEADER, rid.encode())]
            elif head and message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        try:
            if inside:
                await self.app(scope, receive, send_with_id)
            else:
                await _not_found(send_with_id)
        finally:
            if self.log_requests:
                access_log.info(
                    '%s "%s %s" %d %.1fms',
                    scope.get("client", ("-",))[0] if scope.get("client") else "-",
                    method,
                    path,
                    status,
                    (time.perf_counter() - started) * 1000,
                )
            request_id.reset(token)
