"""The account's dashboard: a signed page, opened without a token, drawn entirely on the server.

`GET /dashboard/url` (a build:read token) answers a signed link to `/d/{token}`; the token carries the
account and the expiry, signed like build links but with a salt of its own. The page reads the window's
builds once (the rows of /builds/stats) and computes every figure from them with stats.py, so the page
and the API can never disagree. Charts are SVG (charts.py); no JavaScript, the build page's CSP.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlencode

import msgspec
from litestar import Request, Response, Router, get
from litestar.params import PathParameter, QueryParameter

from buildreport import filters
from buildreport.errors import Problem
from buildreport.events.models import EventType, StoredEvent
from buildreport.filters import DASHBOARD_WINDOWS, BuildFilter, DashboardQuery, GroupBy, ListQuery, StatsQuery
from buildreport.http import humanize
from buildreport.http.answers import query_pairs
from buildreport.http.auth import link_token_ended, principal
from buildreport.http.pages import PAGE_HEADERS, prefix_of, render, status_view
from buildreport.http.parameters import integer
from buildreport.http.responses import errors, json_response, success
from buildreport.insights import charts
from buildreport.insights.stats import (
    Decoded,
    Newest,
    build_stats,
    decode_rows,
    derivation_name,
    newest_build,
    value_groups,
)
from buildreport.models import FAILED, UNFINISHED, Build, BuildStatsGroup, BuildStatus, DashboardURL, Usage
from buildreport.signing import DashboardClaims, DashboardSigner, LinkClaims, LinkSigner
from buildreport.store.reader import Reader
from buildreport.times import US_PER_DAY, US_PER_SECOND, from_us, month_start_us, now_us

WINDOW_LABELS = {"24h": "24 hours", "7d": "7 days", "30d": "30 days", "90d": "90 days"}
TOP = 10  # rows in each derivation table
RUNNING_LOOKBACK_US = 7 * US_PER_DAY
_BUILDS = msgspec.json.Decoder(list[Build])
_BUILD = msgspec.json.Decoder(Build)
_EVENT = msgspec.json.Decoder(StoredEvent)
# The events the page lists beside the figures, and how it names them.
EVENT_WORDS = {EventType.failed: "broke", EventType.recovered: "recovered", EventType.regressed: "got slower"}
NOTABLE_EVENTS = [kind.value for kind in EVENT_WORDS]


# --- the link ------------------------------------------------------------------------------------


@get(
    "/dashboard/url",
    operation_id="getDashboardUrl",
    summary="A signed, time-limited web link to the account's dashboard page",
    description="The page opens in a browser without a token: builds per day by outcome, success rate, duration "
    "percentiles, CPU hours, this month's usage against last month's, the slowest, most failing and flaky "
    "derivations and the builds running now.",
    responses={200: success(DashboardURL, "The link."), **errors(400, 401, 403, 429)},
)
async def get_dashboard_url(
    request: Request[Any, Any, Any],
    ttl_seconds: Annotated[
        str | None,
        QueryParameter(
            description="Lifetime, 1 to 604800 seconds; default 3600.", schema_extra=integer(1, 604_800, 3_600)
        ),
    ] = None,
) -> Response[bytes]:
    ttl = filters.parse_ttl(query_pairs(request))
    # Whole seconds, rounded up, as for build links: `expires_at` is exactly what the page enforces.
    expires_us = -(-(now_us() + ttl * US_PER_SECOND) // US_PER_SECOND) * US_PER_SECOND
    signer: DashboardSigner = request.app.state.dashboard_signer
    url = signer.link_url(
        request.app.state.settings.base_url,
        DashboardClaims(principal(request).account_id, expires_us, principal(request).token_id),
    )
    return json_response(request, msgspec.json.encode(DashboardURL(url=url, expires_at=from_us(expires_us))))


# --- what the page shows ----------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildLink:
    build_id: int
    url: str
    name: str
    status: Any  # web.StatusView
    create_us: int


@dataclass(frozen=True)
class DerivationLine:
    group: BuildStatsGroup
    latest: BuildLink


@dataclass(frozen=True)
class Totals:
    builds: int
    successful: int
    failed: int
    discarded: int
    running: int
    success_rate: float | None
    cpu_hours: float


class _Links:
    """Signed build links that live exactly as long as the dashboard link that shows them."""

    def __init__(self, request: Request[Any, Any, Any], claims: DashboardClaims) -> None:
        self._signer: LinkSigner = request.app.state.signer
        self._base = request.app.state.settings.base_url
        self._claims = claims

    def to(self, build_id: int, derivation_path: str, status: str, create_us: int) -> BuildLink:
        claims = LinkClaims(self._claims.account_id, build_id, self._claims.expires_us, self._claims.token_id)
        url = self._signer.link_url(self._base, claims)
        return BuildLink(build_id, url, derivation_name(derivation_path), status_view(BuildStatus(status)), create_us)

    def newest(self, newest: Newest) -> BuildLink:
        """A link to a group's newest build."""
        return self.to(newest.build_id, newest.derivation_path, newest.status, newest.create_us)


