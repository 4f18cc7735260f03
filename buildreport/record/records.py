"""One build record in the write format: what `POST /builds` and a spool file take (models.BuildRecord).

That is an import record without `account` (the token's or the command line's) and without `build_id`,
named instead by the recorder's own `source_id`, so the `running` record of a build and its final one
(same source id) are one build wherever they arrive.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from datetime import UTC, datetime
from typing import Any

import msgspec

from buildreport.models import BuildRecord

SOURCE_ID_MAX = 200
_HOST_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class RecordInvalid(Exception):
    """A record the service would refuse; the message names the field."""


def new_invocation() -> str:
    """An id for one run of a recorder, unique on this host: the pid and random bits."""
    return f"{os.getpid()}-{secrets.token_hex(4)}"


def drv_hash(drv_path: str) -> str:
    """The store hash of a derivation path: the 32 characters before its name."""
    return os.path.basename(drv_path).split("-", 1)[0]


def source_id(invocation: str, drv_path: str, host: str | None = None) -> str:
    """`<host>:<invocation>:<drv hash>`: unique per build, at most 200 characters whatever the host name."""
    name = _HOST_SAFE.sub("_", host if host is not None else socket.gethostname()) or "host"
    tail = f":{invocation}:{drv_hash(drv_path)}"
    return name[: SOURCE_ID_MAX - len(tail)] + tail


def utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def make_record(**fields: Any) -> BuildRecord:
    """A BuildRecord from its fields, checked against every type and range of the write format."""
    try:
        return msgspec.convert(fields, BuildRecord)
    except msgspec.ValidationError as exc:
        raise RecordInvalid(str(exc)) from exc


def encode(record: BuildRecord) -> bytes:
    """One JSON line (without its newline), as a spool file holds it."""
    return msgspec.json.encode(record)
