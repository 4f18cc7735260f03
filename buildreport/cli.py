"""The command line: serve, demo, import, token, sample, export."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import ssl
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import click
import msgspec
from click.core import ParameterSource

from buildreport import __version__, config
from buildreport.cli_hooks import event_options, hook_group
from buildreport.cli_ops import older_than
from buildreport.cli_secrets import given_or_from_file, secret_lines
from buildreport.cli_shared import (
    ACCOUNT_NAME,
    CommandGroup,
    check_label,
    db_option,
    destination_options,
    duration_seconds,
    echo_table,
    err,
    open_db,
    open_tokens,
    opened_dbs,
    when,
)
from buildreport.cli_trust import oidc_options, token_claims, trust
from buildreport.config import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_RECORDS, DEFAULT_RATE_LIMIT, Settings
from buildreport.faults import printable
from buildreport.store import (
    DatabaseError,
    describe,
    is_postgres,
)
from buildreport.store import exists as database_exists
from buildreport.store import remove as remove_database
from buildreport.times import US_PER_SECOND, format_us, now_us

MAX_RATE_LIMIT = 10**9
MAX_SAMPLE_BUILDS = 100_000_000
MAX_SAMPLE_DAYS = 36_500








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


@click.group(cls=CommandGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="buildreport")
def main() -> None:
    """buildreport: reports on remote Nix builds over a JSON API."""


# --- serve ---------------------------------------------------------------------------------


def _check_read_dbs(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    for value in values:
        if not is_postgres(value):
            raise click.BadParameter(f"{printable(value)!r} is not a postgresql:// URL")
    return tuple(values)


def _serve_options(func):  # type: ignore[no-untyped-def]
    options = [
        click.option(
            "--host",
            default="127.0.0.1",
            show_default=True,
            envvar="BUILDREPORT_HOST",
            show_envvar=True,
            callback=_check_host,
            help="Address to listen on; 0.0.0.0 (or ::) for every interface.",
        ),
        click.option(
            "--port",
            default=8000,
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
            default=DEFAULT_RATE_LIMIT,
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
        click.option("--access-log/--no-access-log", default=True, show_default=True),
        click.option(
            "--max-body-bytes",
            default=DEFAULT_MAX_BODY_BYTES,
            show_default=True,
            type=click.IntRange(1024, 1024**3),
            envvar="BUILDREPORT_MAX_BODY_BYTES",
            show_envvar=True,
            help="Largest POST /builds body, also once gzip is inflated; larger ones get 413.",
        ),
        click.option(
            "--max-records",
            default=DEFAULT_MAX_RECORDS,
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
            default=False,
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
        click.option("--keep-usage/--drop-usage", default=True, show_default=True, envvar="BUILDREPORT_KEEP_USAGE",
                     help="Retention keeps the billable usage of the builds it removes."),
        *oidc_options(),
        *event_options(),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _limit_options() -> list:  # type: ignore[type-arg]
    """Bounds on what one client can hold of a worker process; README "Security and limits" explains each."""

    def limit(name: str, default: float, kind: click.ParamType, text: str):  # type: ignore[no-untyped-def]
        env = "BUILDREPORT_" + name.upper().replace("-", "_")
        return click.option(f"--{name}", default=default, show_default=True, type=kind, envvar=env, help=text)

    return [
        limit("max-header-bytes", config.DEFAULT_MAX_HEADER_BYTES, click.IntRange(1024, 1024 * 1024),
              "Largest request line plus headers; larger requests get 431."),
        limit("header-timeout", config.DEFAULT_HEADER_TIMEOUT, click.FloatRange(0.1, 3600),
              "Seconds a client has to send its request line and headers before it is dropped."),
        limit("keep-alive-timeout", config.DEFAULT_KEEP_ALIVE_TIMEOUT, click.FloatRange(0.1, 3600),
              "Seconds an idle connection stays open between requests."),
        limit("max-connections", config.DEFAULT_MAX_CONNECTIONS, click.IntRange(1, 1_000_000),
              "Open connections per worker process; requests beyond them get 503."),
        limit("link-rate-limit", config.DEFAULT_LINK_RATE_LIMIT, click.IntRange(0),
              "Requests a minute per client address to signed pages and logs (/b/…); 0 turns it off."),
        limit("log-streams", config.DEFAULT_LOG_STREAMS, click.IntRange(1, 10_000),
              "Raw logs streamed at once per worker process; more get 429."),
        limit("log-streams-per-client", config.DEFAULT_LOG_STREAMS_PER_CLIENT, click.IntRange(1, 10_000),
              "Raw logs streamed at once to one client address per worker process."),
    ]


class KeyRefused(click.ClickException):
    """A signing key too weak to sign links: a usage error, exit status 2."""

    exit_code = 2


def _settings(db: str, **kwargs: object) -> Settings:
    keys = tuple(kwargs.pop("secret_keys") or ())  # type: ignore[arg-type]
    if (key_file := kwargs.pop("secret_key_file", None)) is not None:
        if keys:
            raise click.UsageError("give --secret-key or --secret-key-file, not both")
        keys = secret_lines(str(key_file), "--secret-key-file")
    from_env = os.environ.get("BUILDREPORT_SECRET_KEY")
    if not keys and from_env is not None:
        # Set but empty (or with an empty entry) is a mistake to report, not a reason to generate a key.
        keys = tuple(k.strip() for k in from_env.split(","))
    if kwargs.get("read_dbs") and not is_postgres(str(db)):
        raise click.BadParameter(
            "replicas serve a PostgreSQL --db; a SQLite file is read directly", param_hint="--read-db")
    settings = Settings(db=str(db), secret_keys=keys, **kwargs)  # type: ignore[arg-type]
    _check_tls(settings.tls_cert, settings.tls_key)
    return settings


def _check_tls(cert: str | None, key: str | None) -> None:
    """Refuse, before serving, a certificate and key that are missing, unreadable or not a pair."""
    if cert is None and key is None:
        return
    if cert is None or key is None:
        raise click.UsageError("--tls-cert and --tls-key go together: give both (or neither)")
    for flag, path in (("--tls-cert", cert), ("--tls-key", key)):
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise click.ClickException(f"cannot read TLS file {path} ({flag}): {exc.strerror or exc}") from exc
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, key)
    except ssl.SSLError as exc:  # readable, but not a matching PEM certificate and key
        reason = str(exc.reason or exc)
        if "KEY_VALUES_MISMATCH" in reason.upper():
            detail = "the key does not belong to the certificate"
        else:
            detail = f"not a PEM certificate and its private key ({reason})"
        raise click.ClickException(f"cannot use --tls-cert {cert} with --tls-key {key}: {detail}") from exc
    except OSError as exc:  # the files changed in between
        raise click.ClickException(f"cannot read TLS files {cert} and {key}: {exc.strerror or exc}") from exc


def _check_signing_keys(settings: Settings) -> None:
    """Refuse to start with a key that would let anyone forge links (or generate the key, once)."""
    try:
        config.load_secret_keys(settings)
    except config.WeakKey as exc:
        raise KeyRefused(str(exc)) from exc
    except OSError as exc:
        raise click.ClickException(f"cannot read or write the signing key: {exc}") from exc


def _check_port(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from exc


def run_server(settings: Settings, *, create: bool = True) -> None:
    """Serve `settings.db`; with `create` False a missing SQLite file is an error rather than a new database
    (a typo in --db must not serve an empty one)."""
    from buildreport.config import SETTINGS_ENV, to_env
    from buildreport.http.envelope import configure_logging

    _check_port(settings.host, settings.port)
    if settings.secret_keys or config.secret_path(settings.db).exists():
        _check_signing_keys(settings)  # a weak key is refused first, whatever else is wrong
    open_db(settings.db, create=create).close()
    _check_signing_keys(settings)
    configure_logging()
    from buildreport import retention  # the daily prune, when --retention asks for it

    retention.start(settings)
    from buildreport.http.sdnotify import ServiceNotifier
    from buildreport.http.server_protocol import ServeConfig
    from buildreport.http.serving import NotifyingServer, NotifyingSupervisor

    notifier = ServiceNotifier(settings.host, settings.port, tls=bool(settings.tls_cert),
                               prefix=settings.path_prefix, workers=settings.workers)

    # No websocket routes: uvicorn need not load a websocket implementation.
    common = {
        "host": settings.host, "port": settings.port, "access_log": False, "log_config": None, "ws": "none",
        "max_header_bytes": settings.max_header_bytes, "header_timeout": settings.header_timeout,
        "timeout_keep_alive": settings.keep_alive_timeout, "limit_concurrency": settings.max_connections,
    }
    if settings.tls_cert:
        common |= {"ssl_certfile": settings.tls_cert, "ssl_keyfile": settings.tls_key}
    # uvicorn.run, with a Config that carries the head limits to every worker.
    if settings.workers > 1:
        os.environ[SETTINGS_ENV] = to_env(settings)
        server_config = ServeConfig(
            "buildreport.http.app:app_from_env", factory=True, workers=settings.workers, **common
        )
        with metrics_folder():
            NotifyingSupervisor(server_config, server_config.bind_socket(), notifier).run()
    else:
        from buildreport.http.app import create_app, tune_process  # one process: its own registry holds everything

        server_config = ServeConfig(create_app(settings), **common)
        tune_process()
        server = NotifyingServer(server_config, notifier)
        with contextlib.suppress(KeyboardInterrupt):
            server.run()
        if not server.started:
            sys.exit(3)  # uvicorn's STARTUP_FAILURE


@contextlib.contextmanager
def metrics_folder() -> Iterator[None]:
    """A fresh folder where every worker writes its Prometheus samples (set before the workers import
    prometheus_client, which reads it once), removed when the server stops. One the environment names is kept."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        yield
        return
    with tempfile.TemporaryDirectory(prefix="buildreport-metrics-") as folder:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder
        try:
            yield
        finally:
            del os.environ["PROMETHEUS_MULTIPROC_DIR"]


