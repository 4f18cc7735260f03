"""GET /builds/stats: every figure equals a plain computation over the same builds."""

from __future__ import annotations

import asyncio
import json
import math
import random
from array import array
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from conftest import ENGINES, NOW, Env, auth, new_database, record
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_figures import plain_percentiles as plain_run_percentiles

from buildreport.figures import nearest_rank
from buildreport.filters import BuildFilter, GroupBy, StatsQuery
from buildreport.insights.stats import build_stats, derivation_name, value_groups
from buildreport.models import BuildStatus
from buildreport.store import open_database, open_reader, stats_queries

ORIGIN = NOW.replace(minute=0, second=0) - timedelta(days=4)
STATUSES = [s.value for s in BuildStatus]
SUCCESSFUL = {"built"}
FAILED = {"build_failed", "cancelled", "timeout", "max_memory_exceeded", "client_disconnect", "client_error"}
DISCARDED = {"internal_error", "out_of_memory"}
RUNNING = {"pending", "running"}
NAMES = ["hello-2.12", "curl-8.4.0", "python3-3.11.6", "zlib-1.3"]
US = 1_000_000


def make_records() -> list[dict[str, Any]]:
    rng = random.Random(13)
    records = []
    for build_id in range(1, 301):
        status = rng.choice(STATUSES)
        create = ORIGIN + timedelta(seconds=rng.randrange(4 * 86_400), microseconds=rng.randrange(US))
        tags = {}
        if rng.random() < 0.8:
            tags["project"] = rng.choice(["web", "api", "ci:nightly"])
        if rng.random() < 0.5:
            tags["team"] = rng.choice(["core", "infra"])
        if rng.random() < 0.3:
            tags['ci."stage"'] = rng.choice(["build", "test"])  # not a plain name: grouped outside SQLite
        name = rng.choice(NAMES)
        records.append(
            record(
                build_id,
                account="acme" if build_id % 7 else "globex",
                create_time=create,
                start_time=(create + timedelta(seconds=3)).isoformat(),
                build_status=status,
                # More digits than a microsecond holds: percentiles must repeat the values as sent.
                duration_seconds=None if status in RUNNING else rng.choice([0.0, rng.uniform(0, 5000)]),
                queue_time_seconds=rng.uniform(0, 300) if rng.random() < 0.9 else 0.1 + 0.2,
                cpu_seconds=rng.randrange(50_000),
                system=rng.choice(["x86_64-linux", "aarch64-linux"]),
                # Hashes on both sides of the point where a walk over derivation paths is split in two.
                derivation_path=f"/nix/store/{rng.choice('0bmz') * 32}-{name}.drv",
                tags=tags,
            )
        )
    return records


RECORDS = make_records()


def us(text: str) -> int:
    moment = datetime.fromisoformat(text)
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def z(us_value: int) -> str:
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us_value)).isoformat().replace("+00:00", "Z")


def plain_percentiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    pick = {f"p{p}": ordered[max(1, math.ceil(p * len(ordered) / 100)) - 1] for p in (50, 90, 95, 99)}
    return {**pick, "max": max(values)}


def plain_group(key: str, builds: list[dict[str, Any]]) -> dict[str, Any]:
    def count(kinds: set[str]) -> int:
        return sum(1 for b in builds if b["build_status"] in kinds)

    ok, failed = count(SUCCESSFUL), count(FAILED)
    return {
        "key": key,
        "build_count": len(builds),
        "running_build_count": count(RUNNING),
        "discarded_build_count": count(DISCARDED),
        "failed_build_count": failed,
        "successful_build_count": ok,
        "success_rate": ok / (ok + failed) if ok + failed else None,
        "total_cpu_seconds": sum(b["cpu_seconds"] for b in builds),
        "billable_cpu_seconds": sum(b["cpu_seconds"] for b in builds if b["build_status"] in SUCCESSFUL | FAILED),
        "duration_seconds": plain_percentiles(
            [b["duration_seconds"] for b in builds if b["duration_seconds"] is not None]
        ),
        "queue_time_seconds": plain_percentiles([b["queue_time_seconds"] for b in builds]),
    }


