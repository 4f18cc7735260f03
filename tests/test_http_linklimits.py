"""Limits on signed pages and raw logs: requests a minute per client address and log streams held at once."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import httpx
import pytest
from conftest import auth, record

from buildreport.http.linklimits import LinkLimits, TooMany, client_key


def test_requests_per_client_are_counted_in_one_minute_windows():
    limits = LinkLimits(per_minute=3, streams=4, streams_per_client=2)
    for _ in range(3):
        limits.count_request("10.0.0.1", now=600.0)
    with pytest.raises(TooMany) as info:
        limits.count_request("10.0.0.1", now=630.5)
    assert info.value.retry_after == 30 and "3 build pages or logs a minute" in info.value.message
    limits.count_request("10.0.0.2", now=630.5)  # another address has its own window
    limits.count_request("10.0.0.1", now=660.0)  # the next minute starts afresh


def test_admits_tells_what_count_request_would_do_and_counts_nothing():
    limits = LinkLimits(per_minute=2, streams=4, streams_per_client=2)
    for _ in range(5):
        assert limits.admits("10.0.0.1", now=600.0)
    limits.count_request("10.0.0.1", now=600.0)
    assert limits.admits("10.0.0.1", now=610.0)
    limits.count_request("10.0.0.1", now=610.0)
    assert not limits.admits("10.0.0.1", now=620.0)
    with pytest.raises(TooMany):
        limits.count_request("10.0.0.1", now=620.0)
    assert limits.admits("10.0.0.2", now=620.0)
    assert limits.admits("10.0.0.1", now=660.0)  # a new minute
    assert LinkLimits(per_minute=0, streams=1, streams_per_client=1).admits("10.0.0.1")


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("10.0.0.1", "10.0.0.1"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),
        ("::ffff:10.0.0.1", "10.0.0.1"),
        ("testclient", "testclient"),
    ],
)
def test_an_ipv6_site_counts_as_one_client(address, key):
    assert client_key(address) == key


def test_a_zero_request_limit_turns_counting_off():
    limits = LinkLimits(per_minute=0, streams=1, streams_per_client=1)
    for _ in range(1000):
        limits.count_request("10.0.0.1", now=1.0)


def test_streams_are_bounded_per_client_and_in_all_and_released():
    limits = LinkLimits(per_minute=0, streams=2, streams_per_client=1)
    with limits.stream("a"):
        with pytest.raises(TooMany, match="already"), limits.stream("a"):
            pass
        with limits.stream("b"), pytest.raises(TooMany, match="right now"), limits.stream("c"):
            pass
    with pytest.raises(RuntimeError), limits.stream("a"):
        raise RuntimeError("the client went away")
    with limits.stream("a"), limits.stream("b"):
        pass  # every stream was given back


def signed_path(client, secret: str, build_id: int) -> str:
    return urlsplit(client.get(f"/builds/{build_id}/url", headers=auth(secret)).json()["url"]).path


def test_pages_beyond_the_limit_get_a_429_page_with_retry_after(env):
    env.load([record(1, log="hello\n")])
    secret = env.token()
    with env.client(link_rate_limit=3) as client:
        path = signed_path(client, secret, 1)
        assert [client.get(p).status_code for p in (path, path + "/log", path)] == [200, 200, 200]
        refused = client.get(path)
        assert refused.status_code == 429
        assert refused.headers["content-type"].startswith("text/html")
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert refused.headers["cache-control"] == "no-store"
        assert "Try again in" in refused.text
        assert client.get(path + "/log").status_code == 429
        assert client.get("/b/static/build.css").status_code == 200  # the stylesheet of a page is not counted
        assert client.get("/builds/1", headers=auth(secret)).status_code == 200  # the API has its own limits
        assert client.get("/healthz").status_code == 200


def test_log_streams_are_limited_while_health_and_api_answer(env, serve):
    log = "".join(f"line {n} of a long build log with some text to make it wider\n" for n in range(300_000))
    env.load([record(1, log=log)])
    secret = env.token()
    server = serve(env.db, "--log-streams-per-client", "1", "--log-streams", "2")
    with httpx.Client(base_url=server.url, timeout=10) as api, httpx.Client(timeout=10) as other:
        url = api.get("/builds/1/url", headers=auth(secret)).json()["url"]
        with other.stream("GET", url + "/log") as first:
            assert first.status_code == 200
            next(first.iter_bytes())  # holding the stream: the rest waits on this reader
            refused = api.get(url + "/log")
            assert refused.status_code == 429
            assert int(refused.headers["retry-after"]) >= 1
            assert api.get("/healthz").status_code == 200
            assert api.get("/builds/1", headers=auth(secret)).status_code == 200
            assert api.get(url).status_code == 200  # the page itself is not a stream
        # Once the reader goes away its stream is given back (the server notices within moments).
        deadline = time.monotonic() + 5
        whole = api.get(url + "/log")
        while whole.status_code == 429 and time.monotonic() < deadline:
            time.sleep(0.1)
            whole = api.get(url + "/log")
        assert whole.status_code == 200 and len(whole.content) == len(log.encode())
