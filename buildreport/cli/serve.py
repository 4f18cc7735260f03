"""`buildreport serve`: check the settings, the signing key and the port before serving, then run uvicorn with
one process or a supervisor of several."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import sys
import tempfile
from collections.abc import Iterator

import click
from click.core import ParameterSource

from buildreport import config
from buildreport.cli.secrets import given_or_from_file, secret_lines
from buildreport.cli.serve_options import serve_options
from buildreport.cli.shared import db_option, open_db
from buildreport.config import Settings
from buildreport.store import DatabaseError, is_postgres


class KeyRefused(click.ClickException):
    """A signing key too weak to sign links: a usage error, exit status 2."""

    exit_code = 2


def settings_from_options(db: str, **kwargs: object) -> Settings:
    """The settings the options of `serve` or `demo` give, checked: signing keys, replicas, the TLS pair."""
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


def check_signing_keys(settings: Settings) -> None:
    """Refuse to start with a key that would let anyone forge links (or generate the key, once)."""
    try:
        config.load_secret_keys(settings)
    except config.WeakKey as exc:
        raise KeyRefused(str(exc)) from exc
    except OSError as exc:
        raise click.ClickException(f"cannot read or write the signing key: {exc}") from exc


def check_port(host: str, port: int) -> None:
    """Refuse, before anything is created, an address the server could not listen on."""
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
    from buildreport.http.envelope import configure_logging

    check_port(settings.host, settings.port)
    if settings.secret_keys or config.secret_path(settings.db).exists():
        check_signing_keys(settings)  # a weak key is refused first, whatever else is wrong
    open_db(settings.db, create=create).close()
    check_signing_keys(settings)
    configure_logging()
    from buildreport import retention  # the daily prune, when --retention asks for it
    from buildreport.events.deliver import event_rules
    from buildreport.store.writer import shared_writer

    with _stopped_cleanly_by_sigterm(), shared_writer(settings.db, event_rules(settings)):  # one writer, first
        stop_pruning = retention.start(settings)  # by that writer too
        try:
            _serve(settings)
        finally:
            stop_pruning.set()


class _Terminated(BaseException):
    """SIGTERM while uvicorn does not hold the signal: unwinds to `_stopped_cleanly_by_sigterm`."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated(signum)


@contextlib.contextmanager
def _stopped_cleanly_by_sigterm() -> Iterator[None]:
    """A SIGTERM while the server starts (or once uvicorn hands the signal back) stops the writer and removes its
    folder, then acts as the handler from before would have: the default ends the process by the signal."""
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_IGN or previous is None:  # ignored by whoever started us, or not Python's to set
        yield
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    except _Terminated:
        signal.signal(signal.SIGTERM, previous)
        signal.raise_signal(signal.SIGTERM)
    finally:
        if signal.getsignal(signal.SIGTERM) is _raise_terminated:  # uvicorn's supervisor keeps its own
            signal.signal(signal.SIGTERM, previous)


def _serve(settings: Settings) -> None:
    """uvicorn with one process, or a supervisor of several."""
    from buildreport.config import SETTINGS_ENV, to_env
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
        "server_header": False,  # answers do not name the server software they run on
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


@click.command("serve")
@db_option
@click.option("--db-file", type=click.Path(dir_okay=False),
              help="Read --db from this file: a postgresql:// URL whose password stays off the command line.")
@click.option("--create", is_flag=True, help="Start a new, empty database if DB does not exist (else an error).")
@serve_options
def serve(db: str, db_file: str | None, create: bool, **kwargs: object) -> None:
    """Serve the API for the builds in the database (which must exist, unless --create)."""
    given = click.get_current_context().get_parameter_source("db") is not ParameterSource.DEFAULT
    db = given_or_from_file(db if given else None, db_file, "--db", "--db-file") or db
    settings = settings_from_options(db, **kwargs)
    try:
        run_server(settings, create=create)
    except DatabaseError as exc:
        raise click.ClickException(str(exc)) from exc