def plain_stats(
    low: int, high: int | None, statuses: list[str], tag: tuple[str, str] | None, group_by: str, limit: int, now: int,
    derivation_path: str | None = None,
) -> list[dict[str, Any]]:
    chosen = [
        r
        for r in RECORDS
        if r["account"] == "acme"
        and low <= us(r["create_time"])
        and (high is None or us(r["create_time"]) < high)
        and (not statuses or r["build_status"] in statuses)
        and (tag is None or r["tags"].get(tag[0]) == tag[1])
        and (derivation_path is None or r["derivation_path"] == derivation_path)
    ]
    if group_by in ("day", "hour"):
        period = 86_400 * US if group_by == "day" else 3_600 * US
        end = high if high is not None else max(now, low)  # the window ends at create_time_to or now
        chosen = [r for r in chosen if us(r["create_time"]) < end]
        last = end - 1 if end > low else low // period * period - 1
        out = []
        for start in range(low // period * period, last + 1, period):
            moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=start)
            key = moment.date().isoformat() if group_by == "day" else moment.strftime("%Y-%m-%dT%H:%M:%SZ")
            out.append(plain_group(key, [r for r in chosen if us(r["create_time"]) // period * period == start]))
        return out
    keyed: dict[str, list[dict[str, Any]]] = {}
    for r in chosen:
        if group_by.startswith("tag:"):
            key = r["tags"].get(group_by[4:])
        elif group_by == "derivation":
            key = r["derivation_path"].split("/")[-1][33:-4]
        elif group_by == "status":
            key = r["build_status"]
        else:
            key = r[group_by]
        if key is not None:
            keyed.setdefault(key, []).append(r)
    ordered = sorted(keyed.items(), key=lambda item: (-len(item[1]), item[0]))[:limit]
    return [plain_group(key, builds) for key, builds in ordered]


@pytest.fixture(scope="module", params=ENGINES)
def api(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stats")
    env = Env(tmp, new_database(request, request.param, tmp))
    env.load(RECORDS)
    secret = env.token()
    with env.client() as client:
        yield client, secret


GROUPINGS = [
    "day", "hour", "system", "status", "derivation", "derivation_path", "tag:project", "tag:team", "tag:none",
    'tag:ci."stage"',
]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    start_minutes=st.integers(-600, 4 * 1440 + 600),
    length_minutes=st.one_of(st.none(), st.integers(0, 5 * 1440)),
    statuses=st.lists(st.sampled_from(STATUSES), max_size=3, unique=True),
    tag=st.one_of(st.none(), st.sampled_from([("project", "web"), ("project", "ci:nightly"), ("team", "core")])),
    group_by=st.sampled_from(GROUPINGS),
    limit=st.one_of(st.none(), st.integers(1, 5)),
)
def test_stats_equal_a_plain_computation(api, start_minutes, length_minutes, statuses, tag, group_by, limit):
    client, secret = api
    low = us(ORIGIN.isoformat()) + start_minutes * 60 * US + 123_456
    high = None if length_minutes is None else low + length_minutes * 60 * US
    params: dict[str, Any] = {"create_time_from": z(low), "group_by": group_by}
    if high is not None:
        params["create_time_to"] = z(high)
    if statuses:
        params["status"] = ",".join(statuses)
    if tag is not None:
        params["tags"] = f"{tag[0]}:{tag[1]}"
    if limit is not None:
        params["limit"] = limit
    before = int(datetime.now(UTC).timestamp() * US)
    response = client.get("/builds/stats", params=params, headers=auth(secret))
    after = int(datetime.now(UTC).timestamp() * US)
    assert response.status_code == 200, response.text
    expected = plain_stats(low, high, statuses, tag, group_by, limit or 100, before)
    if response.json() != expected:  # "now" may have crossed an hour between the two readings
        expected = plain_stats(low, high, statuses, tag, group_by, limit or 100, after)
    assert response.json() == expected


DAY_US = 86_400 * US
FIRST_DAY = us(ORIGIN.isoformat()) // DAY_US * DAY_US


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    first_day=st.integers(-1, 4),
    days=st.one_of(st.none(), st.integers(0, 5)),
    # Bounds on midnight (no partial day at that edge), or inside a day.
    start_offset=st.sampled_from([0, 0, 90 * 60 * US, 23 * 3_600 * US + 1]),
    end_offset=st.sampled_from([0, 0, 3_600 * US, -1]),
    statuses=st.lists(st.sampled_from(STATUSES), max_size=3, unique=True),
    group_by=st.sampled_from(["day", "hour", "tag:project", "status"]),
)
def test_stats_over_whole_days_equal_a_plain_computation(api, first_day, days, start_offset, end_offset, statuses,
                                                         group_by):
    """Windows whose bounds fall on midnight or near it: whole days are answered from kept figures, partial days
    at the edges from the builds, and together they are exactly the builds."""
    client, secret = api
    low = FIRST_DAY + first_day * DAY_US + start_offset
    high = None if days is None else max(low, FIRST_DAY + (first_day + days) * DAY_US + end_offset)
    params: dict[str, Any] = {"create_time_from": z(low), "group_by": group_by}
    if high is not None:
        params["create_time_to"] = z(high)
    if statuses:
        params["status"] = ",".join(statuses)
    before = int(datetime.now(UTC).timestamp() * US)
    response = client.get("/builds/stats", params=params, headers=auth(secret))
    after = int(datetime.now(UTC).timestamp() * US)
    assert response.status_code == 200, response.text
    expected = plain_stats(low, high, statuses, None, group_by, 100, before)
    if response.json() != expected:  # "now" may have crossed an hour between the two readings
        expected = plain_stats(low, high, statuses, None, group_by, 100, after)
    assert response.json() == expected


@pytest.mark.parametrize("engine", ENGINES)
def test_whole_days_are_answered_from_kept_figures_and_partial_days_from_builds(request, tmp_path, engine):
    """Both engines read a grouping by day's whole days from kept figures (day_summaries, or with a status filter
    day_figures): with one day's kept figures taken away, that day reads empty, while the partial days at the
    window's edges, read from the builds, do not."""
    env = Env(tmp_path, new_database(request, engine, tmp_path))
    env.load(RECORDS)
    low = FIRST_DAY + 6 * 3_600 * US
    high = FIRST_DAY + 3 * DAY_US + 6 * 3_600 * US
    params = {"create_time_from": z(low), "create_time_to": z(high), "group_by": "day"}
    whole = _stats(env, **params)
    assert [g["build_count"] > 0 for g in whole] == [True] * 4
    every_status = {"status": ",".join(s.value for s in BuildStatus)}  # named: day_figures answer
    assert _stats(env, **params, **every_status) == whole
    for table, narrowing in (("day_summaries", {}), ("day_figures", every_status)):
        conn = open_database(env.db)
        try:
            with conn:
                conn.execute(f"DELETE FROM {table} WHERE day_us = ?", (FIRST_DAY + DAY_US,))
        finally:
            conn.close()
        groups = _stats(env, **params, **narrowing)
        assert [g["build_count"] for g in groups] == [whole[0]["build_count"], 0, whole[2]["build_count"],
                                                      whole[3]["build_count"]], table


@pytest.mark.parametrize("engine", ENGINES)
def test_grouped_by_tag_under_a_filter_tag_rows_do_not_hold_each_builds_tag_is_looked_up(request, tmp_path, engine):
    """Storage's grouping by tag under a filter on what only the builds hold (a derivation path; /builds/stats
    takes none today, the storage call does): each matching build's tag value is found by its tag row's key, and
    the groups are those of a plain computation."""
    env = Env(tmp_path, new_database(request, engine, tmp_path))
    env.load(RECORDS)
    conn = open_database(env.db)
    try:
        ((account_id,),) = conn.execute("SELECT account_id FROM accounts WHERE name = 'acme'").fetchall()
    finally:
        conn.close()
    low, now = us(ORIGIN.isoformat()), int(datetime.now(UTC).timestamp() * US)
    paths = sorted({r["derivation_path"] for r in RECORDS if r["account"] == "acme"})

    async def grouped(path: str) -> list[dict[str, Any]]:
        reader = await open_reader(str(env.db))
        try:
            query = StatsQuery(BuildFilter(create_from_us=low, derivation_path=path), GroupBy("tag", "project"), now)
            rows = await reader.stats_rows(account_id, query.filter, query.group_by)
        finally:
            await reader.close()
        return json.loads(msgspec.json.encode(build_stats(rows, query)))

    for path in paths[:3] + paths[-3:]:
        assert asyncio.run(grouped(path)) == plain_stats(low, None, [], None, "tag:project", 100, now, path), path


def test_every_day_of_the_window_is_listed_with_empty_ones_zero(api):
    client, secret = api
    params = {"create_time_from": "2001-01-01", "create_time_to": "2001-01-04", "group_by": "day"}
    groups = client.get("/builds/stats", params=params, headers=auth(secret)).json()
    assert [g["key"] for g in groups] == ["2001-01-01", "2001-01-02", "2001-01-03"]
    assert all(g["build_count"] == 0 and g["success_rate"] is None and g["duration_seconds"] is None for g in groups)


def test_hour_keys_are_rfc3339(api):
    client, secret = api
    params = {"create_time_from": "2001-01-01T22:30:00Z", "create_time_to": "2001-01-02T00:00:01Z", "group_by": "hour"}
    groups = client.get("/builds/stats", params=params, headers=auth(secret)).json()
    assert [g["key"] for g in groups] == ["2001-01-01T22:00:00Z", "2001-01-01T23:00:00Z", "2001-01-02T00:00:00Z"]


def test_value_groups_are_capped_by_limit_largest_first(api):
    client, secret = api
    params = {"create_time_from": z(us(ORIGIN.isoformat())), "group_by": "status", "limit": "3"}
    groups = client.get("/builds/stats", params=params, headers=auth(secret)).json()
    assert len(groups) == 3
    counts = [g["build_count"] for g in groups]
    assert counts == sorted(counts, reverse=True)


def test_stats_default_to_days_of_the_last_day(api):
    client, secret = api
    groups = client.get("/builds/stats", headers=auth(secret)).json()
    assert 1 <= len(groups) <= 2
    assert all(len(g["key"]) == 10 for g in groups)


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"group_by": "week"}, "group_by"),
        ({"group_by": "tag:"}, "group_by"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"derivation_path": "/nix/store/x.drv"}, "derivation_path"),
        ({"group_by": "hour", "create_time_from": "2000-01-01"}, "group_by"),
        ({"status": "done"}, "status"),
    ],
)
def test_bad_stats_parameters_are_named(api, params, name):
    client, secret = api
    response = client.get("/builds/stats", params=params, headers=auth(secret))
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("application/problem+json")
    assert name in [p["name"] for p in response.json()["invalid_params"]]


