"""Build badges: `GET /badges/url` signs a long-lived link to an SVG of a series' newest finished build (its status
in words and colour, and its duration), which opens without a token, for a README.

A badge's link carries its account, series and expiry, signed with the keys of build links under a salt of its
own; nothing in it depends on the token that asked for it. Altered links answer 403 and expired ones 410, each
with a grey badge that says so, as build links do.
"""

from __future__ import annotations

from html import escape
from typing import Annotated, Any

import msgspec
from litestar import Request, Response, Router, get
from litestar.params import PathParameter, QueryParameter

from buildreport import filters
from buildreport.http import humanize
from buildreport.http.answers import ask_of
from buildreport.http.pages import status_view
from buildreport.http.parameters import TagsParam, integer
from buildreport.http.responses import errors, json_response, success
from buildreport.models import BadgeURL, BuildStatus
from buildreport.signing import Signer
from buildreport.times import US_PER_SECOND, from_us, now_us

BADGE_SALT = "buildreport.badge.v1"
MAX_LABEL_CHARS = 40
# Fills with white text at a contrast of at least 4.5:1, on any page colour: light and dark READMEs alike.
LABEL_FILL = "#24292f"
FILLS = {"ok": "#1a7f37", "failed": "#cf222e", "discarded": "#9a6700", "none": "#57606a"}
SVG_HEADERS = {
    "Cache-Control": "public, max-age=60",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
}
REFUSED_HEADERS = {**SVG_HEADERS, "Cache-Control": "no-store"}


class BadgeClaims(msgspec.Struct, frozen=True, array_like=True):
    account_id: int
    series: filters.BadgeSeries
    expires_us: int


class BadgeSigner(Signer):  # type: ignore[type-arg]
    """Links to badges: the keys and rotation of build links, a salt of their own."""

    def __init__(self, secret_keys: tuple[str, ...]) -> None:
        super().__init__(secret_keys, BadgeClaims, BADGE_SALT, "badge")  # type: ignore[arg-type]


def _text_width(text: str) -> int:
    """About how wide 11 px Verdana sets `text`: wide enough that nothing is cut, narrow enough to look right."""
    return 10 + sum(8 if c.isupper() or c in "mwMW" else 4 if c in "ijl.,:;'| " else 7 for c in text)


def svg(label: str, message: str, fill: str) -> bytes:
    """A flat badge: `label` on dark grey, `message` on `fill`, both in white."""
    if len(label) > MAX_LABEL_CHARS:
        label = label[: MAX_LABEL_CHARS - 1] + "…"
    left, right = _text_width(label), _text_width(message)
    total = left + right
    title = escape(f"{label}: {message}")
    label, message = escape(label), escape(message)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total}" height="20" role="img" aria-label="{title}">'
        f"<title>{title}</title>"
        f'<rect width="{left}" height="20" rx="3" fill="{LABEL_FILL}"/>'
        f'<rect x="{left}" width="{right}" height="20" rx="3" fill="{fill}"/>'
        f'<rect x="{left}" width="4" height="20" fill="{fill}"/>'
        '<g fill="#fff" font-family="Verdana,DejaVu Sans,sans-serif" font-size="11" text-anchor="middle">'
        f'<text x="{left / 2}" y="14">{label}</text>'
        f'<text x="{left + right / 2}" y="14">{message}</text>'
        "</g></svg>"
    ).encode()


def status_badge(label: str, newest: tuple[str, int | None] | None) -> bytes:
    """The badge of a series: its newest finished build's status and duration, or a grey "no builds"."""
    if newest is None:
        return svg(label, "no builds", FILLS["none"])
    view = status_view(BuildStatus(newest[0]))
    words = view.label.lower()
    if newest[1] is not None:
        words += " · " + humanize.duration(newest[1] / US_PER_SECOND)
    return svg(label, words, FILLS.get(view.kind, FILLS["none"]))


def _svg_response(status: int, body: bytes, headers: dict[str, str]) -> Response[bytes]:
    return Response(body, status_code=status, media_type="image/svg+xml", headers=headers)


# What the parameters take, in the schema language (filters.parse_badge_query checks it).
_NAME = {"oneOf": None, "type": "string", "minLength": 1, "maxLength": filters.MAX_DERIVATION_NAME,
         "pattern": "^[^\\x00]+$"}  # fmt: skip


@get(
    "/badges/url",
    operation_id="getBadgeUrl",
    summary="A signed, long-lived link to an SVG badge of a series' newest finished build",
    description="The series is the account's builds of one derivation name (as `group_by=derivation` names it), "
    "optionally of one `system` and carrying every pair of `tags`. The badge opens without a token.",
    tags=["builds"],
    responses={200: success(BadgeURL, "The link."), **errors(400, 401, 403, 429)},
)
async def get_badge_url(
    request: Request[Any, Any, Any],
    derivation: Annotated[
        str | None,
        QueryParameter(description="Derivation name, e.g. `hello-2.12.1`.", required=True, schema_extra=_NAME),
    ] = None,
    system: Annotated[
        str | None, QueryParameter(description="Only builds for this system.", schema_extra=_NAME)
    ] = None,
    tags: TagsParam = None,
    ttl_seconds: Annotated[
        str | None,
        QueryParameter(
            description=f"Lifetime, 1 to {filters.MAX_BADGE_TTL_SECONDS} seconds (ten years); default one year.",
            schema_extra=integer(1, filters.MAX_BADGE_TTL_SECONDS, filters.DEFAULT_BADGE_TTL_SECONDS),
        ),
    ] = None,
) -> Response[bytes]:
    ask = ask_of(request)
    series, ttl = filters.parse_badge_query(ask.pairs)
    expires_us = -(-(now_us() + ttl * US_PER_SECOND) // US_PER_SECOND) * US_PER_SECOND  # whole seconds, as links
    state = request.app.state
    url = state.badge_signer.link_url(state.settings.base_url, BadgeClaims(ask.account_id, series, expires_us))
    return json_response(request, msgspec.json.encode(BadgeURL(url=url, expires_at=from_us(expires_us))))


@get("/{token:str}", include_in_schema=False)
async def badge(request: Request[Any, Any, Any], token: Annotated[str, PathParameter()]) -> Response[bytes]:
    claims: BadgeClaims | None = request.app.state.badge_signer.verify(token)
    if claims is None:
        return _svg_response(403, svg("badge", "link not valid", FILLS["none"]), REFUSED_HEADERS)
    if claims.expires_us <= now_us():
        return _svg_response(410, svg("badge", "link expired", FILLS["none"]), REFUSED_HEADERS)
    newest = await request.app.state.reader.newest_finished(claims.account_id, claims.series)
    return _svg_response(200, status_badge(claims.series.derivation, newest), SVG_HEADERS)


def badge_router() -> Router:
    """The badges themselves, under /badge: no token, as build pages."""
    return Router(path="/badge", route_handlers=[badge])
