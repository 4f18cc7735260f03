"""What the OpenAPI document says in words but its schema language cannot: schemathesis learns it here.

Loaded by tests/test_docs.py through SCHEMATHESIS_HOOKS. One rule spans two parameters: a `from` must not
be later than its `to` (the document says so in their descriptions; each value alone is valid). A request
that breaks only that rule is sent with the two values in order; every other request goes as generated.
"""

from __future__ import annotations

from typing import Any

import schemathesis

from buildreport.times import parse_date, parse_moment

RANGES = (("create_time_from", "create_time_to", parse_moment), ("from", "to", parse_date))


def _parsed(parse: Any, text: Any) -> Any:
    try:
        return parse(text) if isinstance(text, str) else None
    except (ValueError, OverflowError):
        return None


@schemathesis.hook
def before_call(ctx: Any, case: Any, kwargs: dict[str, Any]) -> None:
    query = case.query
    if not isinstance(query, dict):
        return
    for low_name, high_name, parse in RANGES:
        low, high = _parsed(parse, query.get(low_name)), _parsed(parse, query.get(high_name))
        if low is not None and high is not None and low > high:
            query[low_name], query[high_name] = query[high_name], query[low_name]
