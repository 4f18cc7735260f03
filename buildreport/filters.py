"""Query strings turned into typed filters: pure functions, no SQL and no HTTP."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Annotated

import msgspec

from buildreport.errors import MAX_SHOWN_CHARS, InvalidParams, shown
from buildreport.filter_spec import FILTER_FIELDS, MAX_STATUS_VALUES, MAX_TAG_PAIRS, WINDOW_FIELDS
from buildreport.models import BuildStatus, InvalidParam
from buildreport.times import US_PER_DAY, date_to_us, from_us, month_start_us, parse_date, parse_moment

MAX_LIMIT = 10_000
DEFAULT_LIMIT = 500
MAX_TTL_SECONDS = 604_800
DEFAULT_TTL_SECONDS = 3_600
MAX_BUILD_ID = 2**63 - 1
_STATUSES = ", ".join(s.value for s in BuildStatus)
# Canonical decimal only (no sign, no leading zero), at most 19 digits: one text per number, and int() is
# never asked to convert a huge string.
CANONICAL_INT = re.compile(r"0|[1-9][0-9]{0,18}")
NonNegativeInt64 = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
# 0 to 2**63 - 1 each: a first hex digit of 0-7 keeps the value within a signed 64-bit integer.
CURSOR_PATTERN = "[0-7][0-9a-f]{15}[0-7][0-9a-f]{15}"
_CURSOR = re.compile(CURSOR_PATTERN)

Pairs = Sequence[tuple[str, str]]


class BuildFilter(msgspec.Struct, frozen=True):
    """Which builds of an account a list or summary covers: `create_from_us <= create_time < create_to_us`."""

    create_from_us: int
    create_to_us: int | None = None
    statuses: tuple[BuildStatus, ...] = ()
    tags: tuple[tuple[str, str], ...] = ()
    derivation_path: str | None = None


def set_fields(build_filter: BuildFilter) -> frozenset[str]:
    """The names of the fields a filter restricts: the window's start always, the others when given."""
    return frozenset(
        field.name for field in FILTER_FIELDS if getattr(build_filter, field.attr) not in (None, ())
    )


class Cursor(msgspec.Struct, frozen=True, array_like=True):
    """The position after the last build of a page, in list order.

    Written as two 64-bit values in fixed-width hex, so that every string of the documented pattern
    (CURSOR_PATTERN) is a position: a client or a fuzzer can send nothing the pattern allows that fails.
    """

    create_us: NonNegativeInt64
    build_id: NonNegativeInt64

    def encode(self) -> str:
        return f"{self.create_us:016x}{self.build_id:016x}"

    @classmethod
    def decode(cls, text: str) -> Cursor:
        if not _CURSOR.fullmatch(text):
            raise ValueError("not a cursor this server issued; follow the Link header of the previous page")
        return cls(create_us=int(text[:16], 16), build_id=int(text[16:], 16))


class ListQuery(msgspec.Struct, frozen=True):
    filter: BuildFilter
    limit: int = DEFAULT_LIMIT
    cursor: Cursor | None = None


class UsageQuery(msgspec.Struct, frozen=True):
    """Billable builds whose stop time falls in `from_us <= stop < to_us`."""

    from_us: int
    to_us: int | None = None


class _Params:
    """Collects query parameters and every problem with them, so one 400 names them all."""

    def __init__(self, pairs: Pairs, allowed: Iterable[str], repeatable: Iterable[str] = ()) -> None:
        self.errors: list[InvalidParam] = []
        self.values: dict[str, list[str]] = {}
        allowed_set, repeatable_set = set(allowed), set(repeatable)
        for name, value in pairs:
            if name not in allowed_set:
                allowed_text = ", ".join(sorted(allowed_set)) or "none"
                self.fail(name[:MAX_SHOWN_CHARS], f"unknown parameter; allowed here: {allowed_text}")
                continue
            seen = self.values.setdefault(name, [])
            if seen and name not in repeatable_set:
                self.fail(name, "given more than once")
            seen.append(value)

    def fail(self, name: str, reason: str) -> None:
        self.errors.append(InvalidParam(name=name, reason=reason))

    def single(self, name: str) -> str | None:
        values = self.values.get(name)
        return values[0] if values else None

    def joined(self, name: str) -> list[str] | None:
        values = self.values.get(name)
        return ",".join(values).split(",") if values is not None else None

    def raise_if_failed(self) -> None:
        if self.errors:
            raise InvalidParams(self.errors)


