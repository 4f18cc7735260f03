"""The signed build page and raw log, in process: links, expiry, headers, escaping, the log and its tail."""

from __future__ import annotations

import itertools
import re
import time
import tracemalloc
import zlib
from urllib.parse import urlsplit

import httpx
import markupsafe
import pytest
from conftest import TEST_KEY, auth, record
from hypothesis import given
from hypothesis import strategies as st

from buildreport import logtext
from buildreport.http import humanize
from buildreport.http import pages as web
from buildreport.signing import LinkClaims, LinkSigner
from buildreport.store import open_auth
from buildreport.store.admin import revoke_token
from buildreport.times import US_PER_SECOND, from_us
from buildreport.tokens import digest

SECURITY_HEADERS = {
    "cache-control": "no-store",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
    "content-security-policy": "default-src 'none'; style-src 'self'; img-src 'self' data:; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'",
}
BASE = "http://testserver.local"


def assert_secure(response: httpx.Response) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert response.headers.get(name) == value, name


def link(client, secret: str, build_id: int, **params: str) -> str:
    """The path of a signed link from the API."""
    response = client.get(f"/builds/{build_id}/url", headers=auth(secret), params=params)
    assert response.status_code == 200, response.text
    url = response.json()["url"]
    assert url.startswith(f"{BASE}/b/")
    return urlsplit(url).path


def token_of(path: str) -> str:
    return path.split("/")[2]


def claims_of(path: str, keys: tuple[str, ...] = (TEST_KEY,)) -> LinkClaims:
    claims = LinkSigner(keys).verify(token_of(path))
    assert claims is not None
    return claims


def now_us() -> int:
    return int(time.time() * US_PER_SECOND)


# --- signing ----------------------------------------------------------------------------------


def test_signing_round_trip_and_link_url():
    signer = LinkSigner(("k1",))
    claims = LinkClaims(account_id=3, build_id=2**63 - 1, expires_us=1_800_000_000_000_000)
    token = signer.sign(claims)
    assert signer.verify(token) == claims
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", token)
    assert signer.link_url("https://ci.example/reports", claims).startswith("https://ci.example/reports/b/")
    assert signer.verify(signer.link_url("https://x", claims).rsplit("/", 1)[1]) == claims
    assert LinkSigner(("other",)).verify(token) is None


def test_key_rotation():
    claims = LinkClaims(1, 7, 1_800_000_000_000_000)
    old_token = LinkSigner(("old",)).sign(claims)
    rotated = LinkSigner(("old", "new"))
    assert rotated.verify(old_token) == claims  # every listed key verifies
    new_token = rotated.sign(claims)
    assert LinkSigner(("new",)).verify(new_token) == claims  # the last key signs
    assert LinkSigner(("old",)).verify(new_token) is None


@pytest.mark.parametrize("token", ["", "x", "a.b", "WzEsMSwxXQ", "WzEsMSwxXQ.", "%00", "é.ü", "." * 200])
def test_garbage_never_verifies(token):
    assert LinkSigner((TEST_KEY,)).verify(token) is None


OLD_KEY = "old-key-" + "Zm9yZ2VyeS1yZXNpc3RhbnQtb2xkLWtleS0xMjM0NTY"
NEW_KEY = "new-key-" + "bmV3ZXItZm9yZ2VyeS1yZXNpc3RhbnQta2V5LTk4NzY"


