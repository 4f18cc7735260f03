"""GET /metrics: Prometheus text, per route and per account, summed across workers, behind its own scope."""

from __future__ import annotations

import os
from datetime import timedelta

import httpx
import pytest
from click.testing import CliRunner
from conftest import ENGINES, NOW, Env, auth, new_database, record
from litestar.testing import TestClient
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from buildreport.cli.main import main
from buildreport.http.app import create_app
from buildreport.http.metrics import HOUR_US
from buildreport.store.totals import hour_of
from buildreport.times import now_us, to_us

STATUSES = ["built", "build_failed", "running", "timeout"]


def records() -> list[dict]:
    out = []
    for i in range(1, 61):
        status = STATUSES[i % 4]
        out.append(
            record(
                i,
                account="acme" if i % 3 else "globex",
                create_time=NOW - timedelta(hours=i),  # some within the last day, some before
                build_status=status,
                cpu_seconds=i * 10,
            )
        )
    return out


RECORDS = records()


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def plain_last_day(now_us: int) -> dict[tuple[str, str], tuple[int, int]]:
    since = hour_of(now_us) - 23 * HOUR_US
    figures: dict[tuple[str, str], tuple[int, int]] = {}
    for r in RECORDS:
        if to_us(NOW - timedelta(hours=r["build_id"])) >= since:
            key = (r["account"], r["build_status"])
            count, cpu = figures.get(key, (0, 0))
            figures[key] = (count + 1, cpu + r["cpu_seconds"])
    return figures


