"""The signed build page and raw log: what a person opens, without a token, from `GET /builds/{id}/url`.

`/b/{token}` is the page, `/b/{token}/log` the raw log (streamed, `?tail=N` for its last lines) and
`/b/static/…` the stylesheet and icons. The token carries the account, the build and the expiry
(see signing.py): a wrong signature is a 403 page, an expired link a 410 page, a build that is gone a 404 page.
No JavaScript, nothing from elsewhere, and a Content-Security-Policy that says so.

A log is stored zlib-compressed and can be tens of megabytes once inflated. It is inflated a bounded
piece at a time: the raw log streams as it inflates, and the page keeps only a window of the last
lines (`LineWindow`), so neither holds the whole text.
"""

from __future__ import annotations

import hashlib
import logging
import zlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from datetime import timedelta
from importlib.resources import files
from typing import Annotated, Any
from urllib.parse import urlsplit

import anyio.to_thread
import msgspec
from jinja2 import DictLoader, Environment, StrictUndefined
from litestar import Request, Response, Router, get
from litestar.datastructures import State
from litestar.middleware import ASGIMiddleware
from litestar.params import PathParameter
from litestar.response import Stream
from litestar.types import ASGIApp, Receive, Scope, Send
from markupsafe import Markup

from buildreport import ansi
from buildreport.errors import Problem, shown
from buildreport.filters import CANONICAL_INT
from buildreport.http import humanize
from buildreport.http.auth import link_token_ended
from buildreport.http.linklimits import LinkLimits, TooMany, client_key
from buildreport.logtext import (
    FULL_LOG_BYTES,
    LINE_BYTES,
    TAIL_LINES,
    check_inflates,
    inflate,
    render_log,
    tail_bytes,
    window,
)
from buildreport.models import DISCARDED, FAILED, SUCCESSFUL, Build, BuildStatus
from buildreport.signing import LinkClaims, LinkSigner
from buildreport.store.reader import Reader
from buildreport.times import from_us, now_us

CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": CSP,
    "X-Robots-Tag": "noindex, nofollow",
}
HTML = "text/html"  # Litestar adds "; charset=utf-8" to text types
TEXT = "text/plain"

logger = logging.getLogger("buildreport.web")
MAX_TAIL = 100_000
RAW_TAIL_LINK = 1_000  # the "last lines" link on the page

# --- package data -----------------------------------------------------------------------------


def _package_files(folder: str, suffixes: tuple[str, ...]) -> dict[str, bytes]:
    """Files shipped inside the package (and so inside a frozen executable), read once."""
    found = {
        entry.name: entry.read_bytes()
        for entry in files("buildreport").joinpath(folder).iterdir()
        if entry.name.endswith(suffixes) and entry.is_file()
    }
    if not found:
        raise RuntimeError(f"buildreport/{folder} is missing from the package")
    return found


_STATIC_TYPES = {".css": "text/css", ".svg": "image/svg+xml"}
STATIC = _package_files("static", tuple(_STATIC_TYPES))
_STATIC_VERSION = {name: hashlib.sha256(body).hexdigest()[:12] for name, body in STATIC.items()}

# --- the page -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StatusView:
    kind: str  # ok, failed, discarded, running: the colour and the icon
    symbol: str
    label: str
    description: str


_STATUS_TEXT = {
    BuildStatus.built: ("Built", "The build succeeded."),
    BuildStatus.build_failed: ("Build failed", "The builder exited with an error."),
    BuildStatus.cancelled: ("Cancelled", "The build was cancelled before it finished."),
    BuildStatus.timeout: ("Timed out", "The build ran longer than it was allowed to."),
    BuildStatus.internal_error: (
        "Internal error", "The build service failed, not the build. It is not billed and the service restarts it."),
    BuildStatus.out_of_memory: (
        "Out of memory", "The build machine ran out of memory. It is not billed and the service restarts it."),
    BuildStatus.max_memory_exceeded: ("Memory limit exceeded", "The build used more memory than it was allowed."),
    BuildStatus.client_disconnect: ("Client disconnected", "The client went away before the build finished."),
    BuildStatus.client_error: ("Client error", "The client's request could not be built."),
    BuildStatus.pending: ("Pending", "The build is waiting for a machine."),
    BuildStatus.running: ("Running", "The build is running."),
}


