"""Nesting and repeated keys found in JSON text exactly as a decoder that keeps every key would find them."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from buildreport.jsoncheck import MAX_DEPTH, duplicate_key, too_deep

# Strings full of what a scan could mistake for structure: brackets, quotes, backslashes, colons.
TEXT = st.text(alphabet='[]{}":\\,ab\u003a', max_size=8)
VALUES = st.recursive(
    st.none() | st.integers() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=40,
)


def depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


def nested(value: Any, levels: int) -> Any:
    for level in range(levels):
        value = [value] if level % 2 else {"k[": value}
    return value


@settings(max_examples=300)
@given(value=VALUES, extra=st.integers(0, 40), ascii_only=st.booleans())
def test_too_deep_counts_the_levels_of_arrays_and_objects(value, extra, ascii_only):
    value = nested(value, extra)
    text = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert too_deep(text, 8) == (depth(value) > 8)
    assert too_deep(text) == (depth(value) > MAX_DEPTH)


def test_unclosed_nesting_is_too_deep():
    assert too_deep(b"[" * 10_000)
    assert too_deep(b'{"a": ' * 40)
    assert not too_deep(b"[" * MAX_DEPTH)


def pairs_text(pairs: list[tuple[str, Any]]) -> str:
    return "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in pairs) + "}"


@settings(max_examples=300)
@given(
    pairs=st.lists(st.tuples(TEXT, VALUES), max_size=6),
    inner=st.lists(st.tuples(TEXT, TEXT), max_size=4),
    escaped=st.booleans(),
)
def test_duplicate_key_finds_a_key_given_twice_in_any_object(pairs, inner, escaped):
    text = pairs_text([*pairs, ("inner", "@")]).replace('"@"', pairs_text(inner))
    if escaped:
        text = text.replace(":", "\\u003a", 1) if '":' not in text[:2] else text
    keys = [k for k, _ in pairs] + ["inner"]
    repeated = [k for k in keys if keys.count(k) > 1] + [k for k, _ in inner if [i for i, _ in inner].count(k) > 1]
    try:
        json.loads(text)
    except ValueError:
        return  # the escape landed outside a string
    found = duplicate_key(text.encode())
    assert (found is not None) == bool(repeated)
    if found is not None:
        assert found in repeated
