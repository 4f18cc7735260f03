"""The application: every request, answered or refused, goes once through the router, its middleware (token
check, rate limit, metrics) and its error handling."""

from __future__ import annotations

import sqlite3
import time
from typing import Any
from urllib.parse import urlsplit

import pytest
from conftest import Env, auth, record
from litestar.testing import TestClient
from prometheus_client import REGISTRY

from buildreport import filters
from buildreport.http import answers, metrics
from buildreport.http import pages as web
from buildreport.http.app import create_app
from buildreport.http.auth import AuthMiddleware
from buildreport.signing import LinkClaims
from buildreport.store import open_auth
from buildreport.store.errors import DatabaseBusy


@pytest.fixture
def filled(env: Env, monkeypatch: pytest.MonkeyPatch) -> Env:
    env.load([record(1), record(2, tags={"project": "web"}), record(3, account="globex")])
    frozen = answers.now_us()
    monkeypatch.setattr(answers, "now_us", lambda: frozen)
    return env


def _serve(env: Env, **overrides: Any) -> tuple[TestClient, Any]:
    """A client of the service as served, and its application's state (the reader, the signers)."""
    served = create_app(env.settings(**overrides))
    return TestClient(served, base_url="http://testserver.local"), served.app.state


def clear_of_a_new_minute(seconds: float = 10.0) -> None:
    """Rate limits count in whole minutes: a test that counts requests starts well before the next one."""
    left = 60 - time.time() % 60
    if left < seconds:
        time.sleep(left + 0.1)


def _labels(path: str, status: int) -> dict[str, str]:
    return {"method": "GET", "path": path, "status_code": str(status), "app_name": "buildreport"}


def _count(path: str, status: int) -> float:
    return REGISTRY.get_sample_value("buildreport_requests_total", _labels(path, status)) or 0.0


def _timed(path: str, status: int) -> float:
    return REGISTRY.get_sample_value("buildreport_request_duration_seconds_count", _labels(path, status)) or 0.0