def _too_many(params: _Params, name: str, items: list[str], cap: int, what: str) -> bool:
    """One error for a list over its cap, rather than one per item."""
    if len(items) <= cap:
        return False
    params.fail(name, f"{len(items)} {what} given; at most {cap} per request")
    return True


def _parse_tags(params: _Params, name: str = "tags") -> tuple[tuple[str, str], ...]:
    items = params.joined(name)
    if items is None or _too_many(params, name, items, MAX_TAG_PAIRS, "tag pairs"):
        return ()
    tags: dict[tuple[str, str], None] = {}
    for item in items:
        key, colon, value = item.partition(":")
        if not colon:
            params.fail(name, f"{shown(item)} is not KEY:VALUE")
        elif not key:
            params.fail(name, f"{shown(item)} has an empty key")
        elif "\x00" in item:
            params.fail(name, f"{shown(item)} contains the NUL character, which no tag holds")
        else:
            tags[(key, value)] = None
    return tuple(tags)


def _parse_statuses(params: _Params, name: str = "status") -> tuple[BuildStatus, ...]:
    items = params.joined(name)
    if items is None or _too_many(params, name, items, MAX_STATUS_VALUES, "status values"):
        return ()
    statuses: dict[BuildStatus, None] = {}
    for item in items:
        try:
            statuses[BuildStatus(item)] = None
        except ValueError:
            params.fail(name, f"{shown(item)} is not a build status; allowed: {_STATUSES}")
    return tuple(statuses)


def _parse_moment(params: _Params, name: str) -> int | None:
    text = params.single(name)
    if text is None:
        return None
    try:
        moment = parse_moment(text)
        from_us(moment)  # must be a UTC time that can be written back, e.g. in a Link header
    except OverflowError:
        params.fail(name, f"{shown(text)}: out of range; years 0001 to 9999 in UTC")
        return None
    except ValueError as exc:
        params.fail(name, f"{shown(text)}: {exc}")
        return None
    return moment


def _parse_int(params: _Params, name: str, low: int, high: int, default: int) -> int:
    text = params.single(name)
    if text is None:
        return default
    if not CANONICAL_INT.fullmatch(text) or not low <= int(text) <= high:
        params.fail(name, f"{shown(text)} is not an integer from {low} to {high} in plain decimal")
        return default
    return int(text)


def _check_range(params: _Params, low: int | None, high: int | None, low_name: str, high_name: str) -> None:
    if low is not None and high is not None and low > high:
        params.fail(low_name, f"{low_name} is later than {high_name}")


def _parse_store_path(params: _Params, name: str) -> str | None:
    text = params.single(name)
    if text == "":
        params.fail(name, "must not be empty")
    elif text is not None and "\x00" in text:
        params.fail(name, "contains the NUL character, which no store path holds")
    return text


# How each kind of filter field reads its text: (params, name) -> the BuildFilter value.
_FIELD_PARSERS: dict[str, Callable[[_Params, str], object]] = {
    "moment": _parse_moment,
    "store_path": _parse_store_path,
    "statuses": _parse_statuses,
    "tags": _parse_tags,
}


def _parse_filter(params: _Params, now_us: int) -> BuildFilter:
    """Every field of FILTER_FIELDS read by its kind; a field the route does not take reads as not given."""
    values = {field.attr: _FIELD_PARSERS[field.kind](params, field.name) for field in FILTER_FIELDS
              if field.name in WINDOW_FIELDS}
    create_from, create_to = values["create_from_us"], values["create_to_us"]
    if create_from is None:
        create_from = now_us - US_PER_DAY
        if create_to is not None and create_to < create_from:  # type: ignore[operator]
            # Only an explicit `from` can be wrong; an early `to` with the default `from` selects nothing.
            create_to = create_from
    else:
        _check_range(params, create_from, create_to, *WINDOW_FIELDS)  # type: ignore[arg-type]
    values.update(create_from_us=create_from, create_to_us=create_to)
    for field in FILTER_FIELDS:
        if field.name not in WINDOW_FIELDS:
            values[field.attr] = _FIELD_PARSERS[field.kind](params, field.name)
    return BuildFilter(**values)  # type: ignore[arg-type]


