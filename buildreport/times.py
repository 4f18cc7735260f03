"""Time values as buildreport stores them: integer microseconds since the epoch, UTC."""

from __future__ import annotations

import re
import time
from datetime import UTC, date, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
US_PER_SECOND = 1_000_000
US_PER_DAY = 86_400 * US_PER_SECOND

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
# A space before the offset is what an unescaped "+" in a query string turns into.
_DATETIME = re.compile(
    r"(?P<base>\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}(?::\d{2})?)"
    r"(?:\.(?P<frac>\d{1,9}))?"
    r"(?P<offset>[Zz]|[+ -]\d{2}:\d{2})?"
)


def now_us() -> int:
    """The current time in microseconds since the epoch."""
    return time.time_ns() // 1000


def to_us(moment: datetime) -> int:
    """Microseconds since the epoch for an aware datetime."""
    return (moment - EPOCH) // MICROSECOND


def from_us(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def date_to_us(day: date) -> int:
    return to_us(datetime(day.year, day.month, day.day, tzinfo=UTC))


def format_us(us: int) -> str:
    """RFC 3339 in UTC with a Z, with microseconds only where the value has them."""
    text = from_us(us).isoformat().replace("+00:00", "Z")
    return text


def parse_date(text: str) -> date:
    """A calendar date written `YYYY-MM-DD`; ValueError for anything else."""
    if not _DATE.fullmatch(text):
        raise ValueError("expected a date as YYYY-MM-DD")
    return date.fromisoformat(text)


def parse_moment(text: str) -> int:
    """An ISO 8601 date (midnight UTC) or date-time (UTC unless it has an offset), in microseconds."""
    if _DATE.fullmatch(text):
        return date_to_us(parse_date(text))
    match = _DATETIME.fullmatch(text)
    if not match:
        raise ValueError("expected an ISO 8601 date (YYYY-MM-DD) or date-time (YYYY-MM-DDTHH:MM:SS[.ffffff][Z|±HH:MM])")
    frac = (match["frac"] or "")[:6].ljust(6, "0")
    offset = match["offset"] or "Z"
    if offset in ("Z", "z"):
        offset = "+00:00"
    elif offset[0] == " ":
        offset = "+" + offset[1:]
    moment = datetime.fromisoformat(f"{match['base'].upper()}.{frac}{offset}")
    return to_us(moment)


def month_start_us(now_us: int) -> int:
    now = from_us(now_us)
    return date_to_us(date(now.year, now.month, 1))
