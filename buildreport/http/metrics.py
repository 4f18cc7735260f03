"""`GET /metrics`: Prometheus text format through prometheus_client, across every uvicorn worker.

Request counts and latencies by route are the metrics of Litestar's Prometheus plugin, labelled with route
templates (so a signed link never becomes a label), counted by RequestMetrics. `buildreport serve` points
PROMETHEUS_MULTIPROC_DIR at a temporary folder before its workers start, so each worker writes its samples there
and a scrape of any worker adds them all up. Per-account figures and the database's size are read from the
database at scrape time.

Open to a token with the `metrics:read` scope, or, with `serve --metrics-loopback`, to loopback clients.
"""

from __future__ import annotations

import ipaddress
import os
import time
from collections.abc import Iterator
from typing import Any

from litestar import Request, Response, Router, get
from litestar.plugins.prometheus import PrometheusConfig, PrometheusMiddleware
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from buildreport.http.auth import AuthMiddleware
from buildreport.store.reader import Reader
from buildreport.store.totals import hour_of
from buildreport.times import US_PER_DAY, now_us
from buildreport.tokens import METRICS_SCOPE

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
PREFIX = "buildreport"
HOUR_US = US_PER_DAY // 24
# The text exposition format every Prometheus version reads (Litestar adds the charset).
CONTENT_TYPE = "text/plain; version=0.0.4"


def prometheus_config() -> PrometheusConfig:
    """Requests by route template, method and status; latency histogram; requests in progress."""
    return PrometheusConfig(app_name=PREFIX, prefix=PREFIX, group_path=True, exclude_unhandled_paths=True)


class RouteMetrics:
    """The request metrics of Litestar's Prometheus middleware (same metric objects, names and labels), with the
    metric of each label set looked up once, where the middleware looks each one up by its label values on every
    request, four times."""

    def __init__(self) -> None:
        self._middleware: PrometheusMiddleware | None = None
        self._answered: dict[tuple[str, str, int], tuple[Any, Any, Any]] = {}
        self._in_progress: dict[tuple[str, str], Any] = {}

    def in_progress(self, method: str, template: str) -> Any:
        """The gauge of one route's requests in progress."""
        gauge = self._in_progress.get((method, template))
        if gauge is None:
            labels = self._labels(method, template, 200)
            gauge = self._factory().requests_in_progress(labels).labels(*labels.values())
            self._in_progress[(method, template)] = gauge
        return gauge

    def answered(self, method: str, template: str, status: int, seconds: float) -> None:
        """Count and time one answered request; one of 500 or above is also counted as an error."""
        children = self._answered.get((method, template, status))
        if children is None:
            children = self._answered[(method, template, status)] = self._made(method, template, status)
        count, duration, errors = children
        count.inc()
        duration.observe(seconds)
        if errors is not None:
            errors.inc()

    def _made(self, method: str, template: str, status: int) -> tuple[Any, Any, Any]:
        """(request count, request time, error count or None) of one route and status."""
        labels = self._labels(method, template, status)
        values = [*labels.values()]
        factory = self._factory()
        errors = factory.requests_error_count(labels).labels(*values) if status >= 500 else None
        return factory.request_count(labels).labels(*values), factory.request_time(labels).labels(*values), errors

    def _factory(self) -> PrometheusMiddleware:
        """The middleware that owns the metric objects; only its metric methods are used."""
        if self._middleware is None:
            self._middleware = PrometheusMiddleware(app=_no_app, config=prometheus_config())
        return self._middleware

    @staticmethod
    def _labels(method: str, template: str, status: int) -> dict[str, str | int | float]:
        return {"method": method, "path": template, "status_code": status, "app_name": PREFIX}


async def _no_app(scope: Scope, receive: Receive, send: Send) -> None:
    """RouteMetrics only reads metrics through the middleware; it never calls it."""


