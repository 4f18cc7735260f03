"""Commands that move builds in and out of a database: `import`, `export`, `migrate`, and `sample`, which
writes a dataset to import."""

from __future__ import annotations

import itertools
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import click

from buildreport.cli.shared import ACCOUNT_NAME, db_option, err, open_db, opened_dbs
from buildreport.config import default_db
from buildreport.errors import InvalidParams
from buildreport.faults import printable
from buildreport.filters import EXPORT_FORMATS, parse_export_query
from buildreport.insights.export import header, page
from buildreport.store import DatabaseError, describe, is_postgres, open_database
from buildreport.store.stats_queries import account_id, iter_export_pages
from buildreport.times import now_us

MAX_SAMPLE_BUILDS = 100_000_000
MAX_SAMPLE_DAYS = 36_500


@click.command("import")
@db_option
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--events", is_flag=True, help="Derive events (and send webhooks) as if the builds were sent now.")
def import_command(db: str, files: tuple[Path, ...], events: bool) -> None:
    """Import builds from JSON Lines files (plain or .gz), all or nothing."""
    from buildreport.imports.files import ImportFailed
    from buildreport.imports.reader import ReadingStopped

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


@click.command("migrate")
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
    from buildreport.imports.load import import_files

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


def _write_file(path: Path, chunks: Iterable[bytes]) -> int:
    """Write beside the target and rename at the end: an interrupted export leaves no half file."""
    count = 0
    with tempfile.NamedTemporaryFile("wb", dir=path.parent, prefix=f".{path.name}.", delete=False) as out:
        try:
            for chunk in chunks:
                out.write(chunk)
                count += 1
        except BaseException:
            out.close()
            Path(out.name).unlink(missing_ok=True)
            raise
    Path(out.name).replace(path)
    return count


@click.command("export")
@click.option("--db", default=default_db, show_default="$BUILDREPORT_DB or ./buildreport.db", help="Database file.")
@click.option("--account", required=True, help="Account whose builds are exported.")
@click.option("--format", "export_format", type=click.Choice(EXPORT_FORMATS), default="ndjson", show_default=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), help="File to write; default: stdout.")
@click.option("--tags", multiple=True, help="KEY:VALUE pairs, comma-separated; a build must carry every pair.")
@click.option("--status", multiple=True, help="Build statuses, comma-separated.")
@click.option("--create-time-from", help="ISO 8601 date or date-time [default: 24 hours ago].")
@click.option("--create-time-to", help="ISO 8601 date or date-time, exclusive [default: no bound].")
@click.option("--derivation-path", help="Exact derivation path.")
def export_command(db: str, account: str, export_format: str, output: Path | None, **given: object) -> None:
    """Every matching build, newest first, as JSON Lines or CSV: the filters and format of GET /builds/export."""
    pairs: list[tuple[str, str]] = [("format", export_format)]
    for name, value in given.items():
        for item in value if isinstance(value, tuple) else (value,):
            if item is not None:
                pairs.append((name, str(item)))
    try:
        query = parse_export_query(pairs, now_us())
    except InvalidParams as exc:
        raise click.UsageError("; ".join(f"--{p.name.replace('_', '-')}: {p.reason}" for p in exc.params)) from exc
    try:
        conn = open_database(db, create=False)
    except DatabaseError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        number = account_id(conn, account)
        if number is None:
            raise click.ClickException(f"no account {account!r} in {describe(db)}")
        pages = iter_export_pages(conn, number, query.filter)
        try:
            chunks = itertools.chain([header(query.format)], (page(bodies, query.format) for bodies in pages))
            if output is None:
                stream = sys.stdout.buffer
                for chunk in chunks:
                    stream.write(chunk)
                stream.flush()
            else:
                _write_file(output, chunks)
        finally:
            pages.close()  # ends its read transaction before the connection closes
    except OSError as exc:
        raise click.ClickException(f"cannot write the export: {exc.strerror or exc}") from exc
    finally:
        conn.close()


@click.command("sample")
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
