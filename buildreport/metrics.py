"""`GET /metrics`: Prometheus text format through prometheus_client, across every uvicorn worker.

Request counts and latencies by route come from Litestar's Prometheus middleware (route templates, so a
signed link never becomes a label). `buildreport serve` points PROMETHEUS_MULTIPROC_DIR at a temporary
folder before its workers start, so each worker writes its samples there and a scrape of any worker
adds them all up. Per-account figures and the database's size are read from the database at scrape time.

Open to a token with the `metrics:read` scope, or, with `serve --metrics-loopback`, to loopback clients.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterator
from typing import Any

from litestar import Request, Response, Router, get
from litestar.plugins.prometheus import PrometheusConfig, PrometheusMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from buildreport.auth import AuthMiddleware
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
    """The request metrics of Litestar's Prometheus middleware, for requests answered before routing: the same
    metric objects and labels, so a scrape counts them as the route's own.

    Such a request is counted and timed but not shown in progress: on SQLite it is answered without yielding
    to the event loop (unless the client stops reading), so no scrape of its process could see it in progress,
    and leaving the gauge out saves its two updates, about 2 µs of an answer's 20 (see lookup.py)."""

    def __init__(self) -> None:
        self._middleware: PrometheusMiddleware | None = None
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def answered(self, method: str, template: str, status: int, seconds: float) -> None:
        children = self._children.get((method, template, status))
        if children is None:
            children = self._children[(method, template, status)] = self._made(method, template, status)
        count, duration = children
        count.inc()
        duration.observe(seconds)

    def _made(self, method: str, template: str, status: int) -> tuple[Any, Any]:
        """(request count, request time) of one route and status, through the middleware that owns them."""
        if self._middleware is None:
            self._middleware = PrometheusMiddleware(app=_no_app, config=prometheus_config())
        labels: dict[str, str | int | float] = {
            "method": method, "path": template, "status_code": status, "app_name": PREFIX
        }
        values = [*labels.values()]
        return (
            self._middleware.request_count(labels).labels(*values),
            self._middleware.request_time(labels).labels(*values),
        )


async def _no_app(scope: Scope, receive: Receive, send: Send) -> None:
    """RouteMetrics only reads metrics through the middleware; it never calls it."""


ROUTE_METRICS = RouteMetrics()


class _Live:
    """Metrics this process counts itself, made on first use: prometheus_client picks its multiprocess storage
    when the first metric is made, after `serve` has named the folder for it."""

    def __init__(self) -> None:
        self._written: Counter | None = None
        self._connections: Gauge | None = None

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
    def connections(self) -> Gauge:
        if self._connections is None:
            self._connections = Gauge(
                f"{PREFIX}_open_connections", "Open client connections, over every worker.", multiprocess_mode="livesum"
            )
        return self._connections


LIVE = _Live()


def count_written(created: int, updated: int, unchanged: int) -> None:
    for outcome, count in (("created", created), ("updated", updated), ("unchanged", unchanged)):
        LIVE.written.labels(outcome).inc(count)


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
        middleware=[MetricsAuth("reader", None)],
        opt={"scope": METRICS_SCOPE},
        include_in_schema=False,
    )


def worker_stopped() -> None:
    """Drop this worker's live gauges (requests in progress) from the shared folder as it exits."""
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.mark_process_dead(os.getpid())
