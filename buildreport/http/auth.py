"""Bearer tokens: their format and digest, the check on every API request, scopes and rate limits."""

from __future__ import annotations

import math
import time
from typing import Any

import msgspec
from litestar import Request
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from buildreport.errors import Problem
from buildreport.http.responses import raw_headers
from buildreport.store.reader import Reader, TokenRow
from buildreport.times import US_PER_SECOND
from buildreport.tokens import READ_SCOPE, TOKEN_SHAPE, digest

REALM = 'Bearer realm="buildreport"'
# Written at most once a minute per token, so reads never turn into a stream of writes.
LAST_USED_RESOLUTION_US = 60 * US_PER_SECOND


class Principal(msgspec.Struct, frozen=True):
    """Who is asking: the account a token belongs to, and what it may do."""

    token_id: str
    account_id: int
    account: str
    scopes: frozenset[str]
    expires_us: int = 0
    claims: str | None = None  # the verified OIDC claims (JSON) of a token got by an exchange


def _unauthorized(detail: str, *, presented: bool) -> Problem:
    challenge = REALM + (f', error="invalid_token", error_description="{detail}"' if presented else "")
    return Problem(401, detail, headers={"WWW-Authenticate": challenge})


def bearer_secret(headers: list[tuple[bytes, bytes]]) -> str:
    """The token of an `Authorization: Bearer` header, or a 401 that says what is wrong."""
    values = [v for k, v in headers if k == b"authorization"]
    if not values:
        raise _unauthorized("An Authorization: Bearer token is required", presented=False)
    scheme, _, secret = values[0].decode("latin-1").strip().partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret:
        raise _unauthorized("The Authorization header must be 'Bearer <token>'", presented=False)
    if len(values) > 1 or not TOKEN_SHAPE.fullmatch(secret):
        raise _unauthorized("The token is malformed", presented=True)
    return secret


def check_token(row: TokenRow | None, now_us: int) -> TokenRow:
    if row is None:
        raise _unauthorized("The token is not known", presented=True)
    if row.revoked_us is not None and row.revoked_us <= now_us:
        raise _unauthorized("The token has been revoked", presented=True)
    if row.expires_us <= now_us:
        raise _unauthorized("The token has expired", presented=True)
    return row


async def link_token_ended(reader: Reader, token_id: str | None, now_us: int) -> str | None:
    """Why a link made with the token `token_id` no longer opens (that token was revoked, has expired or was
    deleted); None while the token is live, or for a link made without a token."""
    if token_id is None:
        return None
    life = await reader.token_life(token_id)
    if life is None:
        return "The API token this link was made with no longer exists."
    expires_us, revoked_us = life
    if revoked_us is not None and revoked_us <= now_us:
        return "The API token this link was made with has been revoked."
    if expires_us <= now_us:
        return "The API token this link was made with has expired."
    return None


def require_scope(principal: Principal | TokenRow, scope: str) -> None:
    if scope not in principal.scopes:
        challenge = f'{REALM}, error="insufficient_scope", scope="{scope}"'
        raise Problem(403, f"The token lacks the {scope} scope", headers={"WWW-Authenticate": challenge})


