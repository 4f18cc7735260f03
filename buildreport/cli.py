"""The command line: serve, demo, import, token, sample."""

from __future__ import annotations

import os
import re
import socket
import sys
import tempfile
import time
from pathlib import Path

import click

from buildreport import __version__
from buildreport.config import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_RECORDS, DEFAULT_RATE_LIMIT, Settings, default_db
from buildreport.store.schema import DatabaseError, open_database
from buildreport.times import US_PER_SECOND, format_us, now_us

DURATION = re.compile(r"(\d+)([smhd])")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _err(message: str) -> None:
    click.echo(message, err=True)


def db_option(func):  # type: ignore[no-untyped-def]
    return click.option(
        "--db",
        default=default_db,
        show_default="$BUILDREPORT_DB or ./buildreport.db",
        help="Path of the SQLite database file.",
    )(func)


def _open(db: str, *, create: bool = True):  # type: ignore[no-untyped-def]
    try:
        return open_database(db, create=create)
    except DatabaseError as exc:
        raise click.ClickException(str(exc)) from exc


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="buildreport")
def main() -> None:
    """buildreport: reports on remote Nix builds over a JSON API."""


# --- serve ---------------------------------------------------------------------------------


def _serve_options(func):  # type: ignore[no-untyped-def]
    options = [
        click.option("--host", default="127.0.0.1", show_default=True, envvar="BUILDREPORT_HOST"),
        click.option(
            "--port", default=8000, show_default=True, type=click.IntRange(0, 65535), envvar="BUILDREPORT_PORT"
        ),
        click.option(
            "--public-url",
            envvar="BUILDREPORT_PUBLIC_URL",
            help="Address users reach the service at (behind a proxy too); signed links start with it.",
        ),
        click.option(
            "--secret-key",
            "secret_keys",
            multiple=True,
            help="Key that signs build links; repeat to rotate (the last signs, all verify). "
            "Env: BUILDREPORT_SECRET_KEY, comma-separated. Default: generated once, kept in DB.secret.",
        ),
        click.option(
            "--rate-limit",
            default=DEFAULT_RATE_LIMIT,
            show_default=True,
            type=click.IntRange(0),
            envvar="BUILDREPORT_RATE_LIMIT",
            help="Requests a minute per token and worker process; 0 turns limiting off.",
        ),
        click.option(
            "--workers",
            default=lambda: min(os.cpu_count() or 1, 4),
            show_default="CPU count, at most 4",
            type=click.IntRange(1, 64),
            envvar="BUILDREPORT_WORKERS",
        ),
        click.option("--access-log/--no-access-log", default=True, show_default=True),
        click.option(
            "--max-body-bytes",
            default=DEFAULT_MAX_BODY_BYTES,
            show_default=True,
            type=click.IntRange(1024, 1024**3),
            envvar="BUILDREPORT_MAX_BODY_BYTES",
            help="Largest POST /builds body, also once gzip is inflated; larger ones get 413.",
        ),
        click.option(
            "--max-records",
            default=DEFAULT_MAX_RECORDS,
            show_default=True,
            type=click.IntRange(1, 100_000),
            envvar="BUILDREPORT_MAX_RECORDS",
            help="Most build records in one POST /builds; more get 413.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _settings(db: str, **kwargs: object) -> Settings:
    keys = tuple(kwargs.pop("secret_keys") or ())  # type: ignore[arg-type]
    if not keys and os.environ.get("BUILDREPORT_SECRET_KEY"):
        keys = tuple(k.strip() for k in os.environ["BUILDREPORT_SECRET_KEY"].split(",") if k.strip())
    return Settings(db=str(db), secret_keys=keys, **kwargs)  # type: ignore[arg-type]


def _check_port(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from exc


def run_server(settings: Settings) -> None:
    import uvicorn

    from buildreport.config import SETTINGS_ENV, to_env
    from buildreport.envelope import configure_logging

    _check_port(settings.host, settings.port)
    _open(settings.db).close()
    configure_logging()
    # No websocket routes: uvicorn need not load a websocket implementation.
    common = {"host": settings.host, "port": settings.port, "access_log": False, "log_config": None, "ws": "none"}
    if settings.workers > 1:
        os.environ[SETTINGS_ENV] = to_env(settings)
        uvicorn.run("buildreport.app:app_from_env", factory=True, workers=settings.workers, **common)
    else:
        from buildreport.app import create_app

        uvicorn.run(create_app(settings), **common)


@main.command()
@db_option
@_serve_options
def serve(db: str, **kwargs: object) -> None:
    """Serve the API for the builds in the database."""
    settings = _settings(db, **kwargs)
    try:
        run_server(settings)
    except DatabaseError as exc:
        raise click.ClickException(str(exc)) from exc


# --- import --------------------------------------------------------------------------------


@main.command("import")
@db_option
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
def import_command(db: str, files: tuple[Path, ...]) -> None:
    """Import builds from JSON Lines files (plain or .gz), all or nothing."""
    from buildreport.ingest import ImportFailed

    conn = _open(db)
    try:
        result = _import_with_progress(conn, list(files))
    except ImportFailed as exc:
        for error in exc.errors:
            _err(str(error))
        if exc.total > len(exc.errors):
            _err(f"… and {exc.total - len(exc.errors)} more")
        raise click.ClickException(str(exc)) from exc
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        conn.close()
    stats = result.stats
    _err(
        f"imported {result.records} builds from {len(files)} file{'s' if len(files) != 1 else ''} "
        f"({stats.created} new, {stats.updated} updated, {stats.unchanged} unchanged) in {result.seconds:.1f}s"
    )


def _import_with_progress(conn, files: list[Path], transform=None):  # type: ignore[no-untyped-def]
    from buildreport.ingest import import_files

    total_bytes = sum(f.stat().st_size for f in files if f.is_file())
    if not sys.stderr.isatty() or total_bytes < 8 * 1024 * 1024:
        return import_files(conn, files, now_us(), transform=transform)
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), transient=True) as bar:
        task = bar.add_task("importing")
        return import_files(
            conn,
            files,
            now_us(),
            on_progress=lambda n: bar.update(task, description=f"importing: {n:,} builds read"),
            transform=transform,
        )


# --- push ----------------------------------------------------------------------------------


@main.command()
@click.option(
    "--to", "url", required=True, envvar="BUILDREPORT_URL", help="Service address, e.g. https://builds.example.com."
)
@click.option(
    "--token", required=True, envvar="BUILDREPORT_TOKEN", help="A token with build:write. Env: BUILDREPORT_TOKEN."
)
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
    url: str, token: str, follow: bool, batch_size: int, interval: float, retries: int, timeout: float, spool_dir: Path
) -> None:
    """Send the spooled build records in SPOOL_DIR to a buildreport service, deleting each file once sent."""
    import signal
    import threading

    from buildreport.push import Pusher, PushStopped
    from buildreport.tokens import TOKEN_SHAPE

    if not url.startswith(("http://", "https://")):
        raise click.BadParameter("must start with http:// or https://", param_hint="--to")
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
        say=_err,
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
    _err(
        f"pushed {stats.records} records from {stats.files_sent} files ({stats.created} new, {stats.updated} updated,"
        f" {stats.unchanged} unchanged); {stats.files_rejected} files rejected"
    )
    if not follow and not complete:
        raise click.ClickException(f"{stats.files_left} files left unsent in {spool_dir}")


