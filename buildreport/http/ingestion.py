"""The body of `POST /builds`: its media type, encoding and size, and the records in it, validated whole.

Reading is bounded everywhere: the body as it arrives, and a gzip body as it inflates, so neither a
large upload nor a small "zip bomb" can hold more than the configured number of bytes in memory.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import AsyncIterator

import msgspec

from buildreport.errors import Problem
from buildreport.imports.files import check_links, check_record, decode_error, repeated_key, undecodable
from buildreport.jsoncheck import depth_reason, too_deep
from buildreport.models import MAX_TAGS, BuildRecord, InvalidRecord

JSON = "application/json"
NDJSON = "application/x-ndjson"
MEDIA_TYPES = (JSON, NDJSON)
# A bad request names this many records; `invalid_record_count` says how many there were in all.
MAX_REPORTED_RECORDS = 100
_INFLATE_CHUNK = 1024 * 1024
_GZIP_MAGIC = b"\x1f\x8b"

_NAMED_FIELD = re.compile(r"(?:missing required|unknown) field `([^`]+)`")
_RECORD = msgspec.json.Decoder(BuildRecord)
_ARRAY = msgspec.json.Decoder(list[msgspec.Raw])


class InvalidRecords(Problem):
    """A 400 naming the bad records of a request (the first MAX_REPORTED_RECORDS of them), or a 409 naming
    those that contradict stored builds or their own ids."""

    def __init__(self, invalid: list[InvalidRecord], status: int = 400) -> None:
        shown = invalid[:MAX_REPORTED_RECORDS]
        first = shown[0]
        kind = "invalid" if status == 400 else "conflicting"
        super().__init__(
            status,
            f"{len(invalid)} {kind} record{'s' if len(invalid) != 1 else ''}; nothing was written. "
            f"First: record {first.index}: {first.field}: {first.reason}",
            invalid_records=[msgspec.structs.asdict(r) for r in shown],
            invalid_record_count=len(invalid),
        )
        self.invalid = invalid


def too_large(limit: int) -> Problem:
    return Problem(413, f"The request body is larger than {limit} bytes; send fewer records a request")


def media_type(headers: list[tuple[bytes, bytes]]) -> tuple[str, str]:
    """(media type, content coding) of a request, or a 415 that names what is accepted."""
    content_type = b""
    coding = b""
    for key, value in headers:
        if key == b"content-type":
            content_type = value
        elif key == b"content-encoding":
            coding = value
    kind = content_type.decode("latin-1").split(";")[0].strip().lower()
    if kind not in MEDIA_TYPES:
        raise Problem(415, f"Content-Type must be {JSON} (an array of records) or {NDJSON} (a record a line)")
    encoding = coding.decode("latin-1").strip().lower()
    if encoding not in ("", "identity", "gzip"):
        raise Problem(415, "Content-Encoding must be gzip or left out", headers={"Accept-Encoding": "gzip"})
    return kind, encoding


async def read_body(chunks: AsyncIterator[bytes], declared: int | None, limit: int) -> bytes:
    """The body as sent, refused with a 413 as soon as it is known to be larger than `limit`."""
    if declared is not None and declared > limit:
        raise too_large(limit)
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        parts.append(chunk)
    return b"".join(parts)


def inflate(body: bytes, limit: int) -> bytes:
    """A gzip body inflated in bounded steps; a 413 once it would exceed `limit` bytes. Members may follow one
    another (as gzip allows); anything else after the compressed data is a 400, never silently dropped."""
    parts: list[bytes] = []
    size = 0
    pending = body
    while True:
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            while pending:
                part = inflater.decompress(pending, min(_INFLATE_CHUNK, limit - size + 1))
                size += len(part)
                if size > limit:
                    raise too_large(limit)
                parts.append(part)
                pending = inflater.unconsumed_tail
                if inflater.eof:
                    break
        except zlib.error as exc:
            raise Problem(400, f"The body is not valid gzip: {exc}") from exc
        if not inflater.eof:
            raise Problem(400, "The gzip body is cut short")
        pending = inflater.unused_data
        if not pending:
            return b"".join(parts)
        if not pending.startswith(_GZIP_MAGIC):
            raise Problem(400, f"The gzip body has {len(pending)} bytes of trailing data after its compressed data")


def split_records(body: bytes, kind: str, max_records: int) -> list[bytes]:
    """The encoded records of a body: the elements of a JSON array, or the non-blank lines of JSON Lines."""
    if kind == JSON:
        try:
            raws: list[bytes] = [bytes(raw) for raw in _ARRAY.decode(body)]
        except msgspec.MsgspecError as exc:
            raise Problem(400, f"The body must be a JSON array of build records: {decode_error(exc)[1]}") from exc
        except RecursionError:
            # Decoding stops at the interpreter's recursion limit with this clean error; scanning every body's
            # brackets first (jsoncheck.too_deep) costs more than decoding it.
            raise Problem(400, f"The body must be a JSON array of build records: {depth_reason()}") from None
    else:
        raws = [line for line in body.split(b"\n") if line.strip()]
    if not raws:
        raise Problem(400, "The body holds no records")
    if len(raws) > max_records:
        # More items than the document's maxItems: an invalid body (400), saying the limit for senders to split by.
        raise Problem(
            400, f"{len(raws)} records in one request; at most {max_records} are taken", max_records=max_records
        )
    return raws


def check_write_record(record: BuildRecord) -> tuple[str, str] | None:
    """The import record's rules, and a name for the build: its build id or the sender's source id."""
    if record.build_id is None and record.source_id is None:
        return "source_id", "a record needs a build_id or a source_id"
    return check_record(record)  # type: ignore[arg-type]


def record_conflict(record: BuildRecord) -> InvalidRecord | None:
    """A record whose ids contradict each other: valid by the schema, so a conflict (409), as with stored builds."""
    if record.restart_of_source_id is not None and record.restart_of_source_id == record.source_id:
        return InvalidRecord(-1, "restart_of_source_id", "cannot equal source_id")
    problem = check_links(record)  # type: ignore[arg-type]
    return None if problem is None else InvalidRecord(-1, *problem)


def _field_reason(raw: bytes, exc: msgspec.MsgspecError) -> tuple[str, str]:
    field, reason = undecodable(raw, exc)
    if "unknown field `account`" in reason:
        return "account", "records are written to the token's account; leave `account` out"
    named = _NAMED_FIELD.search(reason)
    if field == "(record)" and named is not None:
        return named[1], reason
    return field, reason


def _whole_numbers(value: object) -> object:
    """Floats without a fraction as ints: JSON Schema counts `3.0` as an integer, as many JSON encoders write it."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_whole_numbers(item) for item in value]
    if isinstance(value, dict):
        return {key: _whole_numbers(item) for key, item in value.items()}
    return value


