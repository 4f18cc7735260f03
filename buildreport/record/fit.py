"""Fit a recorded build into the write format's ranges instead of losing it.

A build's record carries text the runner does not control: Nix's error message, the derivation's and the
session's tags, the log. Where one is longer (or there are more of them) than the write format allows, the
record is trimmed to fit — the limits are read from models.BuildRecord itself, the one source of ranges —
so the build is still recorded rather than refused whole by the service.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec.inspect as mi

from buildreport.models import BuildRecord

ELLIPSIS = "…"


def _unwrap(kind: mi.Type) -> mi.Type:
    if isinstance(kind, mi.UnionType):
        return next(t for t in kind.types if not isinstance(t, mi.NoneType))
    return kind


@cache
def _fields() -> dict[str, mi.Type]:
    info = mi.type_info(BuildRecord)
    assert isinstance(info, mi.StructType)
    return {f.name: _unwrap(f.type) for f in info.fields}


def _max(kind: mi.Type) -> int | None:
    return getattr(kind, "max_length", None)


def fit(record: dict[str, Any]) -> dict[str, Any]:
    """The record with its message, log, tags and outputs cut to the lengths and counts BuildRecord allows."""
    fields = _fields()
    message = record.get("status_message")
    limit = _max(fields["status_message"])
    if message and limit is not None and len(message) > limit:
        record["status_message"] = message[: limit - 1] + ELLIPSIS  # the start says what failed
    log = record.get("log")
    limit = _max(fields["log"])
    if log and limit is not None and len(log) > limit:
        record["log"] = log[-limit:]  # the end says how it ended
    tags = fields["tags"]
    if isinstance(tags, mi.DictType):
        key_max, value_max = _max(tags.key_type), _max(tags.value_type)
        kept = {
            k: v if value_max is None or len(v) <= value_max else v[: value_max - 1] + ELLIPSIS
            for k, v in record["tags"].items()
            if key_max is None or len(k) <= key_max
        }
        count = _max(tags)
        record["tags"] = dict(list(kept.items())[:count]) if count is not None else kept
    limit = _max(fields["outputs"])
    if limit is not None:
        record["outputs"] = record["outputs"][:limit]
    return record
