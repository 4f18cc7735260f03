"""`buildreport push`: send the spooled build records to a buildreport service (record/push.py does the sending)."""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from buildreport.cli.secrets import given_or_from_file
from buildreport.cli.shared import err


@click.command("push")
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

    from buildreport.record.push import Pusher, PushStopped
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
