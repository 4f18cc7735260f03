"""Every option of `buildreport serve` (and `demo`), defined once: each takes its default from `Settings`
(config.py), so the command line, the environment variables and the settings of a worker process agree."""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

import click

from buildreport.claims import issuer_problem, parse_claim_tag
from buildreport.cli.ops import older_than
from buildreport.config import Settings
from buildreport.faults import printable
from buildreport.store import is_postgres

DEFAULTS = Settings()
MAX_RATE_LIMIT = 10**9

SPAN = re.compile(r"([0-9]{1,9}(?:\.[0-9]{1,6})?)([smhd]?)")
UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


class Span(click.ParamType):
    """A duration: seconds, fractions allowed, with an optional unit: 0.5, 90s, 15m, 24h, 30d."""

    name = "duration"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, int | float):
            return float(value)
        match = SPAN.fullmatch(str(value).strip())
        if not match or float(match[1]) <= 0:
            self.fail(f"{printable(str(value))!r} is not a duration such as 0.5, 90s, 15m, 24h or 30d", param, ctx)
        return float(match[1]) * UNIT_SECONDS[match[2]]


def event_options() -> list:  # type: ignore[type-arg]
    """`serve`'s options for events and webhooks (README "Events and webhooks")."""

    def option(name: str, default: object, kind: click.ParamType, text: str):  # type: ignore[no-untyped-def]
        env = "BUILDREPORT_" + name.upper().replace("-", "_")
        return click.option(f"--{name}", default=default, show_default=True, type=kind, envvar=env, help=text)

    d = DEFAULTS
    # Defaults as a person writes them; each equals the Settings default (tests/test_cli_serve_options.py).
    return [
        option("event-link-ttl", "7d", Span(), "Lifetime of the signed build links in events."),
        option("event-retention", "30d", Span(), "How long events are kept."),
        option("hook-retry-base", "1s", Span(), "First wait before a failed delivery is tried again; "
               "it doubles each time."),
        option("hook-retry-for", "24h", Span(), "How long a delivery is tried before it is marked failed."),
        option("hook-timeout", "10s", Span(), "How long a receiver has to answer a delivery."),
        option("regression-percent", d.regression_percent, click.FloatRange(0, 10_000),
               "build.regressed: the recent median duration exceeds the baseline's by this percentage…"),
        option("regression-seconds", d.regression_seconds, click.FloatRange(0), "… and by this many seconds…"),
        option("regression-baseline", d.regression_baseline, click.IntRange(1, 20),
               "… with at least this many successful builds in the baseline (of the 20 before the last 3)."),
    ]


