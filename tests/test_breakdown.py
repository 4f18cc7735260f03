"""GET /usage/breakdown: groups that add up to /usage, each equal to a plain computation."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from conftest import ENGINES, NOW, Env, auth, new_database, record
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from buildreport.models import BuildStatus

STATUSES = [s.value for s in BuildStatus]
BILLABLE = {"built", "build_failed", "cancelled", "timeout", "max_memory_exceeded", "client_disconnect", "client_error"}
FIRST_DAY = (NOW - timedelta(days=20)).date()


def make_records() -> list[dict[str, Any]]:
    rng = random.Random(8)
    records = []
    for build_id in range(1, 251):
        status = rng.choice(STATUSES)
        create = datetime.combine(FIRST_DAY, datetime.min.time(), UTC) + timedelta(seconds=rng.randrange(18 * 86_400))
        tags = {"project": rng.choice(["web", "api"])} if rng.random() < 0.7 else {}
        records.append(
            record(
                build_id,
                account="acme" if build_id % 9 else "globex",
                create_time=create,
                start_time=(create + timedelta(seconds=30)).isoformat(),
                build_status=status,
                duration_seconds=None if status in ("pending", "running") else rng.uniform(0, 2 * 86_400),
                cpu_seconds=rng.randrange(100_000),
                system=rng.choice(["x86_64-linux", "aarch64-linux", "aarch64-darwin"]),
                tags=tags,
            )
        )
    return records


RECORDS = make_records()


def stop_date(r: dict[str, Any]) -> date | None:
    if r["duration_seconds"] is None:
        return None
    start = datetime.fromisoformat(r["start_time"])
    return (start + timedelta(microseconds=round(r["duration_seconds"] * 1_000_000))).astimezone(UTC).date()


def plain_breakdown(
    low: date, high: date | None, group_by: str, records: list[dict[str, Any]] = RECORDS
) -> list[dict[str, Any]]:
    groups: dict[str | None, list[int]] = {}
    for r in records:
        stop = stop_date(r)
        if r["account"] != "acme" or r["build_status"] not in BILLABLE or stop is None:
            continue
        if stop < low or (high is not None and stop >= high):
            continue
        if group_by == "day":
            key: str | None = stop.isoformat()
        elif group_by == "system":
            key = r["system"]
        else:
            key = r["tags"].get(group_by[4:])
        entry = groups.setdefault(key, [0, 0])
        entry[0] += r["cpu_seconds"]
        entry[1] += 1
    if group_by == "day":
        ordered = sorted(groups.items())
    else:
        ordered = sorted(groups.items(), key=lambda item: (-item[1][0], item[0] is None, item[0] or ""))
    return [{"key": k, "billable_cpu_seconds": c, "billable_build_count": n} for k, (c, n) in ordered]


@pytest.fixture(scope="module", params=ENGINES)
def api(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("breakdown")
    env = Env(tmp, new_database(request, request.param, tmp))
    env.load(RECORDS)
    secret = env.token()
    with env.client() as client:
        yield client, secret


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    start=st.integers(-3, 24),
    length=st.one_of(st.none(), st.integers(0, 25)),
    group_by=st.sampled_from(["day", "system", "tag:project", "tag:absent"]),
)
def test_breakdown_equals_a_plain_computation_and_adds_up_to_usage(api, start, length, group_by):
    client, secret = api
    low = FIRST_DAY + timedelta(days=start)
    high = None if length is None else low + timedelta(days=length)
    params = {"from": low.isoformat(), "group_by": group_by}
    if high is not None:
        params["to"] = high.isoformat()
    response = client.get("/usage/breakdown", params=params, headers=auth(secret))
    assert response.status_code == 200, response.text
    groups = response.json()
    assert groups == plain_breakdown(low, high, group_by)
    del params["group_by"]
    usage = client.get("/usage", params=params, headers=auth(secret)).json()
    assert sum(g["billable_cpu_seconds"] for g in groups) == usage["billable_cpu_seconds"]
    assert sum(g["billable_build_count"] for g in groups) == usage["billable_build_count"]


def test_breakdown_defaults_to_days_of_this_month(api):
    client, secret = api
    groups = client.get("/usage/breakdown", headers=auth(secret)).json()
    month = NOW.date().replace(day=1)
    assert groups == plain_breakdown(month, None, "day")


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"group_by": "hour"}, "group_by"),
        ({"group_by": "status"}, "group_by"),
        ({"from": "2026-01-01T00:00:00Z"}, "from"),
        ({"to": "soon"}, "to"),
        ({"from": "2026-02-01", "to": "2026-01-01"}, "from"),
        ({"limit": "5"}, "limit"),
        ({"group_by": "tag:"}, "group_by"),
    ],
)
def test_bad_breakdown_parameters_are_named(api, params, name):
    client, secret = api
    response = client.get("/usage/breakdown", params=params, headers=auth(secret))
    assert response.status_code == 400
    assert name in [p["name"] for p in response.json()["invalid_params"]]


def test_an_unknown_parameter_is_told_what_breakdown_takes(api):
    client, secret = api
    response = client.get("/usage/breakdown", params={"group": "day"}, headers=auth(secret))
    assert response.status_code == 400
    assert "from, group_by, to" in response.json()["invalid_params"][0]["reason"]


def rewritten(r: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """The same build written again, its status, duration, CPU seconds or tags changed; a finished build stays
    finished (a write that takes it back is not applied)."""
    unfinished = ("pending", "running")
    status = rng.choice([s for s in STATUSES if r["build_status"] in unfinished or s not in unfinished])
    return {
        **r,
        "build_status": status,
        "duration_seconds": None if status in ("pending", "running") else rng.uniform(0, 2 * 86_400),
        "cpu_seconds": rng.randrange(100_000),
        "tags": rng.choice([{}, {"project": "web"}, {"project": "cli"}, r["tags"]]),
    }


@pytest.mark.parametrize("engine", ENGINES)
def test_breakdown_by_tag_follows_builds_written_again(request, engine, tmp_path):
    """Usage by tag is read from the tag rows: a build written again (finished since, or its figures or tags
    changed) moves between groups, and the groups still add up to /usage."""
    rng = random.Random(9)
    env = Env(tmp_path, new_database(request, engine, tmp_path))
    env.load(RECORDS)
    again = [rewritten(r, rng) for r in RECORDS if r["build_id"] % 3 == 0]
    env.load(again)
    latest = {r["build_id"]: r for r in [*RECORDS, *again]}
    records = [latest[build_id] for build_id in sorted(latest)]
    secret = env.token()
    low = FIRST_DAY - timedelta(days=1)
    with env.client() as client:
        response = client.get("/usage/breakdown", params={"from": low.isoformat(), "group_by": "tag:project"},
                              headers=auth(secret))
        usage = client.get("/usage", params={"from": low.isoformat()}, headers=auth(secret)).json()
    assert response.status_code == 200, response.text
    groups = response.json()
    assert groups == plain_breakdown(low, None, "tag:project", records)
    assert {g["key"] for g in groups} == {"web", "api", "cli", None}
    assert sum(g["billable_cpu_seconds"] for g in groups) == usage["billable_cpu_seconds"]
    assert sum(g["billable_build_count"] for g in groups) == usage["billable_build_count"]
