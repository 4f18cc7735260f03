"""create_app(settings): the Litestar application with its routes, errors, OpenAPI and lifespan."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar, Request, Response, Router, get
from litestar.datastructures import State
from litestar.exceptions import HTTPException
from litestar.openapi import OpenAPIConfig
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import Components, SecurityScheme
from litestar.plugins.problem_details import ProblemDetailsConfig, ProblemDetailsException, ProblemDetailsPlugin

from buildreport import __version__
from buildreport.config import Settings, load_secret_keys
from buildreport.errors import Problem
from buildreport.events.deliver import Deliverer, event_rules
from buildreport.http import answers
from buildreport.http.allocator import keep_freed_memory
from buildreport.http.auth import API_CHECK, AuthMiddleware, RateLimiter, TokenCheck
from buildreport.http.badges import BadgeSigner, badge_router, get_badge_url
from buildreport.http.builds import get_build, get_build_url, list_builds, summarize_builds, write_builds
from buildreport.http.dashboard import dashboard_router, get_dashboard_url
from buildreport.http.envelope import Envelope, request_id
from buildreport.http.exchange import exchange_handlers
from buildreport.http.feed import Bell, list_events
from buildreport.http.insights import build_stats, export_builds
from buildreport.http.linklimits import LinkLimits
from buildreport.http.metrics import METRICS_CHECK, RequestMetrics, count_delivery, metrics_router, worker_stopped
from buildreport.http.pages import web_router
from buildreport.http.responses import Answer
from buildreport.http.usage import get_usage, usage_breakdown
from buildreport.models import Health
from buildreport.oidc import Verifier
from buildreport.signing import DashboardSigner, LinkSigner
from buildreport.store import engine_errors, open_database, open_reader
from buildreport.store.errors import DatabaseBusy, DatabaseUnavailable
from buildreport.store.writer import Writes
from buildreport.tokens import READ_SCOPE

log = logging.getLogger("buildreport")


def _http_problem(exc: HTTPException) -> ProblemDetailsException:
    """Litestar's own errors (unknown path, wrong method, …) in the same problem shape as ours."""
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        allowed = {m.strip() for m in headers.get("allow", headers.get("Allow", "")).split(",") if m.strip()}
        allowed.discard("OPTIONS")
        if "GET" in allowed:
            allowed.add("HEAD")
        headers = {k: v for k, v in headers.items() if k.lower() != "allow"}
        headers["Allow"] = ", ".join(sorted(allowed))
    detail = exc.detail
    if exc.status_code == 404:
        detail = "No such resource"
    elif exc.status_code == 405:
        detail = f"Method not allowed; use {headers['Allow']}"
    return Problem(exc.status_code, detail, headers=headers or None)


def _database_problem(exc: Exception) -> ProblemDetailsException:
    log.error("database error: %s", exc)
    return Problem(503, "The database cannot be read right now; try again shortly", headers={"Retry-After": "5"})


def _busy_problem(exc: Exception) -> ProblemDetailsException:
    """More requests than the database connections (or turns to compute statistics) serve waited as long as
    `--queue-length` and `--queue-wait` allow; nothing is wrong with the database."""
    log.warning("request refused: %s", exc)
    retry_after = exc.retry_after if isinstance(exc, DatabaseBusy) else 5
    return Problem(503, f"The server is busy: {exc}; try again in {retry_after} s",
                   headers={"Retry-After": str(retry_after)})


def _write_problem(exc: Exception) -> ProblemDetailsException:
    log.error("write failed: %s", exc)
    return Problem(
        503, "The builds could not be written right now; nothing was half-written, send them again shortly",
        headers={"Retry-After": "5"},
    )