def test_stats_need_a_token(api):
    client, _ = api
    assert client.get("/builds/stats").status_code == 401


@pytest.mark.parametrize(
    ("values", "percent", "expected"),
    [
        ([1.0], 50, 1.0),
        ([1.0, 2.0], 50, 1.0),
        ([1.0, 2.0, 3.0], 50, 2.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.0),
        ([float(i) for i in range(1, 101)], 95, 95.0),
        ([float(i) for i in range(1, 101)], 99, 99.0),
        ([float(i) for i in range(1, 21)], 90, 18.0),
        ([float(i) for i in range(1, 11)], 99, 10.0),
    ],
)
def test_percentiles_take_the_nearest_rank(values, percent, expected):
    assert nearest_rank(values, percent) == expected


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/nix/store/" + "a" * 32 + "-hello-2.12.1.drv", "hello-2.12.1"),
        ("/nix/store/" + "a" * 32 + "-source.drv", "source"),
        ("/nix/store/plain.drv", "plain"),
    ],
)
def test_derivation_name_is_the_store_path_name_without_drv(path, name):
    assert derivation_name(path) == name


def _stats(env: Env, expect: int = 200, **params: Any) -> Any:
    secret = env.token()
    with env.client() as client:
        response = client.get("/builds/stats", params=params, headers=auth(secret))
    assert response.status_code == expect, response.text
    return response.json()


