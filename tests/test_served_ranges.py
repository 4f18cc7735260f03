"""Property: any build import accepts, at any point of its ranges, is served by every endpoint without a 5xx."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from conftest import Env, auth
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from buildreport.imports.files import LATEST_US, check_time
from buildreport.models import (
    MAX_CPU_COUNT,
    MAX_CPU_SECONDS,
    MAX_CPU_UTILIZATION,
    MAX_DURATION_SECONDS,
    MAX_KILOBYTES,
    MAX_MEGABYTES,
    MAX_MESSAGE_LENGTH,
    MAX_NAME_LENGTH,
    MAX_NAR_SIZE_BYTES,
    MAX_OUTPUTS,
    MAX_PATH_LENGTH,
    MAX_SYSTEM_LENGTH,
    MAX_TAG_KEY_LENGTH,
    MAX_TAG_VALUE_LENGTH,
    MAX_TAGS,
    BuildStatus,
)
from buildreport.times import EPOCH, US_PER_SECOND

ACCOUNTS = ("acme", "z" * 63)
UNFINISHED = {"pending", "running"}
# Text as a hostile file would carry it: control characters, escapes, markup, any plane; no lone surrogates
# (JSON cannot carry them as UTF-8).
TEXT = st.characters(exclude_categories=("Cs",))
COLUMN_TEXT = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")


def bounded_int(high: int, low: int = 0) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from([low, high]), st.integers(low, high))


def bounded_float(high: float) -> st.SearchStrategy[float]:
    return st.one_of(st.sampled_from([0.0, high]), st.floats(0, high, allow_nan=False, allow_infinity=False))


def text(low: int, high: int, alphabet: st.SearchStrategy[str] = TEXT) -> st.SearchStrategy[str]:
    """Short text of any character, or text at the longest length allowed."""
    return st.one_of(st.text(alphabet, min_size=low, max_size=min(high, 20)), st.just("é" * high))


def column_text(low: int, high: int) -> st.SearchStrategy[str]:
    """Text kept in a column of its own (tags, store paths, the system): any character but NUL, which import
    refuses."""
    return text(low, high, COLUMN_TEXT)


@st.composite
def moments(draw, low_us: int = 0, high_us: int = LATEST_US) -> tuple[int, str]:
    """A time in range, in microseconds and as RFC 3339 with an offset that keeps its local time writable."""
    us = draw(st.one_of(st.sampled_from([low_us, high_us]), st.integers(low_us, high_us)))
    moment = EPOCH + timedelta(microseconds=us)
    minutes = draw(st.integers(-23 * 60 - 59, 23 * 60 + 59))
    try:
        local = moment.astimezone(timezone(timedelta(minutes=minutes)))
    except OverflowError:
        local = moment.astimezone(UTC)
    if check_time(local) is not None:  # its written date would leave the range: written in UTC instead
        local = moment.astimezone(UTC)
    return us, local.isoformat()


@st.composite
def build_records(draw, build_id: int) -> dict:
    # A build starts when or after it is created (ingestion refuses anything else).
    (_, create_time), (start_us, start_time) = sorted([draw(moments()), draw(moments())])
    status = draw(st.sampled_from([s.value for s in BuildStatus]))
    duration = None
    if status not in UNFINISHED:
        longest_us = min(MAX_DURATION_SECONDS * US_PER_SECOND, LATEST_US - start_us)
        duration = draw(bounded_int(longest_us)) / US_PER_SECOND
    outputs = draw(st.one_of(
        st.lists(st.fixed_dictionaries({
            "name": text(1, MAX_NAME_LENGTH), "path": column_text(1, MAX_PATH_LENGTH),
            "nar_hash": text(0, MAX_NAME_LENGTH),
            "nar_size_bytes": bounded_int(MAX_NAR_SIZE_BYTES),
        }), max_size=3),
        st.just([{"name": f"o{i}", "path": "/p", "nar_hash": "h", "nar_size_bytes": MAX_NAR_SIZE_BYTES}
                 for i in range(MAX_OUTPUTS)]),
    ))
    tags = draw(st.one_of(
        st.dictionaries(column_text(1, MAX_TAG_KEY_LENGTH), column_text(0, MAX_TAG_VALUE_LENGTH), max_size=4),
        st.just({f"k{i}": "v" * MAX_TAG_VALUE_LENGTH for i in range(MAX_TAGS)}),
    ))
    return {
        "account": draw(st.sampled_from(ACCOUNTS)),
        "build_id": build_id,
        "create_time": create_time,
        "start_time": start_time,
        "queue_time_seconds": draw(bounded_float(MAX_DURATION_SECONDS)),
        "duration_seconds": duration,
        "build_status": status,
        "status_message": draw(st.none() | text(0, MAX_MESSAGE_LENGTH)),
        "cpu_count": draw(bounded_int(MAX_CPU_COUNT, 1)),
        "allocated_megabytes": draw(bounded_int(MAX_MEGABYTES)),
        "cpu_seconds": draw(bounded_int(MAX_CPU_SECONDS)),
        "average_cpu_utilization": draw(st.none() | bounded_float(MAX_CPU_UTILIZATION)),
        "peak_memory_use_kilobytes": draw(st.none() | bounded_int(MAX_KILOBYTES)),
        "peak_storage_use_kilobytes": draw(st.none() | bounded_int(MAX_KILOBYTES)),
        "derivation_path": draw(column_text(1, MAX_PATH_LENGTH)),
        "outputs": outputs,
        "system": draw(column_text(1, MAX_SYSTEM_LENGTH)),
        "tags": tags,
        "log": draw(st.none() | st.text(TEXT, max_size=200) | st.just("\x1b[31mred\r\n" * 3000)),
    }


@st.composite
def imports(draw) -> list[dict]:
    ids = draw(st.lists(bounded_int(2**63 - 1, 1), min_size=1, max_size=4, unique=True))
    return [draw(build_records(build_id)) for build_id in ids]


def filters(build: dict) -> list[dict[str, str]]:
    """Query strings that select this build (or fail cleanly when a value cannot be written in a filter)."""
    created = datetime.fromisoformat(build["create_time"]).astimezone(UTC)
    window = {"create_time_from": "1970-01-01", "status": build["build_status"]}
    found = [window, {**window, "create_time_from": created.isoformat(), "limit": "10000"}]
    if build["tags"]:
        key, value = next(iter(build["tags"].items()))
        found.append({**window, "tags": f"{key}:{value}"})
    return found


@settings(max_examples=30, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(records=imports())
def test_every_endpoint_serves_whatever_import_accepted(fresh_db, records):
    with tempfile.TemporaryDirectory() as folder:
        env = Env(Path(folder), fresh_db(Path(folder)))
        env.load(records)  # raises if import refuses a record generated inside the ranges
        tokens = {account: env.token(account) for account in ACCOUNTS}
        with env.client() as client:
            assert client.get("/healthz").status_code == 200
            for account, token in tokens.items():
                headers = auth(token)
                for path in ("/usage?from=1970-01-01", "/usage", "/builds/summary?create_time_from=1970-01-01"):
                    response = client.get(path, headers=headers)
                    assert response.status_code == 200, (path, response.text)
                mine = [r for r in records if r["account"] == account]
                listed = client.get("/builds?create_time_from=1970-01-01&limit=10000", headers=headers)
                assert listed.status_code == 200 and len(listed.json()) == len(mine)
                for build in mine:
                    build_id = build["build_id"]
                    for params in filters(build):
                        for path in ("/builds", "/builds/summary"):
                            query = {k: v for k, v in params.items() if path == "/builds" or k != "limit"}
                            response = client.get(path, params=query, headers=headers)
                            assert response.status_code < 500, (path, query, response.text)
                    response = client.get("/builds", headers=headers, params={
                        "create_time_from": "1970-01-01", "derivation_path": build["derivation_path"]})
                    assert response.status_code == 200 and build_id in [b["build_id"] for b in response.json()]
                    assert client.get(f"/builds/{build_id}", headers=headers).status_code == 200
                    answer = client.get(f"/builds/{build_id}/url", headers=headers)
                    assert answer.status_code == 200
                    page = answer.json()["url"].removeprefix("http://testserver.local")
                    assert client.get(page).status_code == 200
                    for raw in (page + "/log", page + "/log?tail=5"):
                        expected = 200 if build["log"] is not None else 404
                        assert client.get(raw).status_code == expected, raw