def test_links_follow_key_rotation_over_http(env):
    env.load([record(1, log="hello\n")])
    secret = env.token()
    with env.client(secret_keys=(OLD_KEY,)) as client:
        old_link = link(client, secret, 1)
    with env.client(secret_keys=(OLD_KEY, NEW_KEY)) as client:
        assert client.get(old_link).status_code == 200  # a link signed before the rotation still opens
        new_link = link(client, secret, 1)
        assert client.get(new_link).status_code == 200
    claims_of(new_link, (NEW_KEY,))  # new links are signed with the last key
    assert LinkSigner((OLD_KEY,)).verify(token_of(new_link)) is None
    with env.client(secret_keys=(NEW_KEY,)) as client:  # the old key retired: its links stop working
        response = client.get(old_link)
        assert response.status_code == 403
        assert "not valid" in response.text
        assert client.get(new_link).status_code == 200
    with env.client(secret_keys=("unknown-" + NEW_KEY,)) as client:
        assert client.get(new_link).status_code == 403
        assert client.get(new_link + "/log").status_code == 403


# --- opening a link ---------------------------------------------------------------------------


def test_expired_link_is_410_with_the_time_it_expired(env):
    env.load([record(1, log="hello\n")])
    secret = env.token()
    with env.client() as client:
        claims = claims_of(link(client, secret, 1))
        expired_us = (now_us() // US_PER_SECOND - 90) * US_PER_SECOND
        token = LinkSigner((TEST_KEY,)).sign(LinkClaims(claims.account_id, 1, expired_us))
        page = client.get(f"/b/{token}")
        raw = client.get(f"/b/{token}/log")
    assert page.status_code == 410
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert "This link has expired" in page.text
    assert humanize.utc(from_us(expired_us)) in page.text
    assert f'datetime="{humanize.rfc3339(from_us(expired_us))}"' in page.text
    assert "2 minutes ago" in page.text
    assert_secure(page)
    assert raw.status_code == 410
    assert_secure(raw)
    assert "hello" not in raw.text


def revoke(env, secret: str) -> None:
    """Revoke the token `secret` as `buildreport token revoke` does."""
    reader_conn = open_auth(env.db)
    try:
        with reader_conn:
            row = reader_conn.execute("SELECT token_id FROM tokens WHERE digest = ?", (digest(secret),)).fetchone()
            assert revoke_token(reader_conn, row[0], now_us())
    finally:
        reader_conn.close()


def test_a_link_ends_when_the_token_that_made_it_is_revoked(env):
    env.load([record(1, log="hello\n"), record(2, restart_of_build_id=1, log="again\n")])
    secret, other = env.token(), env.token()
    with env.client() as client:
        path = link(client, secret, 2)
        kept = link(client, other, 2)
        assert claims_of(path).token_id is not None
        assert client.get(path).status_code == 200
        restart = re.findall(r'<a href="http://testserver\.local(/b/[^"]+)">build 1</a>', client.get(path).text)
        revoke(env, secret)
        for opened in (path, path + "/log", restart[0]):
            response = client.get(opened)
            assert response.status_code == 410, opened
            assert "This link was revoked" in response.text
            assert "The API token this link was made with has been revoked." in response.text
            assert "hello" not in response.text and "again" not in response.text
            assert_secure(response)
        assert client.get(kept).status_code == 200  # another token's links live on


def test_a_link_without_a_token_lives_until_it_expires(env):
    """Links made before links named their token, and links the server makes by itself, name no token."""
    env.load([record(1, log="hello\n")])
    secret = env.token()
    with env.client() as client:
        claims = claims_of(link(client, secret, 1))
        revoke(env, secret)
        token = LinkSigner((TEST_KEY,)).sign(LinkClaims(claims.account_id, 1, claims.expires_us))
        assert "hello" in client.get(f"/b/{token}").text


def test_a_link_expires_at_exactly_expires_at(env):
    env.load([record(1)])
    secret = env.token()
    with env.client() as client:
        response = client.get("/builds/1/url", headers=auth(secret), params={"ttl_seconds": "60"})
        path = urlsplit(response.json()["url"]).path
        claims = claims_of(path)
        assert from_us(claims.expires_us) == humanize_parse(response.json()["expires_at"])
        assert client.get(path).status_code == 200
        same_moment = LinkSigner((TEST_KEY,)).sign(LinkClaims(claims.account_id, 1, now_us()))
        assert client.get(f"/b/{same_moment}").status_code == 410


def humanize_parse(text: str):
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_tampered_links_are_403(env):
    env.load([record(1, log="hello\n")])
    secret = env.token()
    with env.client(link_rate_limit=0) as client:  # every variant of a link is tried: more than a minute's pages
        path = link(client, secret, 1)
        token = token_of(path)
        payload, signature = token.split(".")
        swap = {"A": "Q", "Q": "A"}
        tampered = [
            # One character changed in the payload (another build, another account, another expiry) …
            *(f"{payload[:i]}{swap.get(payload[i], 'A')}{payload[i + 1:]}.{signature}" for i in range(len(payload))),
            # … or in the signature (not its last character, whose low bits base64 ignores).
            *(f"{payload}.{signature[:i]}{swap.get(signature[i], 'A')}{signature[i + 1:]}"
              for i in range(len(signature) - 1)),
            token[:-1],
            token + "x",
            payload,
            "." + signature,
        ]
        for bad in tampered:
            assert bad != token
            response = client.get(f"/b/{bad}")
            assert response.status_code == 403, bad
            assert "This link is not valid" in response.text
            assert_secure(response)
            assert client.get(f"/b/{bad}/log").status_code == 403


def test_a_link_never_opens_another_accounts_build(env):
    env.load([record(1, log="acme's log\n"), record(2, account="other", log="other's log\n")])
    secret = env.token()
    other_secret = env.token("other")
    with env.client() as client:
        acme = claims_of(link(client, secret, 1))
        other = claims_of(link(client, other_secret, 2))
        assert acme.account_id != other.account_id
        signer = LinkSigner((TEST_KEY,))
        cross = signer.sign(LinkClaims(acme.account_id, 2, acme.expires_us))
        page = client.get(f"/b/{cross}")
        assert page.status_code == 404
        assert "Build not found" in page.text
        assert "other" not in page.text.replace("another", "")
        assert_secure(page)
        assert client.get(f"/b/{cross}/log").status_code == 404
        missing = signer.sign(LinkClaims(acme.account_id, 999, acme.expires_us))
        assert client.get(f"/b/{missing}").status_code == 404


def test_headers_on_every_answer(env):
    env.load([record(1, log="hello\n"), record(2)])
    secret = env.token()
    with env.client() as client:
        good = link(client, secret, 1)
        no_log = link(client, secret, 2)
        claims = claims_of(good)
        expired = LinkSigner((TEST_KEY,)).sign(LinkClaims(claims.account_id, 1, now_us() - US_PER_SECOND))
        answers = {
            "page": (client.get(good), 200),
            "raw log": (client.get(good + "/log"), 200),
            "raw tail": (client.get(good + "/log?tail=1"), 200),
            "bad tail": (client.get(good + "/log?tail=x"), 400),
            "forbidden": (client.get(good + "X"), 403),
            "forbidden log": (client.get(good + "X/log"), 403),
            "expired": (client.get(f"/b/{expired}"), 410),
            "no log": (client.get(no_log + "/log"), 404),
            "head of page": (client.head(good), 200),
            "head of raw log": (client.head(good + "/log"), 200),
        }
    for name, (response, status) in answers.items():
        assert response.status_code == status, name
        assert_secure(response)
        assert "x-request-id" in response.headers


def test_page_shows_every_field(env):
    env.load([
        record(
            1,
            build_status="build_failed",
            status_message="builder for '/nix/store/x.drv' failed with exit code 2",
            queue_time_seconds=4.25,
            duration_seconds=83.0,
            cpu_count=16,
            allocated_megabytes=8192,
            cpu_seconds=754,
            average_cpu_utilization=0.873,
            peak_memory_use_kilobytes=3 * 1024 * 1024,
            peak_storage_use_kilobytes=1288490,
            outputs=[
                {"name": "out", "path": f"/nix/store/{'b' * 32}-hello-2.12.1", "nar_hash": "sha256-" + "A" * 43 + "=",
                 "nar_size_bytes": 1288490189},
                {"name": "man", "path": f"/nix/store/{'c' * 32}-hello-2.12.1-man", "nar_hash": "sha256-man",
                 "nar_size_bytes": 2048},
            ],
            tags={"project": "web", "branch": "main", "empty": ""},
            log="building\nerror: boom\n",
        )
    ])
    secret = env.token()
    with env.client() as client:
        path = link(client, secret, 1)
        response = client.get(path)
        api = client.get("/builds/1", headers=auth(secret)).json()
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    page = response.text
    assert 'class="badge st-failed"' in page and "Build failed" in page  # colour and words
    assert "builder for &#39;/nix/store/x.drv&#39; failed with exit code 2" in page
    assert f"/nix/store/{'a' * 32}-hello-2.12.1.drv" in page
    assert "<span class=\"name\">hello-2.12.1</span>" in page
    assert "x86_64-linux" in page
    assert "4.2s" in page  # queue time
    assert "1m 23s" in page  # duration
    assert "12m 34s" in page and "754 s" in page  # CPU time
    assert "16" in page
    assert "87%" in page
    assert "8 GiB" in page and "3 GiB" in page and "1.2 GiB" in page
    for output in api["outputs"]:
        assert output["name"] in page and output["path"] in page and output["nar_hash"] in page
    assert "2 KiB" in page
    for key, value in (("project", "web"), ("branch", "main")):
        assert f'<span class="tk">{key}</span><span class="tv">{value}</span>' in page
    assert "(empty)" in page
    for field in ("create_time", "start_time"):
        exact = humanize.rfc3339(humanize_parse(api[field]))
        assert f'<time datetime="{exact}" title="{exact}">{humanize.utc(humanize_parse(api[field]))}</time>' in page
    finished = humanize_parse(api["start_time"]).timestamp() + 83
    assert humanize.utc(from_us(int(finished * US_PER_SECOND))) in page
    expires = from_us(claims_of(path).expires_us)
    assert f'datetime="{humanize.rfc3339(expires)}"' in page and "expires" in page
    assert "<script" not in page and " style=" not in page
    assert re.search(r'<link rel="stylesheet" href="/b/static/build\.css\?v=[0-9a-f]+">', page)


def test_statuses_read_in_words(env):
    statuses = ["built", "build_failed", "cancelled", "timeout", "internal_error", "out_of_memory",
                "max_memory_exceeded", "client_disconnect", "client_error", "pending", "running"]
    env.load([record(i, build_status=s) for i, s in enumerate(statuses, start=1)])
    secret = env.token()
    labels = []
    with env.client() as client:
        for i, status in enumerate(statuses, start=1):
            page = client.get(link(client, secret, i)).text
            label = re.search(r'<span class="badge st-(\w+)"><span aria-hidden="true">.</span> ([^<]+)</span>', page)
            assert label, status
            kind = "ok" if status == "built" else "running" if status in ("pending", "running") else (
                "discarded" if status in ("internal_error", "out_of_memory") else "failed")
            assert label[1] == kind
            labels.append(label[2])
            assert f"<code>{status}</code>" in page
    assert len(set(labels)) == len(statuses)
    assert labels[0] == "Built" and labels[1] == "Build failed" and labels[-1] == "Running"


def test_everything_is_escaped(env):
    evil = '<script>alert(1)</script>"\'&'
    log = (
        "\x1b[1;31merror:\x1b[0m <script>alert(1)</script>\n"
        "\x1b]0;oscpayload\x07\x1b[2K\x1b[32m<img src=x onerror=alert(2)>\x1b[0m\n"
        "progress 10%\rprogress 100%\n"
    )
    env.load([
        record(1, build_status="build_failed", status_message=evil, tags={evil: evil}, system="x86_64-linux" + evil,
               outputs=[{"name": evil, "path": evil, "nar_hash": evil, "nar_size_bytes": 1}],
               derivation_path="/nix/store/" + "a" * 32 + "-<b>bold</b>.drv", log=log)
    ])
    secret = env.token()
    with env.client() as client:
        page = client.get(link(client, secret, 1)).text
    assert "<script" not in page and "<img" not in page and "<b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert '<span class="a31 ab">error:</span> &lt;script&gt;alert(1)&lt;/script&gt;' in page
    assert '<span class="a32">&lt;img src=x onerror=alert(2)&gt;</span>' in page
    assert "\x1b" not in page and "[31m" not in page and "[0m" not in page and "oscpayload" not in page
    assert "\r" not in page
    assert ">progress 100%</div>" in page  # a carriage return redraws the line
    escaped = str(markupsafe.escape(evil))
    assert escaped == "&lt;script&gt;alert(1)&lt;/script&gt;&#34;&#39;&amp;"
    # the message, the system (twice), the tag's key and value, the output's name, path and hash
    assert page.count(escaped) >= 8
    assert "-&lt;b&gt;bold&lt;/b&gt;.drv" in page


HIDDEN = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\x1b\x07\x00\x08\x7f\x85\x9b"


def test_bidi_and_control_characters_never_reach_the_page(env):
    """A status message, tag, system or output that would reorder or hide text shows its plain characters."""
    sneaky = "ok\u202e gnp.exe\u2066 x\x1b[31m red\x07 bell\x08"
    env.load([
        record(1, build_status="build_failed", status_message=sneaky, tags={"k" + sneaky: "v" + sneaky},
               system="x86_64-linux" + sneaky, outputs=[{"name": "out" + sneaky, "path": "/nix/store/p" + sneaky,
                                                         "nar_hash": "sha256:h", "nar_size_bytes": 1}],
               log="a\u202eb\u2067c\n")
    ])
    secret = env.token()
    with env.client() as client:
        page = client.get(link(client, secret, 1)).text
    assert not set(page) & set(HIDDEN)
    assert "[31m" not in page
    assert page.count("ok gnp.exe x red bell") >= 6  # message, tag key and value, system, output name and path
    assert ">abc</div>" in page  # and in the log, as before


def test_log_lines_have_anchors(env):
    env.load([record(1, log="".join(f"line {i}\n" for i in range(1, 13)))])
    secret = env.token()
    with env.client() as client:
        page = client.get(link(client, secret, 1)).text
    for number in (1, 12):
        assert f'<div class="l" id="L{number}"><a href="#L{number}" data-n="{number}"></a>line {number}</div>' in page
    assert 'id="L13"' not in page
    assert 'id="end"' in page and 'href="#end"' in page
    assert "12 lines" in page


def test_failed_build_log_opens_at_its_end_and_comes_first(env):
    env.load([record(1, build_status="build_failed", log="a\nb\n"), record(2, log="a\nb\n")])
    secret = env.token()
    with env.client() as client:
        failed = client.get(link(client, secret, 1)).text
        built = client.get(link(client, secret, 2)).text
    assert re.search(r'<div class="log g\d from-end"', failed)
    excerpt = failed.split('<div class="excerpt">')[1].split("</div>\n  </div>")[0]
    assert '<div class="l"><a href="#L2" data-n="2"></a>b</div>' in excerpt  # the end of the log, at the top
    assert len(re.findall(r'id="L2"', failed)) == 1
    assert '<div class="excerpt">' not in built
    assert failed.index('id="log"') < failed.index('id="details"')  # the log comes before the details
    assert re.search(r'<div class="log g\d"', built)
    assert built.index('id="details"') < built.index('id="log"')
    css = web.STATIC["build.css"].decode()
    assert re.search(r"\.log\.from-end\s*\{[^}]*flex-direction:\s*column-reverse", css)


def test_missing_log(env):
    env.load([record(1, build_status="build_failed")])
    secret = env.token()
    with env.client() as client:
        path = link(client, secret, 1)
        page = client.get(path)
        raw = client.get(path + "/log")
        tail = client.get(path + "/log?tail=5")
    assert page.status_code == 200
    assert "No log was recorded" in page.text
    assert "/log" not in page.text
    assert raw.status_code == 404 and "No log was recorded" in raw.text
    assert tail.status_code == 404
    assert_secure(raw)


def test_empty_log(env):
    env.load([record(1, log="")])
    secret = env.token()
    with env.client() as client:
        path = link(client, secret, 1)
        assert "The log is empty" in client.get(path).text
        raw = client.get(path + "/log")
        assert raw.status_code == 200 and raw.content == b""
        assert client.get(path + "/log?tail=3").content == b""


# --- the raw log ------------------------------------------------------------------------------

LOG = "first line\n\x1b[31msecond\x1b[0m <tag> é ✓\nthird\r\n\nfifth\nsixth, no newline"


def test_raw_log_is_the_exact_text(env):
    env.load([record(1, log=LOG)])
    secret = env.token()
    with env.client() as client:
        response = client.get(link(client, secret, 1) + "/log")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert response.headers["content-disposition"] == 'inline; filename="build-1.log"'
    assert response.content == LOG.encode()
    assert_secure(response)


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        ("1", "sixth, no newline"),
        ("3", "\nfifth\nsixth, no newline"),
        ("4", "third\r\n\nfifth\nsixth, no newline"),
        ("6", LOG),
        ("100000", LOG),
    ],
)
def test_raw_log_tail(env, tail, expected):
    env.load([record(1, log=LOG)])
    secret = env.token()
    with env.client() as client:
        response = client.get(link(client, secret, 1) + f"/log?tail={tail}")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert response.content.decode() == expected


