"""`GET /events`: an account's events, oldest first, after an opaque cursor; with `wait`, a long poll.

A long poll holds no database connection while it waits: it sleeps until this server's writer makes events
(the bell) or a short interval passes (events written by other processes or servers), then reads again.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Annotated, Any
from urllib.parse import urlencode

import msgspec
from litestar import Request, Response, get
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import QueryParameter

from buildreport.errors import InvalidParams, shown
from buildreport.events.links import linked
from buildreport.events.models import Event, EventType, StoredEvent
from buildreport.http.answers import Pairs, pairs_of
from buildreport.http.responses import Answer, json_answer
from buildreport.models import InvalidParam, Problem
from buildreport.store.reader import Reader

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_WAIT_SECONDS = 60
# Long polls one worker holds at once; past them a request is answered at once, as with wait=0.
MAX_WAITERS = 512
# How often a waiting request reads again, for events written by other processes or servers.
POLL_SECONDS = 1.0
CURSOR = re.compile(r"[0-7][0-9a-f]{15}")  # a position from 0 to 2^63 - 1
_STORED = msgspec.json.Decoder(StoredEvent)
_ENCODE = msgspec.json.Encoder()
_PARAMS = ("cursor", "limit", "types", "wait")


class FeedQuery(msgspec.Struct, frozen=True):
    after: int = 0
    limit: int = DEFAULT_LIMIT
    types: tuple[str, ...] = ()
    wait: int = 0


def encode_cursor(seq: int) -> str:
    return f"{seq:016x}"


def _number(name: str, text: str, low: int, high: int, errors: list[InvalidParam]) -> int:
    if not text.isdigit() or not low <= int(text) <= high:
        errors.append(InvalidParam(name=name, reason=f"{shown(text)} is not an integer from {low} to {high}"))
        return low
    return int(text)


def parse_feed_query(pairs: Pairs) -> FeedQuery:
    """The feed's parameters; a 400 naming every bad one (an unknown parameter too)."""
    errors: list[InvalidParam] = []
    values: dict[str, str] = {}
    for name, value in pairs:
        if name not in _PARAMS:
            reason = f"unknown parameter; allowed here: {', '.join(_PARAMS)}"
            errors.append(InvalidParam(name=name[:100], reason=reason))
        elif name in values:
            errors.append(InvalidParam(name=name, reason="given more than once"))
        else:
            values[name] = value
    after = 0
    if "cursor" in values:
        if CURSOR.fullmatch(values["cursor"]):
            after = int(values["cursor"], 16)
        else:
            errors.append(InvalidParam(name="cursor", reason="not a cursor this server issued; follow the Link header"))
    limit = _number("limit", values["limit"], 1, MAX_LIMIT, errors) if "limit" in values else DEFAULT_LIMIT
    wait = _number("wait", values["wait"], 0, MAX_WAIT_SECONDS, errors) if "wait" in values else 0
    types: list[str] = []
    for kind in values["types"].split(",") if "types" in values else []:
        if kind not in EventType.__members__.values():
            allowed = ", ".join(t.value for t in EventType)
            errors.append(InvalidParam(name="types", reason=f"{shown(kind)} is not an event type; allowed: {allowed}"))
        elif kind not in types:
            types.append(kind)
    if errors:
        raise InvalidParams(errors)
    return FeedQuery(after, limit, tuple(types), wait)


class Bell:
    """Rung when this server's writer has made events; long polls wait on it, a bounded number at once."""

    def __init__(self, max_waiters: int = MAX_WAITERS) -> None:
        self._rung = asyncio.Event()
        self._max = max_waiters
        self.waiters = 0

    def ring(self, _events: int = 0) -> None:
        rung, self._rung = self._rung, asyncio.Event()
        rung.set()

    @contextmanager
    def place(self) -> Iterator[bool]:
        """A place among the waiters: True when one was free."""
        if self.waiters >= self._max:
            yield False
            return
        self.waiters += 1
        try:
            yield True
        finally:
            self.waiters -= 1

    async def wait(self, seconds: float) -> None:
        with suppress(TimeoutError):
            await asyncio.wait_for(self._rung.wait(), seconds)