def test_stats_follow_a_build_written_again_with_other_figures(tmp_path):
    env = Env(tmp_path)
    env.load([record(1, duration_seconds=10.5, queue_time_seconds=2.25, tags={"project": "web"}), record(2)])
    env.load([record(1, build_status="timeout", duration_seconds=7200.125, queue_time_seconds=0.1 + 0.2,
                      tags={"project": "api"})])
    since = z(us((NOW - timedelta(days=1)).isoformat()))
    by_project = {g["key"]: g for g in _stats(env, create_time_from=since, group_by="tag:project")}
    assert list(by_project) == ["api"]
    assert by_project["api"]["failed_build_count"] == 1
    assert by_project["api"]["duration_seconds"]["max"] == 7200.125
    assert by_project["api"]["queue_time_seconds"]["p50"] == 0.1 + 0.2
    (day,) = [g for g in _stats(env, create_time_from=since, group_by="day") if g["build_count"]]
    assert (day["successful_build_count"], day["failed_build_count"]) == (1, 1)
    assert day["duration_seconds"]["max"] == 7200.125


def test_tag_groups_follow_a_build_written_again_under_the_same_tag(tmp_path):
    env = Env(tmp_path)
    env.load([record(1, duration_seconds=10.5, queue_time_seconds=2.25, cpu_seconds=5, tags={"project": "web"})])
    env.load([record(1, build_status="timeout", duration_seconds=7200.125, queue_time_seconds=0.1 + 0.2,
                      cpu_seconds=9, tags={"project": "web"})])
    since = z(us((NOW - timedelta(days=1)).isoformat()))
    (web,) = _stats(env, create_time_from=since, group_by="tag:project")
    assert (web["key"], web["build_count"], web["failed_build_count"], web["total_cpu_seconds"]) == ("web", 1, 1, 9)
    assert web["duration_seconds"]["max"] == 7200.125
    assert web["queue_time_seconds"]["max"] == 0.1 + 0.2