@dataclass(frozen=True)
class EventLine:
    """A recent event of the account: a series that broke, recovered or got slower."""

    word: str
    event: StoredEvent
    link: BuildLink


def _event_line(row: tuple, links: _Links) -> EventLine:
    event = _EVENT.decode(bytes(row[2]))
    build = _BUILD.decode(event.build)
    return EventLine(EVENT_WORDS[event.type], event,
                     links.to(build.build_id, build.derivation_path, build.build_status.value, 0))


def _totals(groups: Sequence[BuildStatsGroup]) -> Totals:
    successful = sum(g.successful_build_count for g in groups)
    failed = sum(g.failed_build_count for g in groups)
    return Totals(
        builds=sum(g.build_count for g in groups),
        successful=successful,
        failed=failed,
        discarded=sum(g.discarded_build_count for g in groups),
        running=sum(g.running_build_count for g in groups),
        success_rate=successful / (successful + failed) if successful + failed else None,
        cpu_hours=sum(g.total_cpu_seconds for g in groups) / 3600,
    )


def _hours(value: float) -> str:
    return f"{value:,.1f} h" if value < 100 else f"{value:,.0f} h"


def _seconds(value: float) -> str:
    return humanize.duration(value)


def _charts(periods: Sequence[BuildStatsGroup], kind: str) -> dict[str, Any]:
    labels = [g.key[5:] if kind == "day" else g.key[11:16] for g in periods]
    unit = "day" if kind == "day" else "hour"
    return {
        "outcomes": charts.stacked_bars(
            f"Builds per {unit} by outcome",
            labels,
            [
                charts.Series("successful", "s-ok", [g.successful_build_count for g in periods]),
                charts.Series("failed", "s-failed", [g.failed_build_count for g in periods]),
                charts.Series("discarded", "s-discarded", [g.discarded_build_count for g in periods]),
                charts.Series("running", "s-running", [g.running_build_count for g in periods]),
            ],
            lambda v: f"{v:,.0f}",
            charts.Scale.INTEGER,
        ),
        "success": charts.lines(
            f"Success rate per {unit}",
            labels,
            [charts.Series("success rate", "s-ok", [g.success_rate for g in periods])],
            humanize.percent,
        ),
        "duration": charts.lines(
            f"Build duration per {unit}, p50 and p95",
            labels,
            [
                charts.Series(
                    "p50", "s-p50", [g.duration_seconds.p50 if g.duration_seconds else None for g in periods]
                ),
                charts.Series(
                    "p95", "s-p95", [g.duration_seconds.p95 if g.duration_seconds else None for g in periods]
                ),
            ],
            _seconds,
            charts.Scale.DURATION,
        ),
        "cpu": charts.stacked_bars(
            f"CPU hours per {unit}",
            labels,
            [charts.Series("CPU hours", "s-cpu", [g.total_cpu_seconds / 3600 for g in periods])],
            _hours,
        ),
    }


def _usage_chart(this_month: Usage, last_month: Usage) -> Any:
    rows = [
        ("Last month", last_month.billable_cpu_seconds / 3600, _hours(last_month.billable_cpu_seconds / 3600)),
        ("This month", this_month.billable_cpu_seconds / 3600, _hours(this_month.billable_cpu_seconds / 3600)),
    ]
    return charts.compare("Billable CPU hours, this month against last month", rows, ["s-last", "s-cpu"])


def _page_url(prefix: str, token: str, window: str, tags: Sequence[tuple[str, str]]) -> str:
    """A link to the page: each tag a `tag.KEY=VALUE` of its own, so that a comma or colon in a key or value
    stays part of it and the link selects exactly its tags."""
    query = [("window", window), *((filters.DASHBOARD_TAG + key, value) for key, value in dict.fromkeys(tags))]
    return f"{prefix}/d/{token}?{urlencode(query)}"


