"""The `buildreport collect` command: listen where Nix (≥ 2.32) sends its JSON log and record every build."""

from __future__ import annotations

import os
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path

import click

from buildreport.cli.shared import ACCOUNT_NAME, destination_options, err


@click.command("collect")
@click.option(
    "--socket",
    "socket_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The socket to listen at: the json-log-path of nix.conf.",
)
@destination_options
@click.option(
    "--nix-state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("/nix/var/nix"),
    show_default=True,
    help="Nix's state folder: its database names the outputs of builds whose .drv is not in the store (read-only).",
)
@click.option("--cpu-count", type=click.IntRange(1), help="Cores a build gets, as recorded [default: this machine's].")
@click.option(
    "--allocated-megabytes", type=click.IntRange(0), help="Memory a build gets, as recorded [default: this machine's]."
)
def collect_command(
    socket_path: Path,
    spool: Path | None,
    db: str | None,
    account: str | None,
    nix_state_dir: Path,
    cpu_count: int | None,
    allocated_megabytes: int | None,
) -> None:
    """Record every build this machine's Nix runs, from the JSON log it sends to a socket (Nix 2.32 or later).

    \b
    nix.conf:  json-log-path = /run/buildreport/nix-log.sock
    buildreport collect --socket /run/buildreport/nix-log.sock --spool /var/spool/buildreport
    """
    from buildreport.record.collect import CollectConfig, CollectError, Collector, StoreView, open_socket
    from buildreport.record.destinations import DatabaseSink, SpoolSink
    from buildreport.record.process import memory_megabytes
    from buildreport.store import DatabaseError

    if (spool is None) == (db is None):
        raise click.UsageError("give either --spool DIR or --db PATH --account NAME")
    if db is not None and (account is None or not ACCOUNT_NAME.fullmatch(account)):
        raise click.UsageError("--db needs --account NAME (lower-case letters, digits, '.', '_', '-')")

    def log(message: str) -> None:
        err(f"{datetime.now(UTC).isoformat(timespec='milliseconds')} {message}")

    try:
        sink = SpoolSink(spool) if spool is not None else DatabaseSink(db, account)  # type: ignore[arg-type]
    except DatabaseError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        server = open_socket(socket_path, log)
    except (CollectError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    config = CollectConfig(
        sink=sink,
        cpu_count=cpu_count or os.cpu_count() or 1,
        allocated_megabytes=memory_megabytes() if allocated_megabytes is None else allocated_megabytes,
        log=log,
        store=StoreView(str(nix_state_dir / "db" / "db.sqlite")),
    )
    collector = Collector(server, config)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: collector.stop())
    log(f"listening at {socket_path}")
    # The socket stays in place when the collector stops: Nix then fails to connect and says so, where
    # with no socket it would write its log to a plain file of that name.
    collector.serve()
    log(f"stopped: {collector.recorder.recorded} builds recorded")
    if isinstance(sink, DatabaseSink):
        sink.close()
    sys.exit(0)
