"""The dashboard: its signed link, the page's figures against the API's, and the page in a real browser."""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
import time
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest
import test_browser as tb
from conftest import ENGINES, TEST_KEY, Env, auth, new_database, record
from test_http_pages import revoke
from test_stats import FAILED, RECORDS, us

from buildreport.demo import prepare_demo, sample_data_path
from buildreport.filters import BuildFilter
from buildreport.insights.stats import derivation_name
from buildreport.signing import DashboardClaims, DashboardSigner, LinkSigner
from buildreport.store import open_database, open_reader
from buildreport.store.reader import NEWEST_CHUNK
from buildreport.times import US_PER_SECOND, now_us

SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "screenshot-dashboard.png"
browser = tb.browser  # the module-scoped headless Chromium of the build page tests


@pytest.fixture(scope="module", params=ENGINES)
def api(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dashboard")
    env = Env(tmp, new_database(request, request.param, tmp))
    env.load(RECORDS)
    secret = env.token()
    with env.client() as client:
        yield env, client, secret


def dashboard_path(client, secret: str, **params: Any) -> str:
    response = client.get("/dashboard/url", params=params, headers=auth(secret))
    assert response.status_code == 200, response.text
    url = response.json()["url"]
    assert url.startswith("http://testserver.local/d/")
    return url.removeprefix("http://testserver.local")


def text_of(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def test_dashboard_url_expires_when_it_says(api):
    _, client, secret = api
    before = time.time()
    body = client.get("/dashboard/url", params={"ttl_seconds": 600}, headers=auth(secret)).json()
    expires = body["expires_at"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", expires)
    token = body["url"].rsplit("/", 1)[1]
    claims = DashboardSigner((TEST_KEY,)).verify(token)
    assert claims is not None and before + 600 <= claims.expires_us / US_PER_SECOND <= time.time() + 601


@pytest.mark.parametrize("ttl", ["0", "604801", "x", "-5"])
def test_dashboard_url_ttl_is_bounded(api, ttl):
    _, client, secret = api
    response = client.get("/dashboard/url", params={"ttl_seconds": ttl}, headers=auth(secret))
    assert response.status_code == 400
    assert response.json()["invalid_params"][0]["name"] == "ttl_seconds"


def test_dashboard_url_needs_a_read_token(api):
    env, client, _ = api
    assert client.get("/dashboard/url").status_code == 401
    writer = env.token(scopes=("build:write",))
    assert client.get("/dashboard/url", headers=auth(writer)).status_code == 403


def test_a_build_link_never_opens_a_dashboard_and_back(api):
    _, client, secret = api
    dashboard_token = dashboard_path(client, secret).rsplit("/", 1)[1]
    build_url = client.get("/builds/5/url", headers=auth(secret)).json()["url"]
    build_token = build_url.rsplit("/", 1)[1]
    assert client.get(f"/d/{build_token}").status_code == 403
    assert client.get(f"/b/{dashboard_token}").status_code == 403
    assert LinkSigner((TEST_KEY,)).verify(dashboard_token) is None
    assert DashboardSigner((TEST_KEY,)).verify(build_token) is None


def test_expired_and_altered_dashboard_links_say_so(api):
    _, client, _ = api
    signer = DashboardSigner((TEST_KEY,))
    expired = signer.link_url("", DashboardClaims(1, (int(time.time()) - 7200) * US_PER_SECOND))
    response = client.get(expired)
    assert response.status_code == 410
    assert "This link has expired" in response.text and "2 hours ago" in text_of(response.text)
    assert response.headers["cache-control"] == "no-store"
    altered = signer.link_url("", DashboardClaims(1, (int(time.time()) + 7200) * US_PER_SECOND))[:-2] + "xx"
    assert client.get(altered).status_code == 403


def test_a_dashboard_link_and_its_build_links_end_when_their_token_is_revoked(api):
    env, client, _ = api
    secret = env.token()
    path = dashboard_path(client, secret)
    page = client.get(path + "?window=7d")
    assert page.status_code == 200
    builds = re.findall(r'<a href="http://testserver.local(/b/[^"]+)">build \d+</a>', page.text)
    assert builds and client.get(builds[0]).status_code == 200
    revoke(env, secret)
    for opened in (path, builds[0]):
        response = client.get(opened)
        assert response.status_code == 410, opened
        assert "The API token this link was made with has been revoked." in response.text


def test_dashboard_page_has_the_strict_headers_and_no_script(api):
    _, client, secret = api
    response = client.get(dashboard_path(client, secret))
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.headers["content-security-policy"].startswith("default-src 'none'")
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    assert response.headers["cache-control"] == "no-store"
    assert "<script" not in response.text and " style=" not in response.text
    assert response.text.count("<svg") >= 5


@pytest.mark.parametrize("window", ["24h", "7d", "30d", "90d"])
def test_dashboard_figures_are_those_of_the_api(api, window):
    _, client, secret = api
    page = client.get(dashboard_path(client, secret) + f"?window={window}")
    assert page.status_code == 200
    text = text_of(page.text)
    groups = client.get(
        "/builds/stats",
        params={"group_by": "derivation_path", "limit": 1000, "create_time_from": f"{window_start(window)}"},
        headers=auth(secret),
    ).json()
    builds = sum(g["build_count"] for g in groups)
    assert f"Builds {builds:,}" in text
    flaky = [g for g in groups if g["failed_build_count"] and g["successful_build_count"]]
    flaky.sort(key=lambda g: (-g["failed_build_count"], g["key"]))
    shown = re.search(r'id="flaky-h".*?</section>', page.text, re.S)
    assert shown is not None
    assert re.findall(r'<th scope="row" class="path">([^<]+)</th>', shown.group(0)) == [g["key"] for g in flaky[:10]]
    if not flaky:
        assert "Flaky derivations the same derivation path both failed and succeeded in this window None" in text
    names = client.get(
        "/builds/stats",
        params={"group_by": "derivation", "limit": 1000, "create_time_from": f"{window_start(window)}"},
        headers=auth(secret),
    ).json()
    timed = [g for g in names if g["duration_seconds"]]
    slowest = sorted(timed, key=lambda g: (-g["duration_seconds"]["p95"], g["key"]))
    failing = sorted((g for g in names if g["failed_build_count"]), key=lambda g: (-g["failed_build_count"], g["key"]))
    for section, expected in (("slowest-h", slowest), ("failing-h", failing)):
        shown = re.search(rf'id="{section}".*?</section>', page.text, re.S)
        assert shown is not None
        rows = re.findall(r'<th scope="row" class="path">([^<]+)</th>', shown.group(0))
        assert rows == [g["key"] for g in expected[:10]]


def window_start(window: str) -> str:
    from buildreport.filters import DASHBOARD_WINDOWS
    from buildreport.times import format_us

    return format_us(now_us() - DASHBOARD_WINDOWS[window])


def test_the_tag_filter_narrows_every_figure(api):
    _, client, secret = api
    path = dashboard_path(client, secret)
    page = client.get(path, params={"window": "7d", "tags": "project:web"})
    assert page.status_code == 200
    text = text_of(page.text)
    assert "Only builds tagged project:web" in text
    params = {"group_by": "status", "tags": "project:web", "create_time_from": window_start("7d")}
    groups = client.get("/builds/stats", params=params, headers=auth(secret)).json()
    assert f"Builds {sum(g['build_count'] for g in groups):,}" in text


# Pairs whose old `tags=KEY:VALUE,…` link named another build's tags: a comma in a value, a colon in a key.
TRICKY_TAGS = [
    {"k": "v,x:y"},
    {"k": "v", "x": "y"},
    {"a:b": "c"},
    {"a": "b:c"},
    {"bidi": "ok\u202egnp.exe\x1b[31m"},
]


@pytest.fixture(scope="module")
def tricky(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tricky")
    env = Env(tmp, new_database(request, "sqlite", tmp))
    env.load([record(i, build_status="running", system="x86_64-linux\u2066\x07", tags=tags)
              for i, tags in enumerate(TRICKY_TAGS, start=1)])
    secret = env.token()
    with env.client() as client:
        yield client, dashboard_path(client, secret)


def test_every_tag_link_selects_exactly_its_tag(tricky):
    client, path = tricky
    page = client.get(path).text
    links = {unescape(href) for href in re.findall(r'<a class="tag" href="([^"]+)"', page)}
    assert len(links) == sum(len(tags) for tags in TRICKY_TAGS)
    for href in links:
        [(key, value)] = [(k.removeprefix("tag."), v) for k, v in parse_qsl(urlsplit(href).query)
                          if k.startswith("tag.")]
        carrying = [i for i, tags in enumerate(TRICKY_TAGS, start=1) if tags.get(key) == value]
        narrowed = client.get(href)
        assert narrowed.status_code == 200, href
        shown_ids = {int(n) for n in re.findall(r">build (\d+)</a>", narrowed.text)}
        assert shown_ids == set(carrying), (key, value)


def test_stored_text_on_the_dashboard_has_no_bidi_or_control_characters(tricky):
    client, path = tricky
    page = client.get(path).text
    assert not set(page) & set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\x1b\x07")
    assert "bidi:okgnp.exe" in page and "x86_64-linux," in page


@pytest.mark.parametrize("params", [{"window": "1y"}, {"tags": "novalue"}, {"when": "now"}])
def test_bad_page_parameters_are_a_400(api, params):
    _, client, secret = api
    response = client.get(dashboard_path(client, secret), params=params)
    assert response.status_code == 400
    assert response.headers["content-security-policy"].startswith("default-src 'none'")


def test_derivation_tables_link_each_derivation_to_its_newest_build(api):
    _, client, secret = api
    page = client.get(dashboard_path(client, secret) + "?window=7d").text
    links = re.findall(r'<a href="(http://testserver.local/b/[^"]+)">build (\d+)</a>', page)
    assert links
    signer = LinkSigner((TEST_KEY,))
    for url, build_id in links:
        claims = signer.verify(url.rsplit("/", 1)[1])
        assert claims is not None and claims.build_id == int(build_id)
    names = {derivation_name(r["derivation_path"]) for r in RECORDS}
    assert any(name in page for name in names)


def test_each_derivation_links_its_newest_build_and_failures_their_newest_failed_one(api):
    """Against the records themselves: a derivation's row links to its newest build in the window; the failing
    and flaky rows to the newest failed one (by name for the first two tables, by path for the flaky one)."""
    _, client, secret = api
    page = client.get(dashboard_path(client, secret) + "?window=7d").text
    acme = [r for r in RECORDS if r["account"] == "acme"]

    def newest(builds: list[dict[str, Any]]) -> int:
        return max(builds, key=lambda r: (us(r["create_time"]), r["build_id"]))["build_id"]

    def of_name(name: str, failed: bool) -> list[dict[str, Any]]:
        return [r for r in acme if derivation_name(r["derivation_path"]) == name and (not failed or r["build_status"]
                in FAILED)]

    checked = 0
    for section, failed, by_path in (("slowest-h", False, False), ("failing-h", True, False), ("flaky-h", True, True)):
        shown = re.search(rf'id="{section}".*?</section>', page, re.S)
        assert shown is not None
        rows = re.findall(r'class="path">([^<]+)</th>.*?>build (\d+)</a>', shown.group(0), re.S)
        for key, build_id in rows:
            if by_path:
                builds = [r for r in acme if r["derivation_path"] == key and r["build_status"] in FAILED]
            else:
                builds = of_name(key, failed)
            assert int(build_id) == newest(builds), (section, key)
            checked += 1
    assert checked >= 3


def test_newest_builds_of_more_paths_than_one_statement_takes_are_found(api):
    env, _, _ = api
    acme = [r for r in RECORDS if r["account"] == "acme"]
    real = sorted({r["derivation_path"] for r in acme})
    # More parameters than SQLite takes in one statement (its limit differs from build to build). PostgreSQL takes
    # up to 65,535: three lookups' worth show the paths are looked up in parts there, on a table too small for its
    # planner to prefer the derivation index (each path then reads every build of the account).
    most = sqlite3.connect(":memory:").getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    if env.engine == "postgresql":
        most = 2 * NEWEST_CHUNK + 1
    paths = [f"/nix/store/{i:032d}-absent.drv" for i in range(most)] + real

    async def look() -> tuple[dict[str, str], dict[str, str]]:
        reader = await open_reader(env.db)
        try:
            return await reader.newest_of_paths(1, BuildFilter(create_from_us=0), paths, paths)
        finally:
            await reader.close()

    newest, newest_failed = asyncio.run(look())
    for marks, failed in ((newest, False), (newest_failed, True)):
        expected = {}
        for r in sorted(acme, key=lambda r: (us(r["create_time"]), r["build_id"])):
            if not failed or r["build_status"] in FAILED:
                expected[r["derivation_path"]] = r["build_id"]
        assert {path: int(mark.split()[1]) for path, mark in marks.items()} == expected


# --- the demo prints a link, and the page in a browser ---------------------------------------------------


def demo_env(env: Env) -> str:
    """The demo's data in the env's database; returns the dashboard link the demo prints."""
    conn = open_database(env.db)
    try:
        lines = prepare_demo(conn, env.settings(), sample_data_path(), now_us())
    finally:
        conn.close()
    (line,) = [line for line in lines if line.lstrip().startswith("The dashboard")]
    return line.split(": ", 1)[1]


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[Env, str]:
    """One demo database that the browser tests share: the server only reads it."""
    env = Env(tmp_path_factory.mktemp("demo"))
    return env, demo_env(env)


def test_demo_prints_a_dashboard_link_that_opens(demo):
    env, link = demo
    assert link.startswith("http://testserver.local/d/")
    with env.client() as client:
        page = client.get(link.removeprefix("http://testserver.local"))
        assert page.status_code == 200
        assert "Builds over the last 7 days" in text_of(page.text)


def test_dashboard_in_a_browser(demo, serve, browser, tmp_path):
    env, link = demo
    server = serve(env.db, "--secret-key", TEST_KEY)
    url = server.url + link.removeprefix("http://testserver.local")
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="light")
    page = context.new_page()
    watch = tb.Watch(page)
    response = page.goto(url)
    assert response.status == 200
    assert page.evaluate("() => document.scripts.length") == 0
    assert page.locator("h1").inner_text() == "Builds over the last 7 days"
    for heading in ("Builds by outcome", "Success rate", "Duration", "CPU hours", "Usage this month", "Running now",
                    "Slowest derivations", "Most failing derivations", "Flaky derivations", "Latest failures"):
        assert page.get_by_role("heading", name=heading, exact=True).is_visible(), heading
    # Charts are drawn, sized by the stylesheet, coloured by status.
    bars = page.locator("#outcomes-h ~ svg rect")
    assert bars.count() > 7
    ok_bar = page.locator("#outcomes-h ~ svg rect.s-ok").first
    assert ok_bar.evaluate("e => getComputedStyle(e).fill") == "rgb(26, 127, 55)"
    chart_box = page.locator("#outcomes-h ~ svg").bounding_box()
    assert chart_box is not None and chart_box["width"] > 600
    shot = SCREENSHOT if os.environ.get("UPDATE_SCREENSHOT") == "1" else tmp_path / SCREENSHOT.name
    page.screenshot(path=str(shot), full_page=True)
    assert 0 < shot.stat().st_size < 1_500_000
    # Other windows, chosen on the page, and a build opened from a table.
    page.get_by_role("link", name="30 days", exact=True).click()
    assert page.locator("h1").inner_text() == "Builds over the last 30 days"
    page.get_by_role("link", name="24 hours", exact=True).click()
    assert page.locator("h1").inner_text() == "Builds over the last 24 hours"
    tag = page.locator("a.tag").first
    if tag.count():
        label = tag.inner_text()
        tag.click()
        assert f"Only builds tagged {label}" in " ".join(page.locator(".filter").inner_text().split())
    page.locator("table a").first.click()
    page.wait_for_load_state()
    assert page.url.startswith(server.url + "/b/")
    assert page.locator(".hero .badge").is_visible()
    misses = [line for line in server.log.read_text().splitlines() if '" 404 ' in line]
    assert misses == []
    assert watch.problems == []
    context.close()


def test_dashboard_on_a_phone_in_dark_mode(demo, serve, browser):
    env, link = demo
    server = serve(env.db, "--secret-key", TEST_KEY, "--no-access-log")
    url = server.url + link.removeprefix("http://testserver.local")
    context = browser.new_context(viewport={"width": 360, "height": 740}, color_scheme="dark", is_mobile=True,
                                  has_touch=True, device_scale_factor=2)
    page = context.new_page()
    watch = tb.Watch(page)
    for window in ("7d", "24h", "90d"):
        assert page.goto(f"{url}?window={window}").status == 200
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 360, f"{window} scrolls sideways"
    assert page.evaluate("() => getComputedStyle(document.body).backgroundColor") == "rgb(13, 17, 23)"
    ok_bar = page.locator("#outcomes-h ~ svg rect.s-ok").first
    assert ok_bar.evaluate("e => getComputedStyle(e).fill") == "rgb(63, 185, 80)"
    chart_box = page.locator("#outcomes-h ~ svg").bounding_box()
    assert chart_box is not None and chart_box["width"] <= 360
    assert watch.problems == []
    context.close()


@pytest.mark.parametrize("width", [1280, 390])
def test_chart_labels_and_tables_fit_on_a_wide_screen_and_a_phone(demo, serve, browser, width):
    """Every tick label lies inside its chart and is at least 9 px high; every figure of the derivation tables is
    within the screen, without scrolling sideways."""
    env, link = demo
    server = serve(env.db, "--secret-key", TEST_KEY, "--no-access-log")
    url = server.url + link.removeprefix("http://testserver.local")
    context = browser.new_context(viewport={"width": width, "height": 900}, is_mobile=width < 500)
    page = context.new_page()
    for window in ("24h", "7d", "90d"):
        assert page.goto(f"{url}?window={window}").status == 200
        for chart in page.locator("svg.chart:not(.compare)").all():
            box = chart.bounding_box()
            assert box is not None
            for tick in chart.locator("text.tick").all():
                inside = tick.bounding_box()
                assert inside is not None, window
                assert inside["x"] >= box["x"] - 0.5 and inside["y"] >= box["y"] - 0.5, (window, tick.text_content())
                assert inside["x"] + inside["width"] <= box["x"] + box["width"] + 0.5, (window, tick.text_content())
                assert inside["height"] >= 9, (window, tick.text_content(), inside)
        for cell in page.locator("#slowest-h ~ div table td, #failing-h ~ div table td").all():
            cell_box = cell.bounding_box()
            assert cell_box is not None and cell_box["x"] + cell_box["width"] <= width, (window, cell.inner_text())
        assert page.evaluate("() => document.documentElement.scrollWidth") <= width
    context.close()


def test_expired_dashboard_link_in_a_browser(demo, serve, browser):
    env, _ = demo
    server = serve(env.db, "--secret-key", TEST_KEY, "--no-access-log")
    expired_us = (int(time.time()) - 3 * 3600) * US_PER_SECOND
    url = DashboardSigner((TEST_KEY,)).link_url(server.url, DashboardClaims(1, expired_us))
    context = browser.new_context()
    page = context.new_page()
    watch = tb.Watch(page)
    watch.expected = {"410"}
    assert page.goto(url).status == 410
    assert page.locator("h1").inner_text() == "This link has expired"
    assert "3 hours ago" in page.locator("main").inner_text()
    assert watch.problems == []
    context.close()
    assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200


@pytest.mark.parametrize("engine", ENGINES)
def test_a_build_dated_far_ahead_leaves_the_window_and_its_periods_as_they_are(request, tmp_path, engine):
    from datetime import UTC, datetime

    from conftest import record

    env = Env(tmp_path, new_database(request, engine, tmp_path))
    far = datetime(9899, 12, 31, 12, tzinfo=UTC)
    env.load([record(1), record(2, create_time=far, start_time=far.isoformat())])
    secret = env.token()
    with env.client() as client:
        page = client.get(dashboard_path(client, secret) + "?window=24h")
    assert page.status_code == 200
    assert "Builds 1 " in text_of(page.text)  # the window ends now
    assert len(page.content) < 200_000


def test_recent_events_show_series_that_broke_and_recovered(env: Env) -> None:
    from test_transaction import write_record

    writer, reader = env.token("acme", ("build:write",)), env.token("acme")
    with env.client() as client:
        for number, status in enumerate(["built", "build_failed", "build_failed", "built"]):
            answer = client.post("/builds", json=[write_record(f"e:{number}", build_status=status)],
                                 headers=auth(writer))
            assert answer.status_code == 200
        text = text_of(client.get(dashboard_path(client, reader)).text)
    events = text[text.index("Recent events"):text.index("Builds by outcome")]
    assert events.count("hello-2.12.1") == 2
    assert events.index("recovered") < events.index("broke")  # newest first
    assert "No series broke" not in events