# The filter's names on the routes that take all of it (list, export) and on the summaries (summary, stats).
FILTER_NAMES = tuple(field.name for field in FILTER_FIELDS)
SUMMARY_FILTER_NAMES = tuple(field.name for field in FILTER_FIELDS if field.summaries)
_REPEATABLE = tuple(field.name for field in FILTER_FIELDS if field.repeats)


def parse_list_query(pairs: Pairs, now_us: int) -> ListQuery:
    """Parameters of GET /builds."""
    params = _Params(pairs, (*FILTER_NAMES, "limit", "cursor"), _REPEATABLE)
    build_filter = _parse_filter(params, now_us)
    limit = _parse_int(params, "limit", 1, MAX_LIMIT, DEFAULT_LIMIT)
    cursor = None
    if (text := params.single("cursor")) is not None:
        try:
            cursor = Cursor.decode(text)
        except ValueError as exc:
            params.fail("cursor", str(exc))
    params.raise_if_failed()
    return ListQuery(filter=build_filter, limit=limit, cursor=cursor)


def parse_summary_query(pairs: Pairs, now_us: int) -> BuildFilter:
    """Parameters of GET /builds/summary: the list filters without `limit` and `derivation_path`."""
    params = _Params(pairs, SUMMARY_FILTER_NAMES, _REPEATABLE)
    build_filter = _parse_filter(params, now_us)
    params.raise_if_failed()
    return build_filter


def parse_usage_query(pairs: Pairs, now_us: int) -> UsageQuery:
    """Parameters of GET /usage: whole UTC dates."""
    params = _Params(pairs, ("from", "to"))
    bounds: dict[str, int | None] = {}
    for name in ("from", "to"):
        text = params.single(name)
        bounds[name] = None
        if text is None:
            continue
        try:
            bounds[name] = date_to_us(parse_date(text))
        except ValueError as exc:
            reason = "a date (YYYY-MM-DD) is expected, not a date-time" if "T" in text.upper() else str(exc)
            params.fail(name, f"{shown(text)}: {reason}")
    from_us = bounds["from"] if bounds["from"] is not None else month_start_us(now_us)
    if bounds["from"] is not None:
        _check_range(params, from_us, bounds["to"], "from", "to")
    params.raise_if_failed()
    to_us = bounds["to"]
    if to_us is not None and to_us < from_us:
        to_us = from_us
    return UsageQuery(from_us=from_us, to_us=to_us)


def parse_ttl(pairs: Pairs) -> int:
    """Parameters of GET /builds/{id}/url."""
    params = _Params(pairs, ("ttl_seconds",))
    ttl = _parse_int(params, "ttl_seconds", 1, MAX_TTL_SECONDS, DEFAULT_TTL_SECONDS)
    params.raise_if_failed()
    return ttl


MAX_BADGE_TTL_SECONDS = 10 * 366 * 86_400  # ten years
DEFAULT_BADGE_TTL_SECONDS = 365 * 86_400
MAX_DERIVATION_NAME = 1_000


class BadgeSeries(msgspec.Struct, frozen=True, array_like=True):
    """What a badge shows the newest finished build of: a derivation name, optionally a system and tags."""

    derivation: str
    system: str | None = None
    tags: tuple[tuple[str, str], ...] = ()


def _parse_text(params: _Params, name: str, required: bool) -> str | None:
    text = params.single(name)
    if text is None:
        if required:
            params.fail(name, "is required")
    elif not text or len(text) > MAX_DERIVATION_NAME or "\x00" in text:
        params.fail(name, f"must be 1 to {MAX_DERIVATION_NAME} characters without NUL")
        return None
    return text


