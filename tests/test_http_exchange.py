"""/auth/oidc-token-exchange through the app, on both engines: tokens exchanged as nixbuild-action does, trusted
CI identities, refusals with their reasons, claims kept with the token and turned into tags of its builds."""

from __future__ import annotations

import hashlib
import hmac
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import Env, auth, buildreport_command, query
from oidc_issuer import Issuer
from test_transaction import write_record

from buildreport.claims import claim_tags, matches, parse_claim_tag, tag_mapping
from buildreport.times import US_PER_SECOND

HEADER = "NIXBUILDNET-OIDC-ID-TOKEN"
PATH = "/auth/oidc-token-exchange"
SIX_HOURS_US = 6 * 3600 * US_PER_SECOND


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    made = Issuer()
    made.add_key("k1", "RS256")
    made.add_key("k2", "ES256")
    made.start()
    yield made
    made.stop()


def client(env: Env, issuer: Issuer, **overrides: Any) -> Any:
    return env.client(oidc_issuers=(issuer.url,), **overrides)


def exchange(http: Any, jwt_text: str | None, token: str | None = None, method: str = "GET") -> Any:
    headers = {"Content-Type": "application/json"}  # as nixbuild-action sends it, with no body
    if token is not None:
        headers |= auth(token)
    if jwt_text is not None:
        headers[HEADER] = jwt_text
    return http.request(method, PATH, headers=headers)


def refused(response: Any, words: str) -> dict[str, Any]:
    assert response.status_code == 401, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
    body = response.json()
    assert words in body["detail"], body
    assert "Traceback" not in response.text
    return body


def trust(env: Env, *args: str) -> str:
    done = subprocess.run(
        [*buildreport_command(), "token", "trust", "--db", str(env.db), *args], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def token_row(env: Env, secret: str) -> tuple:
    from buildreport.tokens import digest

    rows = query(env.db, "SELECT account, scopes, expires_us, claims FROM tokens WHERE digest = ?",
                 (digest(secret),), tokens=True)  # fmt: skip
    return rows[0]


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_an_exchange_answers_a_new_token_with_the_old_ones_account_and_scopes(env, issuer, method):
    old = env.token("acme", ("build:read", "build:write"))
    with client(env, issuer) as http:
        response = exchange(http, issuer.token("k1"), old, method)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/plain")
        new = response.text
        assert new.startswith("brt_") and new != old and "\n" not in new
        assert http.get("/builds", headers=auth(new)).status_code == 200
    account, scopes, expires_us, claims = token_row(env, new)
    assert (account, sorted(scopes.split())) == ("acme", ["build:read", "build:write"])
    assert 0 < expires_us - time.time() * US_PER_SECOND <= SIX_HOURS_US
    assert '"repository":"acme/web"' in claims


def test_the_new_token_expires_with_the_old_one_when_that_is_sooner(env, issuer):
    old = env.token("acme", ("build:read",), expires_days=0)  # expires now: refused
    with client(env, issuer) as http:
        refused(exchange(http, issuer.token("k1"), old), "expired")
    soon = env.token("acme")
    query(env.db, "UPDATE tokens SET expires_us = ? WHERE expires_us > ?",
          (int((time.time() + 600) * US_PER_SECOND), 0), tokens=True)  # fmt: skip
    with client(env, issuer) as http:
        new = exchange(http, issuer.token("k2"), soon).text
    assert token_row(env, new)[2] <= (time.time() + 600) * US_PER_SECOND


def hmac_with_public_key(issuer: Issuer) -> str:
    """HS256 "signed" with the issuer's RSA public key, which anyone can read from its key set."""
    from cryptography.hazmat.primitives import serialization
    from test_oidc import b64, hand_made

    public = issuer.keys["k1"][0].public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    head, _ = hand_made({"alg": "HS256", "kid": "k1", "typ": "JWT"}, issuer.claims())
    return head + "." + b64(hmac.new(public, head.encode(), hashlib.sha256).digest())


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda i: i.token("k1", aud="other"), "audience"),
        (lambda i: i.token("k1", exp=int(time.time()) - 3600, iat=int(time.time()) - 7200, nbf=None), "expired"),
        (lambda i: i.token("k1", nbf=int(time.time()) + 3600), "not valid yet"),
        (lambda i: i.token("k1", iss="https://token.actions.githubusercontent.com"), "not one this service trusts"),
        (lambda i: i.token("k1")[:-6] + "AAAAAA", "signature"),
        (lambda i: "x" * 9000, "longer than"),
        (lambda i: "not a jwt", "not a signed JWT"),
        (lambda i: "eyJhbGciOiJub25lIn0.eyJpc3MiOiJ4In0.", "algorithm"),
        (lambda i: hmac_with_public_key(i), "algorithm 'HS256' is not accepted"),
        (lambda i: i.token("k1", headers={"kid": "unknown"}), "which the issuer does not publish"),
    ],
)
def test_bad_id_tokens_are_401_with_the_reason(env, issuer, make, words):
    old = env.token("acme")
    with client(env, issuer) as http:
        refused(exchange(http, make(issuer), old), words)