@main.command()
@db_option
@click.option("--db-file", type=click.Path(dir_okay=False),
              help="Read --db from this file: a postgresql:// URL whose password stays off the command line.")
@click.option("--create", is_flag=True, help="Start a new, empty database if DB does not exist (else an error).")
@_serve_options
def serve(db: str, db_file: str | None, create: bool, **kwargs: object) -> None:
    """Serve the API for the builds in the database (which must exist, unless --create)."""
    given = click.get_current_context().get_parameter_source("db") is not ParameterSource.DEFAULT
    db = given_or_from_file(db if given else None, db_file, "--db", "--db-file") or db
    settings = _settings(db, **kwargs)
    try:
        run_server(settings, create=create)
    except DatabaseError as exc:
        raise click.ClickException(str(exc)) from exc


# --- import --------------------------------------------------------------------------------


@main.command("import")
@db_option
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--events", is_flag=True, help="Derive events (and send webhooks) as if the builds were sent now.")
def import_command(db: str, files: tuple[Path, ...], events: bool) -> None:
    """Import builds from JSON Lines files (plain or .gz), all or nothing."""
    from buildreport.import_reader import ReadingStopped
    from buildreport.ingest import ImportFailed

    conn = open_db(db)
    try:
        result = _import_with_progress(conn, list(files), events=events)
    except ImportFailed as exc:
        for error in exc.errors:
            err(str(error))
        if exc.total > len(exc.errors):
            err(f"… and {exc.total - len(exc.errors)} more")
        raise click.ClickException(str(exc)) from exc
    except (FileNotFoundError, ReadingStopped) as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        conn.close()
    stats = result.stats
    err(
        f"imported {result.records} builds from {len(files)} file{'s' if len(files) != 1 else ''} "
        f"({stats.created} new, {stats.updated} updated, {stats.unchanged} unchanged) in {result.seconds:.1f}s"
    )