def status_view(status: BuildStatus) -> StatusView:
    label, description = _STATUS_TEXT[status]
    if status in SUCCESSFUL:
        return StatusView("ok", "✓", label, description)
    if status in FAILED:
        return StatusView("failed", "✗", label, description)
    if status in DISCARDED:
        return StatusView("discarded", "!", label, description)
    return StatusView("running", "●", label, description)


def derivation_name(path: str) -> str:
    """`/nix/store/<hash>-hello-2.12.1.drv` → `hello-2.12.1`."""
    base = path.rsplit("/", 1)[-1].removesuffix(".drv")
    _, dash, name = base.partition("-")
    return name if dash and name else base


@dataclass(frozen=True)
class RelatedBuild:
    build_id: int
    url: str
    status: StatusView | None  # None when that build is not in the database


def _shown(value: Any) -> Any:
    """Every value a page writes, before it is escaped: a stored text (a status message, a tag, a system) loses
    escape sequences, control characters and bidirectional controls, as a log line does (ansi.py). HTML the
    code made (Markup: log lines, charts) is left as it is."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return ansi.strip(value)
    return value


def _environment() -> Environment:
    templates = {name: body.decode() for name, body in _package_files("templates", (".html",)).items()}
    env = Environment(
        loader=DictLoader(templates), autoescape=True, undefined=StrictUndefined, trim_blocks=True,
        lstrip_blocks=True, keep_trailing_newline=False, finalize=_shown,
    )
    env.filters.update(
        duration=humanize.duration, size=humanize.size, count=humanize.count, percent=humanize.percent,
        plural=humanize.plural, utc=humanize.utc, rfc3339=humanize.rfc3339, relative=humanize.relative,
    )
    return env


_TEMPLATES = _environment()


class LinkPage(Exception):
    """An answer other than the build: an error page (HTML) with its status code."""

    def __init__(self, status: int, template_vars: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        super().__init__(template_vars.get("title", ""))
        self.status = status
        self.template_vars = template_vars
        self.headers = headers or {}


def prefix_of(request: Request[Any, Any, Any]) -> str:
    """The path the service lives under, from its public URL: pages link with paths, not hosts."""
    return urlsplit(request.app.state.settings.base_url).path.rstrip("/")


def render_page(request: Request[Any, Any, Any], template: str, **values: Any) -> bytes:
    """A page from the templates, its stylesheet and icons linked under the service's path."""
    return render_under(prefix_of(request), template, **values)


def render_under(prefix: str, template: str, **values: Any) -> bytes:
    """A page from the templates, its stylesheet and icons linked under `prefix`, the service's path."""

    def static(name: str) -> str:
        return f"{prefix}/b/static/{name}?v={_STATIC_VERSION[name]}"

    return _TEMPLATES.get_template(template).render(static=static, now=from_us(now_us()), **values).encode()


def render(
    request: Request[Any, Any, Any],
    template: str,
    code: int = 200,
    headers: dict[str, str] | None = None,
    **values: Any,
) -> Response[bytes]:
    return _html(code, {**PAGE_HEADERS, **(headers or {})}, render_page(request, template, **values))


def _html(status: int, headers: dict[str, str], body: bytes) -> Response[bytes]:
    return Response(content=body, status_code=status, media_type=HTML, headers=headers)


Token = Annotated[str, PathParameter(description="A signed build link.")]


def _page_error(request: Request[Any, Any, Any], exc: LinkPage) -> Response[bytes]:
    return _html(*_error_answer(prefix_of(request), exc))


def _error_answer(prefix: str, exc: LinkPage) -> tuple[int, dict[str, str], bytes]:
    """The status, headers and HTML of the page that says why a link shows no build."""
    body = render_under(prefix, "error.html", icon="link", status_code=exc.status, **exc.template_vars)
    return exc.status, {**PAGE_HEADERS, **exc.headers}, body


