"""`buildreport demo`: serve the sample data in a new database, removed again if the demo fails to start."""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
from pathlib import Path

import click
import msgspec

from buildreport.cli.serve import check_port, check_signing_keys, run_server, settings_from_options
from buildreport.cli.serve_options import serve_options
from buildreport.cli.shared import open_db
from buildreport.faults import printable
from buildreport.store import exists as database_exists
from buildreport.store import remove as remove_database
from buildreport.times import now_us


class _Stopped(SystemExit):
    """SIGTERM after the server ran: a stop, not a failure."""


def _terminated(signum: int, frame: object) -> None:
    raise _Stopped(128 + signum)


@click.command("demo")
@click.option("--db", default=None, help="Database to create (must not exist) [default: a temporary file].")
@serve_options
def demo(db: str | None, **kwargs: object) -> None:
    """Serve the sample data, shifted so its latest moment is now, with a token per account.

    The temporary database (without --db) is removed when the demo stops; a demo that fails to start
    removes the database it created.
    """
    from buildreport.demo import prepare_demo, sample_data_path  # loads the storage layer: only when used

    if db is not None and database_exists(db):
        raise click.ClickException(f"{printable(db)} exists; the demo starts from a new database (choose another --db)")
    settings = settings_from_options(db or "demo.db", **kwargs)  # checked before anything is created
    check_port(settings.host, settings.port)
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
        check_signing_keys(settings)
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
