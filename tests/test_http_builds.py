"""HTTP behaviour of the JSON API, through the app in process."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from conftest import NOW, Env, auth, record

FIELDS = [
    "build_id", "create_time", "start_time", "queue_time_seconds", "duration_seconds", "build_status", "status",
    "status_message", "cpu_count", "allocated_megabytes", "cpu_seconds", "average_cpu_utilization",
    "peak_memory_use_kilobytes", "peak_storage_use_kilobytes", "derivation_path", "outputs", "system", "tags",
    "restart_of_build_id", "restarted_as_build_id",
]
NULLABLE = {
    "duration_seconds", "status_message", "average_cpu_utilization", "peak_memory_use_kilobytes",
    "peak_storage_use_kilobytes", "restart_of_build_id", "restarted_as_build_id",
}
PUBLIC_URL = "http://testserver.local"
RFC3339_Z = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{6})?Z")
LINK = re.compile(r'<([^>]+)>; rel="next"')
DRV = "/nix/store/" + "b" * 32 + "-hello-2.12.1.drv"
EPOCH_FROM = {"create_time_from": "2000-01-01"}


def z(moment: datetime) -> str:
    """A UTC time as the API writes it."""
    text = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return text + (f".{moment.microsecond:06d}" if moment.microsecond else "") + "Z"


def ids(response) -> list[int]:
    assert response.status_code == 200, response.text
    return [build["build_id"] for build in response.json()]


def next_link(response) -> str | None:
    header = response.headers.get("link")
    if header is None:
        return None
    match = LINK.fullmatch(header)
    assert match, header
    return match.group(1)


def shared(tmp_path_factory, name: str, records: list[dict[str, Any]]):
    """A client and token over one database that a module's parametrised cases share (they only read)."""
    env = Env(tmp_path_factory.mktemp(name))
    env.load(records)
    secret = env.token()
    with env.client() as client:
        yield client, secret


def walk(client, secret: str, params: dict[str, Any]) -> tuple[list[int], int]:
    """Every build id of every page, following `Link` as an opaque URL; and the number of pages."""
    response = client.get("/builds", params=params, headers=auth(secret))
    seen, pages = ids(response), 1
    while (url := next_link(response)) is not None:
        assert url.startswith(PUBLIC_URL + "/builds?")
        response = client.get(url, headers=auth(secret))
        seen += ids(response)
        pages += 1
        assert pages < 100
    return seen, pages


# --- GET /builds ------------------------------------------------------------------------------


def test_builds_are_ordered_newest_first_with_ties_by_build_id_descending(env):
    t = NOW - timedelta(hours=3)
    env.load([
        record(10, create_time=t),
        record(11, create_time=t + timedelta(minutes=5)),
        record(3, create_time=t + timedelta(minutes=5)),
        record(7, create_time=t + timedelta(minutes=5)),
        record(12, create_time=t - timedelta(minutes=1)),
        record(1, create_time=t + timedelta(minutes=9)),
    ])
    secret = env.token()
    with env.client() as client:
        assert ids(client.get("/builds", headers=auth(secret))) == [1, 11, 7, 3, 10, 12]


def test_default_window_is_the_last_24_hours(env):
    env.load([
        record(1, create_time=NOW - timedelta(hours=25)),
        record(2, create_time=NOW - timedelta(hours=23)),
        record(3, create_time=NOW - timedelta(days=30)),
    ])
    secret = env.token()
    with env.client() as client:
        assert ids(client.get("/builds", headers=auth(secret))) == [2]
        summary = client.get("/builds/summary", headers=auth(secret)).json()
        assert summary["build_count"] == 1


def test_omitted_create_time_to_has_no_upper_bound(env):
    env.load([record(1, create_time=NOW + timedelta(days=400)), record(2)])
    secret = env.token()
    with env.client() as client:
        assert ids(client.get("/builds", headers=auth(secret))) == [1, 2]
        assert client.get("/builds/summary", headers=auth(secret)).json()["build_count"] == 2


def test_create_time_ranges_are_half_open(env):
    t = (NOW - timedelta(hours=5)).replace(microsecond=0)
    env.load([record(i, create_time=t + timedelta(seconds=i)) for i in range(1, 6)])
    secret = env.token()
    params = {"create_time_from": z(t + timedelta(seconds=2)), "create_time_to": z(t + timedelta(seconds=4))}
    with env.client() as client:
        assert ids(client.get("/builds", params=params, headers=auth(secret))) == [3, 2]
        assert client.get("/builds/summary", params=params, headers=auth(secret)).json()["build_count"] == 2
        one_microsecond_later = {**params, "create_time_from": z(t + timedelta(seconds=2, microseconds=1))}
        assert ids(client.get("/builds", params=one_microsecond_later, headers=auth(secret))) == [3]
        empty = {"create_time_from": params["create_time_from"], "create_time_to": params["create_time_from"]}
        assert ids(client.get("/builds", params=empty, headers=auth(secret))) == []