def client_of(scope: Scope) -> str:
    """The client address a request's pages and logs are counted against."""
    return client_key(str(scope["client"][0])) if scope.get("client") else "-"


class LinkLimitMiddleware(ASGIMiddleware):
    """Requests a minute per client address to pages and logs, and raw-log streams held at once (linklimits.py),
    counted in the application's `link_limits`."""

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        opt = scope["route_handler"].opt
        limits: LinkLimits = scope["app"].state.link_limits
        if opt.get("unlimited"):
            await next_app(scope, receive, send)
            return
        client = client_of(scope)
        try:
            limits.count_request(client)
            if not opt.get("log_stream"):
                await next_app(scope, receive, send)
                return
            with limits.stream(client):
                await next_app(scope, receive, send)
        except TooMany as exc:
            raise LinkPage(
                429, {"title": "Too many requests", "kind": "busy", "message": exc.message,
                      "retry_after": exc.retry_after},
                headers={"Retry-After": str(exc.retry_after)},
            ) from None


async def _open_link(state: State, token: str) -> tuple[LinkClaims, bytes]:
    """The claims of a valid, live link and its build's JSON; or a LinkPage to answer instead."""
    signer: LinkSigner = state.signer
    claims = signer.verify(token)
    if claims is None:
        raise LinkPage(403, {"title": "This link is not valid", "kind": "invalid"})
    now = now_us()
    if claims.expires_us <= now:
        raise LinkPage(410, {"title": "This link has expired", "kind": "expired",
                             "expired": from_us(claims.expires_us), "build_id": claims.build_id})
    ended = await link_token_ended(_reader(state), claims.token_id, now)
    if ended is not None:
        raise LinkPage(410, {"title": "This link was revoked", "kind": "revoked", "reason": ended})
    body = await _reader(state).build(claims.account_id, claims.build_id)
    if body is None:
        raise LinkPage(404, {"title": "Build not found", "kind": "no-build", "build_id": claims.build_id})
    return claims, body


def _stored_build(body: bytes, build_id: int) -> Build:
    """A stored build; a 503 page for one that no longer fits the types (written by an older version)."""
    try:
        return _BUILD.decode(body)
    except msgspec.MsgspecError as exc:
        logger.error("build %d: stored record cannot be read: %s", build_id, exc)
        raise LinkPage(503, {"title": "This build cannot be shown", "kind": "unreadable-build",
                             "build_id": build_id}) from exc


_BUILD = msgspec.json.Decoder(Build)


def _reader(state: State) -> Reader:
    return state.reader


async def _related(state: State, claims: LinkClaims, build_id: int | None) -> RelatedBuild | None:
    """A link to the restarted or restarting build that lives exactly as long as this one."""
    if build_id is None:
        return None
    signer: LinkSigner = state.signer
    url = signer.link_url(state.settings.base_url, msgspec.structs.replace(claims, build_id=build_id))
    body = await _reader(state).build(claims.account_id, build_id)
    status = status_view(_stored_build(body, build_id).build_status) if body is not None else None
    return RelatedBuild(build_id, url, status)


@get("/{token:str}", include_in_schema=False)
async def build_page(request: Request[Any, Any, Any], token: Token) -> Response[bytes]:
    return _html(*await page_answer(request.app.state, token))


async def page_answer(state: State, token: str) -> tuple[int, dict[str, str], bytes]:
    """The status, headers and HTML of what a signed link opens: its build's page, or the page that says why not."""
    try:
        return 200, PAGE_HEADERS, await _build_page(state, token)
    except LinkPage as exc:
        return _error_answer(state.settings.path_prefix, exc)


