"""Builds as CSV or JSON Lines, a page at a time: the stored JSON of each build is already its line.

Shared by `GET /builds/export` and `buildreport export`; neither ever holds more than one page.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable

import msgspec

from buildreport.models import Build

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