def _internal_problem(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    log.exception("unhandled error")
    problem = Problem(500, f"Internal error; quote request id {request_id.get()} when reporting it")
    return problem.to_response(request)


@get(
    "/healthz",
    operation_id="health",
    summary="Health: 200 when the database answers",
    tags=["service"],
    responses={503: ResponseSpec(Health, description="The database does not answer.", generate_examples=False)},
)
async def healthz(request: Request[Any, Any, Any]) -> Response[Health]:
    return Answer(*await answers.health(request.app.state.reader))


@get("/", include_in_schema=False)
async def front_door(request: Request[Any, Any, Any]) -> Response[bytes]:
    """A person who opens the bare address is sent to the API docs."""
    docs = request.app.state.settings.path_prefix + "/docs"
    return Response(content=b"", status_code=302, headers={"Location": docs}, media_type="text/plain")


@get("/favicon.ico", include_in_schema=False)
async def favicon() -> Response[bytes]:
    """Browsers ask for it on every page, the raw log included; there is none."""
    return Response(content=b"", status_code=204, headers={"Cache-Control": "public, max-age=86400"})


def _openapi() -> OpenAPIConfig:
    from buildreport.http.docs import DocsPagePlugin, ExactJsonPlugin, docs_router

    return OpenAPIConfig(
        title="buildreport",
        version=__version__,
        description="Reports on remote Nix builds: builds, summaries, signed links and usage; "
        "builds sent by build runners.",
        path="/docs",
        # Served from here, nothing from elsewhere: a page rendered on the server and the exact JSON document.
        render_plugins=[DocsPagePlugin(), ExactJsonPlugin()],
        openapi_router=docs_router(),
        components=Components(
            security_schemes={
                "bearer": SecurityScheme(type="http", scheme="bearer", description="A `brt_…` API token")
            }
        ),
        use_handler_docstrings=False,
    )


def _link_limits(settings: Settings) -> LinkLimits:
    return LinkLimits(settings.link_rate_limit, settings.log_streams, settings.log_streams_per_client)


def api_router() -> Router:
    """The JSON API's routes, behind the token check; each needs build:read unless it says otherwise."""
    return Router(
        path="/",
        route_handlers=[
            list_builds, summarize_builds, get_build, get_build_url, get_usage, write_builds, build_stats,
            usage_breakdown, export_builds, get_dashboard_url, *exchange_handlers(), get_badge_url, list_events,
        ],
        middleware=[AuthMiddleware(API_CHECK)],
        opt={"scope": READ_SCOPE},
        tags=["builds"],
        security=[{"bearer": []}],
    )


def create_litestar(settings: Settings) -> Litestar:
    """The application: every request goes through its router, middleware and error handling."""
    # Migrates before any request; the database must exist (`serve` and `demo` create it before workers start),
    # so a worker never creates an empty database in place of one that was deleted.
    open_database(settings.db, create=False).close()
    keys = load_secret_keys(settings)
    signer = LinkSigner(keys)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        app.state.reader = await open_reader(settings.db, settings.read_dbs, settings.queue_length, settings.queue_wait)
        bell, deliverer = Bell(), Deliverer(settings, signer, count_delivery)

        def on_events(count: int) -> None:  # long polls and the deliverer learn of new events at once
            bell.ring(count)
            deliverer.wake(count)

        app.state.event_bell = bell
        app.state.writes = Writes(settings.db, event_rules(settings), on_events=on_events)
        app.state.reader.write_tokens_with(app.state.writes)
        app.state.heavy = answers.heavy_turns(settings.queue_length, settings.queue_wait)
        deliverer.start(app.state.writes)
        try:
            yield
        finally:
            await deliverer.close()
            await app.state.reader.close()  # after the token writes it waits for, which go to the writer
            await app.state.writes.close()

    return Litestar(
        route_handlers=[
            api_router(),
            web_router(),
            badge_router(),
            dashboard_router(),
            metrics_router(),
            healthz,
            favicon,
            front_door,
        ],
        middleware=[RequestMetrics],
        lifespan=[lifespan],
        on_shutdown=[worker_stopped],
        plugins=[
            ProblemDetailsPlugin(
                ProblemDetailsConfig(
                    exception_to_problem_detail_map={
                        HTTPException: _http_problem,
                        **dict.fromkeys(engine_errors(), _database_problem),
                        DatabaseUnavailable: _write_problem,
                        DatabaseBusy: _busy_problem,
                    }
                )
            )
        ],
        exception_handlers={Exception: _internal_problem},
        openapi_config=_openapi(),
        state=State({"settings": settings,
                     API_CHECK: TokenCheck(RateLimiter(settings.rate_limit) if settings.rate_limit > 0 else None),
                     METRICS_CHECK: TokenCheck(None), "signer": signer, "dashboard_signer": DashboardSigner(keys),
                     "link_limits": _link_limits(settings),
                     "oidc": Verifier(settings.oidc_issuers, settings.oidc_audience),
                     "badge_signer": BadgeSigner(keys)}),
        logging_config=None,
        debug=False,
    )


def create_app(settings: Settings) -> Envelope:
    """The application inside its envelope (request ids, the access log, the path prefix)."""
    return Envelope(create_litestar(settings), log_requests=settings.access_log, prefix=settings.path_prefix)


# A worker's garbage collector. What it holds from its start (modules, routes, the app) lives as long as it does,
# so it is frozen out of full collections; and a collection waits for 20,000 new objects instead of 700, as a
# statistics request makes tens of thousands (its rows) and each early collection walks those still in use.
GC_THRESHOLDS = (20_000, 20, 20)


def tune_process() -> None:
    """Set up the garbage collector and the allocator of a serving process, once its application is built."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    keep_freed_memory()


def app_from_env() -> Envelope:
    """The factory uvicorn workers call; settings come from the environment `serve` prepared."""
    from buildreport.config import from_env
    from buildreport.http.envelope import configure_logging
    from buildreport.lifeline import follow_parent_process

    follow_parent_process()  # a worker never outlives the server that started it
    configure_logging()
    app = create_app(from_env())
    tune_process()
    return app