def test_a_missing_header_or_bad_bearer_token_is_401(env, issuer):
    with client(env, issuer) as http:
        refused(exchange(http, None, env.token("acme")), "NIXBUILDNET-OIDC-ID-TOKEN")
        assert exchange(http, issuer.token("k1"), "brt_" + "x" * 43).status_code == 401
        assert http.get(PATH, headers={HEADER: issuer.token("k1"), "Authorization": "Basic Zm9v"}).status_code == 401


def test_an_exchanged_token_cannot_be_exchanged_again(env, issuer):
    with client(env, issuer) as http:
        new = exchange(http, issuer.token("k1"), env.token("acme")).text
        refused(exchange(http, issuer.token("k1"), new), "cannot be exchanged again")


def test_without_a_token_a_trusted_identity_must_match_every_claim(env, issuer):
    trust(env, "--account", "acme", "--issuer", issuer.url, "--claim", "repository=acme/*",
          "--claim", "ref=refs/heads/main", "--scope", "build:write", "--expires-in", "2h")  # fmt: skip
    with client(env, issuer) as http:
        response = exchange(http, issuer.token("k1"))
        assert response.status_code == 200, response.text
        account, scopes, expires_us, _ = token_row(env, response.text)
        assert (account, scopes) == ("acme", "build:write")
        assert expires_us - time.time() * US_PER_SECOND <= 2 * 3600 * US_PER_SECOND
        refused(exchange(http, issuer.token("k1", ref="refs/heads/dev")), "No trusted CI identity")
        refused(exchange(http, issuer.token("k1", repository="evil/acme")), "No trusted CI identity")
        refused(exchange(http, issuer.token("k1", repository=None)), "No trusted CI identity")


def test_without_a_token_and_without_policies_the_exchange_is_401(env, issuer):
    with client(env, issuer) as http:
        refused(exchange(http, issuer.token("k1")), "No trusted CI identity")


def test_builds_written_with_an_exchanged_token_carry_its_claims_as_tags_the_body_cannot_override(env, issuer):
    env.load([])
    with client(env, issuer) as http:
        new = exchange(http, issuer.token("k1", run_id="777"), env.token("acme", ("build:read", "build:write"))).text
        record = write_record("ci:1", tags={"GITHUB_REPOSITORY": "evil/repo", "project": "web"})
        written = http.post("/builds", json=[record], headers=auth(new))
        assert written.status_code == 200, written.text
        build = http.get(f"/builds/{written.json()['build_ids'][0]}", headers=auth(new)).json()
    assert build["tags"] == {
        "project": "web", "GITHUB_REPOSITORY": "acme/web", "GITHUB_RUN_ID": "777", "GITHUB_RUN_ATTEMPT": "1",
        "GITHUB_SHA": "a" * 40, "GITHUB_REF": "refs/heads/main",
    }  # fmt: skip


def test_the_exchange_is_counted_in_metrics(env, issuer):
    with client(env, issuer) as http:
        exchange(http, issuer.token("k1"), env.token("acme"))
        exchange(http, issuer.token("k1", aud="x"), env.token("acme"))
        text = http.get("/metrics", headers=auth(env.token("ops", ("metrics:read",)))).text
    assert 'buildreport_oidc_exchanges_total{outcome="issued",reason="token"}' in text
    assert 'buildreport_oidc_exchanges_total{outcome="refused",reason="audience"}' in text


