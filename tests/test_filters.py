"""Unit tests of buildreport/filters.py: query pairs in, typed filters or named 400 reasons out."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from buildreport.errors import InvalidParams
from buildreport.filters import (
    CURSOR_PATTERN,
    DEFAULT_LIMIT,
    BuildFilter,
    Cursor,
    DashboardQuery,
    ListQuery,
    UsageQuery,
    parse_build_id,
    parse_dashboard_query,
    parse_list_query,
    parse_no_params,
    parse_summary_query,
    parse_ttl,
    parse_usage_query,
)
from buildreport.models import BuildStatus
from buildreport.times import US_PER_DAY, to_us

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
NOW_US = to_us(NOW)
DAY_AGO = NOW_US - US_PER_DAY
ALL_STATUSES = [s.value for s in BuildStatus]


def at(text: str) -> int:
    """Microseconds of an ISO time written with an explicit offset."""
    return to_us(datetime.fromisoformat(text))


def rejected(func, *args) -> dict[str, list[str]]:
    """The invalid parameters a call rejects, name -> reasons."""
    with pytest.raises(InvalidParams) as info:
        func(*args)
    assert info.value.status_code == 400
    found: dict[str, list[str]] = {}
    for param in info.value.params:
        found.setdefault(param.name, []).append(param.reason)
    return found


def list_filter(**fields) -> ListQuery:
    fields.setdefault("create_from_us", DAY_AGO)
    limit = fields.pop("limit", DEFAULT_LIMIT)
    cursor = fields.pop("cursor", None)
    return ListQuery(filter=BuildFilter(**fields), limit=limit, cursor=cursor)


# --- GET /builds: valid queries ---------------------------------------------------------------

VALID_LIST_QUERIES = [
    pytest.param([], list_filter(), id="defaults"),
    pytest.param([("tags", "project:web")], list_filter(tags=(("project", "web"),)), id="one-tag"),
    pytest.param([("tags", "project:")], list_filter(tags=(("project", ""),)), id="tag-empty-value"),
    pytest.param([("tags", "url:http://x:80/y")], list_filter(tags=(("url", "http://x:80/y"),)),
                 id="tag-split-at-first-colon"),
    pytest.param([("tags", "a::")], list_filter(tags=(("a", ":"),)), id="tag-value-is-a-colon"),
    pytest.param([("tags", "a:1,b:2")], list_filter(tags=(("a", "1"), ("b", "2"))), id="tags-comma-separated"),
    pytest.param([("tags", "a:1"), ("tags", "b:2")], list_filter(tags=(("a", "1"), ("b", "2"))),
                 id="tags-repeated-combine"),
    pytest.param([("tags", "a:1,a:1")], list_filter(tags=(("a", "1"),)), id="tags-duplicate-pair-once"),
    pytest.param([("tags", "projet:wéb ✓")], list_filter(tags=(("projet", "wéb ✓"),)), id="tag-unicode"),
    pytest.param([("status", "built")], list_filter(statuses=(BuildStatus.built,)), id="one-status"),
    pytest.param([("status", "built,running")], list_filter(statuses=(BuildStatus.built, BuildStatus.running)),
                 id="status-list"),
    pytest.param([("status", "built"), ("status", "timeout,pending")],
                 list_filter(statuses=(BuildStatus.built, BuildStatus.timeout, BuildStatus.pending)),
                 id="status-repeated-combine"),
    pytest.param([("status", ",".join(ALL_STATUSES))], list_filter(statuses=tuple(BuildStatus)), id="all-statuses"),
    pytest.param([("limit", "1")], list_filter(limit=1), id="limit-min"),
    pytest.param([("limit", "10000")], list_filter(limit=10000), id="limit-max"),
    pytest.param([("limit", "500")], list_filter(limit=500), id="limit-default-explicit"),
    pytest.param([("derivation_path", "/nix/store/x-a.drv")], list_filter(derivation_path="/nix/store/x-a.drv"),
                 id="derivation-path"),
    pytest.param([("create_time_from", "2026-11-01"), ("create_time_to", "2026-11-02")],
                 list_filter(create_from_us=at("2026-11-01T00:00:00+00:00"),
                             create_to_us=at("2026-11-02T00:00:00+00:00")), id="date-range"),
    pytest.param([("create_time_from", "2026-11-01"), ("create_time_to", "2026-11-01")],
                 list_filter(create_from_us=at("2026-11-01T00:00:00+00:00"),
                             create_to_us=at("2026-11-01T00:00:00+00:00")), id="empty-range-allowed"),
    pytest.param([("create_time_to", "2030-01-01")], list_filter(create_to_us=at("2030-01-01T00:00:00+00:00")),
                 id="to-without-from-keeps-default-from"),
]


@pytest.mark.parametrize(("pairs", "expected"), VALID_LIST_QUERIES)
def test_list_query_parses(pairs, expected):
    assert parse_list_query(pairs, NOW_US) == expected


def test_default_create_time_from_is_exactly_24_hours_before_now():
    query = parse_list_query([], NOW_US)
    assert query.filter.create_from_us == NOW_US - 86_400_000_000
    assert query.filter.create_to_us is None
    assert query.limit == 500


def test_early_create_time_to_with_default_from_selects_nothing_rather_than_failing():
    query = parse_list_query([("create_time_to", "2020-01-01")], NOW_US)
    assert query.filter.create_to_us is not None
    assert query.filter.create_to_us <= query.filter.create_from_us


# --- GET /builds: rejected queries ------------------------------------------------------------

INVALID_LIST_QUERIES = [
    pytest.param([("tags", "project")], "tags", "KEY:VALUE", id="tag-without-colon"),
    pytest.param([("tags", ":web")], "tags", "empty key", id="tag-empty-key"),
    pytest.param([("tags", "")], "tags", "KEY:VALUE", id="tags-empty"),
    pytest.param([("tags", "a:1,")], "tags", "KEY:VALUE", id="tags-trailing-comma"),
    pytest.param([("tags", "a:1"), ("tags", "nocolon")], "tags", "nocolon", id="tags-bad-in-repeat"),
    pytest.param([("status", "done")], "status", "done", id="status-unknown"),
    pytest.param([("status", "Built")], "status", "Built", id="status-case-sensitive"),
    pytest.param([("status", "")], "status", "not a build status", id="status-empty"),
    pytest.param([("status", "built,")], "status", "not a build status", id="status-trailing-comma"),
    pytest.param([("limit", "0")], "limit", "1 to 10000", id="limit-zero"),
    pytest.param([("limit", "10001")], "limit", "1 to 10000", id="limit-too-big"),
    pytest.param([("limit", "-1")], "limit", "1 to 10000", id="limit-negative"),
    pytest.param([("limit", "abc")], "limit", "1 to 10000", id="limit-word"),
    pytest.param([("limit", "")], "limit", "1 to 10000", id="limit-empty"),
    pytest.param([("limit", "1.5")], "limit", "1 to 10000", id="limit-fraction"),
    pytest.param([("limit", "+5")], "limit", "1 to 10000", id="limit-plus"),
    pytest.param([("limit", " 5")], "limit", "1 to 10000", id="limit-space"),
    pytest.param([("limit", "1e3")], "limit", "1 to 10000", id="limit-exponent"),
    pytest.param([("limit", "\u0661\u0662")], "limit", "1 to 10000", id="limit-non-ascii-digits"),
    pytest.param([("limit", "9" * 5000)], "limit", "1 to 10000", id="limit-5000-digits"),
    pytest.param([("derivation_path", "")], "derivation_path", "empty", id="derivation-path-empty"),
    pytest.param([("limit", "5"), ("limit", "5")], "limit", "more than once", id="limit-twice"),
    pytest.param([("create_time_from", "2026-11-01"), ("create_time_from", "2026-11-01")], "create_time_from",
                 "more than once", id="from-twice"),
    pytest.param([("create_time_to", "2026-11-01"), ("create_time_to", "2026-11-02")], "create_time_to",
                 "more than once", id="to-twice"),
    pytest.param([("derivation_path", "/a"), ("derivation_path", "/a")], "derivation_path", "more than once",
                 id="derivation-path-twice"),
    pytest.param([("tag", "a:b")], "tag", "unknown parameter", id="unknown-tag-typo"),
    pytest.param([("statuses", "built")], "statuses", "unknown parameter", id="unknown-statuses"),
    pytest.param([("LIMIT", "5")], "LIMIT", "unknown parameter", id="unknown-case"),
    pytest.param([("", "x")], "", "unknown parameter", id="unknown-empty-name"),
    pytest.param([("create_time_from", "2026-11-02"), ("create_time_to", "2026-11-01")], "create_time_from",
                 "later than", id="from-after-to"),
]


@pytest.mark.parametrize(("pairs", "name", "reason"), INVALID_LIST_QUERIES)
def test_list_query_rejects(pairs, name, reason):
    problems = rejected(parse_list_query, pairs, NOW_US)
    assert name in problems
    assert any(reason in text for text in problems[name]), problems


def test_unknown_status_lists_every_allowed_value():
    (reason,) = rejected(parse_list_query, [("status", "succeeded")], NOW_US)["status"]
    for status in ALL_STATUSES:
        assert status in reason


def test_unknown_parameter_names_it_and_lists_allowed_ones():
    (reason,) = rejected(parse_list_query, [("craete_time_from", "2026-11-01")], NOW_US)["craete_time_from"]
    assert "create_time_from" in reason


def test_every_problem_is_reported_at_once():
    problems = rejected(parse_list_query, [("limit", "0"), ("status", "nope"), ("tags", "x"), ("bogus", "1")],
                        NOW_US)
    assert set(problems) == {"limit", "status", "tags", "bogus"}


# --- create_time formats ----------------------------------------------------------------------

MOMENTS = [
    pytest.param("2026-11-21", "2026-11-21T00:00:00+00:00", id="date-is-midnight-utc"),
    pytest.param("2026-11-21T07:33:16Z", "2026-11-21T07:33:16+00:00", id="z"),
    pytest.param("2026-11-21T07:33:16z", "2026-11-21T07:33:16+00:00", id="lowercase-z"),
    pytest.param("2026-11-21T07:33:16.069456Z", "2026-11-21T07:33:16.069456+00:00", id="fraction-z"),
    pytest.param("2026-11-21T07:33:16.5Z", "2026-11-21T07:33:16.500000+00:00", id="short-fraction"),
    pytest.param("2026-11-21T07:33:16.0694561Z", "2026-11-21T07:33:16.069456+00:00", id="nanoseconds-truncated"),
    pytest.param("2026-11-21T07:33:16+01:00", "2026-11-21T06:33:16+00:00", id="plus-offset"),
    pytest.param("2026-11-21T07:33:16-05:30", "2026-11-21T13:03:16+00:00", id="minus-offset"),
    pytest.param("2026-11-21T07:33:16.25+01:00", "2026-11-21T06:33:16.250000+00:00", id="fraction-offset"),
    pytest.param("2026-11-21T07:33:16", "2026-11-21T07:33:16+00:00", id="no-offset-is-utc"),
    pytest.param("2026-11-21T07:33:16.069456", "2026-11-21T07:33:16.069456+00:00", id="fraction-no-offset-is-utc"),
    pytest.param("2026-11-21T07:33:16 01:00", "2026-11-21T06:33:16+00:00", id="unescaped-plus-is-space"),
]


@pytest.mark.parametrize(("text", "expected"), MOMENTS)
@pytest.mark.parametrize("name", ["create_time_from", "create_time_to"])
def test_create_time_formats(name, text, expected):
    pairs = [(name, text)]
    if name == "create_time_to":
        pairs.append(("create_time_from", "2000-01-01"))
    build_filter = parse_list_query(pairs, NOW_US).filter
    got = build_filter.create_from_us if name == "create_time_from" else build_filter.create_to_us
    assert got == at(expected)


def test_unescaped_plus_equals_explicit_plus():
    spaced = parse_summary_query([("create_time_from", "2026-11-21T07:33:16 01:00")], NOW_US)
    plus = parse_summary_query([("create_time_from", "2026-11-21T07:33:16+01:00")], NOW_US)
    assert spaced == plus


BAD_MOMENTS = [
    "",
    "now",
    "yesterday",
    "2026",
    "2026-11",
    "2026-13-01",
    "2026-02-30",
    "2026-11-21T25:00:00Z",
    "2026-11-21T07:60:00Z",
    "2026-02-30T00:00:00Z",
    "21/11/2026",
    "1795242796",
    "2026-11-21T07:33:16+25:00",
    "2026-11-21T07:33:16+0100",
    "2026-11-21T07:33:16ZZ",
    "2026-11-21T07:33:16.Z",
    "2026-11-21T07:33:16 Z",
    "2026-11-21Z",
    "0000-01-01",
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59-01:00",
    "\uff12\uff10\uff12\uff16-11-21",
    "2026-11-21T07:33:16\x00",
]


@pytest.mark.parametrize("text", BAD_MOMENTS)
@pytest.mark.parametrize("name", ["create_time_from", "create_time_to"])
def test_create_time_garbage_is_rejected(name, text):
    problems = rejected(parse_list_query, [(name, text)], NOW_US)
    assert list(problems) == [name]
    assert problems[name][0]


@pytest.mark.parametrize(("text", "expected"), MOMENTS)
def test_summary_accepts_the_same_times(text, expected):
    assert parse_summary_query([("create_time_from", text)], NOW_US).create_from_us == at(expected)


# --- GET /builds/summary ----------------------------------------------------------------------


def test_summary_query_takes_the_list_filters():
    pairs = [("tags", "a:1"), ("tags", "b:"), ("status", "built,timeout"),
             ("create_time_from", "2026-11-01"), ("create_time_to", "2026-11-02")]
    assert parse_summary_query(pairs, NOW_US) == BuildFilter(
        create_from_us=at("2026-11-01T00:00:00+00:00"),
        create_to_us=at("2026-11-02T00:00:00+00:00"),
        statuses=(BuildStatus.built, BuildStatus.timeout),
        tags=(("a", "1"), ("b", "")),
    )


def test_summary_default_window_is_one_day():
    assert parse_summary_query([], NOW_US) == BuildFilter(create_from_us=NOW_US - US_PER_DAY)


@pytest.mark.parametrize(("pairs", "name"), [
    ([("limit", "10")], "limit"),
    ([("derivation_path", "/nix/store/x.drv")], "derivation_path"),
    ([("cursor", Cursor(1, 1).encode())], "cursor"),
    ([("from", "2026-11-01")], "from"),
    ([("create_time_from", "2026-11-01"), ("create_time_from", "2026-11-02")], "create_time_from"),
    ([("tags", "nocolon")], "tags"),
    ([("status", "nope")], "status"),
])
def test_summary_query_rejects(pairs, name):
    assert name in rejected(parse_summary_query, pairs, NOW_US)


# --- GET /usage -------------------------------------------------------------------------------


@pytest.mark.parametrize(("pairs", "expected"), [
    ([], UsageQuery(from_us=at("2026-11-01T00:00:00+00:00"))),
    ([("from", "2026-10-01")], UsageQuery(from_us=at("2026-10-01T00:00:00+00:00"))),
    ([("from", "2026-10-01"), ("to", "2026-11-01")],
     UsageQuery(from_us=at("2026-10-01T00:00:00+00:00"), to_us=at("2026-11-01T00:00:00+00:00"))),
    ([("from", "2026-10-01"), ("to", "2026-10-01")],
     UsageQuery(from_us=at("2026-10-01T00:00:00+00:00"), to_us=at("2026-10-01T00:00:00+00:00"))),
    ([("to", "2026-12-01")],
     UsageQuery(from_us=at("2026-11-01T00:00:00+00:00"), to_us=at("2026-12-01T00:00:00+00:00"))),
])
def test_usage_query_parses(pairs, expected):
    assert parse_usage_query(pairs, NOW_US) == expected


@pytest.mark.parametrize(("now", "month_start"), [
    ("2026-11-21T12:00:00+00:00", "2026-11-01T00:00:00+00:00"),
    ("2026-12-01T00:00:00+00:00", "2026-12-01T00:00:00+00:00"),
    ("2026-11-30T23:59:59.999999+00:00", "2026-11-01T00:00:00+00:00"),
    ("2027-01-15T08:00:00+00:00", "2027-01-01T00:00:00+00:00"),
    ("2026-12-01T00:30:00+01:00", "2026-11-01T00:00:00+00:00"),  # still November in UTC
])
def test_usage_default_from_is_first_of_current_utc_month(now, month_start):
    query = parse_usage_query([], at(now))
    assert query.from_us == at(month_start)
    assert query.to_us is None


@pytest.mark.parametrize("text", ["2026-11-01T00:00:00Z", "2026-11-01T00:00:00", "2026-11-01t00:00:00+01:00"])
@pytest.mark.parametrize("name", ["from", "to"])
def test_usage_date_time_is_rejected_saying_a_date_is_expected(name, text):
    (reason,) = rejected(parse_usage_query, [(name, text)], NOW_US)[name]
    assert "date" in reason
    assert "YYYY-MM-DD" in reason


@pytest.mark.parametrize(("pairs", "name"), [
    ([("from", "")], "from"),
    ([("from", "garbage")], "from"),
    ([("from", "2026-13-01")], "from"),
    ([("to", "2026-02-30")], "to"),
    ([("to", "20261101")], "to"),
    ([("from", "2026-11-02"), ("to", "2026-11-01")], "from"),
    ([("from", "2026-11-01"), ("from", "2026-11-01")], "from"),
    ([("to", "2026-11-01"), ("to", "2026-11-01")], "to"),
    ([("create_time_from", "2026-11-01")], "create_time_from"),
    ([("limit", "5")], "limit"),
])
def test_usage_query_rejects(pairs, name):
    assert name in rejected(parse_usage_query, pairs, NOW_US)


# --- GET /builds/{id}/url: ttl_seconds ---------------------------------------------------------


@pytest.mark.parametrize(("pairs", "ttl"), [
    ([], 3600),
    ([("ttl_seconds", "1")], 1),
    ([("ttl_seconds", "60")], 60),
    ([("ttl_seconds", "604800")], 604800),
])
def test_ttl_parses(pairs, ttl):
    assert parse_ttl(pairs) == ttl


@pytest.mark.parametrize(("pairs", "name"), [
    ([("ttl_seconds", "0")], "ttl_seconds"),
    ([("ttl_seconds", "604801")], "ttl_seconds"),
    ([("ttl_seconds", "-1")], "ttl_seconds"),
    ([("ttl_seconds", "abc")], "ttl_seconds"),
    ([("ttl_seconds", "")], "ttl_seconds"),
    ([("ttl_seconds", "60.0")], "ttl_seconds"),
    ([("ttl_seconds", "9" * 5000)], "ttl_seconds"),
    ([("ttl_seconds", "60"), ("ttl_seconds", "60")], "ttl_seconds"),
    ([("ttl", "60")], "ttl"),
])
def test_ttl_rejects(pairs, name):
    assert name in rejected(parse_ttl, pairs)


def test_no_params_rejects_any_parameter():
    parse_no_params([])
    assert "x" in rejected(parse_no_params, [("x", "")])


# --- build ids --------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "number"), [("1", 1), ("42", 42), (str(2**63 - 1), 2**63 - 1)])
def test_build_id_parses(text, number):
    assert parse_build_id(text) == number


@pytest.mark.parametrize("text", [
    "0", "-1", str(2**63), str(2**64), "abc", "", "1.0", " 1", "1 ", "+1", "0x10", "1e3", "\uff11", "\u0661",
    "9" * 5000,
])
def test_build_id_rejects(text):
    (reason,) = rejected(parse_build_id, text)["build_id"]
    assert "positive 64-bit integer" in reason


# --- cursors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("cursor", [Cursor(NOW_US, 1), Cursor(0, 2**63 - 1), Cursor(2**63 - 1, 5)])
def test_cursor_round_trips(cursor):
    text = cursor.encode()
    assert Cursor.decode(text) == cursor
    assert "=" not in text
    assert parse_list_query([("cursor", text)], NOW_US).cursor == cursor


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize("text", [
    "", "garbage", "!!!", "%%%", "WzE", b64(b"[1,2]"), "0" * 31, "0" * 33, "8" + "0" * 31, "0" * 16 + "f" * 16,
    "0" * 31 + "G", "0" * 31 + "A", "0" * 31 + "\u0661", " " + "0" * 31,
])
def test_garbage_cursor_is_rejected(text):
    (reason,) = rejected(parse_list_query, [("cursor", text)], NOW_US)["cursor"]
    assert "Link" in reason


@given(st.from_regex(f"\\A{CURSOR_PATTERN}\\Z"))
def test_every_cursor_of_the_documented_pattern_is_a_position(text):
    assert parse_list_query([("cursor", text)], NOW_US).cursor.encode() == text


def test_cursor_twice_is_rejected():
    text = Cursor(1, 1).encode()
    assert "cursor" in rejected(parse_list_query, [("cursor", text), ("cursor", text)], NOW_US)


# --- canonical values and caps ------------------------------------------------------------------


@pytest.mark.parametrize("text", ["007", "01", "00", "+5", "-0", " 5", "5 ", "1_000", "٣", "0x10", "1e3"])
def test_integers_must_be_canonical_decimal(text):
    assert "limit" in rejected(parse_list_query, [("limit", text)], NOW_US)
    assert "ttl_seconds" in rejected(parse_ttl, [("ttl_seconds", text)])
    with pytest.raises(InvalidParams):
        parse_build_id(text)


def test_canonical_integers_are_accepted():
    assert parse_build_id("7") == 7 and parse_build_id(str(2**63 - 1)) == 2**63 - 1
    assert parse_ttl([("ttl_seconds", "10")]) == 10


def cursor_text(value) -> str:
    return base64.urlsafe_b64encode(value if isinstance(value, bytes) else json_bytes(value)).rstrip(b"=").decode()


def json_bytes(value) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


@pytest.mark.parametrize(
    "text",
    [
        cursor_text([NOW_US, 5, 1]),  # an extra element
        cursor_text([NOW_US, 5, "x", None]),
        cursor_text(b"[%d, 5]" % NOW_US),  # the same numbers spelled otherwise
        cursor_text(b" [%d,5]" % NOW_US),
        cursor_text(b"[%d,5.0]" % NOW_US),
        cursor_text(b"[%d,05]" % NOW_US),
        Cursor(NOW_US, 5).encode() + "=",  # padding
        Cursor(NOW_US, 5).encode() + "==",
    ],
)
def test_non_canonical_cursor_is_rejected(text):
    assert "cursor" in rejected(parse_list_query, [("cursor", text)], NOW_US)


def test_cursor_in_other_spellings_is_rejected():
    text = Cursor(NOW_US, 5).encode()
    for variant in (text.upper(), " " + text, text + " ", text[:-1], text + "0", "0x" + text[2:]):
        assert "cursor" in rejected(parse_list_query, [("cursor", variant)], NOW_US)


def test_tag_pairs_are_capped_with_one_reason_that_says_the_cap():
    assert len(parse_list_query([("tags", ",".join(f"k{i}:v" for i in range(32)))], NOW_US).filter.tags) == 32
    reasons = rejected(parse_list_query, [("tags", ",".join(f"k{i}:v" for i in range(33)))], NOW_US)["tags"]
    assert reasons == ["33 tag pairs given; at most 32 per request"]
    repeated = [("tags", f"k{i}:v") for i in range(40)]
    assert "at most 32" in rejected(parse_summary_query, repeated, NOW_US)["tags"][0]


def test_status_values_are_capped_with_one_reason_that_says_the_cap():
    reasons = rejected(parse_list_query, [("status", ",".join(["nope"] * 5000))], NOW_US)["status"]
    assert reasons == ["5000 status values given; at most 32 per request"]
    assert parse_summary_query([("status", ",".join(ALL_STATUSES * 2))], NOW_US).statuses


def test_reasons_quote_long_values_cut_short():
    (reason,) = rejected(parse_list_query, [("limit", "9" * 5000)], NOW_US)["limit"]
    assert len(reason) < 300 and "5000 characters" in reason


@pytest.mark.parametrize(
    ("query", "tags"),
    [
        ([("tags", "project:web,branch:main")], (("project", "web"), ("branch", "main"))),
        ([("tag.project", "web")], (("project", "web"),)),
        ([("tag.branch", "release,2"), ("tag.a:b", "c")], (("branch", "release,2"), ("a:b", "c"))),
        ([("tag.a", "b:c")], (("a", "b:c"),)),
        ([("tag.k", "")], (("k", ""),)),
        ([("tags", "k:v"), ("tag.k", "v"), ("tag.x.y", "z")], (("k", "v"), ("x.y", "z"))),
    ],
)
def test_dashboard_tag_parameters_take_key_and_value_whole(query, tags):
    assert parse_dashboard_query(query) == DashboardQuery(tags=tags)


@pytest.mark.parametrize("query", [[("tag.", "v")], [("tag.k", "a\x00")], [("tag.k", str(i)) for i in range(33)]])
def test_bad_dashboard_tag_parameters_are_refused(query):
    with pytest.raises(InvalidParams):
        parse_dashboard_query(query)