# --- the page ---------------------------------------------------------------------------------------


class DashboardPage(Exception):
    """An answer other than the dashboard: an error page with its status code."""

    def __init__(self, status: int, title: str, kind: str, expired: Any = None, reason: str = "") -> None:
        super().__init__(title)
        self.status, self.title, self.kind, self.expired, self.reason = status, title, kind, expired, reason


def _page_error(request: Request[Any, Any, Any], exc: DashboardPage) -> Response[bytes]:
    return render(
        request,
        "error.html",
        exc.status,
        icon="link",
        title=exc.title,
        kind=exc.kind,
        expired=exc.expired,
        reason=exc.reason,
        status_code=exc.status,
    )


def _parse_page(request: Request[Any, Any, Any]) -> DashboardQuery:
    try:
        return filters.parse_dashboard_query(query_pairs(request))
    except filters.InvalidParams as exc:
        raise Problem(
            400,
            str(exc.detail),
            headers=PAGE_HEADERS,
            invalid_params=[{"name": p.name, "reason": p.reason} for p in exc.params],
        ) from None


@get("/{token:str}", include_in_schema=False)
async def dashboard_page(
    request: Request[Any, Any, Any], token: Annotated[str, PathParameter(description="A signed dashboard link.")]
) -> Response[bytes]:
    signer: DashboardSigner = request.app.state.dashboard_signer
    claims = signer.verify(token)
    if claims is None:
        raise DashboardPage(403, "This link is not valid", "invalid")
    now = now_us()
    if claims.expires_us <= now:
        raise DashboardPage(410, "This link has expired", "dashboard-expired", from_us(claims.expires_us))
    reader: Reader = request.app.state.reader
    ended = await link_token_ended(reader, claims.token_id, now)
    if ended is not None:
        raise DashboardPage(410, "This link was revoked", "revoked", reason=ended)
    query = _parse_page(request)
    account = claims.account_id
    kind = "hour" if query.window == "24h" else "day"
    # The window ends now: a build dated far ahead never stretches its periods.
    window = BuildFilter(create_from_us=now - DASHBOARD_WINDOWS[query.window], create_to_us=now, tags=query.tags)
    # The reads run at once: each one's figures are computed while the next ones wait on the database.
    async with request.app.state.heavy:
        (periods, (tables, newest, newest_failed), (this_month, last_month), running, failures,
         events) = await asyncio.gather(
            _periods(reader, account, window, kind, now),
            _derivations(reader, account, window),
            _months(reader, account, now),
            _builds(reader, account, BuildFilter(create_from_us=now - RUNNING_LOOKBACK_US,
                                                 statuses=tuple(UNFINISHED), tags=query.tags), 20),
            _builds(reader, account, msgspec.structs.replace(window, statuses=tuple(sorted(FAILED))), TOP),
            reader.recent_events(account, NOTABLE_EVENTS, TOP),
        )
    links = _Links(request, claims)
    prefix = prefix_of(request)
    return render(
        request,
        "dashboard.html",
        icon="ok",
        window=query.window,
        window_label=WINDOW_LABELS[query.window],
        windows=[(w, WINDOW_LABELS[w], _page_url(prefix, token, w, query.tags)) for w in DASHBOARD_WINDOWS],
        tags=query.tags,
        clear_tags_url=_page_url(prefix, token, query.window, ()),
        tag_url=lambda key, value: _page_url(prefix, token, query.window, [*query.tags, (key, value)]),
        totals=_totals(periods),
        charts=_charts(periods, kind),
        usage_chart=_usage_chart(this_month, last_month),
        this_month=this_month,
        last_month=last_month,
        slowest=tables.lines(tables.slowest, newest, links),
        failing=tables.lines(tables.failing, newest_failed, links),
        flaky=tables.lines(tables.flaky, newest_failed, links),
        failures=[links.to(b.build_id, b.derivation_path, b.build_status.value, 0) for b in failures],
        running=[(b, links.to(b.build_id, b.derivation_path, b.build_status.value, 0)) for b in running],
        events=[_event_line(row, links) for row in events],
        expires=from_us(claims.expires_us),
        hours=_hours,
        seconds=_seconds,
    )