def test_raw_log_tail_of_a_log_ending_with_a_newline(env):
    env.load([record(1, log="one\ntwo\nthree\nfour\nfive\n")])
    secret = env.token()
    with env.client() as client:
        path = link(client, secret, 1)
        assert client.get(path + "/log?tail=3").text == "three\nfour\nfive\n"
        assert client.get(path + "/log?tail=5").text == "one\ntwo\nthree\nfour\nfive\n"


@pytest.mark.parametrize("query", ["tail=0", "tail=-1", "tail=abc", "tail=", "tail=100001", "tail=1e3", "tail=3&tail=4",
                                   "tail=%203", "tail=99999999999999999999", "tail=03", "tail=+3"])
def test_bad_tail_is_400(env, query):
    env.load([record(1, log=LOG)])
    secret = env.token()
    with env.client() as client:
        response = client.get(link(client, secret, 1) + f"/log?{query}")
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == 400 and body["invalid_params"][0]["name"] == "tail"
    assert_secure(response)


# --- restarts ---------------------------------------------------------------------------------


def test_restart_links_are_signed_links_with_the_same_expiry(env):
    env.load([
        record(1, build_status="internal_error", restarted_as_build_id=2, log="machine died\n"),
        record(2, restart_of_build_id=1, log="built fine\n"),
    ])
    secret = env.token()
    with env.client() as client:
        first_path = link(client, secret, 1, ttl_seconds="600")
        first = claims_of(first_path)
        page = client.get(first_path).text
        assert "This build was restarted as" in page
        hrefs = set(re.findall(r'<a href="(http://testserver\.local/b/[^"]+)">build 2</a>', page))
        assert len(hrefs) == 1
        second_path = urlsplit(hrefs.pop()).path
        second = claims_of(second_path)
        assert second == LinkClaims(first.account_id, 2, first.expires_us, first.token_id)
        second_page = client.get(second_path)
        assert second_page.status_code == 200
        assert "built fine" in second_page.text
        assert '<span class="chip st-ok"><span aria-hidden="true">✓</span> Built</span>' in page
        assert "This build is a restart of" in second_page.text
        back = re.findall(r'<a href="http://testserver\.local(/b/[^"]+)">build 1</a>', second_page.text)
        assert back and all(claims_of(p) == first for p in back)
        assert "machine died" in client.get(back[0]).text