class RateLimiter:
    """A fixed one-minute window per token, kept in this process."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._windows: dict[str, tuple[int, int]] = {}

    def hit(self, key: str, now: float) -> dict[str, str]:
        """Count one request; the RateLimit headers for it, or a 429 once the window is used up."""
        window = int(now // 60)
        start, used = self._windows.get(key, (window, 0))
        if start != window:
            if len(self._windows) > 100_000:
                self._windows.clear()
            start, used = window, 0
        reset = max(1, math.ceil((window + 1) * 60 - now))
        if used >= self.per_minute:
            headers = self._headers(0, reset)
            headers["Retry-After"] = str(reset)
            raise Problem(429, f"Rate limit of {self.per_minute} requests a minute reached", headers=headers)
        self._windows[key] = (start, used + 1)
        return self._headers(self.per_minute - used - 1, reset)

    def _headers(self, remaining: int, reset: int) -> dict[str, str]:
        return {
            "RateLimit-Limit": str(self.per_minute),
            "RateLimit-Remaining": str(remaining),
            "RateLimit-Reset": str(reset),
        }


class TokenCache:
    """Token rows by digest, trusted only while the database has not changed since they were read."""

    MAX_ENTRIES = 10_000

    def __init__(self) -> None:
        self._rows: dict[bytes, tuple[bytes, TokenRow | None]] = {}

    async def lookup(self, reader: Reader, token_digest: bytes) -> TokenRow | None:
        version = await reader.data_version()  # read before the query: a commit in between forces a re-read next time
        cached = self._rows.get(token_digest)
        if version is not None and cached is not None and cached[0] == version:
            return cached[1]
        row = await reader.token(token_digest)
        if version is not None:
            if len(self._rows) >= self.MAX_ENTRIES:
                self._rows.clear()
            self._rows[token_digest] = (version, row)
        return row


class TokenCheck:
    """A worker's check of bearer tokens: the token cache, the rate limit (none when None) and the notes of each
    token's last use. Made once at start-up and kept in the application's state, so every route shares it."""

    def __init__(self, limiter: RateLimiter | None) -> None:
        self.limiter = limiter
        self.tokens = TokenCache()
        self._touched: dict[str, int] = {}

    async def authenticate(
        self, reader: Reader, headers: list[tuple[bytes, bytes]], required: str | None, now: float
    ) -> TokenRow:
        """The token of a request's headers, known, current and holding the `required` scope (any token for None);
        else a 401 or 403."""
        row = check_token(await self.tokens.lookup(reader, digest(bearer_secret(headers))), int(now * US_PER_SECOND))
        if required is not None:
            require_scope(row, required)
        return row

    def admit(self, reader: Reader, row: TokenRow, now: float) -> dict[str, str]:
        """Count a request against its token's rate limit (a 429 past it) and note the token's use; the
        RateLimit headers of the answer."""
        extra = self.limiter.hit(row.token_id, now) if self.limiter is not None else {}
        self._touch(reader, row, int(now * US_PER_SECOND))
        return extra

    def admit_client(self, scope: Scope, now: float) -> dict[str, str]:
        """Count a request without a token against its client address's rate limit (a 429 past it)."""
        if self.limiter is None:
            return {}
        client = scope.get("client")
        return self.limiter.hit(f"client {client[0] if client else ''}", now)

    def _touch(self, reader: Reader, row: TokenRow, now_us: int) -> None:
        """Note the token's last use, at most once a minute."""
        last = max(row.last_used_us or 0, self._touched.get(row.token_id, 0))
        if now_us - last >= LAST_USED_RESOLUTION_US:
            self._touched[row.token_id] = now_us
            reader.touch_token(row.token_id, now_us)


API_CHECK = "token_check"  # the application state's key of the API routes' TokenCheck


class AuthMiddleware:
    """Turns the bearer token into a Principal in `scope["auth"]`, or answers 401, 403 or 429. The check itself,
    with its cache and rate limit, is the application state's `check_key` (a TokenCheck); this middleware holds
    nothing, so Litestar's copies of it as it registers routes all share that one.

    A plain Litestar middleware (a callable given the next app): it guards every route of its router, so it
    needs none of the exclusion checks the middleware base classes make on each request."""

    def __init__(self, check_key: str = API_CHECK) -> None:
        self.check_key = check_key

    def __call__(self, app: ASGIApp) -> ASGIApp:
        async def checked(scope: Scope, receive: Receive, send: Send) -> None:
            await self.handle(scope, receive, send, app)

        return checked

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        state = scope["litestar_app"].state
        check: TokenCheck = state[self.check_key]
        reader: Reader = state.reader
        now = time.time()
        opt = scope["route_handler"].opt
        if opt.get("token_optional") and not any(key == b"authorization" for key, _ in scope["headers"]):
            # A route that also serves callers without a token (the OIDC token exchange): limited by address.
            extra = check.admit_client(scope, now)
            scope["auth"] = None
        else:
            row = await check.authenticate(reader, scope["headers"], opt.get("scope", READ_SCOPE), now)
            extra = check.admit(reader, row, now)
            scope["auth"] = Principal(row.token_id, row.account_id, row.account, row.scopes, row.expires_us, row.claims)
        await next_app(scope, receive, with_headers(send, extra) if extra else send)


def principal(request: Request[Any, Any, Any]) -> Principal:
    """Who is asking: set by AuthMiddleware before any API handler runs."""
    return request.scope["auth"]


def with_headers(send: Send, headers: dict[str, str]) -> Send:
    """`send` with `headers` added to the answer's own."""
    encoded = raw_headers(headers)

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", []), *encoded]
        await send(message)

    return wrapped
