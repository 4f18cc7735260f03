"""Commands that look after a database over the years: `backup`, `restore` and `prune`."""

from __future__ import annotations

import time
from pathlib import Path

import click

from buildreport.cli.shared import DURATION, UNIT_SECONDS, db_option, err, open_db
from buildreport.faults import printable
from buildreport.store import DatabaseError, describe, is_postgres

PG_BACKUP = "{db} is a PostgreSQL database: back it up with pg_dump (pg_dump -Fc -f FILE URL) and restore it with " \
    "pg_restore (pg_restore --clean -d URL FILE)"


def _sqlite_only(db: str) -> None:
    if is_postgres(db):
        raise click.ClickException(PG_BACKUP.format(db=describe(db)))


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    exponent = min(3, (count.bit_length() - 1) // 10)
    return f"{count / 1024**exponent:.1f} {('KiB', 'MiB', 'GiB')[exponent - 1]}"


@click.command("backup")
@db_option
@click.option("--to", "to", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The archive to write (replaced only once the new one is complete and checked).")
@click.option("--gzip", is_flag=True, help="Compress the archive with gzip.")
def backup_command(db: str, to: Path, gzip: bool) -> None:
    """Copy a live SQLite database, its tokens and signing key into one checked archive."""
    from buildreport.store import backup

    _sqlite_only(db)
    written = backup(Path(db), to, gzip=gzip)
    m = written.manifest
    err(f"wrote {printable(written.path)}: {_size(written.bytes)}, {sum(m.builds.values()):,} builds in "
        f"{len(m.builds)} accounts, {m.logs:,} logs, {m.tokens} tokens, schema {m.schema_version}; integrity "
        f"checked, in {written.seconds:.1f}s")


@click.command("restore")
@db_option
@click.option("--from", "source", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="An archive written by `buildreport backup`.")
@click.option("--force", is_flag=True, help="Replace an existing database (never one a server has open).")
def restore_command(db: str, source: Path, force: bool) -> None:
    """Put a backup in place as the database, after checking it; refuses a database in use."""
    from buildreport.store import restore

    _sqlite_only(db)
    restored = restore(source, Path(db), force=force)
    m = restored.manifest
    err(f"restored {printable(restored.path)} from the backup of {m.created_at}: {sum(m.builds.values()):,} builds, "
        f"{m.logs:,} logs, {m.tokens} tokens, integrity checked, in {restored.seconds:.1f}s")


def older_than(ctx: click.Context, param: click.Parameter, text: str | None) -> int | None:
    """A duration such as 90d or 12h, in microseconds."""
    if text is None:
        return None
    match = DURATION.fullmatch(text.strip())
    if not match or int(match[1]) == 0:
        raise click.BadParameter(f"{printable(text)!r} is not a duration such as 365d, 12h or 90m")
    seconds = int(match[1]) * UNIT_SECONDS[match[2]]
    if seconds > 100_000 * 86_400:
        raise click.BadParameter(f"{printable(text)!r} is too long; at most 100000d")
    return seconds * 1_000_000


@click.command("prune")
@db_option
@click.option("--older-than", required=True, callback=older_than,
              help="Remove builds created longer ago than this (365d, 12h, 90m).")
@click.option("--logs-only", is_flag=True, help="Remove only the logs of those builds; keep the builds.")
@click.option("--account", help="Only this account's builds.")
@click.option("--keep-usage/--drop-usage", default=True, show_default=True,
              help="Keep the billable usage of removed builds, so /usage of past months stays as it was.")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@click.option("--vacuum", is_flag=True,
              help="SQLite made before incremental vacuum: switch it with one VACUUM, which rewrites the file and "
              "blocks writers meanwhile (stop the server first), so that pruned space is given back.")
def prune_command(db: str, older_than: int, logs_only: bool, account: str | None, keep_usage: bool,
                  dry_run: bool, vacuum: bool) -> None:
    """Remove old builds (or their logs) with every kept figure kept in step, and give the space back."""
    from buildreport.store import prune as retention

    policy = retention.Policy(older_than, logs_only, account, keep_usage)
    conn = open_db(db, create=False)
    now_us = int(time.time() * 1_000_000)
    try:
        if dry_run:
            would = retention.preview(conn, policy, now_us)
            err(f"would remove {would.builds:,} builds and {would.logs:,} logs ({_size(would.log_bytes)} of log "
                "text); nothing removed")
            return
        if vacuum and retention.switch_to_incremental(conn):
            err("switched the database to incremental vacuum (one VACUUM)")
        started = time.perf_counter()
        with retention.writers_turn(db) as turn:  # a running server's writes go between the batches
            done = retention.prune(conn, policy, now_us, turn)
            freed = retention.give_back_space(conn, turn)
    except DatabaseError as exc:
        raise click.ClickException(printable(str(exc))) from exc
    finally:
        conn.close()
    if is_postgres(db):
        space = "PostgreSQL's autovacuum makes the space reusable"
    elif freed is None:
        space = "the file keeps its size (its free pages are reused); --vacuum once to give space back"
    else:
        space = f"gave back {_size(freed)}"
    usage = "; usage of removed builds kept" if keep_usage and not logs_only else ""
    err(f"removed {done.builds:,} builds and {done.logs:,} logs ({_size(done.log_bytes)} of log text) in "
        f"{time.perf_counter() - started:.1f}s; {space}{usage}")


OPS_COMMANDS = (backup_command, restore_command, prune_command)