# --- big logs ---------------------------------------------------------------------------------


def big_log(megabytes: int = 50) -> str:
    line = "{:08d} gcc -O2 -Wall -c src/module.c -o build/module.o  # \x1b[32mok\x1b[0m compiling <stuff> & more\n"
    count = megabytes * 1024 * 1024 // len(line.format(0))
    return "".join(line.format(i) for i in range(1, count + 1)) + "error: the end is here\n"


def test_big_log_shows_its_tail_and_streams_in_full(env):
    log = big_log()
    size = len(log.encode())
    total_lines = log.count("\n")
    assert size > 50 * 1024 * 1024 - 200
    env.load([record(1, build_status="build_failed", log=log)])
    secret = env.token()
    with env.client() as client:
        path = link(client, secret, 1)
        page = client.get(path)
        assert page.status_code == 200
        assert len(page.content) < 1_500_000
        text = page.text
        assert "too long to show here" in text and "last 2,000 lines" in text
        assert f"{total_lines:,} lines" in text
        assert f'id="L{total_lines}"' in text and f'id="L{total_lines - 1999}"' in text
        assert f'id="L{total_lines - 2000}"' not in text
        assert "error: the end is here" in text
        assert f'href="{path}/log"' in text

        with client.stream("GET", path + "/log") as raw:
            assert raw.status_code == 200
            assert "content-length" not in raw.headers  # streamed, not buffered
            received = 0
            head = b""
            for chunk in raw.iter_bytes():
                if len(head) < 100:
                    head += chunk[:100]
                received += len(chunk)
                last = chunk
        assert received == size
        assert head[:100] == log.encode()[:100]
        assert last.endswith(b"error: the end is here\n")

        tail = client.get(path + "/log?tail=2")
        assert tail.text == log[-len(log.split("\n")[-3]) - 1 - len("error: the end is here\n"):]
        assert tail.text.endswith("error: the end is here\n") and tail.text.count("\n") == 2