def _issuers(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    for value in values:
        if (problem := issuer_problem(value)) is not None:
            raise click.BadParameter(f"{printable(value)!r}: {problem}")
    return tuple(values)


def _claim_tags(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    for value in values:
        try:
            parse_claim_tag(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    return tuple(values)


def oidc_options() -> list:  # type: ignore[type-arg]
    """`serve` options of the OIDC token exchange (README, "CI jobs without stored secrets")."""
    return [
        click.option("--oidc-issuer", "oidc_issuers", multiple=True, callback=_issuers,
                     envvar="BUILDREPORT_OIDC_ISSUER",
                     help="An OIDC issuer whose ID tokens /auth/oidc-token-exchange takes (https); repeat for "
                     "several. Env: BUILDREPORT_OIDC_ISSUER, space-separated."),
        click.option("--oidc-audience", default=DEFAULTS.oidc_audience, show_default=True,
                     envvar="BUILDREPORT_OIDC_AUDIENCE", help="The audience (aud) an ID token must name."),
        click.option("--oidc-claim-tag", "oidc_claim_tags", multiple=True, callback=_claim_tags,
                     envvar="BUILDREPORT_OIDC_CLAIM_TAG",
                     help="ISSUER:CLAIM=TAG (or *:CLAIM=TAG): builds written with an exchanged token carry the "
                     "claim as that tag; repeat. An issuer without any takes GitHub Actions' claims."),
    ]  # fmt: skip


def _check_host(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not value or len(value) > 253 or not re.fullmatch(r"[A-Za-z0-9.:_%-]+", value):
        raise click.BadParameter(f"{printable(value)!r} is not a host name or IP address")
    return value


def _check_public_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    if len(value) > 2000 or not re.fullmatch(r"https?://[\x21-\x7e]+", value):
        raise click.BadParameter(f"{printable(value)!r} is not an http(s) address of at most 2000 characters")
    parts = urlsplit(value)
    if not parts.netloc or parts.query or parts.fragment:
        raise click.BadParameter(f"{value!r} is not an http(s) address such as https://builds.example.com/api/v1")
    return value


def _check_read_dbs(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    for value in values:
        if not is_postgres(value):
            raise click.BadParameter(f"{printable(value)!r} is not a postgresql:// URL")
    return tuple(values)


def serve_options(func):  # type: ignore[no-untyped-def]
    """Put every server option on a command (`serve`, `demo`), in the order `--help` lists them."""
    options = [
        click.option(
            "--host",
            default=DEFAULTS.host,
            show_default=True,
            envvar="BUILDREPORT_HOST",
            show_envvar=True,
            callback=_check_host,
            help="Address to listen on; 0.0.0.0 (or ::) for every interface.",
        ),
        click.option(
            "--port",
            default=DEFAULTS.port,
            show_default=True,
            type=click.IntRange(0, 65535),
            envvar="BUILDREPORT_PORT",
            show_envvar=True,
            help="TCP port to listen on.",
        ),
        click.option(
            "--public-url",
            envvar="BUILDREPORT_PUBLIC_URL",
            callback=_check_public_url,
            show_envvar=True,
            help="Address users reach the service at (behind a proxy too); signed links and Link headers start "
            "with it, and a path in it (https://host/api/v1) is where every route is served.",
        ),
        click.option(
            "--tls-cert",
            envvar="BUILDREPORT_TLS_CERT",
            show_envvar=True,
            type=click.Path(dir_okay=False),
            help="Serve https with this PEM certificate (chain). Needs --tls-key.",
        ),
        click.option(
            "--tls-key",
            envvar="BUILDREPORT_TLS_KEY",
            show_envvar=True,
            type=click.Path(dir_okay=False),
            help="The PEM private key of --tls-cert.",
        ),
        click.option(
            "--secret-key",
            "secret_keys",
            multiple=True,
            help="Key that signs build links; repeat to rotate (the last signs, all verify). "
            "Env: BUILDREPORT_SECRET_KEY, comma-separated. Default: generated once, kept in DB.secret.",
        ),
        click.option("--secret-key-file", type=click.Path(dir_okay=False),
                     help="Read the signing keys from this file instead, one a line (the last signs)."),
        click.option(
            "--rate-limit",
            default=DEFAULTS.rate_limit,
            show_default=True,
            type=click.IntRange(0, MAX_RATE_LIMIT),
            envvar="BUILDREPORT_RATE_LIMIT",
            show_envvar=True,
            help="Requests a minute per token and worker process; 0 turns limiting off.",
        ),
        click.option(
            "--workers",
            default=lambda: min(os.cpu_count() or 1, 4),
            show_default="CPU count, at most 4",
            type=click.IntRange(1, 64),
            envvar="BUILDREPORT_WORKERS",
            show_envvar=True,
        ),
        click.option("--access-log/--no-access-log", default=DEFAULTS.access_log, show_default=True),
        click.option(
            "--max-body-bytes",
            default=DEFAULTS.max_body_bytes,
            show_default=True,
            type=click.IntRange(1024, 1024**3),
            envvar="BUILDREPORT_MAX_BODY_BYTES",
            show_envvar=True,
            help="Largest POST /builds body, also once gzip is inflated; larger ones get 413.",
        ),
        click.option(
            "--max-records",
            default=DEFAULTS.max_records,
            show_default=True,
            type=click.IntRange(1, 100_000),
            envvar="BUILDREPORT_MAX_RECORDS",
            show_envvar=True,
            help="Most build records in one POST /builds; more get 400.",
        ),
        click.option(
            "--read-db",
            "read_dbs",
            multiple=True,
            envvar="BUILDREPORT_READ_DB",
            callback=_check_read_dbs,
            help="A PostgreSQL replica to send read-only queries to; repeat for several. Writes and token checks "
            "go to --db. Env: BUILDREPORT_READ_DB, space-separated.",
        ),
        click.option(
            "--metrics-loopback/--no-metrics-loopback",
            default=DEFAULTS.metrics_loopback,
            show_default=True,
            envvar="BUILDREPORT_METRICS_LOOPBACK",
            show_envvar=True,
            help="Serve /metrics to loopback clients without a token (otherwise a metrics:read token).",
        ),
        *_limit_options(),
        click.option("--retention", "retention_us", callback=older_than, envvar="BUILDREPORT_RETENTION",
                     show_envvar=True, help="Once a day, prune builds created longer ago than this (365d), as "
                     "`buildreport prune` does; off by default."),
        click.option("--retention-logs-only", is_flag=True, envvar="BUILDREPORT_RETENTION_LOGS_ONLY",
                     help="Retention removes only the logs of those builds."),
        click.option("--keep-usage/--drop-usage", default=DEFAULTS.keep_usage, show_default=True,
                     envvar="BUILDREPORT_KEEP_USAGE",
                     help="Retention keeps the billable usage of the builds it removes."),
        *oidc_options(),
        *event_options(),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _limit_options() -> list:  # type: ignore[type-arg]
    """Bounds on what one client can hold of a worker process; README "Security and limits" explains each."""

    def limit(name: str, kind: click.ParamType, text: str):  # type: ignore[no-untyped-def]
        env = "BUILDREPORT_" + name.upper().replace("-", "_")
        default = getattr(DEFAULTS, name.replace("-", "_"))
        return click.option(f"--{name}", default=default, show_default=True, type=kind, envvar=env, help=text)

    return [
        limit("max-header-bytes", click.IntRange(1024, 1024 * 1024),
              "Largest request line plus headers; larger requests get 431."),
        limit("header-timeout", click.FloatRange(0.1, 3600),
              "Seconds a client has to send its request line and headers before it is dropped."),
        limit("keep-alive-timeout", click.FloatRange(0.1, 3600),
              "Seconds an idle connection stays open between requests."),
        limit("max-connections", click.IntRange(1, 1_000_000),
              "Open connections per worker process; requests beyond them get 503."),
        limit("link-rate-limit", click.IntRange(0),
              "Requests a minute per client address to signed pages and logs (/b/…); 0 turns it off."),
        limit("log-streams", click.IntRange(1, 10_000),
              "Raw logs streamed at once per worker process; more get 429."),
        limit("log-streams-per-client", click.IntRange(1, 10_000),
              "Raw logs streamed at once to one client address per worker process."),
        limit("queue-length", click.IntRange(0, 1_000_000),
              "Requests waiting for a PostgreSQL connection (per database) or a turn to compute statistics, per "
              "worker process; one more gets 503, busy."),
        click.option("--queue-wait", default="30s", show_default=True, type=Span(), envvar="BUILDREPORT_QUEUE_WAIT",
                     help="How long a request waits in that queue before it gets 503, busy."),
    ]
