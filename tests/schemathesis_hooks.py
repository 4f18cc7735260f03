"""What the OpenAPI document says in words but its schema language cannot: schemathesis learns it here.

Loaded by tests/test_docs.py through SCHEMATHESIS_HOOKS. Only requests the document itself calls invalid
are left out: a `from` later than its `to`, each valid alone. Everything else schemathesis generates is sent.
"""

from __future__ import annotations

from typing import Any

import schemathesis

from buildreport.times import parse_date, parse_moment

RANGES = (("create_time_from", "create_time_to", parse_moment), ("from", "to", lambda text: parse_date(text)))


def _parsed(parse: Any, text: Any) -> Any:
    try:
        return parse(text) if isinstance(text, str) else None
    except (ValueError, OverflowError):
        return None


@schemathesis.hook
def filter_query(ctx: Any, query: dict[str, Any] | None) -> bool:
    if not query:
        return True
    for low_name, high_name, parse in RANGES:
        low, high = _parsed(parse, query.get(low_name)), _parsed(parse, query.get(high_name))
        if low is not None and high is not None and low > high:
            return False
    return True