def test_neither_the_page_nor_the_raw_log_inflates_a_big_log_whole():
    log = big_log(8).encode()
    blob = zlib.compress(log, 6)
    size = len(log)
    del log
    limit = 3 * 1024 * 1024  # well under the 8 MiB of text
    tracemalloc.start()
    try:
        view = logtext.render_log(blob, size)
        _, page_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        streamed = sum(len(piece) for piece in logtext.inflate(blob))
        _, raw_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        tail = b"".join(logtext.tail_bytes(logtext.window(logtext.inflate(blob), 2_000)))
        _, tail_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(view.lines) == logtext.TAIL_LINES and not view.complete
    assert streamed == size
    assert tail.count(b"\n") == 2_000
    assert page_peak < limit, page_peak
    assert raw_peak < limit, raw_peak
    assert tail_peak < limit, tail_peak


def test_long_lines_are_cut_on_the_page_but_not_in_the_raw_log(env):
    long_line = "x" * 50_000
    env.load([record(1, log=f"short\n{long_line}\nshort again\n")])
    secret = env.token()
    with env.client() as client:
        path = link(client, secret, 1)
        page = client.get(path).text
        assert "x" * logtext.LINE_BYTES in page and "x" * (logtext.LINE_BYTES + 1) not in page
        assert "more in the raw log" in page and "cut short here" in page
        assert long_line in client.get(path + "/log").text