# --- token ---------------------------------------------------------------------------------


def _duration_seconds(text: str) -> int:
    match = DURATION.fullmatch(text.strip())
    if not match or int(match[1]) == 0:
        raise click.BadParameter(f"{text!r} is not a duration such as 30d, 12h, 90m or 3600s")
    return int(match[1]) * UNIT_SECONDS[match[2]]


@main.group()
def token() -> None:
    """Create, list and revoke API tokens."""


@token.command("create")
@db_option
@click.option("--account", required=True, help="Account the token reads.")
@click.option("--scope", "scopes", multiple=True, default=("build:read",), show_default=True, help="Repeatable.")
@click.option("--expires-in", default="1000d", show_default=True, help="Lifetime: 30d, 12h, 90m or 3600s.")
@click.option("--label", default="", help="What the token is for.")
def token_create(db: str, account: str, scopes: tuple[str, ...], expires_in: str, label: str) -> None:
    """Create a token; its secret is printed once, alone on standard output."""
    from buildreport.store.admin import ensure_account, insert_token
    from buildreport.tokens import SCOPES, new_token

    for scope in scopes:
        if scope not in SCOPES:
            raise click.BadParameter(f"{scope!r}; known scopes: {', '.join(SCOPES)}", param_hint="--scope")
    if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,62}", account):
        raise click.BadParameter("lowercase letters, digits, '_', '.', '-'; at most 63", param_hint="--account")
    lifetime = _duration_seconds(expires_in)
    conn = _open(db)
    with conn:
        now = now_us()
        conn.execute("BEGIN IMMEDIATE")
        account_id = ensure_account(conn, account, now)
        token_id, secret, token_digest = new_token()
        insert_token(
            conn,
            token_id=token_id,
            account_id=account_id,
            digest=token_digest,
            scopes=tuple(dict.fromkeys(scopes)),
            label=label,
            now_us=now,
            expires_us=now + lifetime * US_PER_SECOND,
        )
    conn.close()
    _err(f"created {token_id} for account {account}, expires {format_us(now + lifetime * US_PER_SECOND)}")
    click.echo(secret)


