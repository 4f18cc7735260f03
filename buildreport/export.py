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
MEDIA_TYPES = {"csv": "text/csv; charset=utf-8", "ndjson": "application/x-ndjson"}
_DECODE = msgspec.json.decode
_ENCODE = msgspec.json.encode


def header(export_format: str) -> bytes:
    """What comes before the first build: the CSV header row, nothing for JSON Lines."""
    return _csv_lines([list(COLUMNS)]) if export_format == "csv" else b""


def _cell(value: object) -> object:
    """A CSV cell: null as empty, nested values (outputs, tags) as JSON, times as the API writes them."""
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return _ENCODE(value).decode()
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _csv_lines(rows: Iterable[list[object]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerows(rows)
    return out.getvalue().encode()


def page(bodies: list[bytes], export_format: str) -> bytes:
    """One page of builds (their stored JSON) in the export format."""
    if export_format == "ndjson":
        return b"\n".join(bodies) + b"\n" if bodies else b""
    return _csv_lines([[_cell(build.get(name)) for name in COLUMNS] for build in map(_DECODE, bodies)])
