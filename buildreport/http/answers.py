"""The read answers of the JSON API, free of any web framework: from the query, the token's account and the
reader to the JSON body and the headers that go with it.

The routes of builds.py, usage.py and insights.py answer through these and send the result with an ETag
(responses.json_response); /healthz answers through `health`.
"""

from __future__ import annotations

from typing import Any, NamedTuple
from urllib.parse import parse_qsl, urlencode

import msgspec
from litestar import Request

from buildreport import filters
from buildreport.errors import NotFound
from buildreport.http.auth import principal
from buildreport.http.responses import RawHeaders, json_headers, reader
from buildreport.insights import stats
from buildreport.models import BuildURL, Health
from buildreport.signing import LinkClaims
from buildreport.store import engine_errors, engine_message
from buildreport.store.errors import QUEUE_LENGTH, QUEUE_WAIT, DatabaseBusy
from buildreport.store.queue import Turns
from buildreport.store.reader import Reader
from buildreport.times import US_PER_SECOND, format_us, from_us, now_us

_ENCODE = msgspec.json.encode
Pairs = list[tuple[str, str]]


def pairs_of(query_string: bytes) -> Pairs:
    """Query parameters in order, blank values kept, so `limit=` is an error rather than the default."""
    if not query_string:  # most reads have none
        return []
    return parse_qsl(query_string.decode("latin-1"), keep_blank_values=True, errors="replace")


class Ask(NamedTuple):
    """What a read answer needs: the query, whose it is, where it reads, and the application state (settings
    and the link signer)."""

    pairs: Pairs
    account_id: int
    reader: Reader
    state: Any
    build_id: str = ""  # the path's build id, as written
    token_id: str | None = None  # the asking token: links made for it end when it is revoked


def query_pairs(request: Request[Any, Any, Any]) -> Pairs:
    return pairs_of(request.scope["query_string"])


def ask_of(request: Request[Any, Any, Any], build_id: str = "") -> Ask:
    """What a read answer needs, from a request that passed the token check."""
    asking = principal(request)
    return Ask(query_pairs(request), asking.account_id, reader(request), request.app.state, build_id, asking.token_id)


class Json(NamedTuple):
    """An answer's JSON, its own headers, and what its ETag is a digest of when not the body itself."""

    body: bytes
    headers: dict[str, str] | None = None
    digest_of: bytes | None = None


async def build_list(ask: Ask) -> Json:
    query = filters.parse_list_query(ask.pairs, now_us())
    page = await ask.reader.list_builds(ask.account_id, query)
    headers = {}
    if page.next_cursor is not None:
        headers["Link"] = f'<{_next_url(ask, query, page.next_cursor)}>; rel="next"'
    # The stored digests of the builds stand for the body, so a 500-build page is not hashed on every request.
    return Json(page.body, headers, page.digest + headers.get("Link", "").encode())


def _next_url(ask: Ask, query: filters.ListQuery, cursor: filters.Cursor) -> str:
    """The same request from the next page on, with the time window fixed so pages do not drift."""
    kept = [(k, v) for k, v in ask.pairs if k not in ("cursor", "create_time_from")]
    kept.append(("create_time_from", format_us(query.filter.create_from_us)))
    kept.append(("cursor", cursor.encode()))
    return f"{ask.state.settings.base_url}/builds?{urlencode(kept)}"


async def summary(ask: Ask) -> Json:
    now = now_us()
    build_filter = filters.parse_summary_query(ask.pairs, now)
    return Json(_ENCODE(await ask.reader.summary(ask.account_id, build_filter, now)))


async def _required_build(ask: Ask) -> tuple[int, bytes]:
    number = filters.parse_build_id(ask.build_id)
    body = await ask.reader.build(ask.account_id, number)
    if body is None:
        raise NotFound(f"No build {number} in this account")
    return number, body


async def one_build(ask: Ask) -> Json:
    filters.parse_no_params(ask.pairs)
    _, body = await _required_build(ask)
    return Json(body)


async def build_url(ask: Ask) -> Json:
    ttl = filters.parse_ttl(ask.pairs)
    number, _ = await _required_build(ask)
    # Whole seconds, rounded up: the link lives at least `ttl` seconds and `expires_at` is exact.
    expires_us = -(-(now_us() + ttl * US_PER_SECOND) // US_PER_SECOND) * US_PER_SECOND
    claims = LinkClaims(ask.account_id, number, expires_us, ask.token_id)
    url = ask.state.signer.link_url(ask.state.settings.base_url, claims)
    return Json(_ENCODE(BuildURL(build_id=number, url=url, expires_at=from_us(expires_us))))


async def usage(ask: Ask) -> Json:
    query = filters.parse_usage_query(ask.pairs, now_us())
    return Json(_ENCODE(await ask.reader.usage(ask.account_id, query)))


# How many statistics answers, breakdowns and dashboards a worker computes at once; the others wait their
# turn. Their work is Python on one event loop, so more at once are no faster, but each holds its rows until it
# is done, so fewer at once bound a worker's memory.
HEAVY_AT_ONCE = 2


def heavy_turns(length: int = QUEUE_LENGTH, wait: float = QUEUE_WAIT) -> Turns:
    """A worker's turns for heavy answers (made on its event loop, at start-up); past `length` requests waiting
    or `wait` seconds waited, a request is refused as busy (`serve --queue-length`, `--queue-wait`)."""
    return Turns(HEAVY_AT_ONCE, length, wait, "a turn to compute statistics")


async def build_stats(ask: Ask) -> Json:
    query = filters.parse_stats_query(ask.pairs, now_us())
    async with ask.state.heavy:
        rows = await ask.reader.stats_rows(ask.account_id, query.filter, query.group_by)
        return Json(_ENCODE(stats.build_stats(rows, query)))


async def usage_breakdown(ask: Ask) -> Json:
    query = filters.parse_breakdown_query(ask.pairs, now_us())
    async with ask.state.heavy:
        rows = await ask.reader.usage_rows(ask.account_id, query.usage, query.group_by)
        return Json(_ENCODE(stats.usage_breakdown(rows, query.group_by)))


async def health(reader: Reader) -> tuple[int, RawHeaders, bytes]:
    """(status, headers, body) of /healthz: 200 when the files read are the ones opened and the database
    answers, else 503 saying why."""
    problem = reader.file_problem()
    if problem is None:
        try:
            await reader.ping()
        except engine_errors() as exc:
            problem = f"database unavailable: {engine_message(exc)}"
        except DatabaseBusy as exc:
            problem = f"busy: {exc}"
    if problem is None:
        body = _ENCODE(Health(status="ok"))
        return 200, json_headers(body), body
    body = _ENCODE(Health(status=problem))
    return 503, [(b"retry-after", b"5"), (b"cache-control", b"no-store"), *json_headers(body)], body