async def _build_page(state: State, token: str) -> bytes:
    claims, body = await _open_link(state, token)
    build = _stored_build(body, claims.build_id)
    status = status_view(build.build_status)
    stored = await _reader(state).log(claims.account_id, claims.build_id)
    log, log_unreadable = None, False
    if stored is not None:
        try:
            log = await anyio.to_thread.run_sync(render_log, stored[1], stored[0])
        except zlib.error as exc:  # a damaged stored log: the page shows every other field and says so
            logger.error("build %d: stored log cannot be inflated: %s", claims.build_id, exc)
            log_unreadable = True
    finished = (
        build.start_time + timedelta(seconds=build.duration_seconds) if build.duration_seconds is not None else None
    )
    prefix = state.settings.path_prefix
    raw = f"{prefix}/b/{token}/log"
    return render_under(
        prefix,
        "build.html",
        icon=status.kind,
        build=build,
        name=derivation_name(build.derivation_path),
        status=status,
        finished=finished,
        restart_of=await _related(state, claims, build.restart_of_build_id),
        restarted_as=await _related(state, claims, build.restarted_as_build_id),
        log=log,
        log_unreadable=log_unreadable,
        raw_url=raw,
        tail_url=f"{raw}?tail={RAW_TAIL_LINK}",
        tail_lines=RAW_TAIL_LINK,
        expires=from_us(claims.expires_us),
        limits={"full": FULL_LOG_BYTES, "tail": TAIL_LINES, "line": LINE_BYTES},
    )




def _tail_param(request: Request[Any, Any, Any]) -> int | None:
    values = request.query_params.getall("tail", [])
    if not values:
        return None
    reason = None
    if len(values) > 1:
        reason = "give it once"
    elif not CANONICAL_INT.fullmatch(values[0]) or not 1 <= int(values[0]) <= MAX_TAIL:
        reason = f"{shown(values[0])} is not a whole number of lines from 1 to {MAX_TAIL}"
    if reason:
        raise Problem(400, f"Invalid parameter tail: {reason}", headers=PAGE_HEADERS,
                      invalid_params=[{"name": "tail", "reason": reason}])
    return int(values[0])


@get("/{token:str}/log", include_in_schema=False, opt={"log_stream": True})
async def raw_log(request: Request[Any, Any, Any], token: Token) -> Stream:
    claims, _ = await _open_link(request.app.state, token)
    tail = _tail_param(request)
    stored = await _reader(request.app.state).log(claims.account_id, claims.build_id)
    if stored is None:
        raise LinkPage(404, {"title": "No log", "kind": "no-log", "build_id": claims.build_id})
    blob = stored[1]
    try:
        if tail is None:
            # The whole log is inflated once, its text thrown away, before the first byte is sent: a damaged
            # log is a 503 page, never a body cut off part-way.
            await anyio.to_thread.run_sync(check_inflates, blob)
            pieces: Iterable[bytes] = inflate(blob)
            filename = f"build-{claims.build_id}.log"
        else:
            lines = await anyio.to_thread.run_sync(window, inflate(blob), tail)
            pieces = tail_bytes(lines)
            filename = f"build-{claims.build_id}-tail-{tail}.log"
    except zlib.error as exc:
        logger.error("build %d: stored log cannot be inflated: %s", claims.build_id, exc)
        raise LinkPage(503, {"title": "The log cannot be read", "kind": "unreadable-log",
                             "build_id": claims.build_id}) from exc

    async def body() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    headers = {**PAGE_HEADERS, "Content-Disposition": f'inline; filename="{filename}"'}
    return Stream(body(), media_type=TEXT, headers=headers)


@get("/static/{name:str}", include_in_schema=False, opt={"unlimited": True})
async def static_file(name: Annotated[str, PathParameter()]) -> Response[bytes]:
    if name not in STATIC:
        raise Problem(404, "No such resource")
    suffix = name[name.rfind(".") :]
    headers = {**PAGE_HEADERS, "Cache-Control": "public, max-age=86400", "ETag": f'"{_STATIC_VERSION[name]}"'}
    return Response(content=STATIC[name], media_type=_STATIC_TYPES[suffix], headers=headers)


def web_router() -> Router:
    return Router(
        path="/b",
        route_handlers=[static_file, build_page, raw_log],
        middleware=[LinkLimitMiddleware()],
        exception_handlers={LinkPage: _page_error},
        include_in_schema=False,
    )