def test_the_openapi_document_describes_the_exchange(env, issuer):
    with client(env, issuer) as http:
        paths = http.get("/docs/openapi.json").json()["paths"]
    assert set(paths[PATH]) >= {"get", "post"}
    assert "text/plain" in paths[PATH]["get"]["responses"]["200"]["content"]


def test_claim_tag_settings_name_an_issuer_or_every_issuer():
    settings = ("https://gitlab.com:project_path=CI_PROJECT_PATH", "*:pipeline_id=CI_PIPELINE_ID")
    assert parse_claim_tag(settings[0]) == ("https://gitlab.com", "project_path", "CI_PROJECT_PATH")
    assert tag_mapping(settings, "https://gitlab.com") == [("project_path", "CI_PROJECT_PATH"),
                                                           ("pipeline_id", "CI_PIPELINE_ID")]  # fmt: skip
    assert tag_mapping((), "https://token.actions.githubusercontent.com")[0] == ("repository", "GITHUB_REPOSITORY")
    claims = '{"iss": "https://gitlab.com", "project_path": "acme/web", "pipeline_id": 12, "ref": "main"}'
    assert claim_tags(settings, claims) == {"CI_PROJECT_PATH": "acme/web", "CI_PIPELINE_ID": "12"}
    assert claim_tags(settings, None) == {}
    with pytest.raises(ValueError):
        parse_claim_tag("no-equals-sign")


def test_claim_patterns_are_anchored_case_sensitive_globs():
    claims = {"repository": "acme/web", "ref": "refs/heads/main", "run_id": 5, "admin": True}
    assert matches({"repository": "acme/*"}, claims)
    assert matches({"repository": "acme/*", "ref": "refs/heads/main", "run_id": "5"}, claims)
    assert not matches({"repository": "acme"}, claims)
    assert not matches({"repository": "ACME/*"}, claims)
    assert not matches({"repository": "*/web", "ref": "refs/heads/dev"}, claims)
    assert not matches({"admin": "True"}, claims)
    assert not matches({}, claims)


def test_the_exchange_answers_the_real_clients_curl_line(serve, tmp_path, issuer):
    """nixbuild-action's own lines: `curl --fail-with-body -L … -H Authorization … -H NIXBUILDNET-OIDC-ID-TOKEN …`."""
    env = Env(tmp_path)
    env.load([])
    old = env.token("acme", ("build:read", "build:write"))
    server = serve(env.db, "--oidc-issuer", issuer.url)
    done = subprocess.run(
        ["curl", "--fail-with-body", "-sS", "-L", f"{server.url}{PATH}", "-H", f"Authorization: Bearer {old}",
         "-H", f"{HEADER}: {issuer.token('k1')}", "-H", "Content-Type: application/json"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert httpx.get(f"{server.url}/builds", headers=auth(done.stdout)).status_code == 200


def test_calls_without_a_token_are_rate_limited_by_client_address(env, issuer):
    with client(env, issuer, rate_limit=2) as http:
        answers = [exchange(http, issuer.token("k1")) for _ in range(3)]
    assert [a.status_code for a in answers] == [401, 401, 429]
    assert answers[0].headers["ratelimit-limit"] == "2" and "retry-after" in answers[2].headers


def test_each_decision_is_logged_without_the_id_token_or_any_token(env, issuer, caplog):
    old = env.token("acme")
    id_token = issuer.token("k1")
    with caplog.at_level("INFO", logger="buildreport.oidc"), client(env, issuer) as http:
        new = exchange(http, id_token, old).text
        exchange(http, issuer.token("k1", aud="x"), old)
        exchange(http, issuer.token("k2"))
    messages = [r.getMessage() for r in caplog.records if r.name == "buildreport.oidc"]
    assert len(messages) == 3, messages
    assert "issued" in messages[0] and "account acme" in messages[0] and "subject repo:acme/web" in messages[0]
    assert "refused (audience)" in messages[1] and "refused (no_policy)" in messages[2]
    for secret in (old, new, id_token, id_token.split(".")[2]):
        assert not any(secret in message for message in messages)