@main.command("migrate")
@click.option("--from", "source", required=True, help="The SQLite database file to copy.")
@click.option("--to", "target", required=True, help="An empty PostgreSQL database: postgresql://user@host/dbname.")
def migrate_command(source: str, target: str) -> None:
    """Copy a SQLite database (builds, logs, accounts, tokens, signing key) into PostgreSQL and verify it."""
    from buildreport.store.migrate import migrate

    if not is_postgres(target):
        raise click.BadParameter("the target is a postgresql:// URL", param_hint="--to")
    if is_postgres(source):
        raise click.BadParameter("the source is a SQLite database file", param_hint="--from")
    opened_dbs.append(target)
    try:
        copied = migrate(source, target, on_table=lambda table, rows: err(f"{table}: {rows:,} rows"))
    except DatabaseError as exc:
        raise click.ClickException(printable(str(exc))) from exc
    err(
        f"copied {copied['builds']:,} builds of {copied['accounts']:,} accounts and {copied['auth.tokens']:,} tokens"
        f" to {describe(target)} in {copied['seconds']:.1f}s; counts and totals match"
    )


def _import_with_progress(conn, files: list[Path], transform=None, events=False):  # type: ignore[no-untyped-def]
    from buildreport.ingest import import_files

    total_bytes = sum(f.stat().st_size for f in files if f.is_file())
    if not sys.stderr.isatty() or total_bytes < 8 * 1024 * 1024:
        return import_files(conn, files, now_us(), transform=transform, events=events)
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), transient=True) as bar:
        task = bar.add_task("importing")
        return import_files(
            conn,
            files,
            now_us(),
            on_progress=lambda n: bar.update(task, description=f"importing: {n:,} builds read"),
            transform=transform,
            events=events,
        )