def parse_badge_query(pairs: Pairs) -> tuple[BadgeSeries, int]:
    """Parameters of GET /badges/url: the series and the link's lifetime in seconds."""
    params = _Params(pairs, ("derivation", "system", "tags", "ttl_seconds"), ("tags",))
    derivation = _parse_text(params, "derivation", True)
    system = _parse_text(params, "system", False)
    tags = _parse_tags(params)
    ttl = _parse_int(params, "ttl_seconds", 1, MAX_BADGE_TTL_SECONDS, DEFAULT_BADGE_TTL_SECONDS)
    params.raise_if_failed()
    return BadgeSeries(derivation or "", system, tags), ttl


def parse_no_params(pairs: Pairs) -> None:
    if pairs:  # any parameter is one too many
        _Params(pairs, ()).raise_if_failed()


def parse_build_id(text: str) -> int:
    """The `{build_id}` of a path: a positive 64-bit integer."""
    number = int(text) if CANONICAL_INT.fullmatch(text) else 0
    if not 1 <= number <= MAX_BUILD_ID:
        reason = f"{shown(text)} is not a positive 64-bit integer in plain decimal (no sign or leading zero)"
        raise InvalidParams([InvalidParam(name="build_id", reason=reason)])
    return number


# --- insights: stats, usage breakdown, export ---------------------------------------------------

TIME_GROUPINGS = ("day", "hour")
VALUE_GROUPINGS = ("system", "status", "derivation", "derivation_path")
TAG_PREFIX = "tag:"
MAX_GROUPS = 1_000
DEFAULT_GROUPS = 100
# A time grouping lists every period of its window, so the window is bounded in periods.
MAX_TIME_GROUPS = 10_000
EXPORT_FORMATS = ("csv", "ndjson")


_PLAIN_TAG_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


class GroupBy(msgspec.Struct, frozen=True):
    """How builds are grouped: `kind` is a time or value grouping, or `tag` with the tag's key."""

    kind: str
    tag_key: str | None = None

    @property
    def plain_tag(self) -> bool:
        """A tag key that is a plain name: SQLite can read its value from the stored JSON by path."""
        return self.kind == "tag" and self.tag_key is not None and bool(_PLAIN_TAG_KEY.fullmatch(self.tag_key))


class StatsQuery(msgspec.Struct, frozen=True):
    """Parameters of GET /builds/stats; `end_us` closes the window of a time grouping (`to`, or now)."""

    filter: BuildFilter
    group_by: GroupBy
    end_us: int
    limit: int = DEFAULT_GROUPS


class BreakdownQuery(msgspec.Struct, frozen=True):
    usage: UsageQuery
    group_by: GroupBy


class ExportQuery(msgspec.Struct, frozen=True):
    filter: BuildFilter
    format: str


def _parse_group_by(params: _Params, allowed: tuple[str, ...]) -> GroupBy:
    text = params.single("group_by")
    if text is None:
        return GroupBy("day")
    if text.startswith(TAG_PREFIX):
        if not text[len(TAG_PREFIX) :]:
            params.fail("group_by", f"{text!r} needs a tag key, e.g. tag:project")
        elif "\x00" in text:
            params.fail("group_by", f"{shown(text)} contains the NUL character, which no tag key holds")
        return GroupBy("tag", text[len(TAG_PREFIX) :])
    if text not in allowed:
        params.fail("group_by", f"{text!r} is not a grouping; allowed: {', '.join(allowed)}, tag:KEY")
        return GroupBy("day")
    return GroupBy(text)


