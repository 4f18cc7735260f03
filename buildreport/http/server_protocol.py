"""uvicorn's HTTP protocol with the two bounds it lacks: the size of a request head and the time to send it.

uvicorn bounds keep-alive (`timeout_keep_alive`), open connections (`limit_concurrency`) and, with h11 only,
the head size (`h11_max_incomplete_event_size`). With httptools, the faster parser it picks, a client can
send an endless header or hold a connection open without ever finishing its head. This protocol counts
the bytes of each request head and starts a clock when a connection opens or a new request begins: too
large a head gets 431, too slow a client 408, and the connection is closed either way.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from buildreport.config import DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_HEADER_BYTES
from buildreport.http import metrics
from buildreport.problems import problem_body

log = logging.getLogger("buildreport.access")


class ServeConfig(uvicorn.Config):
    """uvicorn's Config plus the head limits; picklable, so `--workers N` processes receive them too."""

    def __init__(
        self,
        app: Any,
        *,
        max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
        header_timeout: float = DEFAULT_HEADER_TIMEOUT,
        **kwargs: Any,
    ) -> None:
        # h11 enforces the same bound itself, should it ever be the parser in use.
        super().__init__(app, http=BoundedHttpProtocol, h11_max_incomplete_event_size=max_header_bytes, **kwargs)
        self.max_header_bytes = max_header_bytes
        self.header_timeout = header_timeout


def _refusal(status: int, reason: str, detail: str) -> bytes:
    """A complete HTTP/1.1 answer with a problem document that closes the connection."""
    body = problem_body(status, detail)
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/problem+json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class BoundedHttpProtocol(HttpToolsProtocol):
    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self.max_header_bytes: int = getattr(config, "max_header_bytes", DEFAULT_MAX_HEADER_BYTES)
        self.header_timeout: float = getattr(config, "header_timeout", DEFAULT_HEADER_TIMEOUT)
        self._head_bytes = 0
        self._awaiting_head = True
        # When the head under way began (None between a head and the next request's first bytes), and the one
        # timer that checks it: a head that ends in time leaves the timer to check the next, so a keep-alive
        # request costs no timer of its own.
        self._head_since: float | None = None
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        metrics.connection_opened()
        self._start_head_clock()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        metrics.connection_closed()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._awaiting_head:
            if self._head_since is None:
                self._start_head_clock()  # a keep-alive connection starts its next request
            self._head_bytes += len(data)
        super().data_received(data)
        if self._awaiting_head and self._head_bytes > self.max_header_bytes and not self.transport.is_closing():
            self._refuse(431, "Request Header Fields Too Large",
                         f"The request line and headers exceed {self.max_header_bytes} bytes")

    def on_headers_complete(self) -> None:
        self._awaiting_head = False
        self._head_since = None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._awaiting_head = True
        self._head_bytes = 0

    def _start_head_clock(self) -> None:
        self._head_since = self.loop.time()
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout, self._head_too_slow)

    def _head_too_slow(self) -> None:
        self._head_timer = None
        since = self._head_since
        if not self._awaiting_head or since is None or self.transport.is_closing():
            return  # no head under way: the next request's first bytes start the clock again
        left = since + self.header_timeout - self.loop.time()
        if left > 0:  # this head began after the timer was set, for an earlier one
            self._head_timer = self.loop.call_later(left, self._head_too_slow)
        elif self._head_bytes:
            self._refuse(408, "Request Timeout", f"The request headers took longer than {self.header_timeout:g}s")
        else:
            self.transport.close()  # an idle connection: nothing was asked, nothing to answer

    def _refuse(self, status: int, reason: str, detail: str) -> None:
        # The formatter escapes control characters; the address comes from the socket, not the request.
        log.warning("%s refused before routing: %d %s", self.client[0] if self.client else "-", status, detail)
        self._head_since = None
        self.transport.write(_refusal(status, reason, detail))
        self.transport.close()