# --- push ----------------------------------------------------------------------------------


@main.command()
@click.option(
    "--to", "url", required=True, envvar="BUILDREPORT_URL", help="Service address, e.g. https://builds.example.com."
)
@click.option("--token", envvar="BUILDREPORT_TOKEN", help="A token with build:write. Env: BUILDREPORT_TOKEN.")
@click.option("--token-file", type=click.Path(dir_okay=False), help="Read the token from this file instead.")
@click.option(
    "--follow", is_flag=True, help="Keep running and send new files as they appear; stop on SIGTERM or SIGINT."
)
@click.option(
    "--batch-size", default=500, show_default=True, type=click.IntRange(1, 100_000), help="Records a request."
)
@click.option(
    "--interval",
    default=2.0,
    show_default=True,
    type=click.FloatRange(0.05, 3600),
    help="Seconds between looks (--follow).",
)
@click.option(
    "--retries",
    default=8,
    show_default=True,
    type=click.IntRange(0, 1000),
    help="Retries of one request before a pass gives up; --follow retries for as long as it takes.",
)
@click.option("--timeout", default=60.0, show_default=True, type=click.FloatRange(1, 3600), help="Seconds a request.")
@click.argument("spool_dir", type=click.Path(file_okay=False, path_type=Path))
def push(
    url: str, token: str | None, token_file: str | None, follow: bool, batch_size: int, interval: float,
    retries: int, timeout: float, spool_dir: Path,
) -> None:
    """Send the spooled build records in SPOOL_DIR to a buildreport service, deleting each file once sent."""
    import signal
    import threading

    from buildreport.push import Pusher, PushStopped
    from buildreport.tokens import TOKEN_SHAPE

    if not url.startswith(("http://", "https://")):
        raise click.BadParameter("must start with http:// or https://", param_hint="--to")
    from_env = click.get_current_context().get_parameter_source("token") is ParameterSource.ENVIRONMENT
    if token_file is not None and from_env:
        token = None  # a file named on the command line is meant over a token the environment happens to hold
    token = given_or_from_file(token, token_file, "--token", "--token-file")
    if token is None:
        raise click.UsageError("give --token (or BUILDREPORT_TOKEN) or --token-file")
    if not TOKEN_SHAPE.fullmatch(token.strip()):
        raise click.BadParameter("not a buildreport token (brt_…)", param_hint="--token")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    pusher = Pusher(
        url,
        token.strip(),
        spool_dir,
        batch_size=batch_size,
        retries=None if follow else retries,
        timeout=timeout,
        stop=stop,
        say=err,
    )
    try:
        complete = pusher.push_all()
        while follow and not stop.wait(interval):
            pusher.push_all()
    except PushStopped as exc:
        raise click.ClickException(f"{exc}; nothing more was sent") from exc
    except OSError as exc:
        raise click.ClickException(f"{exc.filename or spool_dir}: {exc.strerror}") from exc
    finally:
        pusher.close()
    stats = pusher.stats
    err(
        f"pushed {stats.records} records from {stats.files_sent} files ({stats.created} new, {stats.updated} updated,"
        f" {stats.unchanged} unchanged); {stats.files_rejected} files rejected"
    )
    if not follow and not complete:
        raise click.ClickException(f"{stats.files_left} files left unsent in {spool_dir}")