def test_an_open_window_of_periods_ends_now_and_other_groupings_reach_past_it(tmp_path):
    env = Env(tmp_path)
    later = NOW + timedelta(days=2)
    env.load([record(1), record(2, create_time=later, start_time=later.isoformat(), duration_seconds=3.5)])
    since = z(us((NOW - timedelta(days=1)).isoformat()))
    groups = _stats(env, create_time_from=since, group_by="day")
    assert groups[-1]["key"] == datetime.now(UTC).date().isoformat()
    assert sum(g["build_count"] for g in groups) == 1
    (status,) = _stats(env, create_time_from=since, group_by="status")
    assert status["build_count"] == 2


@pytest.mark.parametrize("engine", ENGINES)
def test_a_build_dated_far_ahead_never_stretches_the_periods(request, tmp_path, engine):
    env = Env(tmp_path, new_database(request, engine, tmp_path))
    far = datetime(9899, 12, 31, 12, tzinfo=UTC)
    env.load([record(1), record(2, create_time=far, start_time=far.isoformat(), tags={"project": "web"})])
    since = z(us((NOW - timedelta(hours=24)).isoformat()))
    for extra in ({}, {"tags": "project:web"}, {"status": "built"}):
        hours = _stats(env, create_time_from=since, group_by="hour", **extra)
        assert 24 <= len(hours) <= 26
    days = _stats(env, create_time_from=since, create_time_to="9899-12-31", group_by="day", expect=400)
    assert "narrow create_time_from/create_time_to" in days["invalid_params"][0]["reason"]