def parse_stats_query(pairs: Pairs, now_us: int) -> StatsQuery:
    """Parameters of GET /builds/stats: the summary filters, `group_by` and `limit` on groups."""
    params = _Params(pairs, (*SUMMARY_FILTER_NAMES, "group_by", "limit"), _REPEATABLE)
    build_filter = _parse_filter(params, now_us)
    group_by = _parse_group_by(params, (*TIME_GROUPINGS, *VALUE_GROUPINGS))
    limit = _parse_int(params, "limit", 1, MAX_GROUPS, DEFAULT_GROUPS)
    end_us = build_filter.create_to_us
    if end_us is None:
        end_us = max(now_us, build_filter.create_from_us)
    if group_by.kind in TIME_GROUPINGS:
        # The window ends at `to` or now, however far ahead a build was dated: its periods are counted, and
        # bounded, before any work.
        build_filter = msgspec.structs.replace(build_filter, create_to_us=end_us)
        period = US_PER_DAY if group_by.kind == "day" else US_PER_DAY // 24
        periods = -(-end_us // period) - build_filter.create_from_us // period
        if periods > MAX_TIME_GROUPS:
            params.fail(
                "group_by",
                f"{group_by.kind} over this window makes {periods} groups, more than {MAX_TIME_GROUPS};"
                " narrow create_time_from/create_time_to",
            )
    params.raise_if_failed()
    return StatsQuery(filter=build_filter, group_by=group_by, end_us=end_us, limit=limit)


def parse_breakdown_query(pairs: Pairs, now_us: int) -> BreakdownQuery:
    """Parameters of GET /usage/breakdown: those of /usage and `group_by` (day, system or tag:KEY)."""
    params = _Params(pairs, ("from", "to", "group_by"))
    group_by = _parse_group_by(params, ("day", "system"))
    # Unknown and repeated names are reported above; /usage's own parser reads the first of each date.
    dates = [(name, values[0]) for name, values in params.values.items() if name != "group_by"]
    try:
        usage = parse_usage_query(dates, now_us)
    except InvalidParams as exc:
        raise InvalidParams([*params.errors, *exc.params]) from None
    params.raise_if_failed()
    return BreakdownQuery(usage=usage, group_by=group_by)


def parse_export_query(pairs: Pairs, now_us: int) -> ExportQuery:
    """Parameters of GET /builds/export: the filters of /builds without `limit`, and `format`."""
    params = _Params(pairs, (*FILTER_NAMES, "format"), _REPEATABLE)
    build_filter = _parse_filter(params, now_us)
    given = params.single("format")
    export_format = "ndjson" if given is None else given
    if export_format not in EXPORT_FORMATS:
        params.fail("format", f"{export_format!r} is not an export format; allowed: {', '.join(EXPORT_FORMATS)}")
    params.raise_if_failed()
    return ExportQuery(filter=build_filter, format=export_format)


# --- the dashboard page --------------------------------------------------------------------------

DASHBOARD_WINDOWS = {"24h": US_PER_DAY, "7d": 7 * US_PER_DAY, "30d": 30 * US_PER_DAY, "90d": 90 * US_PER_DAY}
DEFAULT_DASHBOARD_WINDOW = "7d"


class DashboardQuery(msgspec.Struct, frozen=True):
    window: str = DEFAULT_DASHBOARD_WINDOW
    tags: tuple[tuple[str, str], ...] = ()


DASHBOARD_TAG = "tag."


def parse_dashboard_query(pairs: Pairs) -> DashboardQuery:
    """Parameters of the dashboard page: `window` (24h, 7d, 30d, 90d), `tags` as in /builds, and any number of
    `tag.KEY=VALUE`: one tag each, its key and value taken whole (a comma or colon in either is just a
    character), which is how the page's own links name a tag."""
    params = _Params([p for p in pairs if not p[0].startswith(DASHBOARD_TAG)], ("window", "tags"), ("tags",))
    window = params.single("window") or DEFAULT_DASHBOARD_WINDOW
    if window not in DASHBOARD_WINDOWS:
        params.fail("window", f"{window!r} is not a window; allowed: {', '.join(DASHBOARD_WINDOWS)}")
    tags = dict.fromkeys(_parse_tags(params))
    for name, value in pairs:
        key = name.removeprefix(DASHBOARD_TAG)
        if not name.startswith(DASHBOARD_TAG):
            continue
        if not key:
            params.fail(name, "a tag needs a key: tag.KEY=VALUE")
        elif "\x00" in key + value:
            params.fail(name[:MAX_SHOWN_CHARS], "contains the NUL character, which no tag holds")
        else:
            tags[(key, value)] = None
    if len(tags) > MAX_TAG_PAIRS:
        params.fail("tags", f"{len(tags)} tag pairs given; at most {MAX_TAG_PAIRS} per request")
    params.raise_if_failed()
    return DashboardQuery(window=window, tags=tuple(tags))