# --- token ---------------------------------------------------------------------------------




@main.group()
def token() -> None:
    """Create, list and revoke API tokens."""


@token.command("create")
@db_option
@click.option("--account", required=True, help="Account the token reads.")
@click.option(
    "--scope", "scopes", multiple=True, default=("build:read",), show_default=True,
    help="Repeatable. build:read reads the account's builds; build:write sends builds to it; metrics:read is "
    "the operator's: /metrics shows every account's figures, whichever account the token names.",
)
@click.option("--expires-in", default="1000d", show_default=True, help="Lifetime: 30d, 12h, 90m or 3600s.")
@click.option("--label", default="", help="What the token is for.")
def token_create(db: str, account: str, scopes: tuple[str, ...], expires_in: str, label: str) -> None:
    """Create a token; its secret is printed once, alone on standard output."""
    from buildreport.store.admin import insert_token
    from buildreport.tokens import SCOPES, new_token

    for scope in scopes:
        if scope not in SCOPES:
            raise click.BadParameter(f"{printable(scope)!r}; known scopes: {', '.join(SCOPES)}", param_hint="--scope")
    if not ACCOUNT_NAME.fullmatch(account):
        raise click.BadParameter("lowercase letters, digits, '_', '.', '-'; at most 63", param_hint="--account")
    lifetime = duration_seconds(expires_in)
    label = check_label(label)
    conn = open_tokens(db)
    with conn:
        now = now_us()
        conn.execute("BEGIN IMMEDIATE")
        token_id, secret, token_digest = new_token()
        insert_token(
            conn,
            token_id=token_id,
            account=account,
            digest=token_digest,
            scopes=tuple(dict.fromkeys(scopes)),
            label=label,
            now_us=now,
            expires_us=now + lifetime * US_PER_SECOND,
        )
    conn.close()
    err(f"created {token_id} for account {account}, expires {format_us(now + lifetime * US_PER_SECOND)}")
    click.echo(secret)




@token.command("list")
@db_option
def token_list(db: str) -> None:
    """List tokens (never their secrets)."""
    from buildreport.store.admin import list_tokens

    conn = open_tokens(db)
    rows = list_tokens(conn)
    conn.close()
    header = ("ID", "ACCOUNT", "SCOPES", "LABEL", "OIDC", "CREATED", "EXPIRES", "LAST USED", "REVOKED")
    table = [header] + [
        (
            printable(t.token_id),
            printable(t.account),
            printable(",".join(t.scopes.split())),
            printable(t.label) or "-",
            token_claims(t.claims),
            when(t.created_us),
            when(t.expires_us),
            when(t.last_used_us),
            when(t.revoked_us),
        )
        for t in rows
    ]
    echo_table(table)


token.add_command(trust)


@token.command("revoke")
@db_option
@click.argument("token_id")
def token_revoke(db: str, token_id: str) -> None:
    """Revoke a token at once."""
    from buildreport.store.admin import revoke_token

    conn = open_tokens(db)
    with conn:
        found = revoke_token(conn, token_id, now_us())
    conn.close()
    if not found:
        raise click.ClickException(f"no token {printable(token_id)}; `buildreport token list` shows them")
    err(f"revoked {token_id}")


# --- sample --------------------------------------------------------------------------------