def test_create_time_with_offset_and_date_only(env):
    t = datetime(2026, 3, 10, 23, 30, tzinfo=UTC)
    env.load([record(1, create_time=t), record(2, create_time=t + timedelta(hours=1))])
    secret = env.token()
    with env.client() as client:
        # 2026-03-11T00:30:00+01:00 is 23:30 UTC on the 10th.
        params = {"create_time_from": "2026-03-11T00:30:00+01:00", "create_time_to": "2026-03-11"}
        assert ids(client.get("/builds", params=params, headers=auth(secret))) == [1]
        assert ids(client.get("/builds", params={"create_time_from": "2026-03-11"}, headers=auth(secret))) == [2]
        raw = "/builds?create_time_from=2026-03-11T00:30:00+01:00&create_time_to=2026-03-11"  # unescaped "+"
        assert ids(client.get(raw, headers=auth(secret))) == [1]


TAGGED = [
    record(1, tags={"project": "web", "env": "prod"}),
    record(2, tags={"project": "web", "env": "dev"}),
    record(3, tags={"project": "api", "env": "prod"}),
    record(4, tags={"url": "http://x:80/y", "empty": ""}),
    record(5),
]


@pytest.fixture(scope="module")
def tagged(tmp_path_factory):
    yield from shared(tmp_path_factory, "tagged", TAGGED)


@pytest.mark.parametrize(("query", "expected"), [
    ("tags=project:web", [2, 1]),
    ("tags=env:prod", [3, 1]),
    ("tags=project:web,env:prod", [1]),
    ("tags=env:prod,project:web", [1]),
    ("tags=project:web&tags=env:prod", [1]),
    ("tags=project:web,project:api", []),
    ("tags=project:nope", []),
    ("tags=nope:web", []),
    ("tags=url:http://x:80/y", [4]),
    ("tags=url:http%3A%2F%2Fx%3A80%2Fy", [4]),
    ("tags=empty:", [4]),
    ("tags=url:http://x:80/y,empty:", [4]),
    ("tags=SERVICE_TAG_project:web", []),
    ("tags=project:WEB", []),
    ("tags=project:web&status=built", [2, 1]),
    ("tags=project:web&status=timeout", []),
])
def test_tag_filters_combine_with_and(tagged, query, expected):
    client, secret = tagged
    assert ids(client.get(f"/builds?{query}", headers=auth(secret))) == expected
    summary = client.get(f"/builds/summary?{query}", headers=auth(secret))
    assert summary.json()["build_count"] == len(expected)


def test_tag_key_is_the_name_after_service_tag_prefix(env):
    env.load([record(1, tags={"project": "web"})])
    secret = env.token()
    with env.client() as client:
        (build,) = client.get("/builds", params={"tags": "project:web"}, headers=auth(secret)).json()
    assert build["tags"] == {"project": "web"}


@pytest.fixture(scope="module")
def statuses(tmp_path_factory):
    yield from shared(tmp_path_factory, "statuses", [
        record(1), record(2, build_status="build_failed"), record(3, build_status="timeout"),
        record(4, build_status="internal_error"), record(5, build_status="pending"),
        record(6, build_status="running"),
    ])


@pytest.mark.parametrize(("status", "expected"), [
    ("built", [1]),
    ("timeout", [3]),
    ("built,timeout", [3, 1]),
    ("running,pending", [6, 5]),
    ("internal_error,out_of_memory", [4]),
    ("cancelled", []),
])
def test_status_filter(statuses, status, expected):
    client, secret = statuses
    assert ids(client.get("/builds", params={"status": status}, headers=auth(secret))) == expected
    repeated = "&".join(f"status={s}" for s in status.split(","))
    assert ids(client.get(f"/builds?{repeated}", headers=auth(secret))) == expected


def test_derivation_path_is_an_exact_match(env):
    env.load([
        record(1, derivation_path=DRV),
        record(2, derivation_path=DRV + "x"),
        record(3, derivation_path=DRV.upper()),
        record(4, derivation_path=DRV),
    ])
    secret = env.token()
    with env.client() as client:
        def by_path(path: str) -> list[int]:
            return ids(client.get("/builds", params={"derivation_path": path}, headers=auth(secret)))

        assert by_path(DRV) == [4, 1]
        assert by_path(DRV[:-1]) == []
        assert by_path("%") == []
        assert by_path("/nix/store/%") == []
        assert by_path(DRV.replace("b", "_")) == []


def test_limit_caps_the_page_and_link_appears_only_when_more_match(env):
    env.load([record(i, create_time=NOW - timedelta(minutes=i)) for i in range(1, 6)])
    secret = env.token()
    with env.client() as client:
        first = client.get("/builds", params={"limit": 2}, headers=auth(secret))
        assert ids(first) == [1, 2]
        assert next_link(first) is not None
        for limit in (5, 6, 500):
            exact = client.get("/builds", params={"limit": limit}, headers=auth(secret))
            assert ids(exact) == [1, 2, 3, 4, 5]
            assert "link" not in exact.headers
        assert "link" not in client.get("/builds", headers=auth(secret)).headers


def test_default_limit_is_500(env):
    env.load([record(i, create_time=NOW - timedelta(seconds=i)) for i in range(1, 503)])
    secret = env.token()
    with env.client() as client:
        response = client.get("/builds", headers=auth(secret))
        assert len(ids(response)) == 500
        assert next_link(response) is not None