# --- the window over a log --------------------------------------------------------------------


@given(
    text=st.text(alphabet="ab\n\r", max_size=60),
    cuts=st.lists(st.integers(min_value=0, max_value=60), max_size=6),
    max_lines=st.integers(min_value=1, max_value=8),
)
def test_line_window_keeps_the_last_lines_whatever_the_pieces(text, cuts, max_lines):
    data = text.encode()
    bounds = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    pieces = [data[a:b] for a, b in itertools.pairwise(bounds)]
    lines = logtext.window(pieces, max_lines)
    expected = data.split(b"\n")
    if expected[-1] == b"":
        expected.pop()
    assert [line for line, _ in lines.lines] == expected[-max_lines:]
    assert lines.total == len(expected)
    assert lines.first_number == len(expected) - len(expected[-max_lines:]) + 1
    assert b"".join(logtext.tail_bytes(lines)) == b"\n".join(expected[-max_lines:]) + (
        b"\n" if data.endswith(b"\n") else b"")


def test_line_window_bounds_bytes_and_line_length():
    lines = logtext.window([b"aaaa\nbbbb\ncccccccccc\nd", b"ddd\n"], max_lines=10, max_bytes=10, line_bytes=6)
    assert list(lines.lines) == [(b"cccccc", 10), (b"dddd", 4)]
    assert lines.total == 4 and lines.first_number == 3