@main.command()
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="JSON Lines file to write; gzip-compressed when it ends in .gz.",
)
@click.option(
    "--builds", type=click.IntRange(1, MAX_SAMPLE_BUILDS), default=None, help="Builds [default: the sample's]."
)
@click.option(
    "--days", type=click.IntRange(1, MAX_SAMPLE_DAYS), default=None, help="Days they span [default: the sample's]."
)
@click.option("--accounts", default=None, help="Comma-separated account names [default: the sample's].")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=None, help="Random seed [default: the sample's].")
@click.option("--end", default=None, help="UTC date or time the newest build precedes [default: the sample's].")
@click.option(
    "--log-share", type=click.FloatRange(0, 1), default=1.0, show_default=True, help="Share of builds that carry a log."
)
def sample(
    output: Path,
    builds: int | None,
    days: int | None,
    accounts: str | None,
    seed: int | None,
    end: str | None,
    log_share: float,
) -> None:
    """Write a deterministic, realistic sample dataset (the defaults reproduce sample_data/)."""
    from buildreport import sample as gen
    from buildreport.times import from_us, parse_moment

    try:
        end_time = from_us(parse_moment(end)) if end is not None else gen.SAMPLE_END
    except (ValueError, OverflowError) as exc:
        raise click.BadParameter(printable(str(exc)), param_hint="--end") from exc
    span_days = days or gen.SAMPLE_DAYS
    if not 1971 + span_days // 365 <= end_time.year <= 9998:
        raise click.BadParameter(
            f"{printable(end or '')!r}: the builds must fall between 1970 and 9999 (--days {span_days} before it)",
            param_hint="--end",
        )
    names = [a.strip() for a in accounts.split(",") if a.strip()] if accounts else list(gen.SAMPLE_ACCOUNTS)
    bad = [name for name in names if not ACCOUNT_NAME.fullmatch(name)]
    if bad or not names:
        raise click.BadParameter(
            f"{printable(bad[0]) if bad else ''!r}: account names are lowercase letters, digits, '_', '.', '-'",
            param_hint="--accounts",
        )
    started = time.perf_counter()
    count = gen.write_jsonl(
        gen.generate(
            builds=builds or gen.SAMPLE_BUILDS,
            days=days or gen.SAMPLE_DAYS,
            accounts=names,
            seed=gen.SAMPLE_SEED if seed is None else seed,
            end=end_time,
            log_share=log_share,
        ),
        output,
    )
    err(f"wrote {count} builds to {output} in {time.perf_counter() - started:.1f}s")


# --- demo ----------------------------------------------------------------------------------


def sample_data_path() -> Path:
    """The sample dataset shipped inside the package (and so inside the executable)."""
    from importlib.resources import files

    from buildreport import sample as gen

    return Path(str(files("buildreport").joinpath(*gen.SAMPLE_PATH.parts[1:])))


class _Stopped(SystemExit):
    """SIGTERM after the server ran: a stop, not a failure."""


def _terminated(signum: int, frame: object) -> None:
    raise _Stopped(128 + signum)


@main.command()
@click.option("--db", default=None, help="Database to create (must not exist) [default: a temporary file].")
@_serve_options
def demo(db: str | None, **kwargs: object) -> None:
    """Serve the sample data, shifted so its latest moment is now, with a token per account.

    The temporary database (without --db) is removed when the demo stops; a demo that fails to start
    removes the database it created.
    """
    from buildreport.demo import prepare_demo

    if db is not None and database_exists(db):
        raise click.ClickException(f"{printable(db)} exists; the demo starts from a new database (choose another --db)")
    settings = _settings(db or "demo.db", **kwargs)  # checked before anything is created
    _check_port(settings.host, settings.port)
    sample = sample_data_path()
    if not sample.is_file():
        raise click.ClickException(f"the sample data is missing from this installation ({sample})")
    folder = None
    if db is None:
        folder = Path(tempfile.mkdtemp(prefix="buildreport-demo-"))
        db = str(folder / "demo.db")
        settings = msgspec.structs.replace(settings, db=db)
    serving = False
    try:
        _check_signing_keys(settings)
        conn = open_db(db)
        try:
            lines = prepare_demo(conn, settings, sample, now_us())
        finally:
            conn.close()
        click.echo("\n".join(lines))
        sys.stdout.flush()
        # uvicorn stops on SIGTERM and then raises it again; as an exception it lets the cleanup below run.
        signal.signal(signal.SIGTERM, _terminated)
        serving = True
        run_server(settings)
    except BaseException as exc:
        if not (serving and isinstance(exc, KeyboardInterrupt | _Stopped)):  # a --db of a stopped demo stays
            remove_database(db)
        raise
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


# --- record --------------------------------------------------------------------------------


