"""Builds as CSV or JSON Lines, a page at a time: the stored JSON of each build is already its line.

Shared by `GET /builds/export` and `buildreport export`; neither ever holds more than one page.
"""

from __future__ import annotations

import csv
import io
import itertools
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

import click
import msgspec

from buildreport.config import default_db
from buildreport.errors import InvalidParams
from buildreport.filters import EXPORT_FORMATS, parse_export_query
from buildreport.models import Build
from buildreport.store import DatabaseError, describe, open_database
from buildreport.store.stats_queries import account_id, iter_export_pages
from buildreport.times import now_us

COLUMNS: tuple[str, ...] = Build.__struct_fields__
MEDIA_TYPES = {"csv": "text/csv", "ndjson": "application/x-ndjson"}  # Litestar adds "; charset=utf-8" to text
# A text cell beginning with one of these is a formula to a spreadsheet: OWASP's CSV injection advice is to
# write it after a single quote, which spreadsheets show as text and do not evaluate.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_DECODE = msgspec.json.decode
_ENCODE = msgspec.json.encode


def header(export_format: str) -> bytes:
    """What comes before the first build: the CSV header row, nothing for JSON Lines."""
    return _csv_lines([list(COLUMNS)]) if export_format == "csv" else b""


def _cell(value: object) -> object:
    """A CSV cell: null as empty, nested values (outputs, tags) as JSON, times as the API writes them, text
    that a spreadsheet would take for a formula after a single quote; numbers as they are."""
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return _ENCODE(value).decode()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def _csv_lines(rows: Iterable[list[object]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerows(rows)
    return out.getvalue().encode()


def page(bodies: list[bytes], export_format: str) -> bytes:
    """One page of builds (their stored JSON) in the export format."""
    if export_format == "ndjson":
        return b"\n".join([*bodies, b""])  # one line a build, each ended by a newline, in a single copy
    return _csv_lines([[_cell(build.get(name)) for name in COLUMNS] for build in map(_DECODE, bodies)])


# --- buildreport export ------------------------------------------------------------------------


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