async def _periods(reader: Reader, account: int, window: BuildFilter, kind: str, now: int) -> list[BuildStatsGroup]:
    # The page shows no queue times: their arrays stay empty.
    rows = await reader.stats_rows(account, window, GroupBy(kind), queue_times=False)
    return build_stats(rows, StatsQuery(window, GroupBy(kind), end_us=now))


async def _derivations(
    reader: Reader, account: int, window: BuildFilter
) -> tuple[DerivationTables, dict[str, str], dict[str, str]]:
    """The derivation tables with the newest build of each shown path, and its newest failed build."""
    rows = await reader.stats_rows(account, window, GroupBy("derivation_path"), queue_times=False)
    tables = derivation_tables(decode_rows(rows))
    newest, newest_failed = await reader.newest_of_paths(
        account, window, tables.paths(tables.slowest), tables.paths(tables.failing, tables.flaky)
    )
    return tables, newest, newest_failed


async def _months(reader: Reader, account: int, now: int) -> tuple[Usage, Usage]:
    """This month's usage so far and last month's."""
    month = month_start_us(now)
    this_month = await reader.usage(account, filters.UsageQuery(from_us=month))
    return this_month, await reader.usage(account, filters.UsageQuery(from_us=month_start_us(month - 1), to_us=month))


async def _builds(reader: Reader, account: int, build_filter: BuildFilter, limit: int) -> list[Build]:
    return _BUILDS.decode((await reader.list_builds(account, ListQuery(filter=build_filter, limit=limit))).body)


# A row of a derivation table: the group's figures and the derivation paths it gathers.
Ranked = tuple[BuildStatsGroup, tuple[str, ...]]


@dataclass(frozen=True)
class DerivationTables:
    """The TOP slowest derivations (duration p95), the most failing ones and the flakiest paths (both failed
    and succeeded), ties by key."""

    slowest: list[Ranked]
    failing: list[Ranked]
    flaky: list[Ranked]

    @staticmethod
    def paths(*tables: list[Ranked]) -> list[str]:
        """The derivation paths the tables show: only these need their newest builds read."""
        return sorted({path for table in tables for _, paths in table for path in paths})

    @staticmethod
    def lines(table: list[Ranked], newest: dict[str, str], links: _Links) -> list[DerivationLine]:
        """The table's rows, each linked to the newest of its paths' builds in `newest` (path: mark)."""
        lines = []
        for group, paths in table:
            build = newest_build((path, newest.get(path)) for path in paths)
            if build is not None:
                lines.append(DerivationLine(group, links.newest(build)))
        return lines


def derivation_tables(rows: Sequence[Decoded]) -> DerivationTables:
    """The derivation tables of the rows of derivation paths. Of the thousands of groups only the rank is
    computed; the shown ones are finished."""
    names = value_groups(rows, "derivation")
    paths_of: dict[str, list[str]] = {}
    for path, _ in rows:
        paths_of.setdefault(derivation_name(path), []).append(path)
    slowest = heapq.nsmallest(
        TOP, ((-p95, key, group) for key, group in names.items() if (p95 := group.p95_duration()) is not None)
    )
    failing = heapq.nsmallest(TOP, ((-g.counts[1], key, g) for key, g in names.items() if g.counts[1]))
    # Flaky paths are ranked on their counts alone; only the shown ones become groups.
    counts: dict[str, list[int]] = {}
    for path, ((ok, failed, _, _), *_figures) in rows:
        both = counts.get(path) or counts.setdefault(path, [0, 0])
        both[0] += failed
        both[1] += ok
    shown = {path for _, path in heapq.nsmallest(TOP, ((-f, p) for p, (f, ok) in counts.items() if f and ok))}
    paths = value_groups([row for row in rows if row[0] in shown], "derivation_path")
    flaky = sorted((-g.counts[1], key, g) for key, g in paths.items())
    return DerivationTables(
        slowest=[(group.result(key), tuple(paths_of[key])) for _, key, group in slowest],
        failing=[(group.result(key), tuple(paths_of[key])) for _, key, group in failing],
        # The flaky table shows counts only: no percentiles per path.
        flaky=[(group.result(key, with_percentiles=False), (key,)) for _, key, group in flaky],
    )


def dashboard_router() -> Router:
    return Router(
        path="/d",
        route_handlers=[dashboard_page],
        exception_handlers={DashboardPage: _page_error},
        include_in_schema=False,
    )
