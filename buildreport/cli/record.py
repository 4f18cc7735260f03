"""The recorders' commands: `record` runs one Nix command and records its builds; `runner` serves one ssh-ng://
session (its settings from its options, then the session or a set-up check).

The recorders themselves are imported when a command runs, so that every other command starts without them.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from buildreport.cli.shared import destination_options
from buildreport.models import BuildRecord
from buildreport.store import DatabaseError, is_postgres

if TYPE_CHECKING:
    from buildreport.record.runner import RunnerConfig


def runner_config(
    spool: Path | None,
    db: str | None,
    account: str | None,
    state_dir: Path | None,
    timeout: int | None,
    cpu_count: int | None,
    allocated_megabytes: int | None,
    nix_daemon: str,
    nix_options: tuple[tuple[str, str], ...],
    cgroup: bool,
) -> RunnerConfig:
    from buildreport.record.destinations import SpoolSink, database_sink
    from buildreport.record.process import memory_megabytes
    from buildreport.record.runner import RunnerConfig
    from buildreport.record.usage import find_cgroup_root

    sink: Callable[[BuildRecord], None]
    if spool is not None:
        sink = SpoolSink(spool)
        state_dir = state_dir or spool / ".runner"
    else:
        assert db is not None and account is not None
        sink = database_sink(db, account)
        if state_dir is None:
            # Beside a database file; for a database server, in the home of the user the runner runs as.
            local = Path.home() / "buildreport" if is_postgres(str(db)) else Path(db)
            state_dir = local.parent / f"{local.name}.runner"
    return RunnerConfig(
        sink=sink,
        state_dir=state_dir,
        cpu_count=cpu_count or os.cpu_count() or 1,
        allocated_megabytes=memory_megabytes() if allocated_megabytes is None else allocated_megabytes,
        timeout=timeout,
        nix_daemon=nix_daemon,
        nix_options=list(nix_options),
        cgroup_root=find_cgroup_root() if cgroup else None,
    )


def run_runner(*, check_only: bool, **options: Any) -> int:
    from buildreport.record.runner import check_original_command, run_session

    config = runner_config(**options)
    env = dict(os.environ)
    if check_only:
        from buildreport.record.check import check

        findings = check(config, env)
        for finding in findings:
            print(f"{finding.level:>7}  {finding.text}")
        usable = not any(f.level == "missing" for f in findings)
        print("ready: this machine can serve and record ssh-ng builds" if usable else "not ready: see `missing` above")
        return 0 if usable else 1
    refusal = check_original_command(env)
    if refusal is not None:
        sys.stderr.write(f"{refusal}\n")
        return 1
    return run_session(config, env)


def _tag(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE", ctx, param)
        tags[key] = text
    return tags


@click.command("record", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
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
    from buildreport.record.destinations import DatabaseSink, SpoolSink

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


@click.command("runner")
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

    if (kwargs["spool"] is None) == (kwargs["db"] is None):
        raise click.UsageError("give either --spool DIR or --db PATH --account NAME")
    if kwargs["db"] is not None:
        try:
            msgspec.convert(kwargs["account"], AccountName)
        except msgspec.ValidationError as exc:
            raise click.UsageError("--db needs --account NAME (lower-case letters, digits, '.', '_', '-')") from exc
    sys.exit(run_runner(check_only=check_only, **kwargs))