def decode_record(raw: bytes) -> BuildRecord:
    """One record; the typed decoder first, and on a float where an integer belongs, again with whole floats as
    integers (the rare, slower path)."""
    try:
        return _RECORD.decode(raw)
    except msgspec.ValidationError as exc:
        if "got `float`" not in str(exc):
            raise
        if too_deep(raw):  # decoded as plain data next, which recurses
            raise msgspec.ValidationError(depth_reason()) from None
        return msgspec.convert(_whole_numbers(msgspec.json.decode(raw)), BuildRecord)


def with_trusted_tags(record: BuildRecord, trusted: dict[str, str]) -> BuildRecord:
    """The record with the tags its token's claims vouch for (an exchanged token's): they win over the body's."""
    if not trusted:
        return record
    tags = {**record.tags, **trusted}
    if len(tags) > MAX_TAGS:
        raise msgspec.ValidationError(
            f"at most {MAX_TAGS} tags, counting the {len(trusted)} the token's OIDC claims add - at `$.tags`"
        )
    return msgspec.structs.replace(record, tags=tags)


def parse_records(
    body: bytes, kind: str, max_records: int, trusted: dict[str, str] | None = None
) -> list[BuildRecord]:
    """Every record of a body, or InvalidRecords naming each bad one (its 0-based position among the records).
    `trusted` tags are set on every record, over any the body gives them."""
    invalid: list[InvalidRecord] = []
    records: list[BuildRecord] = []
    for index, raw in enumerate(split_records(body, kind, max_records)):
        try:
            record = with_trusted_tags(decode_record(raw), trusted or {})
        except msgspec.MsgspecError as exc:
            invalid.append(InvalidRecord(index, *_field_reason(raw, exc)))
            continue
        except UnicodeDecodeError as exc:  # msgspec checks UTF-8 inside strings with Python's codec
            invalid.append(InvalidRecord(index, "(record)", f"not valid UTF-8 (byte {exc.start} of a string)"))
            continue
        problem = repeated_key(raw) or check_write_record(record)
        if problem is not None:
            invalid.append(InvalidRecord(index, *problem))
            continue
        records.append(record)
    if invalid:
        raise InvalidRecords(invalid)
    conflicts = [
        InvalidRecord(index, conflict.field, conflict.reason)
        for index, record in enumerate(records)
        if (conflict := record_conflict(record)) is not None
    ]
    if conflicts:
        raise InvalidRecords(conflicts, status=409)
    return records


def decode_body(
    body: bytes, kind: str, encoding: str, max_body_bytes: int, max_records: int,
    trusted: dict[str, str] | None = None,
) -> list[BuildRecord]:
    """Inflate (when gzip) and parse a request body; CPU work, run off the event loop."""
    if encoding == "gzip":
        body = inflate(body, max_body_bytes)
    return parse_records(body, kind, max_records, trusted)