@pytest.fixture(scope="module")
def paged(tmp_path_factory):
    # Three create times shared by seven builds each: page boundaries fall inside ties.
    times = [NOW - timedelta(hours=h) for h in (1, 2, 3)]
    yield from shared(tmp_path_factory, "paged", [
        record(i, create_time=times[i % 3], build_status="built" if i % 3 else "timeout",
               tags={"team": "a" if i % 2 else "b", **({"kind": "x"} if i % 5 == 0 else {})})
        for i in range(1, 22)
    ])


@pytest.mark.parametrize(("params", "expected"), [
    ({}, list(range(21, 0, -1))),
    ({"status": "built"}, [i for i in range(21, 0, -1) if i % 3]),
    ({"tags": "team:a"}, [i for i in range(21, 0, -1) if i % 2]),
    ({"tags": "team:a,kind:x"}, [i for i in range(21, 0, -1) if i % 2 and i % 5 == 0]),
    (EPOCH_FROM, list(range(21, 0, -1))),
])
@pytest.mark.parametrize("limit", [1, 4, 7, 20, 21])
def test_following_link_walks_all_pages_without_gaps_or_duplicates(paged, params, expected, limit):
    client, secret = paged
    everything = ids(client.get("/builds", params={**params, "limit": 10000}, headers=auth(secret)))
    assert sorted(everything, reverse=True) == expected
    seen, pages = walk(client, secret, {**params, "limit": limit})
    assert seen == everything
    assert len(set(seen)) == len(seen)
    assert pages == max(1, -(-len(expected) // limit))


def test_link_uses_the_configured_public_url(env):
    env.load([record(1), record(2)])
    secret = env.token()
    with env.client(public_url="https://builds.example.com/report/") as client:
        response = client.get("/report/builds", params={"limit": 1}, headers=auth(secret))
    link = next_link(response)
    assert link is not None
    assert link.startswith("https://builds.example.com/report/builds?")
    assert secret not in link


def test_link_keeps_the_filters_of_the_first_page(env):
    env.load([record(i, tags={"p": "w:x y"}, derivation_path=DRV) for i in range(1, 4)] + [record(9)])
    secret = env.token()
    with env.client() as client:
        seen, pages = walk(client, secret, {"tags": "p:w:x y", "derivation_path": DRV, "status": "built",
                                            "limit": 1})
    assert seen == [3, 2, 1]
    assert pages == 3


# --- GET /builds/summary ----------------------------------------------------------------------

T0 = (NOW - timedelta(hours=2)).replace(microsecond=0)


def out(size: int) -> dict[str, Any]:
    return {"name": "out", "path": "/nix/store/" + "c" * 32 + "-out", "nar_hash": "sha256:x", "nar_size_bytes": size}


SUMMARY_BUILDS = [
    record(1, create_time=T0, cpu_seconds=100, duration_seconds=60.0, outputs=[out(1000)]),
    record(2, create_time=T0, cpu_seconds=50, duration_seconds=30.5, outputs=[out(1000), out(100)],
           start_time=(T0 + timedelta(seconds=10)).isoformat()),
    record(3, create_time=T0, build_status="build_failed", cpu_seconds=10, duration_seconds=5.0),
    record(4, create_time=T0, build_status="cancelled", cpu_seconds=1, duration_seconds=1.0),
    record(5, create_time=T0, build_status="timeout", cpu_seconds=2, duration_seconds=2.0),
    record(6, create_time=T0, build_status="max_memory_exceeded", cpu_seconds=3, duration_seconds=3.0),
    record(7, create_time=T0, build_status="client_disconnect", cpu_seconds=4, duration_seconds=4.0),
    record(8, create_time=T0, build_status="client_error", cpu_seconds=5, duration_seconds=5.0),
    record(9, create_time=T0, build_status="internal_error", cpu_seconds=1000, duration_seconds=100.0,
           outputs=[out(3000)]),
    record(10, create_time=T0, build_status="out_of_memory", cpu_seconds=2000, duration_seconds=200.0,
           start_time=(T0 + timedelta(seconds=500)).isoformat()),
    record(11, create_time=T0, build_status="pending", cpu_seconds=0),
    record(12, create_time=T0, build_status="running", cpu_seconds=7),
]
FINISHED = "built,build_failed,cancelled,timeout,max_memory_exceeded,client_disconnect,client_error," \
           "internal_error,out_of_memory"


@pytest.fixture(scope="module")
def summarized(tmp_path_factory):
    yield from shared(tmp_path_factory, "summarized", SUMMARY_BUILDS)


def counts_add_up(summary: dict[str, Any]) -> bool:
    return summary["successful_build_count"] + summary["failed_build_count"] + summary["discarded_build_count"] \
        + summary["running_build_count"] == summary["build_count"]


def test_summary_counts_and_totals_follow_the_definitions(env):
    env.load(SUMMARY_BUILDS)
    secret = env.token()
    with env.client() as client:
        before = time.time()
        summary = client.get("/builds/summary", headers=auth(secret)).json()
        after = time.time()
    wall = summary.pop("wall_time_seconds")
    assert summary == {
        "build_count": 12,
        "successful_build_count": 2,
        "failed_build_count": 6,
        "discarded_build_count": 2,
        "running_build_count": 2,
        "total_cpu_seconds": 3182,
        "billable_cpu_seconds": 175,
        "total_duration_seconds": 410.5,
        # 1000 + 1100 + 3000 bytes = 5100 -> 4 KiB, not the 0 + 1 + 2 of per-build rounding.
        "total_output_nar_size_kilobytes": 4,
    }
    # Two builds still run, so the wall time runs from the earliest start to now.
    assert before - T0.timestamp() - 1 <= wall <= after - T0.timestamp() + 1
    assert counts_add_up({**summary, "wall_time_seconds": wall})


def test_summary_wall_time_spans_earliest_start_to_latest_stop(env):
    env.load(SUMMARY_BUILDS)
    secret = env.token()
    with env.client() as client:
        summary = client.get("/builds/summary", params={"status": FINISHED}, headers=auth(secret)).json()
        assert summary["wall_time_seconds"] == 700.0  # build 1 starts at T0, build 10 stops at T0 + 500 + 200
        assert summary["running_build_count"] == 0
        assert summary["billable_cpu_seconds"] == 175
        built = client.get("/builds/summary", params={"status": "built"}, headers=auth(secret)).json()
        assert built["wall_time_seconds"] == 60.0  # build 1 spans T0 to T0 + 60; build 2 lies inside it


def test_summary_wall_time_of_overlapping_builds(env):
    env.load([
        record(1, create_time=T0, duration_seconds=60.0),
        record(2, create_time=T0, start_time=(T0 + timedelta(seconds=30)).isoformat(), duration_seconds=100.0),
        record(3, create_time=T0, start_time=(T0 + timedelta(seconds=5)).isoformat(), duration_seconds=1.25),
    ])
    secret = env.token()
    with env.client() as client:
        summary = client.get("/builds/summary", headers=auth(secret)).json()
    assert summary["wall_time_seconds"] == 130.0
    assert summary["total_duration_seconds"] == 161.25


@pytest.mark.parametrize("status", ["pending", "running"])
def test_summary_of_unfinished_builds_bills_nothing_and_runs_until_now(env, status):
    env.load([record(1, create_time=T0, build_status=status, cpu_seconds=33)])
    secret = env.token()
    with env.client() as client:
        summary = client.get("/builds/summary", headers=auth(secret)).json()
    assert summary["running_build_count"] == 1
    assert summary["total_cpu_seconds"] == 33
    assert summary["billable_cpu_seconds"] == 0
    assert summary["total_duration_seconds"] == 0
    assert abs(summary["wall_time_seconds"] - (time.time() - T0.timestamp())) < 5


@pytest.mark.parametrize("status", [
    "built", "build_failed", "cancelled", "timeout", "internal_error", "out_of_memory", "max_memory_exceeded",
    "client_disconnect", "client_error", "pending", "running",
])
def test_summary_counts_add_up_for_every_status(summarized, status):
    client, secret = summarized
    summary = client.get("/builds/summary", params={"status": status}, headers=auth(secret)).json()
    assert summary["build_count"] == (2 if status == "built" else 1)
    assert counts_add_up(summary)
    billable = status not in ("internal_error", "out_of_memory", "pending", "running")
    assert (summary["billable_cpu_seconds"] == summary["total_cpu_seconds"]) == (billable or
                                                                                 summary["total_cpu_seconds"] == 0)


def test_summary_of_nothing_is_all_zeros(env):
    env.load([record(1, create_time=NOW - timedelta(days=3))])
    secret = env.token()
    with env.client() as client:
        response = client.get("/builds/summary", headers=auth(secret))
    assert response.status_code == 200
    body = response.json()
    assert body == {
        "build_count": 0, "running_build_count": 0, "discarded_build_count": 0, "failed_build_count": 0,
        "successful_build_count": 0, "total_cpu_seconds": 0, "billable_cpu_seconds": 0,
        "total_duration_seconds": 0, "wall_time_seconds": 0, "total_output_nar_size_kilobytes": 0,
    }
    assert isinstance(body["total_duration_seconds"], float)
    assert isinstance(body["wall_time_seconds"], float)
    assert isinstance(body["build_count"], int)


@pytest.mark.parametrize(("query", "name"), [
    ("limit=10", "limit"),
    ("derivation_path=/nix/store/x.drv", "derivation_path"),
    ("limit=10&derivation_path=/x", "derivation_path"),
])
def test_summary_rejects_limit_and_derivation_path(env, query, name):
    secret = env.token()
    with env.client() as client:
        response = client.get(f"/builds/summary?{query}", headers=auth(secret))
    assert response.status_code == 400
    assert name in [p["name"] for p in response.json()["invalid_params"]]


# --- GET /usage -------------------------------------------------------------------------------


def month_start(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def test_usage_counts_billable_builds_by_stop_date_this_month_by_default(env):
    m = month_start(datetime.now(UTC))
    env.load([
        # Created and started last month, stops this month: counts.
        record(1, create_time=m - timedelta(hours=1), start_time=(m - timedelta(minutes=30)).isoformat(),
               duration_seconds=3600.0, cpu_seconds=100),
        # Stopped last month: does not count by default.
        record(2, create_time=m - timedelta(hours=3), duration_seconds=60.0, cpu_seconds=200),
        record(3, create_time=m + timedelta(minutes=1), build_status="timeout", cpu_seconds=7),
        record(4, create_time=m + timedelta(minutes=1), build_status="internal_error", cpu_seconds=1000),
        record(5, create_time=m + timedelta(minutes=1), build_status="out_of_memory", cpu_seconds=1000),
        record(6, create_time=m + timedelta(minutes=1), build_status="pending", cpu_seconds=1000),
        record(7, create_time=m + timedelta(minutes=1), build_status="running", cpu_seconds=1000),
    ])
    secret = env.token()
    with env.client() as client:
        assert client.get("/usage", headers=auth(secret)).json() == {
            "billable_cpu_seconds": 107, "billable_build_count": 2,
        }
        previous = month_start(m - timedelta(days=1))
        last_month = {"from": previous.date().isoformat(), "to": m.date().isoformat()}
        assert client.get("/usage", params=last_month, headers=auth(secret)).json() == {
            "billable_cpu_seconds": 200, "billable_build_count": 1,
        }
        assert client.get("/usage", params={"from": "2000-01-01"}, headers=auth(secret)).json() == {
            "billable_cpu_seconds": 307, "billable_build_count": 3,
        }


def test_usage_never_counts_unfinished_or_discarded_builds(env):
    env.load([
        record(1, build_status="pending", cpu_seconds=5),
        record(2, build_status="running", cpu_seconds=5),
        record(3, build_status="internal_error", cpu_seconds=5),
        record(4, build_status="out_of_memory", cpu_seconds=5),
    ])
    secret = env.token()
    with env.client() as client:
        assert client.get("/usage", params={"from": "1970-01-01"}, headers=auth(secret)).json() == {
            "billable_cpu_seconds": 0, "billable_build_count": 0,
        }


@pytest.mark.parametrize(("params", "expected"), [
    ({"from": "2025-01-15", "to": "2025-01-16"}, [1]),
    ({"from": "2025-01-16", "to": "2025-01-17"}, [2]),
    ({"from": "2025-01-15", "to": "2025-01-17"}, [1, 2]),
    ({"from": "2025-01-16"}, [2, 3]),
    ({"from": "2025-01-01", "to": "2025-01-15"}, []),
    ({"from": "2025-01-15", "to": "2025-01-15"}, []),
    ({"from": "2025-01-17", "to": "2025-02-01"}, [3]),
])
def test_usage_dates_are_half_open_on_the_stop_date(env, params, expected):
    cpu = {1: 1, 2: 10, 3: 100}
    env.load([
        # Starts on the 14th, stops at 23:59:59.5 on the 15th.
        record(1, create_time=datetime(2025, 1, 14, 23, 0, tzinfo=UTC), duration_seconds=86_400 + 3599.5,
               cpu_seconds=cpu[1]),
        # Stops at exactly midnight: the 16th.
        record(2, create_time=datetime(2025, 1, 15, 23, 0, tzinfo=UTC), duration_seconds=3600.0, cpu_seconds=cpu[2]),
        # Stops on the 17th; its start time carries an offset.
        record(3, create_time="2025-01-17T10:00:00+09:00", start_time="2025-01-17T10:00:00+09:00",
               duration_seconds=1.0, cpu_seconds=cpu[3]),
    ])
    secret = env.token()
    with env.client() as client:
        usage = client.get("/usage", params=params, headers=auth(secret)).json()
    assert usage == {"billable_cpu_seconds": sum(cpu[i] for i in expected), "billable_build_count": len(expected)}


# --- accounts ---------------------------------------------------------------------------------


def test_a_token_sees_only_its_own_account(env):
    env.load([
        record(1, tags={"project": "web"}, cpu_seconds=10),
        record(2, account="beta", tags={"project": "web"}, cpu_seconds=20),
        record(3, cpu_seconds=40),
    ])
    acme, beta = env.token(), env.token(account="beta")
    with env.client() as client:
        assert ids(client.get("/builds", headers=auth(acme))) == [3, 1]
        assert ids(client.get("/builds", headers=auth(beta))) == [2]
        assert ids(client.get("/builds", params={"tags": "project:web"}, headers=auth(beta))) == [2]
        assert client.get("/builds/summary", headers=auth(beta)).json()["build_count"] == 1
        assert client.get("/builds/summary", params={"tags": "project:web"},
                          headers=auth(beta)).json()["total_cpu_seconds"] == 20
        assert client.get("/usage", params={"from": "2000-01-01"}, headers=auth(beta)).json() == {
            "billable_cpu_seconds": 20, "billable_build_count": 1,
        }
        assert client.get("/builds/1", headers=auth(acme)).status_code == 200

        foreign = client.get("/builds/1", headers=auth(beta))
        unknown = client.get("/builds/999", headers=auth(beta))
        assert foreign.status_code == unknown.status_code == 404
        assert foreign.headers["content-type"] == unknown.headers["content-type"]
        assert foreign.text.replace('"1"', "ID").replace(" 1 ", " ID ") == \
            unknown.text.replace('"999"', "ID").replace(" 999 ", " ID ")
        assert client.get("/builds/1/url", headers=auth(beta)).status_code == 404
        assert client.get("/builds/2/url", headers=auth(acme)).status_code == 404


def test_an_account_without_builds_sees_nothing(env):
    env.load([record(1)])
    secret = env.token(account="empty")
    with env.client() as client:
        assert client.get("/builds", headers=auth(secret)).json() == []
        assert client.get("/builds/summary", headers=auth(secret)).json()["build_count"] == 0
        assert client.get("/builds/1", headers=auth(secret)).status_code == 404


# --- GET /builds/{id} -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def seven(tmp_path_factory):
    yield from shared(tmp_path_factory, "seven", [record(7)])


def test_one_build_is_returned_by_id(env):
    env.load([record(5, tags={"a": "b"}), record(6)])
    secret = env.token()
    with env.client() as client:
        response = client.get("/builds/5", headers=auth(secret))
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/json")
        build = response.json()
        assert build["build_id"] == 5
        assert build["tags"] == {"a": "b"}
        assert client.get("/builds", headers=auth(secret)).json()[1] == build


def test_unknown_build_is_404(env):
    env.load([record(1)])
    secret = env.token()
    with env.client() as client:
        for path in ("/builds/2", f"/builds/{2**63 - 1}", "/builds/2/url"):
            response = client.get(path, headers=auth(secret))
            assert response.status_code == 404, path
            assert response.headers["content-type"] == "application/problem+json"
            assert response.json()["status"] == 404


@pytest.mark.parametrize("build_id", ["0", "-1", str(2**63), "abc", "1.5", "1e3", "0x1", "%20"])
@pytest.mark.parametrize("suffix", ["", "/url"])
def test_bad_build_id_is_400(seven, build_id, suffix):
    client, secret = seven
    response = client.get(f"/builds/{build_id}{suffix}", headers=auth(secret))
    assert response.status_code == 400
    assert [p["name"] for p in response.json()["invalid_params"]] == ["build_id"]


def test_times_are_utc_with_z_and_microseconds_only_when_present(env):
    whole = (NOW - timedelta(hours=2)).replace(microsecond=0)
    fraction = whole.replace(microsecond=69456)
    plus_one = timezone(timedelta(hours=1))
    minus_five = timezone(timedelta(hours=-5, minutes=-30))
    env.load([
        record(1, create_time=whole.astimezone(plus_one).isoformat(),
               start_time=(whole + timedelta(seconds=3)).astimezone(minus_five).isoformat()),
        record(2, create_time=fraction.astimezone(plus_one).isoformat(),
               start_time=fraction.astimezone(UTC).isoformat().replace("+00:00", "Z")),
    ])
    secret = env.token()
    with env.client() as client:
        one = client.get("/builds/1", headers=auth(secret)).json()
        two = client.get("/builds/2", headers=auth(secret)).json()
    assert one["create_time"] == z(whole)
    assert one["start_time"] == z(whole + timedelta(seconds=3))
    assert "." not in one["create_time"]
    assert two["create_time"] == z(fraction)
    assert two["create_time"].endswith(".069456Z")
    assert two["start_time"] == two["create_time"]
    for value in (one["create_time"], one["start_time"], two["create_time"]):
        assert RFC3339_Z.fullmatch(value)


def test_every_field_is_present_and_nullable_ones_are_null(env):
    env.load([record(1, build_status="running")])
    secret = env.token()
    with env.client() as client:
        build = client.get("/builds/1", headers=auth(secret)).json()
    assert list(build) == FIELDS
    assert {name for name, value in build.items() if value is None} == NULLABLE
    assert build["outputs"] == []
    assert build["tags"] == {}


def test_every_field_round_trips_from_import(env):
    full = record(
        2, status_message="ok", average_cpu_utilization=0.75, peak_memory_use_kilobytes=1024,
        peak_storage_use_kilobytes=2048, outputs=[out(5)], tags={"k": "v"}, restart_of_build_id=1,
        queue_time_seconds=1.25, duration_seconds=61.5,
    )
    env.load([record(1), full])
    secret = env.token()
    with env.client() as client:
        build = client.get("/builds/2", headers=auth(secret)).json()
        first = client.get("/builds/1", headers=auth(secret)).json()
    assert list(build) == FIELDS
    for name in FIELDS:
        if name in full and name not in ("create_time", "start_time"):
            assert build[name] == full[name], name
    assert build["restarted_as_build_id"] is None
    assert first["restarted_as_build_id"] == 2  # links are kept in both directions


# --- GET /builds/{id}/url ---------------------------------------------------------------------


@pytest.mark.parametrize(("query", "ttl"), [("", 3600), ("?ttl_seconds=1", 1), ("?ttl_seconds=600", 600),
                                            ("?ttl_seconds=604800", 604800)])
def test_url_carries_build_id_and_expiry(seven, query, ttl):
    client, secret = seven
    before = time.time()
    response = client.get(f"/builds/7/url{query}", headers=auth(secret))
    after = time.time()
    assert response.status_code == 200
    body = response.json()
    assert list(body) == ["build_id", "url", "expires_at"]
    assert body["build_id"] == 7
    assert RFC3339_Z.fullmatch(body["expires_at"])
    expires = datetime.fromisoformat(body["expires_at"].replace("Z", "+00:00")).timestamp()
    assert before + ttl - 2 <= expires <= after + ttl + 2
    assert body["url"].startswith(PUBLIC_URL + "/")
    assert secret not in body["url"]
    assert secret.removeprefix("brt_") not in body["url"]


def test_url_is_absolute_from_the_public_url(env):
    env.load([record(7)])
    secret = env.token()
    with env.client(public_url="https://builds.example.com/report/") as client:
        url = client.get("/report/builds/7/url", headers=auth(secret)).json()["url"]
    assert url.startswith("https://builds.example.com/report/")
    assert "//" not in url.removeprefix("https://")


def test_urls_differ_by_build_and_expiry(env):
    env.load([record(7), record(8)])
    secret = env.token()
    with env.client() as client:
        a = client.get("/builds/7/url", headers=auth(secret)).json()["url"]
        b = client.get("/builds/8/url", headers=auth(secret)).json()["url"]
        c = client.get("/builds/7/url?ttl_seconds=60", headers=auth(secret)).json()["url"]
    assert len({a, b, c}) == 3


@pytest.mark.parametrize("ttl", ["0", "604801", "-1", "abc", "", "1.5", "99999999999999999999999"])
def test_url_ttl_out_of_bounds_is_400(seven, ttl):
    client, secret = seven
    response = client.get("/builds/7/url", params={"ttl_seconds": ttl}, headers=auth(secret))
    assert response.status_code == 400
    assert [p["name"] for p in response.json()["invalid_params"]] == ["ttl_seconds"]


# --- summary and usage agree with the builds they cover -----------------------------------------

STATUS_CYCLE = ["built", "build_failed", "built", "timeout", "internal_error", "cancelled", "out_of_memory",
                "built", "client_error", "max_memory_exceeded", "client_disconnect"]
SUCCESSFUL = {"built"}
FAILED = {"build_failed", "cancelled", "timeout", "max_memory_exceeded", "client_disconnect", "client_error"}
DISCARDED = {"internal_error", "out_of_memory"}
BASE = NOW.replace(minute=0, second=0) - timedelta(hours=50)
NEW_YEAR = datetime(2026, 1, 1, tzinfo=UTC)


def spread() -> list[dict[str, Any]]:
    """Finished builds at irregular times over three days, and a few around a new year, across hour and day edges."""
    builds = []
    for i in range(1, 80):
        create = BASE + timedelta(minutes=47 * i, seconds=i, microseconds=7 * i)
        builds.append(record(
            i, create_time=create, build_status=STATUS_CYCLE[i % len(STATUS_CYCLE)], cpu_seconds=i * 3,
            duration_seconds=[0.0, 59.5, 3600.0, 86_399.25][i % 4], outputs=[out(700 * (i % 5))] * (i % 3),
            start_time=(create + timedelta(seconds=i % 7)).isoformat(), tags={"parity": str(i % 2)},
        ))
    for j, minutes in enumerate((-90, -31, -1, 0, 29, 61)):
        create = NEW_YEAR + timedelta(minutes=minutes, seconds=13)
        builds.append(record(200 + j, create_time=create, cpu_seconds=1000 + j, duration_seconds=30.0,
                             outputs=[out(1500)]))
    return builds


@pytest.fixture(scope="module")
def spread_client(tmp_path_factory):
    yield from shared(tmp_path_factory, "spread", spread())


def expected_summary(builds: list[dict[str, Any]]) -> dict[str, Any]:
    def stop(build: dict[str, Any]) -> datetime:
        return datetime.fromisoformat(build["start_time"]) + timedelta(seconds=build["duration_seconds"])

    statuses = [b["build_status"] for b in builds]
    starts = [datetime.fromisoformat(b["start_time"]) for b in builds]
    return {
        "build_count": len(builds),
        "running_build_count": 0,
        "discarded_build_count": sum(s in DISCARDED for s in statuses),
        "failed_build_count": sum(s in FAILED for s in statuses),
        "successful_build_count": sum(s in SUCCESSFUL for s in statuses),
        "total_cpu_seconds": sum(b["cpu_seconds"] for b in builds),
        "billable_cpu_seconds": sum(b["cpu_seconds"] for b in builds if b["build_status"] not in DISCARDED),
        "total_duration_seconds": pytest.approx(sum(b["duration_seconds"] for b in builds), abs=1e-6),
        "wall_time_seconds": pytest.approx(
            (max(stop(b) for b in builds) - min(starts)).total_seconds() if builds else 0, abs=1e-6
        ),
        "total_output_nar_size_kilobytes": sum(o["nar_size_bytes"] for b in builds for o in b["outputs"]) // 1024,
    }


def edge(hours: float) -> str:
    return z(BASE + timedelta(hours=hours))


WINDOWS = [
    {},
    {"create_time_from": "2025-12-31"},
    {"create_time_from": "2025-12-31T23:00:00Z", "create_time_to": "2026-01-01T00:00:13Z"},
    {"create_time_from": "2025-12-31T22:30:13Z", "create_time_to": "2026-01-01T01:01:13Z"},
    {"create_time_from": "2025-12-31T23:59:13Z", "create_time_to": "2026-01-01T00:29:13.000001Z"},
    {"create_time_from": "2025-12-31T22:31:00Z", "create_time_to": "2026-01-01T00:59:59Z"},
    {"create_time_from": "2026-01-01T00:30:13+01:00", "create_time_to": "2026-01-01T01:29:13 01:00"},
    {"create_time_from": edge(0), "create_time_to": edge(24)},
    {"create_time_from": edge(1.5), "create_time_to": edge(7.25)},
    {"create_time_from": edge(3 + 1 / 3600), "create_time_to": edge(40 - 1 / 3600)},
    {"create_time_from": edge(0.78), "create_time_to": edge(0.79)},
    {"create_time_from": edge(10), "create_time_to": edge(10)},
    {"create_time_from": edge(12), "tags": "parity:1"},
    {"create_time_from": edge(5.5), "create_time_to": edge(30.1), "status": "built,timeout,out_of_memory"},
    {"create_time_from": edge(5.5), "create_time_to": edge(30.1), "status": "internal_error", "tags": "parity:0"},
    {"create_time_from": "2000-01-01"},
]


@pytest.mark.parametrize("window", WINDOWS, ids=lambda w: "&".join(f"{k}={v}" for k, v in w.items()) or "default")
def test_summary_agrees_with_the_builds_it_covers(spread_client, window):
    client, secret = spread_client
    listed = client.get("/builds", params={**window, "limit": 10000}, headers=auth(secret)).json()
    summary = client.get("/builds/summary", params=window, headers=auth(secret)).json()
    assert summary == expected_summary(listed)


USAGE_WINDOWS = [
    {"from": "2025-12-01"},
    {"from": "2025-12-31", "to": "2026-01-01"},
    {"from": "2026-01-01", "to": "2026-01-02"},
    {"from": (BASE + timedelta(days=1)).date().isoformat()},
    {"from": BASE.date().isoformat(), "to": (BASE + timedelta(days=2)).date().isoformat()},
    {"from": (BASE + timedelta(days=2)).date().isoformat(), "to": (BASE + timedelta(days=3)).date().isoformat()},
    {"from": "2000-01-01", "to": "2000-01-01"},
]


@pytest.mark.parametrize("window", USAGE_WINDOWS, ids=lambda w: "&".join(f"{k}={v}" for k, v in w.items()))
def test_usage_agrees_with_the_stop_dates_of_the_builds(spread_client, window):
    client, secret = spread_client
    everything = client.get("/builds", params={"create_time_from": "2000-01-01", "limit": 10000},
                            headers=auth(secret)).json()
    low = datetime.fromisoformat(window["from"]).replace(tzinfo=UTC)
    high = datetime.fromisoformat(window["to"]).replace(tzinfo=UTC) if "to" in window else None
    billable = []
    for build in everything:
        stop = datetime.fromisoformat(build["start_time"]) + timedelta(seconds=build["duration_seconds"])
        day = datetime(stop.year, stop.month, stop.day, tzinfo=UTC)
        if build["build_status"] not in DISCARDED and day >= low and (high is None or day < high):
            billable.append(build)
    usage = client.get("/usage", params=window, headers=auth(secret)).json()
    assert usage == {
        "billable_cpu_seconds": sum(b["cpu_seconds"] for b in billable), "billable_build_count": len(billable),
    }


def test_reimport_moves_a_build_in_lists_summaries_and_usage(env):
    old = NOW - timedelta(hours=30)
    env.load([record(1, create_time=old, build_status="running", tags={"p": "w"}, cpu_seconds=5)])
    secret = env.token()
    with env.client() as client:
        assert ids(client.get("/builds", params={"tags": "p:w"}, headers=auth(secret))) == []
        assert client.get("/builds/summary", headers=auth(secret)).json()["build_count"] == 0
        everything = {"create_time_from": "2000-01-01"}
        assert client.get("/builds/summary", params=everything, headers=auth(secret)).json()[
            "running_build_count"] == 1
        assert client.get("/usage", params={"from": "2000-01-01"}, headers=auth(secret)).json()[
            "billable_build_count"] == 0

        env.load([record(1, build_status="built", tags={"p": "v"}, cpu_seconds=9)])  # an hour old now, finished
        assert ids(client.get("/builds", params={"tags": "p:v"}, headers=auth(secret))) == [1]
        assert ids(client.get("/builds", params={"tags": "p:w", **everything}, headers=auth(secret))) == []
        summary = client.get("/builds/summary", headers=auth(secret)).json()
        assert (summary["build_count"], summary["successful_build_count"], summary["running_build_count"]) == (1, 1, 0)
        assert client.get("/builds/summary", params={"create_time_to": z(NOW - timedelta(hours=2)), **everything},
                          headers=auth(secret)).json()["build_count"] == 0
        assert client.get("/usage", params={"from": "2000-01-01"}, headers=auth(secret)).json() == {
            "billable_cpu_seconds": 9, "billable_build_count": 1,
        }


def test_every_build_carries_status_equal_to_build_status(env):
    env.load([record(1, build_status="build_failed"), record(2), record(3, build_status="running")])
    secret = env.token()
    with env.client() as client:
        listed = client.get("/builds", headers=auth(secret)).json()
        one = client.get("/builds/1", headers=auth(secret)).json()
    assert {(b["build_id"], b["status"], b["build_status"]) for b in listed} == {
        (1, "build_failed", "build_failed"), (2, "built", "built"), (3, "running", "running"),
    }
    assert one["status"] == one["build_status"] == "build_failed"