def test_every_request_passes_the_token_check_and_the_in_progress_gauge_once(
    filled: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = auth(filled.token())
    checked: list[str] = []
    handle = AuthMiddleware.handle

    async def counted_check(self: AuthMiddleware, scope: Any, receive: Any, send: Any, next_app: Any) -> None:
        checked.append(scope["path"])
        await handle(self, scope, receive, send, next_app)

    gauged: list[str] = []
    in_progress = metrics.ROUTE_METRICS.in_progress

    def counted_gauge(method: str, template: str) -> Any:
        gauged.append(template)
        return in_progress(method, template)

    monkeypatch.setattr(AuthMiddleware, "handle", counted_check)
    monkeypatch.setattr(metrics.ROUTE_METRICS, "in_progress", counted_gauge)
    paths = ["/builds/1", "/builds/4", "/builds", "/builds?limit=0", "/usage", "/builds/summary", "/builds/1/url"]
    client, _ = _serve(filled)
    with client:
        statuses = [client.get(path, headers=read).status_code for path in paths]
        assert client.get("/healthz").status_code == 200
    assert statuses == [200, 404, 200, 400, 200, 200, 200]
    assert checked == [urlsplit(path).path for path in paths]  # successes and refusals alike
    assert gauged == ["/builds/{build_id}", "/builds/{build_id}", "/builds", "/builds", "/usage", "/builds/summary",
                      "/builds/{build_id}/url", "/healthz"]


def test_a_failing_get_is_answered_once(filled: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    read = auth(filled.token())
    parsed: list[list[tuple[str, str]]] = []
    parse = filters.parse_usage_query

    def counted_parse(pairs: Any, now: int) -> Any:
        parsed.append(pairs)
        return parse(pairs, now)

    monkeypatch.setattr(filters, "parse_usage_query", counted_parse)
    client, state = _serve(filled)
    with client:
        build = state.reader.build
        asked: list[int] = []

        async def counted_build(account_id: int, build_id: int) -> bytes | None:
            asked.append(build_id)
            return await build(account_id, build_id)

        monkeypatch.setattr(state.reader, "build", counted_build)
        before = _count("/builds/{build_id}", 404), _count("/usage", 400)
        missing = client.get("/builds/4", headers=read)
        bad = client.get("/usage?from=x", headers=read)
    assert (missing.status_code, bad.status_code) == (404, 400)
    assert missing.headers["content-type"] == bad.headers["content-type"] == "application/problem+json"
    assert asked == [4] and len(parsed) == 1  # the query of each ran once
    assert (_count("/builds/{build_id}", 404) - before[0], _count("/usage", 400) - before[1]) == (1, 1)


def test_answers_are_counted_as_the_routes_requests(filled: Env) -> None:
    read = auth(filled.token())
    cases = [("/builds/{build_id}", "/builds/1", "/builds/4"), ("/usage", "/usage", "/usage?from=x"),
             ("/builds/{build_id}/url", "/builds/1/url", "/builds/1/url?ttl_seconds=0")]
    client, _ = _serve(filled)
    with client:
        for template, good, bad in cases:
            before = [_count(template, 200), _timed(template, 200), _count(template, 404) + _count(template, 400)]
            for _ in range(3):
                assert client.get(good, headers=read).status_code == 200
            assert client.get(bad, headers=read).status_code in (400, 404)
            after = [_count(template, 200), _timed(template, 200), _count(template, 404) + _count(template, 400)]
            assert [a - b for a, b in zip(after, before, strict=True)] == [3, 3, 1], template


def test_rate_limit_counts_each_request_once(filled: Env) -> None:
    read = auth(filled.token())
    clear_of_a_new_minute()
    client, _ = _serve(filled, rate_limit=3)
    with client:
        got = [client.get(path, headers=read) for path in ["/builds/1", "/builds/4", "/builds/2", "/builds/1"]]
    assert [a.status_code for a in got] == [200, 404, 200, 429]
    assert [a.headers["ratelimit-remaining"] for a in got] == ["2", "1", "0", "0"]


def test_a_token_past_its_rate_limit_costs_no_query(filled: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    read = auth(filled.token())
    clear_of_a_new_minute()
    client, state = _serve(filled, rate_limit=2)
    with client:
        reader = state.reader
        usage = reader.usage
        asked: list[int] = []

        async def counted(account_id: int, query: Any) -> Any:
            asked.append(account_id)
            return await usage(account_id, query)

        monkeypatch.setattr(reader, "usage", counted)
        statuses = [client.get("/usage", headers=read).status_code for _ in range(4)]
    assert statuses == [200, 200, 429, 429]
    assert len(asked) == 2


def test_a_revoked_token_is_refused_at_once(filled: Env) -> None:
    secret = filled.token()
    client, _ = _serve(filled)
    with client:
        assert client.get("/builds/1", headers=auth(secret)).status_code == 200
        conn = open_auth(filled.db)
        with conn:
            conn.execute("UPDATE tokens SET revoked_us = ?", (int(time.time() * 1_000_000),))
        conn.close()
        refused = client.get("/builds/1", headers=auth(secret))
    assert refused.status_code == 401
    assert "revoked" in refused.json()["detail"]


def test_health_says_why_the_database_cannot_be_used(filled: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    client, state = _serve(filled)
    with client:
        assert client.get("/healthz").json() == {"status": "ok"}
        reader = state.reader
        monkeypatch.setattr(type(reader), "file_problem", lambda self: "the file was replaced")
        got = client.get("/healthz")
    assert got.status_code == 503 and got.json() == {"status": "the file was replaced"}
    assert got.headers["retry-after"] == "5" and got.headers["cache-control"] == "no-store"


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    ("fault", "status", "said"),
    [
        (sqlite3.OperationalError("disk I/O error"), 503, "cannot be read right now"),
        (RuntimeError("a fault nobody planned for"), 500, "quote request id"),
    ],
)
def test_a_fault_while_reading_is_a_problem_without_its_cause(
    filled: Env, monkeypatch: pytest.MonkeyPatch, fault: Exception, status: int, said: str
) -> None:
    read = auth(filled.token())
    client, state = _serve(filled)
    with client:

        async def failing(account_id: int, build_id: int) -> bytes | None:
            raise fault

        monkeypatch.setattr(state.reader, "build", failing)
        response = client.get("/builds/1", headers=read)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    assert said in response.json()["detail"]
    assert str(fault) not in response.text and "Traceback" not in response.text


def test_a_read_refused_by_a_full_queue_is_503_busy_with_retry_after(filled: Env,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    read = auth(filled.token())
    client, state = _serve(filled)
    with client:

        async def busy(*args: object) -> None:
            raise DatabaseBusy("1000 requests are already waiting for a database connection", 7)

        monkeypatch.setattr(state.reader, "build", busy)
        monkeypatch.setattr(state.reader, "ping", busy)
        response = client.get("/builds/1", headers=read)
        health = client.get("/healthz")
    assert response.status_code == 503 and response.headers["retry-after"] == "7"
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["detail"] == ("The server is busy: 1000 requests are already waiting for a database "
                                         "connection; try again in 7 s")
    assert health.status_code == 503
    assert health.json() == {"status": "busy: 1000 requests are already waiting for a database connection"}


def test_the_api_answers_under_its_path_prefix_only(filled: Env) -> None:
    read = auth(filled.token())
    client, _ = _serve(filled, public_url="http://testserver.local/api/v1")
    with client:
        statuses = [client.get(path, headers=read).status_code for path in
                    ("/api/v1/builds/1", "/builds/1", "/api/v1/builds/4")]
    assert statuses == [200, 404, 404]


# --- the signed build page -------------------------------------------------------------------------


@pytest.fixture
def paged(filled: Env, monkeypatch: pytest.MonkeyPatch) -> Env:
    filled.load([record(4, log="one\ntwo\n"), record(5, log="\x1b[31mred\x1b[0m\n", restart_of_build_id=4)])
    frozen = answers.now_us()
    monkeypatch.setattr(web, "now_us", lambda: frozen)
    return filled


def _links(client: TestClient, state: Any, read: dict[str, str]) -> dict[str, str]:
    """Paths of signed links: each kind of page a link can open."""
    signer = state.signer
    frozen = answers.now_us()
    token = urlsplit(client.get("/builds/1/url", headers=read).json()["url"]).path.rsplit("/", 1)[1]
    return {
        "page": f"/b/{token}",
        "page with a log and restart links": "/b/" + signer.sign(LinkClaims(1, 5, frozen + 60_000_000)),
        "altered": f"/b/{token[:-2]}xy",
        "expired": "/b/" + signer.sign(LinkClaims(1, 1, frozen - 1)),
        "gone": "/b/" + signer.sign(LinkClaims(1, 99, frozen + 60_000_000)),
        "another account's build": "/b/" + signer.sign(LinkClaims(1, 3, frozen + 60_000_000)),
        "the static files' folder": "/b/static",
    }


def test_each_kind_of_link_opens_its_page(paged: Env) -> None:
    read = auth(paged.token())
    client, state = _serve(paged)
    with client:
        links = _links(client, state, read)
        statuses = {kind: (client.get(path).status_code, client.head(path).status_code) for kind, path in links.items()}
        assert client.get(links["page with a log and restart links"] + "/log").status_code == 200
    assert statuses == {"page": (200, 200), "page with a log and restart links": (200, 200), "altered": (403, 403),
                        "expired": (410, 410), "gone": (404, 404), "another account's build": (404, 404),
                        "the static files' folder": (404, 404)}


def test_pages_count_once_against_the_clients_pages_a_minute(paged: Env) -> None:
    read = auth(paged.token())
    clear_of_a_new_minute()
    client, state = _serve(paged, link_rate_limit=3)
    with client:
        links = _links(client, state, read)
        logged = links["page with a log and restart links"]
        paths = [links["page"], links["gone"], logged + "/log", logged, links["altered"]]
        got = [client.get(path).status_code for path in paths]
    assert got == [200, 404, 200, 429, 429]


def test_pages_are_counted_as_the_routes_requests(paged: Env) -> None:
    read = auth(paged.token())
    client, state = _serve(paged)
    with client:
        links = _links(client, state, read)
        before = _count("/b/{token}", 200), _count("/b/{token}", 410)
        for path in (links["page"], links["page"], links["expired"]):
            client.get(path)
        assert (_count("/b/{token}", 200) - before[0], _count("/b/{token}", 410) - before[1]) == (2, 1)


@pytest.mark.sqlite_only
def test_a_fault_while_making_a_page_is_a_503_without_its_cause(paged: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    read = auth(paged.token())
    client, state = _serve(paged)
    with client:
        path = _links(client, state, read)["page"]

        async def failing(account_id: int, build_id: int) -> tuple[int, bytes] | None:
            raise sqlite3.OperationalError("disk I/O error")

        monkeypatch.setattr(state.reader, "log", failing)
        response = client.get(path)
    assert response.status_code == 503
    assert "disk I/O error" not in response.text and "Traceback" not in response.text
