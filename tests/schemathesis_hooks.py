"""What the OpenAPI document says in words but its schema language cannot: schemathesis learns it here.

Loaded by tests/test_docs.py through SCHEMATHESIS_HOOKS. Two rules span several parameters (the document
says so in their descriptions; each value alone is valid): a `from` must not be later than its `to`, and a
time grouping of /builds/stats covers at most MAX_TIME_GROUPS days or hours. A request that breaks only such
a rule is sent with the values put right; every other request goes as generated. So is a record of a
`POST /builds` body whose `start_time` is before its `create_time` (which the document says in words).

And one rule of the path grammar: an integer in a path is written in plain decimal (`/builds/212`, as the
service writes its links). JSON Schema counts 212.0 as an integer, so a stateful run that takes a build id
from a request body written as 212.0 writes it into the path as 212.

And one of time: `GET /events?wait=N` holds the request up to N seconds when no event follows; the long poll
is tested on its own (tests/test_events_deliver.py), and here it waits at most a second.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec
import schemathesis

from buildreport.filters import MAX_TIME_GROUPS
from buildreport.times import US_PER_DAY, format_us, now_us, parse_date, parse_moment

RANGES = (("create_time_from", "create_time_to", parse_moment), ("from", "to", parse_date))


def _parsed(parse: Any, text: Any) -> Any:
    try:
        return parse(text) if isinstance(text, str) else None
    except (ValueError, OverflowError):
        return None


@schemathesis.hook
def before_call(ctx: Any, case: Any, kwargs: dict[str, Any]) -> None:
    path = case.path_parameters
    if isinstance(path, dict):
        for name, value in path.items():
            if isinstance(value, float) and value.is_integer():
                path[name] = int(value)
    _start_once_created(case.body)
    query = case.query
    if not isinstance(query, dict):
        return
    for low_name, high_name, parse in RANGES:
        low, high = _parsed(parse, query.get(low_name)), _parsed(parse, query.get(high_name))
        if low is not None and high is not None and low > high:
            query[low_name], query[high_name] = query[high_name], query[low_name]

    # /builds/stats groups by day when no group_by is given: that grouping is bounded too.
    default = "day" if getattr(case.operation, "path", None) == "/builds/stats" else None
    _bound_time_groups(query, default)
    wait = query.get("wait")
    if isinstance(wait, int | str) and str(wait).isdigit() and int(wait) > 1:
        query["wait"] = 1


def _start_once_created(body: Any) -> None:
    """Records that start before they were created (or within the microsecond) start as they were created."""
    for record in body if isinstance(body, list) else []:
        if isinstance(record, dict):
            create, start = _moment(record.get("create_time")), _moment(record.get("start_time"))
            if create is not None and start is not None and start <= create:
                record["start_time"] = record["create_time"]


def _moment(text: Any) -> datetime | None:
    """A time as the service reads it from a record."""
    try:
        moment = msgspec.convert(text, datetime) if isinstance(text, str) else None
    except msgspec.ValidationError:
        return None
    return moment if moment is not None and moment.tzinfo is not None else None


def _bound_time_groups(query: dict[str, Any], default: str | None) -> None:
    """Start a day or hour grouping (`default` when the query names none) late enough that its window holds at
    most MAX_TIME_GROUPS periods."""
    grouping = query.get("group_by", default)
    period = {"day": US_PER_DAY, "hour": US_PER_DAY // 24}.get(grouping) if isinstance(grouping, str) else None
    if period is None:
        return
    high = _parsed(parse_moment, query.get("create_time_to"))
    high = now_us() if high is None else high
    low = _parsed(parse_moment, query.get("create_time_from"))
    if low is not None and high - low > (MAX_TIME_GROUPS - 1) * period:
        query["create_time_from"] = format_us(high - (MAX_TIME_GROUPS - 1) * period)
