"""The outermost ASGI layer: a request id on every response and log line, HEAD served as GET, access log,
and the path prefix of the public URL (`/api/v1`), served with ASGI `root_path` semantics: the routes below
see paths without it, and anything outside it is a 404.

Values that came from a request are escaped before they reach a log line (control characters shown as
`\x1b`, `\n`, …), so a request can neither forge log lines nor write terminal escapes into the log.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import re
import secrets
import time
from typing import TYPE_CHECKING

from buildreport.problems import problem_body

if TYPE_CHECKING:  # annotations only: the `serve --workers N` supervisor never imports Litestar
    from litestar.types import ASGIApp, Message, Receive, Scope, Send

REQUEST_ID_HEADER = b"x-request-id"
_REASONABLE_ID = re.compile(rb"[A-Za-z0-9._:/+=-]{1,128}")
request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
access_log = logging.getLogger("buildreport.access")
# A random prefix per process and a counter: unique ids without a system call per request.
_PREFIX = secrets.token_hex(6)
_COUNTER = itertools.count(1)


# C0 and C1 controls, DEL, and the Unicode line separators and bidirectional overrides a terminal or viewer
# would act on.
_CONTROLS = "\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[{_CONTROLS}]")
_UNSAFE_FIELD = re.compile(f'[{_CONTROLS}\\\\"]')
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\", '"': '\\"'}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def printable(text: str) -> str:
    """A request value as a log line shows it: control characters, backslashes and quotes escaped."""
    return _UNSAFE_FIELD.sub(_escape, text)


def without_controls(text: str) -> str:
    """Any log message with its control characters escaped; a value no caller escaped still cannot forge a line."""
    return _CONTROL.sub(_escape, text)


class EscapingFormatter(logging.Formatter):
    """Escapes control characters in every message; a traceback keeps its line breaks and nothing else."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = without_controls(record.message)
        return super().formatMessage(record)

    def formatException(self, ei) -> str:  # type: ignore[no-untyped-def]
        return "\n".join(without_controls(line) for line in super().formatException(ei).split("\n"))


def new_request_id() -> str:
    return f"{_PREFIX}{next(_COUNTER):010x}"


def _given_request_id(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The client's own X-Request-Id, when it sent one that is safe to log and send back."""
    for name, value in headers:
        if name == REQUEST_ID_HEADER:
            return value.decode() if _REASONABLE_ID.fullmatch(value) else None
    return None


class RequestIdFilter(logging.Filter):
    """Puts the current request id on every log record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


def configure_logging() -> None:
    """Log lines to standard error, each with the request id; called in the server and in every worker."""
    handler = logging.StreamHandler()
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(EscapingFormatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)


class Envelope:
    def __init__(self, app: ASGIApp, *, log_requests: bool = True, prefix: str = "") -> None:
        self.app = app
        self.log_requests = log_requests
        self.prefix = prefix.rstrip("/")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = _given_request_id(scope["headers"]) or new_request_id()
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

        # Routing sees the decoded path: `/builds/1%2Furl` would reach `/builds/1/url`. No path of this service
        # contains an encoded slash, so such a path names nothing and is answered before routing.
        raw_path = scope.get("raw_path", b"")
        encoded_slash = b"%" in raw_path and b"%2f" in raw_path.partition(b"?")[0].lower()
        try:
            if not inside:
                await _not_found(send_with_id, "No such resource")
            elif encoded_slash:
                await _not_found(send_with_id, _ENCODED_SLASH)
            else:
                await self.app(scope, receive, send_with_id)
        finally:
            if self.log_requests:
                self._log(scope, method, path, status, time.perf_counter() - started)
            request_id.reset(token)

    @staticmethod
    def _log(scope: Scope, method: str, path: str, status: int, seconds: float) -> None:
        client = scope.get("client")
        access_log.info(
            '%s "%s %s" %d %.1fms',
            printable(str(client[0])) if client else "-",
            printable(method),
            printable(path),
            status,
            seconds * 1000,
        )


_ENCODED_SLASH = "No such resource: a path never contains a percent-encoded slash (%2F)"


async def _not_found(send: Send, detail: str) -> None:
    body = problem_body(404, detail)
    headers = [(b"content-type", b"application/problem+json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 404, "headers": headers})
    await send({"type": "http.response.body", "body": body})