def _when(us: int | None) -> str:
    return format_us(us)[:19].replace("T", " ") if us is not None else "-"


@token.command("list")
@db_option
def token_list(db: str) -> None:
    """List tokens (never their secrets)."""
    from buildreport.store.admin import list_tokens

    conn = _open(db)
    rows = list_tokens(conn)
    conn.close()
    header = ("ID", "ACCOUNT", "SCOPES", "LABEL", "CREATED", "EXPIRES", "LAST USED", "REVOKED")
    table = [header] + [
        (
            t.token_id,
            t.account,
            ",".join(t.scopes.split()),
            t.label or "-",
            _when(t.created_us),
            _when(t.expires_us),
            _when(t.last_used_us),
            _when(t.revoked_us),
        )
        for t in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@token.command("revoke")
@db_option
@click.argument("token_id")
def token_revoke(db: str, token_id: str) -> None:
    """Revoke a token at once."""
    from buildreport.store.admin import revoke_token

    conn = _open(db)
    with conn:
        found = revoke_token(conn, token_id, now_us())
    conn.close()
    if not found:
        raise click.ClickException(f"no token {token_id}; `buildreport token list` shows them")
    _err(f"revoked {token_id}")


# --- sample --------------------------------------------------------------------------------


@main.command()
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="JSON Lines file to write; gzip-compressed when it ends in .gz.",
)
@click.option("--builds", type=click.IntRange(1), default=None, help="Number of builds [default: the sample's].")
@click.option("--days", type=click.IntRange(1), default=None, help="Days the builds span [default: the sample's].")
@click.option("--accounts", default=None, help="Comma-separated account names [default: the sample's].")
@click.option("--seed", type=int, default=None, help="Random seed [default: the sample's].")
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
        end_time = from_us(parse_moment(end)) if end else gen.SAMPLE_END
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--end") from exc
    names = [a.strip() for a in accounts.split(",") if a.strip()] if accounts else list(gen.SAMPLE_ACCOUNTS)
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
    _err(f"wrote {count} builds to {output} in {time.perf_counter() - started:.1f}s")


# --- demo ----------------------------------------------------------------------------------


def sample_data_path() -> Path:
    """The bundled sample dataset, beside the package or inside the executable."""
    from buildreport import sample as gen

    base = Path(getattr(sys, "_MEIPASS", Path(__file__).resolve().parent.parent))
    return base / gen.SAMPLE_PATH


@main.command()
@click.option("--db", default=None, help="Database to create (must not exist) [default: a temporary file].")
@_serve_options
def demo(db: str | None, **kwargs: object) -> None:
    """Serve the sample data, shifted so the newest build is now, with a token per account."""
    from buildreport.demo import prepare_demo

    if db is None:
        db = str(Path(tempfile.mkdtemp(prefix="buildreport-demo-")) / "demo.db")
    elif Path(db).exists():
        raise click.ClickException(f"{db} exists; the demo starts from a fresh database (choose another --db)")
    settings = _settings(db, **kwargs)
    _check_port(settings.host, settings.port)
    conn = _open(db)
    try:
        lines = prepare_demo(conn, settings, sample_data_path(), now_us())
    finally:
        conn.close()
    click.echo("\n".join(lines))
    sys.stdout.flush()
    run_server(settings)


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
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), help="Write the records to this database.")
@click.option("--account", type=click.STRING, help="Account of the builds written with --db.")
@click.option("--tag", "tags", multiple=True, callback=_tag, metavar="KEY=VALUE", help="A tag for every build.")
@click.option("--cpu-count", type=click.IntRange(1), help="Cores a build gets, as recorded [default: this machine's].")
@click.option(
    "--allocated-megabytes", type=click.IntRange(0), help="Memory a build gets, as recorded [default: this machine's]."
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def record(
    spool: Path | None, db: Path | None, account: str | None, command: tuple[str, ...], **kwargs: object
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
@click.option(
    "--spool",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="BUILDREPORT_SPOOL",
    help="Spool folder for build records (pushed by `buildreport push --follow`). Env: BUILDREPORT_SPOOL.",
)
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), help="Write builds to this database instead.")
@click.option("--account", help="The account builds belong to, with --db.")
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