def _tag(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE", ctx, param)
        tags[key] = text
    return tags


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "--spool",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="BUILDREPORT_SPOOL",
    help="Spool folder for the records (sent on by `buildreport push`). Env: BUILDREPORT_SPOOL.",
)
@click.option("--db", help="Write the records to this database (a SQLite file or a postgresql:// URL).")
@click.option("--account", type=click.STRING, help="Account of the builds written with --db.")
@click.option("--tag", "tags", multiple=True, callback=_tag, metavar="KEY=VALUE", help="A tag for every build.")
@click.option("--cpu-count", type=click.IntRange(1), help="Cores a build gets, as recorded [default: this machine's].")
@click.option(
    "--allocated-megabytes", type=click.IntRange(0), help="Memory a build gets, as recorded [default: this machine's]."
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def record(
    spool: Path | None, db: str | None, account: str | None, command: tuple[str, ...], **kwargs: object
) -> None:
    """Run a Nix build command here (nix-build … or nix build …) and record each build it runs.

    \b
    buildreport record --spool /var/spool/buildreport --tag job=docs -- nix-build -A docs
    buildreport record --db builds.db --account acme -- nix build .#hello -L
    """
    from buildreport.record.local import Recorder, UsageError, exit_like

    if (spool is None) == (db is None):
        raise click.UsageError("give --spool DIR or --db PATH --account NAME")
    if db is not None and not account:
        raise click.UsageError("--db needs --account NAME")
    if account is not None and not re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,62}", account):
        raise click.BadParameter(f"{account!r} is not an account name (a-z, 0-9, _ . -)", param_hint="--account")
    from buildreport.destinations import DatabaseSink, SpoolSink

    try:
        sink = SpoolSink(spool) if spool is not None else DatabaseSink(db, account)  # type: ignore[arg-type]
    except DatabaseError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        returncode = Recorder(command, sink.write_all, **kwargs).run()  # type: ignore[arg-type]
    except UsageError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        if isinstance(sink, DatabaseSink):
            sink.close()
    sys.exit(exit_like(returncode))


# --- runner --------------------------------------------------------------------------------


@main.command()
@destination_options
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for the runner's log and restart links [default: SPOOL/.runner, or DB.runner beside --db].",
)
@click.option("--timeout", type=click.IntRange(1), help="Seconds a build may run before Nix stops it (timeout).")
@click.option("--cpu-count", type=click.IntRange(1), help="Cores a build gets, as recorded [default: this machine's].")
@click.option(
    "--allocated-megabytes", type=click.IntRange(0), help="Memory a build gets, as recorded [default: this machine's]."
)
@click.option("--nix-daemon", default="nix-daemon", show_default=True, help="The nix-daemon program.")
@click.option(
    "--nix-option", "nix_options", nargs=2, multiple=True, metavar="NAME VALUE", help="A Nix setting for the daemon."
)
@click.option("--cgroup/--no-cgroup", default=True, show_default=True, help="Measure CPU with a cgroup v2 per session.")
@click.option("--check", "check_only", is_flag=True, help="Check the set-up, say what is missing, and exit.")
def runner(check_only: bool, **kwargs: object) -> None:
    """Serve one ssh-ng:// session (the forced command of an authorized_keys entry) and record its builds."""
    import msgspec

    from buildreport.models import AccountName
    from buildreport.record.cli import run_runner

    if (kwargs["spool"] is None) == (kwargs["db"] is None):
        raise click.UsageError("give either --spool DIR or --db PATH --account NAME")
    if kwargs["db"] is not None:
        try:
            msgspec.convert(kwargs["account"], AccountName)
        except msgspec.ValidationError as exc:
            raise click.UsageError("--db needs --account NAME (lower-case letters, digits, '.', '_', '-')") from exc
    sys.exit(run_runner(check_only=check_only, **kwargs))


from buildreport.export import export_command  # noqa: E402 (a command of its own module)

main.add_command(export_command)

from buildreport.cli_collect import collect_command  # noqa: E402 (a command of its own module)

main.add_command(collect_command)
from buildreport.cli_ops import OPS_COMMANDS  # noqa: E402 (backup, restore, prune)

for command in OPS_COMMANDS:
    main.add_command(command)
main.add_command(hook_group)