def test_render_log_numbers_and_colours_lines():
    blob = zlib.compress(b"one\n\x1b[33mtwo\nthree\x1b[0m\nfour")
    view = logtext.render_log(blob, 30)
    assert [(line.number, str(line.html)) for line in view.lines] == [
        (1, "one"), (2, '<span class="a33">two</span>'), (3, '<span class="a33">three</span>'), (4, "four")]
    assert view.complete and view.total_lines == 4


@pytest.mark.parametrize(
    ("path", "name"),
    [
        (f"/nix/store/{'a' * 32}-hello-2.12.1.drv", "hello-2.12.1"),
        (f"/nix/store/{'a' * 32}-source.drv", "source"),
        ("/nix/store/nodash.drv", "nodash"),
        ("weird", "weird"),
        (f"/nix/store/{'a' * 32}-.drv", f"{'a' * 32}-"),
    ],
)
def test_derivation_name(path, name):
    assert web.derivation_name(path) == name


# --- static files and the page's own links ----------------------------------------------------


def test_stylesheet_and_icons_are_served(env):
    env.load([record(1)])
    with env.client() as client:
        css = client.get("/b/static/build.css")
        icon = client.get("/b/static/icon-failed.svg")
        missing = client.get("/b/static/nope.css")
        traversal = client.get("/b/static/..%2Fweb.py")
    assert css.status_code == 200 and css.headers["content-type"] == "text/css; charset=utf-8"
    assert "prefers-color-scheme: dark" in css.text
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
    assert css.headers["x-content-type-options"] == "nosniff"
    assert missing.status_code == 404 and traversal.status_code == 404


def test_page_links_live_under_the_public_url_path(env):
    env.load([record(1, log="x\n")])
    secret = env.token()
    with env.client(public_url="https://ci.example/reports/") as client:
        url = client.get("/reports/builds/1/url", headers=auth(secret)).json()["url"]
        assert url.startswith("https://ci.example/reports/b/")
        token = url.rsplit("/", 1)[1]
        page = client.get(f"/reports/b/{token}").text
    assert 'href="/reports/b/static/build.css?v=' in page
    assert f'href="/reports/b/{token}/log"' in page


def test_page_is_small_for_a_typical_build(env):
    log = "".join(f"[{i}/400] CC src/file{i}.o\n" for i in range(400))
    env.load([record(1, log=log, outputs=[{"name": "out", "path": "/nix/store/" + "b" * 32 + "-x", "nar_hash": "h",
                                           "nar_size_bytes": 1}], tags={"project": "web"})])
    secret = env.token()
    with env.client() as client:
        page = client.get(link(client, secret, 1))
        css = client.get("/b/static/build.css")
    assert len(page.content) + len(css.content) < 60_000
