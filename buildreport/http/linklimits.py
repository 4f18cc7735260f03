"""Limits on the signed pages and raw logs (`/b/…`), which anyone holding a link may open without a token.

Per worker process: requests a minute per client address, and raw logs streamed at once, in all and per
client address. A raw log can be tens of megabytes; without these bounds a few downloads could keep the
event loop busy enough to slow `/healthz` and the API. Beyond a limit the answer is 429 with Retry-After.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager

STREAM_RETRY_SECONDS = 10
_MAX_TRACKED_CLIENTS = 100_000


def client_key(address: str) -> str:
    """Whom a limit counts: an IPv4 address, or the /64 network of an IPv6 one (one site holds a whole /64)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class TooMany(Exception):
    """A limit was reached: what to tell the client, and when to come back."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class LinkLimits:
    def __init__(self, per_minute: int, streams: int, streams_per_client: int) -> None:
        self.per_minute = per_minute  # 0: no request limit
        self.streams = streams
        self.streams_per_client = streams_per_client
        self._windows: dict[str, tuple[int, int]] = {}
        self._streaming: dict[str, int] = {}
        self._streaming_total = 0

    def admits(self, client: str, now: float | None = None) -> bool:
        """Whether count_request would count a request of `client` now rather than refuse it; counts nothing."""
        if self.per_minute <= 0:
            return True
        now = time.time() if now is None else now
        start, used = self._windows.get(client, (int(now // 60), 0))
        return start != int(now // 60) or used < self.per_minute

    def count_request(self, client: str, now: float | None = None) -> None:
        """Count one request of a client address in its fixed one-minute window; TooMany once it is used up."""
        if self.per_minute <= 0:
            return
        now = time.time() if now is None else now
        window = int(now // 60)
        start, used = self._windows.get(client, (window, 0))
        if start != window:
            if len(self._windows) >= _MAX_TRACKED_CLIENTS:
                self._windows.clear()
            start, used = window, 0
        if used >= self.per_minute:
            retry = max(1, math.ceil((window + 1) * 60 - now))
            raise TooMany(f"This address opened more than {self.per_minute} build pages or logs a minute.", retry)
        self._windows[client] = (start, used + 1)

    @contextmanager
    def stream(self, client: str) -> Iterator[None]:
        """Hold one of the raw-log streams while the body is sent; TooMany when none is free."""
        if self._streaming_total >= self.streams:
            raise TooMany(f"{self.streams} logs are being downloaded from this server right now.",
                          STREAM_RETRY_SECONDS)
        if self._streaming.get(client, 0) >= self.streams_per_client:
            raise TooMany(f"This address is downloading {self.streams_per_client} logs already.",
                          STREAM_RETRY_SECONDS)
        self._streaming[client] = self._streaming.get(client, 0) + 1
        self._streaming_total += 1
        try:
            yield
        finally:
            self._streaming_total -= 1
            left = self._streaming[client] - 1
            if left:
                self._streaming[client] = left
            else:
                del self._streaming[client]
