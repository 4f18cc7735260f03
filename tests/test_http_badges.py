"""Badges: signed links from GET /badges/url to an SVG of a series' newest finished build, on both engines."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import pytest
from conftest import NOW, TEST_KEY, auth, query, record
from hypothesis import given, settings
from hypothesis import strategies as st

from buildreport.filters import MAX_BADGE_TTL_SECONDS, BadgeSeries
from buildreport.http.badges import FILLS, BadgeClaims, BadgeSigner, status_badge, svg
from buildreport.insights.stats import derivation_name
from buildreport.store.dialect import POSTGRESQL, SQLITE
from buildreport.times import US_PER_SECOND, now_us

HELLO = "/nix/store/" + "a" * 32 + "-hello-2.12.1.drv"
HELLO_AGAIN = "/nix/store/" + "b" * 32 + "-hello-2.12.1.drv"
OTHER = "/nix/store/" + "c" * 32 + "-other-1.0.drv"


def at(hours: float) -> str:
    return (NOW - timedelta(hours=hours)).isoformat()


def badge_of(client, secret: str, **params: str):
    answer = client.get("/badges/url", params={"derivation": "hello-2.12.1", **params}, headers=auth(secret))
    assert answer.status_code == 200, answer.text
    return answer.json(), client.get(urlsplit(answer.json()["url"]).path)


def test_a_badge_shows_the_newest_finished_build_of_the_derivation_name(env):
    env.load([
        record(1, derivation_path=HELLO, build_status="build_failed", create_time=at(5)),
        record(2, derivation_path=HELLO_AGAIN, build_status="built", duration_seconds=83.0, create_time=at(3)),
        record(3, derivation_path=HELLO_AGAIN, build_status="running", create_time=at(1)),
        record(4, derivation_path=OTHER, build_status="build_failed", create_time=at(0.5)),
    ])  # fmt: skip
    with env.client() as client:
        body, badge = badge_of(client, env.token())
    assert badge.status_code == 200
    assert badge.headers["content-type"].startswith("image/svg+xml")
    assert badge.headers["cache-control"] == "public, max-age=60"
    assert "built · 1m 23s" in badge.text and FILLS["ok"] in badge.text and "hello-2.12.1" in badge.text
    assert len(badge.content) < 2048
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", body["expires_at"])


def test_system_and_tags_narrow_the_series(env):
    env.load([
        record(1, derivation_path=HELLO, build_status="built", system="aarch64-linux", create_time=at(2),
               tags={"branch": "main"}),
        record(2, derivation_path=HELLO, build_status="timeout", system="x86_64-linux", create_time=at(1),
               tags={"branch": "dev"}),
    ])  # fmt: skip
    secret = env.token()
    with env.client() as client:
        assert "timed out" in badge_of(client, secret)[1].text
        assert "built" in badge_of(client, secret, system="aarch64-linux")[1].text
        assert "built" in badge_of(client, secret, tags="branch:main")[1].text
        assert "no builds" in badge_of(client, secret, tags="branch:main", system="x86_64-linux")[1].text


def test_an_unknown_series_and_another_accounts_builds_show_no_builds(env):
    env.load([record(1, derivation_path=HELLO)])
    with env.client() as client:
        assert "no builds" in badge_of(client, env.token("globex"))[1].text
        _, unknown = badge_of(client, env.token(), derivation="nothing-1.0")
    assert unknown.status_code == 200 and "no builds" in unknown.text and FILLS["none"] in unknown.text


def test_an_altered_badge_link_is_403_and_an_expired_one_410(env):
    env.load([record(1, derivation_path=HELLO)])
    with env.client() as client:
        body, _ = badge_of(client, env.token())
        path = urlsplit(body["url"]).path
        altered = client.get(path[:-2] + ("A" if path[-2] != "A" else "B") + path[-1])
        signer = BadgeSigner((TEST_KEY,))
        expired = signer.sign(BadgeClaims(1, BadgeSeries("hello-2.12.1"), now_us() - US_PER_SECOND))
        gone = client.get(f"/badge/{expired}")
        build_link = client.get(f"/badge/{path.rsplit('/', 1)[1]}x")
    assert altered.status_code == 403 and "link not valid" in altered.text
    assert gone.status_code == 410 and "link expired" in gone.text
    assert build_link.status_code == 403
    assert altered.headers["cache-control"] == "no-store"


def test_badge_link_lifetime_defaults_to_a_year_and_is_bounded(env):
    secret = env.token()
    with env.client() as client:
        body, _ = badge_of(client, secret)
        ten_years = client.get("/badges/url", params={"derivation": "x", "ttl_seconds": MAX_BADGE_TTL_SECONDS},
                               headers=auth(secret))  # fmt: skip
        too_long = client.get("/badges/url", params={"derivation": "x", "ttl_seconds": MAX_BADGE_TTL_SECONDS + 1},
                              headers=auth(secret))  # fmt: skip
        missing = client.get("/badges/url", headers=auth(secret))
        anonymous = client.get("/badges/url", params={"derivation": "x"})
    expires = datetime.fromisoformat(body["expires_at"].replace("Z", "+00:00"))
    assert abs(expires - (datetime.now(UTC) + timedelta(days=365))) < timedelta(seconds=30)
    assert ten_years.status_code == 200
    assert too_long.status_code == 400 and too_long.json()["invalid_params"][0]["name"] == "ttl_seconds"
    assert missing.status_code == 400 and missing.json()["invalid_params"][0]["name"] == "derivation"
    assert anonymous.status_code == 401


@pytest.mark.parametrize(
    ("status", "words", "fill"),
    [
        ("built", "built · 1m 0s", "ok"),
        ("build_failed", "build failed · 1m 0s", "failed"),
        ("timeout", "timed out", "failed"),
        ("internal_error", "internal error", "discarded"),
        ("out_of_memory", "out of memory", "discarded"),
    ],
)
def test_each_status_has_its_words_and_colour(status, words, fill):
    image = status_badge("hello", (status, 60 * US_PER_SECOND)).decode()
    assert words in image and FILLS[fill] in image


def test_badge_text_is_escaped_and_long_names_are_cut():
    image = svg("<script>&" + "x" * 100, "built", FILLS["ok"]).decode()
    assert "<script>" not in image and "&lt;script&gt;&amp;" in image and "…" in image


PATHS = ["/nix/store/abc-hello-2.12.drv", "/nix/store/abc-hello", "/nix/store/abc.drv", "/nix/store/abc-.drv",
         "hello", "a/b-c/d-e-f.drv", "/", "", "-x", "/nix/store/h-é-ü.drv", "/x/y-z.drv.drv", "/nix/store/",
         "/nix/store/a/b-c.drv", "/nix/store/.drv", "/nix/store/-", "/nix/storex/a-b"]  # fmt: skip


def test_the_stored_derivation_name_is_the_one_statistics_group_by(env):
    dialect = SQLITE if env.engine == "sqlite" else POSTGRESQL
    env.load([])
    for path in PATHS:
        sql = f"SELECT {dialect.derivation_name} FROM (SELECT ? AS derivation_path) AS t"
        assert query(env.db, sql, (path,)) == [(derivation_name(path),)], path


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(["", "/nix/store/", "/nix/store", "nix/store/"]), st.text(alphabet="/-.drvabc_é", max_size=20))
def test_sqlites_derivation_name_matches_python_for_any_path(tmp_path_factory, prefix, rest):
    import sqlite3

    path = prefix + rest
    conn = sqlite3.connect(":memory:")
    sql = f"SELECT {SQLITE.derivation_name} FROM (SELECT ? AS derivation_path)"
    assert conn.execute(sql, (path,)).fetchone()[0] == derivation_name(path)
