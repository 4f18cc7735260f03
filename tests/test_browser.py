"""The build page in a real browser: headless Chromium (Debian's) driven by Playwright, against a real server.

Skipped when Playwright or Chromium is missing, except when CI=true, where that is a failure.
`UPDATE_SCREENSHOT=1` rewrites docs/screenshot-build-page.png; otherwise the screenshot goes to a temporary folder.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import TEST_KEY, auth, record

from buildreport.signing import LinkClaims, LinkSigner
from buildreport.times import US_PER_SECOND

CHROMIUM = os.environ.get("BUILDREPORT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "screenshot-build-page.png"
DRV = "/nix/store/9b3f2kq1xv7l0c5m8d4h6n2p0r1s3t5w-hello-2.12.1.drv"
OUT = "/nix/store/q8w7e6r5t4y3u2i1o0p9a8s7d6f5g4h3-hello-2.12.1"
ESC = "\x1b"


def unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI=true, so the browser test may not be skipped")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        unavailable("Playwright for Python is not installed (pip install playwright; no browser download needed)")
    if not os.access(CHROMIUM, os.X_OK):
        unavailable(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set BUILDREPORT_CHROMIUM)")
    with sync_playwright() as playwright:
        try:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        except Error as exc:
            unavailable(f"Chromium at {CHROMIUM} did not start: {exc}")
        yield chromium
        chromium.close()


def failing_log() -> str:
    """A Nix build log that fails in a compiler error, with the colours gcc and make print."""
    lines = [
        f"building '{DRV}'...",
        "Running phase: unpackPhase",
        "unpacking source archive /nix/store/5m2b8x1c7v4n9q3w6e0r2t8y5u1i7o4p-hello-2.12.1.tar.gz",
        "source root is hello-2.12.1",
        "Running phase: patchPhase",
        "Running phase: configurePhase",
        "configure flags: --disable-dependency-tracking --prefix=" + OUT,
    ]
    checks = ["for gcc... gcc", "whether the C compiler works... yes", "for C compiler default output file name... "
              "a.out", "for suffix of executables... ", "whether we are cross compiling... no", "for suffix of object "
              "files... o", "whether the compiler supports GNU C... yes", "for stdio.h... yes", "for stdlib.h... yes",
              "for string.h... yes", "for inttypes.h... yes", "for stdint.h... yes", "for strings.h... yes",
              "for sys/stat.h... yes", "for sys/types.h... yes", "for unistd.h... yes", "for wchar.h... yes"]
    lines += [f"checking {c}" for c in checks]
    lines += ["configure: creating ./config.status", "config.status: creating Makefile", "Running phase: buildPhase",
              "build flags: -j16 -l16 SHELL=/nix/store/7y1h4k0c2x9v6b3n8m5q1w4e7r0t2y5u-bash-5.2p32/bin/bash"]
    sources = ["basename-lgpl", "c-ctype", "c-strcasecmp", "cloexec", "close-stream", "dirname-lgpl", "exitfail",
               "fcntl", "getprogname", "hard-locale", "localcharset", "malloca", "progname", "quotearg",
               "setlocale_null", "stripslash", "xalloc-die", "xmalloc", "xstrndup"]
    lines += [f"  CC       lib/{name}.o" for name in sources]
    lines += ["  AR       lib/libhello.a", "make  all-recursive", "make[1]: Entering directory '/build/hello-2.12.1'"]
    lines += [f"  CC       lib/libhello_a-{name}.o" for name in sources]
    lines += [f"  CC       src/{name}.o" for name in ("system", "version-etc", "closeout", "hello")]
    lines += [
        f"src/hello.c: In function '{ESC}[01m{ESC}[Kmain{ESC}[m{ESC}[K':",
        f"{ESC}[01m{ESC}[Ksrc/hello.c:159:3:{ESC}[m{ESC}[K {ESC}[01;31m{ESC}[Kerror: {ESC}[m{ESC}[K"
        f"'{ESC}[01m{ESC}[Kgreeting_mesage{ESC}[m{ESC}[K' undeclared (first use in this function); "
        f"did you mean '{ESC}[01m{ESC}[Kgreeting_message{ESC}[m{ESC}[K'?",
        "  159 |   greeting_mesage = _(\"Hello, world!\");",
        f"      |   {ESC}[01;31m{ESC}[K^~~~~~~~~~~~~~~{ESC}[m{ESC}[K",
        f"{ESC}[01m{ESC}[Ksrc/hello.c:159:3:{ESC}[m{ESC}[K {ESC}[01;36m{ESC}[Knote: {ESC}[m{ESC}[Keach undeclared "
        "identifier is reported only once for each function it appears in",
        "make[2]: *** [Makefile:2012: src/hello.o] Error 1",
        "make[1]: *** [Makefile:1634: all-recursive] Error 1",
        "make: *** [Makefile:1450: all] Error 2",
        f"{ESC}[31;1merror:{ESC}[0m builder for '{DRV}' failed with exit code 2",
    ]
    return "\n".join(lines) + "\n"


def load_builds(env: Any) -> None:
    env.load([
        record(41, build_status="internal_error", status_message="The build machine stopped answering",
               derivation_path=DRV, restarted_as_build_id=42, duration_seconds=12.0, log="building...\n"),
        record(
            42,
            build_status="build_failed",
            status_message=f"builder for '{DRV}' failed with exit code 2",
            derivation_path=DRV,
            restart_of_build_id=41,
            queue_time_seconds=3.4,
            duration_seconds=83.2,
            cpu_count=16,
            allocated_megabytes=16384,
            cpu_seconds=911,
            average_cpu_utilization=0.684,
            peak_memory_use_kilobytes=1_843_200,
            peak_storage_use_kilobytes=412_000,
            tags={"project": "hello", "branch": "main", "commit": "4f9c2e1"},
            log=failing_log(),
        ),
        record(
            43,
            derivation_path=DRV,
            outputs=[
                {"name": "out", "path": OUT, "nar_hash": "sha256-" + "Zm9vYmFy" * 5 + "YmF6cXV4=",
                 "nar_size_bytes": 272_384},
                {"name": "man", "path": OUT + "-man", "nar_hash": "sha256-" + "bWFucGFnZQ" * 4 + "b2s=",
                 "nar_size_bytes": 12_288},
            ],
            tags={"project": "hello", "branch": "a-very-long-branch-name-that-has-to-wrap-on-a-phone-screen"},
            log="".join(f"line {i}: {'word ' * 40}\n" for i in range(50)),
        ),
    ])


class Watch:
    """Everything a page reports that would mean it is broken: console errors, page errors, failed loads."""

    def __init__(self, page: Any) -> None:
        self.problems: list[str] = []
        self.expected: set[str] = set()
        page.on("console", lambda msg: msg.type == "error" and self._add(f"console: {msg.text}"))
        page.on("pageerror", lambda exc: self._add(f"page error: {exc}"))
        # A request cut short by the next navigation (an icon still loading) is not a failure of the page.
        page.on("requestfailed", lambda req: req.failure != "net::ERR_ABORTED"
                and self._add(f"request failed: {req.url} {req.failure}"))
        page.on("response", lambda res: res.status >= 400 and self._add(f"HTTP {res.status}: {res.url}"))

    def _add(self, problem: str) -> None:
        if not any(text in problem for text in self.expected):
            self.problems.append(problem)


def words(locator: Any) -> str:
    return " ".join(locator.text_content().split())


def get_link(server_url: str, secret: str, build_id: int) -> str:
    response = httpx.get(f"{server_url}/builds/{build_id}/url", headers=auth(secret), timeout=10)
    assert response.status_code == 200, response.text
    url = response.json()["url"]
    assert url.startswith(f"{server_url}/b/")
    return url


def test_build_page_in_a_browser(env, serve, browser, tmp_path):
    load_builds(env)
    secret = env.token()
    server = serve(env.db, "--secret-key", TEST_KEY)
    url = get_link(server.url, secret, 42)

    context = browser.new_context(viewport={"width": 1280, "height": 860}, color_scheme="light")
    page = context.new_page()
    watch = Watch(page)
    response = page.goto(url)
    assert response.status == 200
    assert response.headers["content-security-policy"].startswith("default-src 'none'")

    # Status in words and colour, the derivation, the log.
    badge = page.locator(".hero .badge")
    assert words(badge) == "✗ Build failed"
    assert badge.evaluate("e => getComputedStyle(e).color") == "rgb(209, 36, 47)"
    assert page.locator("h1 .name").inner_text() == "hello-2.12.1"
    assert page.get_by_text(DRV, exact=True).is_visible()
    assert "failed with exit code 2" in page.locator(".hero .message").inner_text()
    log_box = page.locator("#log .log")
    assert "greeting_mesage' undeclared" in log_box.inner_text()
    assert ESC not in page.content()
    error_word = page.locator("#log .log .a31.ab", has_text="error:").first
    assert error_word.evaluate("e => getComputedStyle(e).fontWeight") == "700"
    assert error_word.evaluate("e => getComputedStyle(e).color") != log_box.evaluate("e => getComputedStyle(e).color")

    # The log of a failed build opens at its end, without a script: the last line is in view, the first is not.
    in_view = """([box, line]) => {
        const b = box.getBoundingClientRect(), l = line.getBoundingClientRect();
        return l.top >= b.top - 1 && l.bottom <= b.bottom + 1;
    }"""
    last_line, first_line = log_box.locator(".l").last, log_box.locator(".l").first
    assert "failed with exit code 2" in last_line.inner_text()
    assert page.evaluate(in_view, [log_box.element_handle(), last_line.element_handle()])
    assert not page.evaluate(in_view, [log_box.element_handle(), first_line.element_handle()])
    assert page.evaluate("() => document.scripts.length") == 0
    # … and the page itself opens with the end of the log in view, at the top.
    excerpt_end = page.locator(".excerpt .l").last
    assert "failed with exit code 2" in excerpt_end.inner_text()
    box = excerpt_end.bounding_box()
    assert box is not None and box["y"] + box["height"] <= 860

    shot = SCREENSHOT if os.environ.get("UPDATE_SCREENSHOT") == "1" else tmp_path / SCREENSHOT.name
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot))
    assert 0 < shot.stat().st_size < 200_000

    # Line numbers are links to themselves; the line becomes the target.
    page.locator('a[href="#L5"]').click()
    assert page.url.endswith("#L5")
    assert page.evaluate("() => document.querySelector(':target')?.id") == "L5"
    page.locator(".hero a", has_text="Jump to end of log").click()
    assert page.url.endswith("#end")

    # The restart link opens the build this one restarted, signed for as long as this link.
    page.locator(".restarts a", has_text="build 41").click()
    page.wait_for_load_state()
    assert words(page.locator(".hero .badge")) == "! Internal error"
    assert "restarted as" in page.locator(".restarts").inner_text()
    page.go_back()

    # The raw log, as plain text.
    with page.expect_navigation() as navigation:
        page.locator(".hero a", has_text="Raw log").click()
    raw = navigation.value
    assert raw.status == 200 and raw.headers["content-type"] == "text/plain; charset=utf-8"
    assert "content-length" not in raw.headers and raw.headers.get("transfer-encoding") == "chunked"  # streamed
    assert page.url == url + "/log"
    assert raw.body().decode() == failing_log()
    assert "greeting_mesage" in page.locator("body").inner_text()

    # No request of the page, its styles or the raw log failed, and nothing was logged as an error.
    misses = [line for line in server.log.read_text().splitlines() if '" 404 ' in line]
    assert misses == []
    assert watch.problems == []
    context.close()


def test_build_page_on_a_phone_in_dark_mode(env, serve, browser):
    load_builds(env)
    secret = env.token()
    server = serve(env.db, "--secret-key", TEST_KEY, "--no-access-log")
    context = browser.new_context(viewport={"width": 360, "height": 740}, color_scheme="dark", is_mobile=True,
                                  has_touch=True, device_scale_factor=2)
    page = context.new_page()
    watch = Watch(page)
    for build_id in (42, 43):
        assert page.goto(get_link(server.url, secret, build_id)).status == 200
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 360, f"build {build_id} scrolls sideways"
        assert page.evaluate("() => getComputedStyle(document.body).backgroundColor") == "rgb(13, 17, 23)"
    assert page.get_by_text(OUT, exact=True).is_visible()
    assert page.get_by_text("266 KiB").is_visible()
    assert watch.problems == []
    context.close()


def test_expired_and_altered_links_in_a_browser(env, serve, browser):
    load_builds(env)
    secret = env.token()
    server = serve(env.db, "--secret-key", TEST_KEY, "--no-access-log")
    url = get_link(server.url, secret, 42)
    claims = LinkSigner((TEST_KEY,)).verify(url.rsplit("/", 1)[1])
    assert claims is not None
    expired_us = (int(time.time()) - 3 * 3600) * US_PER_SECOND
    expired = LinkSigner((TEST_KEY,)).link_url(server.url, LinkClaims(claims.account_id, 42, expired_us))

    context = browser.new_context()
    page = context.new_page()
    watch = Watch(page)
    watch.expected = {"410", "403"}  # the browser reports the page's own status as an error; nothing else may fail
    response = page.goto(expired)
    assert response.status == 410
    assert page.locator("h1").inner_text() == "This link has expired"
    assert "3 hours ago" in page.locator("main").inner_text()
    assert page.evaluate("() => getComputedStyle(document.querySelector('.problem')).maxWidth") != "none"  # styled
    response = page.goto(url[:-3] + ("abc" if not url.endswith("abc") else "xyz"))
    assert response.status == 403
    assert page.locator("h1").inner_text() == "This link is not valid"
    assert watch.problems == []
    context.close()


def test_docs_page_in_a_browser_loads_only_from_the_service(env, serve, browser, tmp_path):
    load_builds(env)
    server = serve(env.db, "--secret-key", TEST_KEY)
    context = browser.new_context(viewport={"width": 1280, "height": 860}, color_scheme="dark")
    page = context.new_page()
    watch = Watch(page)
    requested: list[str] = []
    page.on("request", lambda req: requested.append(req.url))
    response = page.goto(server.url + "/")  # the bare address leads to the docs
    assert response.status == 200 and page.url == server.url + "/docs"
    assert page.locator("h1").inner_text() == "buildreport API"
    assert page.locator("#getBuild h2").is_visible()
    assert page.locator("#schema-Build").is_visible()
    assert page.evaluate("() => document.scripts.length") == 0
    assert requested and all(url.startswith(server.url + "/") for url in requested), requested
    page.screenshot(path=str(tmp_path / "docs.png"), full_page=False)
    assert watch.problems == []
    context.close()