class RequestMetrics:
    """Counts and times every routed request through ROUTE_METRICS (Litestar's Prometheus metrics and labels).

    A plain Litestar middleware (a callable given the next app): it applies to every route, so it needs none of
    the exclusion checks the middleware base classes make on each request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope["method"] if scope["type"] == "http" else scope["type"]
        template = scope["path_template"]
        started = time.perf_counter()
        status, seconds = 200, 0.0

        async def timed_send(message: Message) -> None:
            nonlocal status, seconds
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                seconds = time.perf_counter() - started
            await send(message)

        gauge = ROUTE_METRICS.in_progress(method, template)
        gauge.inc()
        try:
            await self.app(scope, receive, timed_send)
        finally:
            gauge.dec()
            ROUTE_METRICS.answered(method, template, status, seconds)


ROUTE_METRICS = RouteMetrics()


class _Live:
    """Metrics this process counts itself, made on first use: prometheus_client picks its multiprocess storage
    when the first metric is made, after `serve` has named the folder for it."""

    def __init__(self) -> None:
        self._written: Counter | None = None
        self._connections: Gauge | None = None
        self._exchanges: Counter | None = None
        self._deliveries: Counter | None = None

    @property
    def written(self) -> Counter:
        if self._written is None:
            self._written = Counter(
                f"{PREFIX}_builds_written",
                "Build records taken by POST /builds, by what they did: created, updated or unchanged.",
                ["outcome"],
            )
        return self._written

    @property
    def deliveries(self) -> Counter:
        if self._deliveries is None:
            self._deliveries = Counter(
                f"{PREFIX}_hook_deliveries",
                "Attempts to send events to webhooks, by outcome: delivered, retried (to be tried again), failed "
                "(given up after the retry period) or gone (410: the hook was disabled).",
                ["outcome"],
            )
        return self._deliveries

    @property
    def connections(self) -> Gauge:
        if self._connections is None:
            self._connections = Gauge(
                f"{PREFIX}_open_connections", "Open client connections, over every worker.", multiprocess_mode="livesum"
            )
        return self._connections


    @property
    def exchanges(self) -> Counter:
        if self._exchanges is None:
            self._exchanges = Counter(
                f"{PREFIX}_oidc_exchanges",
                "OIDC token exchanges: issued (by a token or a trusted identity) or refused, and why.",
                ["outcome", "reason"],
            )
        return self._exchanges


LIVE = _Live()


def count_exchange(outcome: str, reason: str) -> None:
    LIVE.exchanges.labels(outcome, reason).inc()


def count_written(created: int, updated: int, unchanged: int) -> None:
    for outcome, count in (("created", created), ("updated", updated), ("unchanged", unchanged)):
        LIVE.written.labels(outcome).inc(count)


def count_delivery(outcome: str) -> None:
    LIVE.deliveries.labels(outcome).inc()


def connection_opened() -> None:
    LIVE.connections.inc()


def connection_closed() -> None:
    LIVE.connections.dec()


def _loopback(scope: Scope) -> bool:
    client = scope.get("client")
    if not client:
        return False
    try:
        return ipaddress.ip_address(client[0]).is_loopback
    except ValueError:
        return False


METRICS_CHECK = "metrics_token_check"  # the application state's key of the TokenCheck of /metrics (no rate limit)


class MetricsAuth(AuthMiddleware):
    """The API's token check with the metrics:read scope; skipped for loopback clients when configured."""

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        if scope["litestar_app"].state.settings.metrics_loopback and _loopback(scope):
            await next_app(scope, receive, send)
            return
        await super().handle(scope, receive, send, next_app)


class _Figures(Collector):
    """Gauges read from the database for one scrape."""

    def __init__(self, recent: list[tuple], stored: list[tuple], db_bytes: int) -> None:
        self._recent, self._stored, self._db_bytes = recent, stored, db_bytes

    def collect(self) -> Iterator[GaugeMetricFamily]:
        builds = GaugeMetricFamily(
            f"{PREFIX}_account_builds_last_day",
            "Builds created in the current UTC hour and the 23 before it, by account and status.",
            labels=["account", "status"],
        )
        cpu = GaugeMetricFamily(
            f"{PREFIX}_account_cpu_seconds_last_day",
            "CPU seconds of the builds created in the current UTC hour and the 23 before it, by account and status.",
            labels=["account", "status"],
        )
        for account, status, count, cpu_seconds in self._recent:
            builds.add_metric([account, status], count)
            cpu.add_metric([account, status], cpu_seconds)
        stored = GaugeMetricFamily(
            f"{PREFIX}_builds_stored",
            "Builds in the database by account, whichever way they came (import, recorders, POST /builds).",
            labels=["account"],
        )
        for account, count in self._stored:
            stored.add_metric([account], count)
        size = GaugeMetricFamily(f"{PREFIX}_database_bytes", "Size of the database file and its write-ahead log.")
        size.add_metric([], self._db_bytes)
        yield from (builds, cpu, stored, size)


def _process_registry() -> Any:
    """Every worker's samples in multiprocess mode, else this process's own."""
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY


@get("/metrics", operation_id="metrics", summary="Prometheus metrics", include_in_schema=False)
async def metrics(request: Request[Any, Any, Any]) -> Response[bytes]:
    reader: Reader = request.app.state.reader
    recent, stored = await reader.account_figures(hour_of(now_us()) - 23 * HOUR_US)
    figures = CollectorRegistry()
    figures.register(_Figures(recent, stored, await reader.size_bytes()))
    body = generate_latest(_process_registry()) + generate_latest(figures)
    return Response(content=body, media_type=CONTENT_TYPE, headers={"Cache-Control": "no-store"})


def metrics_router() -> Router:
    return Router(
        path="/",
        route_handlers=[metrics],
        middleware=[MetricsAuth(METRICS_CHECK)],
        opt={"scope": METRICS_SCOPE},
        include_in_schema=False,
    )


def worker_stopped() -> None:
    """Drop this worker's live gauges (requests in progress) from the shared folder as it exits."""
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.mark_process_dead(os.getpid())
