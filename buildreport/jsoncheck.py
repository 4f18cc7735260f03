"""What a JSON decoder lets pass but a build record must not hold: nesting deeper than any record has (a
decoder that recurses would fail on it), and a key given twice in one object (where the last would silently
win). Shared by `POST /builds` and `import`, so both refuse the same input with the same reason.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

# A record nests three levels (record, outputs, an output); the body of `POST /builds` adds an array.
MAX_DEPTH = 32
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_AS_SQUARE = bytes.maketrans(b"{}", b"[]")
_ENCODE = msgspec.json.Encoder().encode
_COLON_ESCAPES = (b"\\u003a", b"\\u003A")  # the only ways but ":" itself to write a colon in a JSON string


def too_deep(data: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON text nests arrays and objects more than `limit` deep, found without decoding it, at C speed:
    the brackets outside strings, from which each pass takes the innermost level. Invalid JSON gets some
    answer; the decoder names what is wrong with it."""
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    # Escaped backslashes, then escaped quotes, go first: every quote left opens or closes a string.
    text = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = b"".join(text.split(b'"')[0::2]).translate(_AS_SQUARE, _NOT_BRACKETS)
    for level in range(limit):
        inner = brackets.replace(b"[]", b"")
        if len(inner) == len(brackets):  # none left, or unbalanced (not JSON): opened deeper than allowed?
            return b"[" * (limit - level + 1) in brackets
        brackets = inner
    return bool(brackets)


def depth_reason(limit: int = MAX_DEPTH) -> str:
    return f"arrays and objects are nested more than {limit} deep; no build record is"


def duplicate_key(data: bytes) -> str | None:
    """A key that one object of this JSON text (valid, and no deeper than a record) holds twice, or None.

    Most texts are cleared by counting: every key is followed by a colon, so without a repeated key the text
    has as many colons (written or escaped) as the decoded value written out again, with its keys and the
    colons inside its strings; a repeated key drops a key, and its value, from the decoded value. Only a text
    that fails the count is read again, key by key."""
    colons = data.count(b":")
    if b"\\u003" in data:
        colons += sum(data.count(escape) for escape in _COLON_ESCAPES)
    if colons == _ENCODE(msgspec.json.decode(data)).count(b":"):
        return None
    repeated: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen and not repeated:
                repeated.append(key)
            seen.add(key)
        return dict(items)

    try:
        json.loads(data, object_pairs_hook=pairs)
    except ValueError:  # text the record's decoder took: nothing known to be repeated, rather than a fault
        return None
    return repeated[0] if repeated else None


def duplicate_reason(key: str) -> str:
    return f"the key {json.dumps(key)} appears twice in one object; each key may appear once"