def test_an_empty_tag_value_is_a_group_of_its_own(tmp_path):
    env = Env(tmp_path)
    env.load([record(1, tags={"project": ""}), record(2, tags={"project": "web"}), record(3, tags={"team": "x"})])
    groups = _stats(env, create_time_from=z(us((NOW - timedelta(days=1)).isoformat())), group_by="tag:project")
    assert sorted((g["key"], g["build_count"]) for g in groups) == [("", 1), ("web", 1)]


@pytest.mark.sqlite_only
def test_statistics_read_in_two_parts_are_those_read_in_one(tmp_path):
    """A walk over derivation paths, or over a tag's values in a long window that kept figures do not answer (a
    filter by derivation path), is read as two queries; each part has rows of its own in this data, and together
    they are the rows of the one query."""
    env = Env(tmp_path)
    env.load(RECORDS)
    conn = open_database(env.db)
    try:
        low = us(ORIGIN.isoformat()) - 3_600 * US
        path = RECORDS[0]["derivation_path"]
        for group_by, tag_window in ((GroupBy("derivation_path"), None), (GroupBy("tag", "project"), 5 * 86_400)):
            build_filter = BuildFilter(create_from_us=low, create_to_us=tag_window and low + tag_window * US,
                                       derivation_path=path if tag_window else None)
            parts = stats_queries.stats_parts(1, build_filter, group_by)
            assert len(parts) == 2
            halves = [conn.execute(*part).fetchall() for part in parts]
            assert all(halves), group_by
            whole = conn.execute(*stats_queries.stats_rows(1, build_filter, group_by)).fetchall()
            if group_by.kind == "derivation_path":
                assert halves[0] + halves[1] == whole
            else:  # each tag value in both halves of time: its builds counted once, in one or the other
                counts = {}
                for value, _, figures in halves[0] + halves[1]:
                    counts[value] = counts.get(value, 0) + json.loads(figures)[0]
                assert counts == {value: json.loads(figures)[0] for value, _, figures in whole}
        short = BuildFilter(create_from_us=low, create_to_us=low + 86_400 * US, derivation_path=path)
        assert len(stats_queries.stats_parts(1, short, GroupBy("tag", "project"))) == 1
    finally:
        conn.close()


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.booleans(),  # a stored day's values (an array of doubles) or a build's (a list of floats)
            st.lists(st.floats(min_value=0, max_value=1e9, allow_nan=False), max_size=6),
        ),
        max_size=12,
    )
)
def test_groups_of_stored_days_and_single_builds_hold_every_value_and_leave_the_rows_as_they_were(parts):
    rows = [(key, ((1, 0, 0, 0), 0, 0, array("d", values) if stored else list(values), list(values)))
            for key, stored, values in parts]
    before = [(key, list(figures[3]), list(figures[4])) for key, figures in rows]
    for _ in range(2):  # decoded rows are grouped more than once (the dashboard)
        groups = value_groups(rows, "derivation_path")
        for key, group in groups.items():
            expected = sorted(v for k, _, values in parts if k == key for v in values)
            assert group.p95_duration() == (nearest_rank(expected, 95) if expected else None)
            assert group.queues.percentiles() == plain_run_percentiles([expected])
    assert [(key, list(figures[3]), list(figures[4])) for key, figures in rows] == before