@pytest.fixture(scope="module", params=ENGINES)
def api(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("metrics")
    env = Env(tmp, new_database(request, request.param, tmp))
    env.load(RECORDS)
    with env.client() as client:
        yield env, client, env.token(scopes=("metrics:read",)), env.token()


def test_metrics_need_the_metrics_scope(api):
    _, client, metrics_token, read_token = api
    assert client.get("/metrics").status_code == 401
    response = client.get("/metrics", headers=auth(read_token))
    assert response.status_code == 403
    assert "metrics:read" in response.json()["detail"]
    assert client.get("/metrics", headers=auth(metrics_token)).status_code == 200
    # … and a metrics token reads nothing else.
    assert client.get("/builds", headers=auth(metrics_token)).status_code == 403


def test_requests_are_counted_by_route_template_and_status(api):
    _, client, metrics_token, read_token = api
    for _ in range(3):
        assert client.get("/builds", headers=auth(read_token)).status_code == 200
    assert client.get("/builds/999999", headers=auth(read_token)).status_code == 404
    link = client.get("/builds/2/url", headers=auth(read_token)).json()["url"]
    assert client.get(link.removeprefix("http://testserver.local")).status_code == 200
    response = client.get("/metrics", headers=auth(metrics_token))
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    found = samples(response.text)

    def count(path: str, status: str) -> float:
        return sum(
            value for (name, labels), value in found.items()
            if name == "buildreport_requests_total" and ("path", path) in labels and ("status_code", status) in labels
        )

    assert count("/builds", "200") >= 3
    assert count("/builds/{build_id}", "404") >= 1
    assert count("/b/{token}", "200") >= 1
    assert link.rsplit("/", 1)[1] not in response.text  # a signed link never becomes a label
    assert any(name == "buildreport_request_duration_seconds_bucket" for name, _ in found)


def test_routed_requests_are_counted_timed_and_their_errors_apart(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.load(RECORDS[:3])
    read = auth(env.token())

    def value(name: str, status: int) -> float:
        labels = {"method": "GET", "path": "/usage", "status_code": str(status), "app_name": "buildreport"}
        return REGISTRY.get_sample_value(name, labels) or 0.0

    names = ("buildreport_requests_total", "buildreport_request_duration_seconds_count",
             "buildreport_requests_error_total")
    before = {(name, status): value(name, status) for name in names for status in (200, 500)}
    served = create_app(env.settings())
    with TestClient(served, base_url="http://testserver.local") as client:
        for _ in range(2):
            assert client.get("/usage", headers=read).status_code == 200

        async def failing(*args: object) -> None:
            raise RuntimeError("a fault nobody planned for")

        monkeypatch.setattr(served.app.state.reader, "usage", failing)
        assert client.get("/usage", headers=read).status_code == 500
    grown = {key: value(*key) - seen for key, seen in before.items()}
    assert grown == {
        ("buildreport_requests_total", 200): 2, ("buildreport_request_duration_seconds_count", 200): 2,
        ("buildreport_requests_error_total", 200): 0,
        ("buildreport_requests_total", 500): 1, ("buildreport_request_duration_seconds_count", 500): 1,
        ("buildreport_requests_error_total", 500): 1,
    }
    # In progress is labelled by route (status 200 while it runs) and is back to nothing once answered.
    assert value("buildreport_requests_in_progress", 200) == 0


def test_a_metrics_token_reads_every_accounts_figures_whichever_account_it_names(api):
    """`metrics:read` is the operator's scope: the README and `token create --help` say so."""
    env, client, _, _ = api
    for account in ("acme", "globex", "ops"):
        found = samples(client.get("/metrics", headers=auth(env.token(account, ("metrics:read",)))).text)
        stored = {dict(labels)["account"] for (name, labels), _ in found.items() if name == "buildreport_builds_stored"}
        assert stored == {"acme", "globex"}
    help_text = " ".join(CliRunner().invoke(main, ["token", "create", "--help"]).output.split())
    assert "metrics:read is the operator's: /metrics shows every account's figures" in help_text


def test_account_figures_equal_a_plain_computation(api):
    _, client, metrics_token, _ = api
    # The last day is counted in whole hours of the server's clock at the scrape, not of the data's NOW.
    while True:
        before = now_us()
        found = samples(client.get("/metrics", headers=auth(metrics_token)).text)
        if hour_of(now_us()) == hour_of(before):
            break
    expected = plain_last_day(before)
    assert expected  # the data has builds on both sides of the boundary
    builds = {
        (dict(labels)["account"], dict(labels)["status"]): value
        for (name, labels), value in found.items()
        if name == "buildreport_account_builds_last_day"
    }
    cpu = {
        (dict(labels)["account"], dict(labels)["status"]): value
        for (name, labels), value in found.items()
        if name == "buildreport_account_cpu_seconds_last_day"
    }
    assert builds == {key: count for key, (count, _) in expected.items()}
    assert cpu == {key: seconds for key, (_, seconds) in expected.items()}
    stored = {dict(labels)["account"]: value for (name, labels), value in found.items()
              if name == "buildreport_builds_stored"}
    assert stored == {"acme": 40, "globex": 20}
    assert found[("buildreport_database_bytes", frozenset())] > 0


def test_metrics_across_two_workers_add_up(env, serve, tmp_path):
    env.load(RECORDS[:5])
    token = env.token(scopes=("metrics:read",))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    server = serve(env.db, "--workers", "2", "--no-access-log", env={"TMPDIR": str(scratch)})
    folders = [p for p in scratch.iterdir() if p.name.startswith("buildreport-metrics-")]
    assert len(folders) == 1
    requests = 40
    with httpx.Client(base_url=server.url, timeout=10) as client:
        for _ in range(requests):
            # A new connection each time, so that both workers answer some.
            assert httpx.get(server.url + "/healthz", timeout=10).status_code == 200
        counted = set()
        for _ in range(6):
            found = samples(client.get("/metrics", headers=auth(token)).text)
            counted.add(sum(
                value for (name, labels), value in found.items()
                if name == "buildreport_requests_total" and ("path", "/healthz") in labels
            ))
    # Whichever worker answers the scrape, it reports every worker's requests (the start-up probes too).
    assert len(counted) == 1
    assert counted.pop() >= requests
    assert server.stop() == 0
    assert not folders[0].exists()  # the samples folder goes with the server


def test_loopback_reads_metrics_without_a_token_only_when_configured(env, serve, tmp_path):
    env.load(RECORDS[:5])
    closed = serve(env.db, "--no-access-log")
    assert httpx.get(closed.url + "/metrics", timeout=10).status_code == 401
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    opened = serve(env.db, "--no-access-log", "--metrics-loopback", env={"TMPDIR": str(scratch)})
    response = httpx.get(opened.url + "/metrics", timeout=10)
    assert response.status_code == 200
    assert "buildreport_builds_stored" in response.text
    assert os.environ.get("PROMETHEUS_MULTIPROC_DIR") is None
    opened.stop()
    assert list(scratch.iterdir()) == []  # one process keeps its samples in memory, nothing on disk


@pytest.mark.parametrize("workers", ["1", "2"])
def test_builds_written_and_open_connections_are_counted(env, serve, tmp_path, workers):
    env.load([])
    writer, reader = env.token(scopes=("build:write",)), env.token(scopes=("metrics:read",))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    server = serve(env.db, "--workers", workers, "--no-access-log", env={"TMPDIR": str(scratch)})
    body = [{k: v for k, v in record(i).items() if k not in ("account", "build_id")} | {"source_id": f"ci:{i}"}
            for i in range(1, 4)]  # fmt: skip
    with httpx.Client(base_url=server.url, timeout=10) as first, httpx.Client(base_url=server.url, timeout=10) as other:
        for client in (first, other, first):  # created three, then unchanged three twice
            assert client.post("/builds", json=body, headers=auth(writer)).status_code == 200
        written: set[tuple[float, float]] = set()
        for _ in range(6):  # whichever worker answers, every worker's writes are in it
            found = samples(first.get("/metrics", headers=auth(reader)).text)
            written.add((found[("buildreport_builds_written_total", frozenset({("outcome", "created")}))],
                         found[("buildreport_builds_written_total", frozenset({("outcome", "unchanged")}))]))
            assert found[("buildreport_open_connections", frozenset())] >= 2  # these two clients at least
    assert written == {(3.0, 6.0)}