async def _read(reader: Reader, account_id: int, account: str, query: FeedQuery) -> tuple[int, list[tuple]]:
    if not account_id:  # an account with no builds had no id when its token was checked; its first write gives one
        account_id = await reader.account_id(account)
        if not account_id:
            return 0, []
    return account_id, await reader.events(account_id, query.after, query.types, query.limit)


async def read_feed(reader: Reader, bell: Bell, account_id: int, account: str, query: FeedQuery) -> tuple[int, list]:
    """(the account's id, the events of a query); with `wait`, once some arrive or the wait is over."""
    account_id, rows = await _read(reader, account_id, account, query)
    if rows or not query.wait:
        return account_id, rows
    loop = asyncio.get_running_loop()
    deadline = loop.time() + query.wait
    with bell.place() as placed:
        while placed and not rows and (left := deadline - loop.time()) > 0:
            await bell.wait(min(left, POLL_SECONDS))
            account_id, rows = await _read(reader, account_id, account, query)
    return account_id, rows


async def feed_answer(state: Any, reader: Reader, account_id: int, account: str, pairs: Pairs) -> tuple[bytes, str]:
    """The feed's JSON array and the address of what follows it."""
    query = parse_feed_query(pairs)
    account_id, rows = await read_feed(reader, state.event_bell, account_id, account, query)
    settings = state.settings
    body = b"[" + b",".join(
        linked(bytes(row[2]), account_id, row[1], state.signer, settings.base_url, settings.event_link_ttl)
        for row in rows
    ) + b"]"
    kept = [(k, v) for k, v in pairs if k != "cursor"]
    kept.append(("cursor", encode_cursor(rows[-1][0] if rows else query.after)))
    return body, f"{settings.base_url}/events?{urlencode(kept)}"


_TYPES_SCHEMA = {
    "oneOf": None, "type": "string", "minLength": 1,
    "pattern": "^(" + "|".join(re.escape(t.value) for t in EventType) + ")(,(" + "|".join(
        re.escape(t.value) for t in EventType) + "))*$",
    "examples": ["build.failed,build.recovered"],
}  # fmt: skip


def _problem(description: str) -> ResponseSpec:
    return ResponseSpec(Problem, description=description, media_type="application/problem+json",
                        generate_examples=False)


@get(
    "/events",
    operation_id="listEvents",
    summary="The account's events, oldest first",
    description="A plain array of events after `cursor` (from the start of the kept events without one). Every "
    "answer carries a `Link: <…>; rel=\"next\"` header to follow for the events after these, also when none came. "
    "With `wait`, the request is held until an event arrives or the wait is over.",
    tags=["events"],
    responses={
        200: ResponseSpec(list[Event], description="Events, oldest first.", generate_examples=False),
        400: _problem("Invalid parameters; `invalid_params` names each."),
        401: _problem("Missing, unknown, expired or revoked token."),
        403: _problem("The token lacks the build:read scope."),
        429: _problem("Rate limit reached; see Retry-After."),
    },
)
async def list_events(
    request: Request[Any, Any, Any],
    cursor: Annotated[str | None, QueryParameter(
        description="Opaque: taken from the `Link` header of the previous answer.",
        schema_extra={"oneOf": None, "type": "string", "pattern": f"^{CURSOR.pattern}$"})] = None,
    limit: Annotated[str | None, QueryParameter(
        description="1 to 1000; default 100.",
        schema_extra={"oneOf": None, "type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                      "default": DEFAULT_LIMIT})] = None,
    types: Annotated[str | None, QueryParameter(
        description="Comma-separated event types; default every type.", schema_extra=_TYPES_SCHEMA)] = None,
    wait: Annotated[str | None, QueryParameter(
        description="Seconds, 0 to 60, to hold the request while no event follows the cursor; default 0.",
        schema_extra={"oneOf": None, "type": "integer", "minimum": 0, "maximum": MAX_WAIT_SECONDS,
                      "default": 0})] = None,
) -> Response[bytes]:
    principal = request.scope["auth"]
    pairs = pairs_of(request.scope["query_string"])
    body, following = await feed_answer(
        request.app.state, request.app.state.reader, principal.account_id, principal.account, pairs
    )
    return Answer(*json_answer(request.scope["headers"], body, {"Link": f'<{following}>; rel="next"'}))
