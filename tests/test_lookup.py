"""Read requests answered before routing: the same answers as the router's, and only when they succeed."""

from __future__ import annotations

import sqlite3
import time
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from conftest import Env, auth, record
from hypothesis import given, settings
from hypothesis import strategies as st
from litestar.testing import TestClient
from prometheus_client import REGISTRY

from buildreport.http import answers as answers_module
from buildreport.http import pages as web
from buildreport.http.app import create_app, create_litestar
from buildreport.http.builds import api_auth
from buildreport.http.envelope import Envelope
from buildreport.lookup import ReadAnswers
from buildreport.signing import LinkClaims
from buildreport.store import open_auth

# Headers that differ between any two answers, or between two within a second (the seconds left of the rate
# limit's window).
_PER_ANSWER = {"x-request-id", "date", "ratelimit-reset"}


class CountingApp:
    """The Litestar app behind ReadAnswers, counting the HTTP requests that reach it."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.http_calls = 0

    @property
    def state(self) -> Any:
        return self.app.state

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.http_calls += 1
        await self.app(scope, receive, send)


def _pair(env: Env, **overrides: Any) -> tuple[TestClient, TestClient, CountingApp]:
    """A client of the service as served, one of the router alone, and the counter of requests routed."""
    settings = env.settings(**overrides)
    served = create_app(settings)
    lookup = served.app
    assert isinstance(lookup, ReadAnswers)
    counting = lookup.app = CountingApp(lookup.app)  # type: ignore[assignment]
    routed = create_litestar(settings, api_auth(settings.rate_limit))
    routed_only = Envelope(routed, log_requests=settings.access_log, prefix=settings.path_prefix)
    base = "http://testserver.local"
    return TestClient(served, base_url=base), TestClient(routed_only, base_url=base), counting


def _answer(response: Any) -> tuple[int, bytes, list[tuple[str, str]]]:
    headers = [(k.lower(), v) for k, v in response.headers.multi_items() if k.lower() not in _PER_ANSWER]
    return response.status_code, response.content, headers


@pytest.fixture
def filled(env: Env, monkeypatch: pytest.MonkeyPatch) -> Env:
    env.load([record(1), record(2, tags={"project": "web"}), record(3, account="globex")])
    # One clock for both apps: default windows and link expiries are then the same in both answers.
    frozen = answers_module.now_us()
    monkeypatch.setattr(answers_module, "now_us", lambda: frozen)
    return env


# Queries of every route answered before routing: good ones, and ones the router refuses.
QUERIES = {
    "/builds": ["", "?limit=1", "?limit=2&tags=project:web", "?create_time_from=2000-01-01&limit=1",
                "?status=built,timeout", "?derivation_path=/nix/store/x.drv", "?limit=0", "?limit=1&limit=2",
                "?tags=broken", "?cursor=zz", "?unknown=1", "?create_time_from=2000-13-01", "?&&", "?limit=%ff"],
    "/builds/summary": ["", "?tags=project:web", "?tags=project:web&tags=a:b", "?status=built",
                        "?create_time_from=2000-01-01", "?create_time_to=2000-01-01&create_time_from=2001-01-01",
                        "?group_by=day", "?tags=a:%ff"],
    "/builds/stats": ["", "?group_by=tag:project", "?group_by=status&limit=1", "?group_by=nothing", "?limit=0"],
    "/usage": ["", "?from=2000-01-01", "?from=2000-01-01&to=2100-01-01", "?from=2100-01-01&to=2000-01-01",
               "?from=x", "?from=2000-01-01&from=2000-01-02", "?from"],
    "/usage/breakdown": ["", "?group_by=system", "?group_by=tag:project&from=2000-01-01", "?group_by=hour"],
    "/builds/1/url": ["", "?ttl_seconds=60", "?ttl_seconds=0", "?ttl_seconds=604801", "?limit=1"],
    "/builds/4/url": [""],
    "/builds/3/url": [""],
}


def _cases(env: Env) -> list[tuple[str, str, dict[str, str], bool]]:
    """(method, path, headers, answered before routing) of the requests both apps must answer alike."""
    read = auth(env.token())
    return [
        ("GET", "/builds/1", read, True),
        ("GET", "/builds/2", read, True),
        ("HEAD", "/builds/1", read, True),
        ("GET", "/builds/3", read, False),  # another account's build
        ("GET", "/builds/4", read, False),  # none
        ("GET", "/builds/01", read, False),
        ("GET", "/builds/0", read, False),
        ("GET", "/builds/9223372036854775807", read, False),
        ("GET", "/builds/9223372036854775808", read, False),
        ("GET", "/builds/99999999999999999999", read, False),
        ("GET", "/builds/-1", read, False),
        ("GET", "/builds/1/", read, False),
        ("GET", "/builds/1?limit=1", read, False),
        ("GET", "/builds/1?", read, True),
        ("POST", "/builds/1", read, False),
        ("GET", "/builds/1", {}, False),
        ("GET", "/builds/1", {"Authorization": "Basic abc"}, False),
        ("GET", "/builds/1", {"Authorization": "Bearer brt_short"}, False),
        ("GET", "/builds/1", auth("brt_" + "A" * 43), False),
        ("GET", "/builds/1", auth(env.token(revoked=True)), False),
        ("GET", "/builds/1", auth(env.token(expires_days=-1)), False),
        ("GET", "/builds/1", auth(env.token(scopes=("build:write",))), False),
        ("GET", "/builds/1", auth(env.token(scopes=("build:read", "build:write"))), True),
        ("GET", "/builds/1", auth(env.token(account="globex")), False),
        ("GET", "/builds/3", auth(env.token(account="globex")), True),
        ("GET", "/builds/1", auth(env.token(account="nobody")), False),
    ]


def test_every_answer_is_the_routers(filled: Env) -> None:
    served, routed, counting = _pair(filled)
    with served, routed:
        for method, path, headers, fast in _cases(filled):
            before = counting.http_calls
            expected = _answer(routed.request(method, path, headers=headers))
            assert _answer(served.request(method, path, headers=headers)) == expected, (method, path, headers)
            assert counting.http_calls == before + (0 if fast else 1), (method, path, headers)


def test_every_query_of_every_read_route_gets_the_routers_answer(filled: Env) -> None:
    read = auth(filled.token())
    served, routed, counting = _pair(filled)
    with served, routed:
        for path, queries in QUERIES.items():
            for query in queries:
                before = counting.http_calls
                expected = routed.get(path + query, headers=read)
                got = served.get(path + query, headers=read)
                assert _answer(got) == _answer(expected), path + query
                # Only a success is answered before routing; anything else is the router's to answer.
                assert counting.http_calls == before + (expected.status_code != 200), path + query
        assert served.get("/builds?limit=1", headers=read).headers["link"]  # a page with a next one


def test_health_is_answered_before_routing_as_its_route_answers_it(
    filled: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    served, routed, counting = _pair(filled)
    with served, routed:
        for path in ("/healthz", "/healthz?verbose=1"):
            got = served.get(path)
            assert got.status_code == 200 and _answer(got) == _answer(routed.get(path))
        monkeypatch.setattr(type(counting.state.reader), "file_problem", lambda self: "the file was replaced")
        got = served.get("/healthz")
        assert got.status_code == 503 and got.json() == {"status": "the file was replaced"}
        assert _answer(got) == _answer(routed.get("/healthz"))
    assert counting.http_calls == 0


def test_read_routes_without_a_read_token_go_to_the_router(filled: Env) -> None:
    served, routed, counting = _pair(filled)
    writer = auth(filled.token(scopes=("build:write",)))
    with served, routed:
        for path in QUERIES:
            for headers in ({}, writer):
                assert _answer(served.get(path, headers=headers)) == _answer(routed.get(path, headers=headers))
    assert counting.http_calls == 2 * len(QUERIES)


def test_conditional_answers_are_the_routers(filled: Env) -> None:
    read = auth(filled.token())
    served, routed, counting = _pair(filled)
    with served, routed:
        etag = served.get("/builds/1", headers=read).headers["etag"]
        assert routed.get("/builds/1", headers=read).headers["etag"] == etag
        for given in (etag, "W/" + etag, f'"other", {etag}', "*", '"other"', "", etag[:-2] + '"'):
            headers = {**read, "If-None-Match": given}
            expected = _answer(routed.get("/builds/1", headers=headers))
            assert _answer(served.get("/builds/1", headers=headers)) == expected, given
        assert counting.http_calls == 0
        assert served.get("/builds/1", headers={**read, "If-None-Match": etag}).status_code == 304


@pytest.mark.sqlite_only
def test_any_path_segment_gets_the_routers_answer(filled: Env) -> None:
    read = auth(filled.token())
    served, routed, _ = _pair(filled)

    @settings(max_examples=300, deadline=None)
    @given(segment=st.one_of(st.integers(min_value=-5, max_value=2**64).map(str), st.text(max_size=12)))
    def same_answer(segment: str) -> None:
        path = "/builds/" + quote(segment, safe="")
        assert _answer(served.get(path, headers=read)) == _answer(routed.get(path, headers=read))

    with served, routed:
        same_answer()


_NAMES = ["limit", "tags", "status", "create_time_from", "create_time_to", "derivation_path", "cursor", "from",
          "to", "group_by", "ttl_seconds", "x", ""]
_VALUES = st.one_of(
    st.sampled_from(["1", "0", "500", "2000-01-01", "2026-11-01T00:00:00Z", "project:web", "built", "day",
                     "system", "tag:project", "/nix/store/x.drv", ""]),
    st.text(max_size=10),
)


_RAW_SAFE = "%&=+,:;/?!$'()*@[]~"


@pytest.mark.sqlite_only
def test_any_query_gets_the_routers_answer(filled: Env) -> None:
    read = auth(filled.token())
    served, routed, _ = _pair(filled)

    @settings(max_examples=300, deadline=None)
    @given(
        path=st.sampled_from(sorted(QUERIES)),
        pairs=st.lists(st.tuples(st.sampled_from(_NAMES), _VALUES), max_size=4),
        raw=st.booleans(),
    )
    def same_answer(path: str, pairs: list[tuple[str, str]], raw: bool) -> None:
        # Encoded as a client would, or with percent signs, separators and the like left raw after the `?`.
        safe = _RAW_SAFE if raw else ""
        query = "&".join(f"{quote(k, safe=safe)}={quote(v, safe=safe)}" for k, v in pairs)
        target = f"{path}?{query}" if pairs else path
        assert _answer(served.get(target, headers=read)) == _answer(routed.get(target, headers=read)), target

    with served, routed:
        same_answer()


def clear_of_a_new_minute(seconds: float = 10.0) -> None:
    """Rate limits count in whole minutes: a test that counts requests starts well before the next one."""
    left = 60 - time.time() % 60
    if left < seconds:
        time.sleep(left + 0.1)


def test_rate_limit_counts_each_request_once(filled: Env) -> None:
    read = auth(filled.token())
    clear_of_a_new_minute()
    served, routed, counting = _pair(filled, rate_limit=3)
    with served, routed:
        paths = ["/builds/1", "/builds/4", "/builds/2", "/builds/1", "/builds/1"]
        answers = [served.get(path, headers=read) for path in paths]
        expected = [routed.get(path, headers=read) for path in paths]
    assert [a.status_code for a in answers] == [e.status_code for e in expected] == [200, 404, 200, 429, 429]
    for got, want in zip(answers, expected, strict=True):
        assert got.headers["ratelimit-remaining"] == want.headers["ratelimit-remaining"]
        assert got.content == want.content
    # Routed: the missing build and both refusals; the two builds were answered before routing.
    assert counting.http_calls == 3


def test_a_token_past_its_rate_limit_costs_no_query(filled: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    read = auth(filled.token())
    served, _, counting = _pair(filled, rate_limit=2)
    clear_of_a_new_minute()
    with served:
        usage = counting.state.reader.usage
        asked: list[int] = []

        async def counted(account_id: int, query: Any) -> Any:
            asked.append(account_id)
            return await usage(account_id, query)

        monkeypatch.setattr(counting.state.reader, "usage", counted)
        statuses = [served.get("/usage", headers=read).status_code for _ in range(4)]
    assert statuses == [200, 200, 429, 429]
    assert len(asked) == 2  # refused requests are refused before their query, here and by the router
    assert counting.http_calls == 2


def test_a_revoked_token_is_refused_at_once(filled: Env) -> None:
    secret = filled.token()
    served, _, counting = _pair(filled)
    with served:
        assert served.get("/builds/1", headers=auth(secret)).status_code == 200
        conn = open_auth(filled.db)
        with conn:
            conn.execute("UPDATE tokens SET revoked_us = ?", (int(time.time() * 1_000_000),))
        conn.close()
        refused = served.get("/builds/1", headers=auth(secret))
    assert refused.status_code == 401
    assert "revoked" in refused.json()["detail"]
    assert counting.http_calls == 1


def test_answers_are_counted_as_the_routes_requests(filled: Env) -> None:
    read = auth(filled.token())

    def labels(path: str, status: int) -> dict[str, str]:
        return {"method": "GET", "path": path, "status_code": str(status), "app_name": "buildreport"}

    def count(path: str, status: int) -> float:
        return REGISTRY.get_sample_value("buildreport_requests_total", labels(path, status)) or 0.0

    def timed(path: str, status: int) -> float:
        return REGISTRY.get_sample_value("buildreport_request_duration_seconds_count", labels(path, status)) or 0.0

    # The router's own labels: a missing build (404) and a bad query (400) are routed.
    cases = [("/builds/{build_id}", "/builds/1", "/builds/4"), ("/usage", "/usage", "/usage?from=x"),
             ("/builds/{build_id}/url", "/builds/1/url", "/builds/1/url?ttl_seconds=0")]
    served, _, counting = _pair(filled)
    with served:
        for template, good, bad in cases:
            before = [count(template, 200), timed(template, 200), count(template, 404) + count(template, 400)]
            for _ in range(3):
                assert served.get(good, headers=read).status_code == 200
            assert served.get(bad, headers=read).status_code in (400, 404)
            after = [count(template, 200), timed(template, 200), count(template, 404) + count(template, 400)]
            assert [a - b for a, b in zip(after, before, strict=True)] == [3, 3, 1], template
    assert counting.http_calls == len(cases)


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    ("fault", "status", "said"),
    [
        (sqlite3.OperationalError("disk I/O error"), 503, "cannot be read right now"),
        (RuntimeError("a fault nobody planned for"), 500, "quote request id"),
    ],
)
def test_a_fault_in_the_lookup_is_answered_by_the_router(
    filled: Env, monkeypatch: pytest.MonkeyPatch, fault: Exception, status: int, said: str
) -> None:
    read = auth(filled.token())
    served, _, counting = _pair(filled)
    with served:

        async def failing(account_id: int, build_id: int) -> bytes | None:
            raise fault

        monkeypatch.setattr(counting.state.reader, "build", failing)
        response = served.get("/builds/1", headers=read)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    assert said in response.json()["detail"]
    assert str(fault) not in response.text and "Traceback" not in response.text
    assert counting.http_calls == 1


def test_the_path_prefix_is_served_before_routing_too(filled: Env) -> None:
    read = auth(filled.token())
    served, routed, counting = _pair(filled, public_url="http://testserver.local/api/v1")
    with served, routed:
        for path in ("/api/v1/builds/1", "/builds/1", "/api/v1/builds/4"):
            assert _answer(served.get(path, headers=read)) == _answer(routed.get(path, headers=read)), path
    assert counting.http_calls == 1  # the missing build; outside the prefix nothing is routed at all


# --- the signed build page -------------------------------------------------------------------------


def _links(served: TestClient, counting: CountingApp, read: dict[str, str]) -> dict[str, str]:
    """Paths of signed links: each kind of page a link can open."""
    signer = counting.state.signer
    frozen = answers_module.now_us()
    token = urlsplit(served.get("/builds/1/url", headers=read).json()["url"]).path.rsplit("/", 1)[1]
    return {
        "page": f"/b/{token}",
        "page with a log and restart links": "/b/" + signer.sign(LinkClaims(1, 5, frozen + 60_000_000)),
        "altered": f"/b/{token[:-2]}xy",
        "expired": "/b/" + signer.sign(LinkClaims(1, 1, frozen - 1)),
        "gone": "/b/" + signer.sign(LinkClaims(1, 99, frozen + 60_000_000)),
        "another account's build": "/b/" + signer.sign(LinkClaims(1, 3, frozen + 60_000_000)),
        "the static files' folder": "/b/static",
    }


@pytest.fixture
def paged(filled: Env, monkeypatch: pytest.MonkeyPatch) -> Env:
    filled.load([record(4, log="one\ntwo\n"), record(5, log="\x1b[31mred\x1b[0m\n", restart_of_build_id=4)])
    frozen = answers_module.now_us()
    monkeypatch.setattr(web, "now_us", lambda: frozen)  # the page shows when it was made
    return filled


def test_build_pages_are_answered_before_routing_as_their_route_answers_them(paged: Env) -> None:
    read = auth(paged.token())
    served, routed, counting = _pair(paged)
    with served, routed:
        links = _links(served, counting, read)
        statuses = {}
        for kind, path in links.items():
            for method in ("GET", "HEAD"):
                expected = _answer(routed.request(method, path))
                assert _answer(served.request(method, path)) == expected, (kind, method)
                statuses[kind] = expected[0]
        assert counting.http_calls == 2  # the static files' folder, by GET and HEAD
        # The page's log and static files are the router's.
        for path in (links["page"] + "/log", "/b/static/style.css"):
            assert _answer(served.get(path)) == _answer(routed.get(path)), path
        assert counting.http_calls == 4
    assert statuses == {"page": 200, "page with a log and restart links": 200, "altered": 403, "expired": 410,
                        "gone": 404, "another account's build": 404, "the static files' folder": 404}


def test_pages_count_once_against_the_clients_pages_a_minute(paged: Env) -> None:
    read = auth(paged.token())
    clear_of_a_new_minute()
    served, routed, counting = _pair(paged, link_rate_limit=3)
    with served, routed:
        links = _links(served, counting, read)
        logged = links["page with a log and restart links"]
        paths = [links["page"], links["gone"], logged + "/log", logged, links["altered"]]
        got = [served.get(path) for path in paths]
        want = [routed.get(path) for path in paths]
    assert [g.status_code for g in got] == [w.status_code for w in want] == [200, 404, 200, 429, 429]
    assert [_answer(g) for g in got] == [_answer(w) for w in want]
    assert counting.http_calls == 3  # the log, and both refusals


def test_pages_are_counted_as_the_routes_requests(paged: Env) -> None:
    read = auth(paged.token())
    labels = {"method": "GET", "path": "/b/{token}", "app_name": "buildreport"}

    def count(status: int) -> float:
        return REGISTRY.get_sample_value("buildreport_requests_total", {**labels, "status_code": str(status)}) or 0.0

    served, _, counting = _pair(paged)
    with served:
        links = _links(served, counting, read)
        before = count(200), count(410)
        for path in (links["page"], links["page"], links["expired"]):
            served.get(path)
        assert (count(200) - before[0], count(410) - before[1]) == (2, 1)
    assert counting.http_calls == 0


@pytest.mark.sqlite_only
def test_a_fault_while_making_a_page_is_answered_by_the_router(
    paged: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = auth(paged.token())
    served, _, counting = _pair(paged)
    with served:
        path = _links(served, counting, read)["page"]

        async def failing(account_id: int, build_id: int) -> tuple[int, bytes] | None:
            raise sqlite3.OperationalError("disk I/O error")

        monkeypatch.setattr(counting.state.reader, "log", failing)
        response = served.get(path)
    assert response.status_code == 503
    assert "disk I/O error" not in response.text and "Traceback" not in response.text
    assert counting.http_calls == 1
