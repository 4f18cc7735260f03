"""Errors and the protocol around the API: problem bodies, auth, methods, HEAD, request ids, ETags, rate limits,
health and the OpenAPI document."""

from __future__ import annotations

import base64
import time
from datetime import timedelta

import msgspec
import pytest
from conftest import ENGINES, NOW, Env, auth, new_database, query, record

from buildreport.filters import Cursor
from buildreport.http.docs import STREAMED
from buildreport.models import Build

API_PATHS = ["/builds", "/builds/summary", "/builds/1", "/builds/1/url", "/usage"]
ALL_PATHS = [*API_PATHS, "/healthz"]
PROBLEM_KEYS = {"type", "title", "status", "detail"}
REALM = 'Bearer realm="buildreport"'


def assert_problem(response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert set(body) >= PROBLEM_KEYS
    assert body["status"] == status
    assert isinstance(body["type"], str) and body["type"]
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str) and body["detail"]
    for leak in ("Traceback", "SELECT", "sqlite", 'File "'):
        assert leak not in response.text
    return body


@pytest.fixture(scope="module", params=ENGINES)
def api(request, tmp_path_factory):
    """A client over a small database, with a token, shared by the read-only cases of this module."""
    tmp = tmp_path_factory.mktemp("errors")
    env = Env(tmp, new_database(request, request.param, tmp))
    env.load([record(1, tags={"p": "w"}), record(2), record(3, create_time=NOW - timedelta(hours=2))])
    secret = env.token()
    with env.client() as client:
        yield client, secret


# --- 400: problem bodies naming every parameter ------------------------------------------------

BAD_REQUESTS = [
    ("/builds?limit=0", ["limit"]),
    ("/builds?limit=abc", ["limit"]),
    ("/builds?limit=", ["limit"]),
    ("/builds?limit=1&limit=2", ["limit"]),
    ("/builds?tags=nocolon", ["tags"]),
    ("/builds?tags=:value", ["tags"]),
    ("/builds?status=done", ["status"]),
    ("/builds?create_time_from=yesterday", ["create_time_from"]),
    ("/builds?create_time_to=2026-13-01", ["create_time_to"]),
    ("/builds?create_time_from=2026-11-02&create_time_to=2026-11-01", ["create_time_from"]),
    ("/builds?derivation_path=", ["derivation_path"]),
    ("/builds?derivation_path=/a&derivation_path=/b", ["derivation_path"]),
    ("/builds?tag=p:w", ["tag"]),
    ("/builds?cursor=garbage", ["cursor"]),
    ("/builds?limit=0&status=done&tags=x&bogus=1", ["limit", "bogus", "status", "tags"]),
    ("/builds/summary?limit=5", ["limit"]),
    ("/builds/summary?derivation_path=/nix/store/x.drv", ["derivation_path"]),
    ("/builds/summary?status=done", ["status"]),
    ("/builds/summary?create_time_from=x", ["create_time_from"]),
    ("/builds/0", ["build_id"]),
    ("/builds/-1", ["build_id"]),
    ("/builds/abc", ["build_id"]),
    (f"/builds/{2**63}", ["build_id"]),
    ("/builds/1?verbose=1", ["verbose"]),
    ("/builds/abc/url", ["build_id"]),
    ("/builds/1/url?ttl_seconds=0", ["ttl_seconds"]),
    ("/builds/1/url?ttl_seconds=604801", ["ttl_seconds"]),
    ("/builds/1/url?ttl=60", ["ttl"]),
    ("/usage?from=2026-11-01T00:00:00Z", ["from"]),
    ("/usage?to=tomorrow", ["to"]),
    ("/usage?from=2026-11-02&to=2026-11-01", ["from"]),
    ("/usage?from=2026-11-01&from=2026-11-01", ["from"]),
    ("/usage?month=2026-11", ["month"]),
]


@pytest.mark.parametrize(("url", "names"), BAD_REQUESTS)
def test_bad_request_is_a_problem_naming_each_parameter(api, url, names):
    client, secret = api
    body = assert_problem(client.get(url, headers=auth(secret)), 400)
    params = body["invalid_params"]
    assert sorted({p["name"] for p in params}) == sorted(names)
    for param in params:
        assert set(param) == {"name", "reason"}
        assert isinstance(param["reason"], str) and param["reason"]
        assert param["name"] in body["detail"]


def test_usage_date_time_problem_says_a_date_is_expected(api):
    client, secret = api
    body = assert_problem(client.get("/usage?from=2026-11-01T00:00:00Z", headers=auth(secret)), 400)
    assert "date" in body["invalid_params"][0]["reason"]


# --- no 500, whatever the input ----------------------------------------------------------------

NASTY = [
    "/builds?limit=99999999999999999999999999999",
    "/builds?limit=" + "9" * 5000,
    "/builds/" + "9" * 5000,
    "/builds/" + "9" * 5000 + "/url",
    "/builds/1/url?ttl_seconds=" + "9" * 5000,
    "/builds?create_time_from=0001-01-01T00:00:00%2B01:00&limit=1",
    "/builds?create_time_from=9999-12-31T23:59:59-01:00&limit=1",
    "/builds?create_time_from=0001-01-01&limit=1",
    "/builds?create_time_to=9999-12-31T23:59:59.999999Z",
    "/builds/summary?create_time_from=0001-01-01&create_time_to=9999-12-31",
    "/usage?from=0001-01-01&to=9999-12-31",
    "/usage?from=9999-12-31",
    "/builds?create_time_from=2026-11-21T07:33:16.1234567891234Z",
    "/builds?tags=%00:%00",
    "/builds?derivation_path=%00",
    "/builds?%00=1",
    "/builds/%00",
    "/builds/%00/url",
    "/usage?from=%00",
    "/builds?cursor=%00",
    "/builds?tags=%D0%BF%D1%80%D0%BE%D0%B5%D0%BA%D1%82:%D0%B2%D0%B5%D0%B1",
    "/builds?status=%E2%9C%93",
    "/builds/%D9%A3",
    "/builds?derivation_path=%F0%9F%92%A5",
    "/builds?tags=a:%ff&limit=1",
    "/builds?tags=%ff%fe:%c3",
    "/builds?derivation_path=" + "x" * 30_000,
    "/builds?tags=k:" + "v" * 30_000,
    "/builds?cursor=" + "A" * 10_000,
    "/builds?" + "&".join(["tags=p:w"] * 500),
    "/builds?" + "&".join(["status=built"] * 500),
    "/builds?" + "&".join(["limit=1"] * 200),
    "/builds?" + "&".join(f"x{i}=1" for i in range(300)),
    "/builds?=&&&=",
    "/builds?;",
    "/builds?limit=1;limit=2",
    "/builds?limit=%2B1",
    "/builds?limit=1%20",
    "/builds//1",
    "/builds/1/url/extra",
    "/builds/1%2Furl",
    "//builds",
    "/builds/summary/",
    "/builds?cursor=" + Cursor(2**63 - 1, 2**63 - 1).encode(),
    "/builds?cursor=" + Cursor(0, 1).encode(),
    "/builds?cursor=" + "f" * 32,
    "/builds?cursor=WzEsOTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTldOw",
]


@pytest.mark.parametrize("url", NASTY, ids=lambda url: url[:60])
def test_nasty_input_never_causes_a_server_error(api, url):
    client, secret = api
    response = client.get(url, headers=auth(secret))
    assert response.status_code < 500, response.text[:500]
    if response.status_code >= 400:
        assert_problem(response, response.status_code)
    assert response.headers.get("x-request-id")


@pytest.mark.parametrize("header", [
    "Bearer " + "x" * 10_000, b"Bearer brt_" + b"\xe9" * 43, b"Bearer \xff\xfe", "Bearer \x00", "Bearer", "Bearer  ",
    "bearer", "Token abc", "Basic dXNlcjpwYXNz", "", "Bearer brt_" + "A" * 43 + " extra",
])
def test_nasty_authorization_header_is_401_not_500(api, header):
    client, _ = api
    response = client.get("/builds", headers={"Authorization": header})
    body = assert_problem(response, 401)
    assert body["status"] == 401
    assert response.headers["www-authenticate"].startswith(REALM)


# --- 401 / 403 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", API_PATHS)
def test_missing_token_is_401_with_a_plain_challenge(api, path):
    client, _ = api
    response = client.get(path)
    assert_problem(response, 401)
    assert response.headers["www-authenticate"] == REALM


def test_unknown_build_without_token_is_401_not_404(api):
    client, _ = api
    assert client.get("/builds/999").status_code == 401


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    env = Env(tmp_path_factory.mktemp("tokens"))
    env.load([record(1)])
    minted = {
        "valid": env.token(),
        "expired": env.token(expires_days=-1),
        "revoked": env.token(revoked=True),
        "write-only": env.token(scopes=("build:write",)),
        "no-scope": env.token(scopes=()),
        "other-account": env.token(account="beta"),
    }
    with env.client() as client:
        yield client, minted


BAD_TOKENS = {
    "malformed": lambda minted: "nope",
    "truncated": lambda minted: minted["valid"][:-1],
    "wrong-prefix": lambda minted: "xyz_" + minted["valid"][4:],
    "unknown": lambda minted: "brt_" + "A" * 43,
    "expired": lambda minted: minted["expired"],
    "revoked": lambda minted: minted["revoked"],
}


@pytest.mark.parametrize("kind", list(BAD_TOKENS))
@pytest.mark.parametrize("path", API_PATHS)
def test_bad_token_is_401_invalid_token(tokens, path, kind):
    client, minted = tokens
    response = client.get(path, headers=auth(BAD_TOKENS[kind](minted)))
    assert_problem(response, 401)
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith(REALM)
    assert 'error="invalid_token"' in challenge


def test_two_authorization_headers_are_rejected(tokens):
    client, minted = tokens
    headers = [("Authorization", f"Bearer {minted['valid']}"), ("Authorization", f"Bearer {minted['valid']}")]
    response = client.get("/builds", headers=headers)
    assert_problem(response, 401)


@pytest.mark.parametrize("kind", ["write-only", "no-scope"])
@pytest.mark.parametrize("path", API_PATHS)
def test_token_without_read_scope_is_403(tokens, path, kind):
    client, minted = tokens
    response = client.get(path, headers=auth(minted[kind]))
    assert_problem(response, 403)
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith(REALM)
    assert 'error="insufficient_scope"' in challenge


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_bearer_scheme_is_case_insensitive(tokens, scheme):
    client, minted = tokens
    assert client.get("/builds/1", headers={"Authorization": f"{scheme} {minted['valid']}"}).status_code == 200


def test_revocation_takes_effect_at_once(env):
    env.load([record(1)])
    secret = env.token()
    with env.client() as client:
        assert client.get("/builds/1", headers=auth(secret)).status_code == 200
        from buildreport.tokens import digest

        revoke = "UPDATE tokens SET revoked_us = ? WHERE digest = ?"
        query(env.db, revoke, (int(time.time() * 1e6), digest(secret)), tokens=True)
        response = client.get("/builds/1", headers=auth(secret))
    assert_problem(response, 401)
    assert 'error="invalid_token"' in response.headers["www-authenticate"]


# --- 404 / 405 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/nope", "/build", "/builds/1/nope", "/builds/1/url/x", "/api/builds", "/usage/x"])
@pytest.mark.parametrize("with_token", [True, False])
def test_unknown_path_is_404(api, path, with_token):
    client, secret = api
    response = client.get(path, headers=auth(secret) if with_token else {})
    assert_problem(response, 404)
    assert response.headers.get("x-request-id")


# POST /builds is the one write; every other method and path is read-only.
WRITES = {("/builds", "POST"), ("/auth/oidc-token-exchange", "POST")}


@pytest.mark.parametrize(
    ("path", "method"),
    [(p, m) for p in ALL_PATHS for m in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS") if (p, m) not in WRITES],
)
def test_other_methods_are_405_with_allow(api, path, method):
    client, secret = api
    response = client.request(method, path, headers=auth(secret), content=b"{}")
    assert_problem(response, 405)
    allowed = {m.strip() for m in response.headers["allow"].split(",")}
    assert {"GET", "HEAD"} <= allowed
    assert allowed - {"GET", "HEAD"} == {m for p, m in WRITES if p == path}


# --- HEAD --------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ALL_PATHS)
def test_head_answers_like_get_without_a_body(api, path):
    client, secret = api
    got = client.get(path, headers=auth(secret))
    head = client.head(path, headers=auth(secret))
    assert got.status_code == head.status_code == 200
    assert head.content == b""
    assert head.headers["content-type"] == got.headers["content-type"]
    assert head.headers.get("x-request-id")
    if path != "/builds/1/url" and path != "/healthz":  # the URL's expiry moves with the clock
        assert head.headers["etag"] == got.headers["etag"]


@pytest.mark.parametrize("path", ["/builds", "/builds/999", "/nope"])
def test_head_of_an_error_has_no_body(api, path):
    client, secret = api
    got = client.get(path, headers=auth(secret) if path != "/builds" else {})
    head = client.head(path, headers=auth(secret) if path != "/builds" else {})
    assert head.status_code == got.status_code >= 400
    assert head.content == b""


# --- X-Request-ID ------------------------------------------------------------------------------


@pytest.mark.parametrize("given", ["abc-123", "req_1.2:3/4+5=6", "0" * 128, "550e8400-e29b-41d4-a716-446655440000"])
@pytest.mark.parametrize("path", ["/builds", "/healthz", "/nope", "/builds/abc"])
def test_reasonable_request_id_is_echoed(api, path, given):
    client, secret = api
    response = client.get(path, headers={**auth(secret), "X-Request-ID": given})
    assert response.headers["x-request-id"] == given


@pytest.mark.parametrize("given", ["x" * 500, "0" * 129, "has space", "tab\there", "a\nb", "", "<script>", "a;b"])
def test_unreasonable_request_id_is_replaced(api, given):
    client, secret = api
    response = client.get("/builds", headers={**auth(secret), "X-Request-ID": given})
    rid = response.headers["x-request-id"]
    assert rid and rid != given
    assert len(rid) <= 128 and " " not in rid


def test_request_id_is_generated_when_absent_and_differs_each_time(api):
    client, secret = api
    first = client.get("/builds", headers=auth(secret)).headers["x-request-id"]
    second = client.get("/builds", headers=auth(secret)).headers["x-request-id"]
    assert first and second and first != second


@pytest.mark.parametrize(("method", "path", "with_token"), [
    ("GET", "/builds", False),  # 401
    ("GET", "/builds/999", True),  # 404
    ("GET", "/nope", False),  # 404
    ("GET", "/builds?limit=0", True),  # 400
    ("POST", "/builds", True),  # 403: a read token cannot write
    ("DELETE", "/builds", True),  # 405
    ("HEAD", "/builds", True),
])
def test_request_id_is_on_errors_too(api, method, path, with_token):
    client, secret = api
    headers = {**(auth(secret) if with_token else {}), "X-Request-ID": "trace-42"}
    assert client.request(method, path, headers=headers).headers["x-request-id"] == "trace-42"


# --- ETag / If-None-Match ----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/builds", "/builds/summary", "/builds/1", "/usage", "/builds?tags=p:w"])
def test_matching_etag_gives_304_without_body(api, path):
    client, secret = api
    first = client.get(path, headers=auth(secret))
    etag = first.headers["etag"]
    assert etag.startswith('"') and etag.endswith('"')
    for header in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        again = client.get(path, headers={**auth(secret), "If-None-Match": header})
        assert again.status_code == 304, header
        assert again.content == b""
        assert again.headers["etag"] == etag
    for header in ('"other"', etag[:-2] + '"', ""):
        fresh = client.get(path, headers={**auth(secret), "If-None-Match": header})
        assert fresh.status_code == 200
        assert fresh.content == first.content


def test_etag_changes_when_the_data_does(env):
    env.load([record(1)])
    secret = env.token()
    with env.client() as client:
        old = client.get("/builds", headers=auth(secret)).headers["etag"]
        env.load([record(2)])
        response = client.get("/builds", headers={**auth(secret), "If-None-Match": old})
    assert response.status_code == 200
    assert [b["build_id"] for b in response.json()] == [2, 1]
    assert response.headers["etag"] != old


def test_etag_differs_between_accounts_with_different_data(env):
    env.load([record(1), record(2, account="beta")])
    acme, beta = env.token(), env.token(account="beta")
    with env.client() as client:
        etag = client.get("/builds", headers=auth(acme)).headers["etag"]
        response = client.get("/builds", headers={**auth(beta), "If-None-Match": etag})
    assert response.status_code == 200


# --- rate limits -------------------------------------------------------------------------------


def away_from_minute_boundary() -> None:
    """The limiter counts in fixed one-minute windows; do not start a count right before one ends."""
    if 60 - time.time() % 60 < 3:
        time.sleep(60 - time.time() % 60 + 0.1)


def test_rate_limit_counts_down_then_429(env):
    env.load([record(1)])
    secret, other = env.token(), env.token()
    away_from_minute_boundary()
    with env.client(rate_limit=3) as client:
        remaining = []
        for _ in range(3):
            response = client.get("/builds/1", headers=auth(secret))
            assert response.status_code == 200
            assert response.headers["ratelimit-limit"] == "3"
            assert 1 <= int(response.headers["ratelimit-reset"]) <= 60
            remaining.append(int(response.headers["ratelimit-remaining"]))
        assert remaining == [2, 1, 0]

        limited = client.get("/builds/1", headers=auth(secret))
        assert_problem(limited, 429)
        assert 1 <= int(limited.headers["retry-after"]) <= 60
        assert limited.headers["ratelimit-limit"] == "3"
        assert limited.headers["ratelimit-remaining"] == "0"
        assert 1 <= int(limited.headers["ratelimit-reset"]) <= 60
        assert limited.headers.get("x-request-id")
        assert client.get("/usage", headers=auth(secret)).status_code == 429  # the limit covers every endpoint

        # Limits are per token: another token of the same account still works.
        fresh = client.get("/builds/1", headers=auth(other))
        assert fresh.status_code == 200
        assert fresh.headers["ratelimit-remaining"] == "2"
        # Health checks are not limited.
        assert client.get("/healthz").status_code == 200


def test_rate_limit_headers_on_every_api_answer(api):
    client, secret = api
    for path in API_PATHS:
        response = client.get(path, headers=auth(secret))
        assert int(response.headers["ratelimit-limit"]) > 0
        assert "ratelimit-remaining" in response.headers
        assert "ratelimit-reset" in response.headers


# --- /healthz ----------------------------------------------------------------------------------


def test_healthz_answers_without_a_token(api):
    client, _ = api
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response.headers.get("x-request-id")


# --- OpenAPI -----------------------------------------------------------------------------------

SEED_BUILD = {
    "build_id": ("integer", False),
    "create_time": ("string", False),
    "start_time": ("string", False),
    "queue_time_seconds": ("number", False),
    "duration_seconds": ("number", True),
    "build_status": ("BuildStatus", False),
    "status": ("BuildStatus", False),
    "status_message": ("string", True),
    "cpu_count": ("integer", False),
    "allocated_megabytes": ("integer", False),
    "cpu_seconds": ("integer", False),
    "average_cpu_utilization": ("number", True),
    "peak_memory_use_kilobytes": ("integer", True),
    "peak_storage_use_kilobytes": ("integer", True),
    "derivation_path": ("string", False),
    "outputs": ("array", False),
    "system": ("string", False),
    "tags": ("object", False),
    "restart_of_build_id": ("integer", True),
    "restarted_as_build_id": ("integer", True),
}
SEED_SUMMARY = {
    "build_count": "integer", "running_build_count": "integer", "discarded_build_count": "integer",
    "failed_build_count": "integer", "successful_build_count": "integer", "total_cpu_seconds": "integer",
    "billable_cpu_seconds": "integer", "total_duration_seconds": "number", "wall_time_seconds": "number",
    "total_output_nar_size_kilobytes": "integer",
}
SEED_URL = {"build_id": "integer", "url": "string", "expires_at": "string"}
SEED_USAGE = {"billable_cpu_seconds": "integer", "billable_build_count": "integer"}
SEED_OUTPUT = {"name": "string", "path": "string", "nar_hash": "string", "nar_size_bytes": "integer"}
SEED_STATUSES = [
    "built", "build_failed", "cancelled", "timeout", "internal_error", "out_of_memory", "max_memory_exceeded",
    "client_disconnect", "client_error", "pending", "running",
]
PARAMETERS = {
    "/builds": {"tags", "create_time_from", "create_time_to", "status", "limit", "derivation_path"},
    "/builds/summary": {"tags", "create_time_from", "create_time_to", "status"},
    "/builds/{build_id}": {"build_id"},
    "/builds/{build_id}/url": {"build_id", "ttl_seconds"},
    "/usage": {"from", "to"},
    "/builds/stats": {"tags", "create_time_from", "create_time_to", "status", "group_by", "limit"},
    "/usage/breakdown": {"from", "to", "group_by"},
    "/builds/export": {"tags", "create_time_from", "create_time_to", "status", "derivation_path", "format"},
    "/dashboard/url": {"ttl_seconds"},
    "/badges/url": {"derivation", "system", "tags", "ttl_seconds"},
    "/events": {"limit", "types", "wait"},
}
# Not a read of builds: the token exchange answers 401 for every bad input (tests/test_exchange.py documents it).
EXCHANGE = "/auth/oidc-token-exchange"


def kind(schema: dict) -> tuple[str, bool]:
    """(type or referenced schema name, nullable) of a property schema."""
    variants = schema.get("oneOf") or schema.get("anyOf") or [schema]
    nullable = any(v.get("type") == "null" for v in variants)
    kinds = {v["$ref"].rsplit("/", 1)[-1] if "$ref" in v else v["type"] for v in variants if v.get("type") != "null"}
    if isinstance(schema.get("type"), list):
        nullable = "null" in schema["type"]
        kinds = {t for t in schema["type"] if t != "null"}
    assert len(kinds) == 1, schema
    return kinds.pop(), nullable


@pytest.fixture(scope="module")
def openapi(api):
    client, _ = api
    response = client.get("/docs/openapi.json")
    assert response.status_code == 200
    return response.json()


def test_openapi_is_3_1_and_lists_every_path(openapi):
    assert openapi["openapi"].startswith("3.1.")
    assert set(openapi["paths"]) == set(PARAMETERS) | {"/healthz", EXCHANGE}
    for path, item in openapi["paths"].items():
        assert "get" in item, path
        assert {"post", "put", "delete", "patch"} & set(item) == {m.lower() for p, m in WRITES if p == path}, path


def test_openapi_documents_the_write_body_from_the_record_type(openapi):
    operation = openapi["paths"]["/builds"]["post"]
    content = operation["requestBody"]["content"]
    record = {"$ref": "#/components/schemas/BuildRecord"}
    assert content["application/json"]["schema"] == {"type": "array", "items": record, "minItems": 1, "maxItems": 5000}
    assert content["application/x-ndjson"]["schema"] == record
    properties = openapi["components"]["schemas"]["BuildRecord"]["properties"]
    assert {"source_id", "restart_of_source_id", "build_id", "log"} <= set(properties)
    assert "account" not in properties
    assert properties["source_id"]["anyOf"][0]["maxLength"] == 200
    for code in ("200", "400", "401", "403", "409", "413", "415", "429"):
        assert code in operation["responses"], code
    assert "invalid_records" in str(operation["responses"]["400"])
    assert "invalid_records" in str(operation["responses"]["409"])


@pytest.mark.parametrize("path", list(PARAMETERS))
def test_openapi_operations_document_parameters_auth_and_errors(openapi, path):
    operation = openapi["paths"][path]["get"]
    names = {p["name"] for p in operation.get("parameters", [])}
    assert PARAMETERS[path] <= names
    assert names - PARAMETERS[path] <= {"cursor", "If-None-Match"}
    assert operation.get("security"), "API operations need the bearer token"
    for code in ("200", "400", "401", "403", "405", "429", "503"):
        assert code in operation["responses"], code
    # A streamed export has no ETag, so no 304; every other answer can be revalidated.
    assert ("304" in operation["responses"]) == (path not in STREAMED), path
    problem = operation["responses"]["400"]["content"]
    assert "application/problem+json" in problem


def test_openapi_healthz_needs_no_token(openapi):
    assert not openapi["paths"]["/healthz"]["get"].get("security")


def test_openapi_responses_use_the_seed_types(openapi):
    def success(path: str) -> dict:
        return openapi["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]

    assert success("/builds")["type"] == "array"
    assert success("/builds")["items"]["$ref"].endswith("/Build")
    assert success("/builds/{build_id}")["$ref"].endswith("/Build")
    assert success("/builds/summary")["$ref"].endswith("/BuildSummary")
    assert success("/builds/{build_id}/url")["$ref"].endswith("/BuildURL")
    assert success("/usage")["$ref"].endswith("/Usage")


def test_openapi_build_schema_matches_the_seed(openapi):
    schema = openapi["components"]["schemas"]["Build"]
    assert list(schema["properties"]) == list(SEED_BUILD)
    for name, expected in SEED_BUILD.items():
        assert kind(schema["properties"][name]) == expected, name
    for name in ("create_time", "start_time"):
        assert schema["properties"][name]["format"] == "date-time"
    assert schema["properties"]["outputs"]["items"]["$ref"].endswith("/BuildOutput")
    assert schema["properties"]["tags"]["additionalProperties"]["type"] == "string"
    assert set(schema["required"]) == set(SEED_BUILD), "every field is always present, nullable ones as null"


def test_openapi_build_status_has_the_eleven_values(openapi):
    assert openapi["components"]["schemas"]["BuildStatus"]["enum"] == SEED_STATUSES


@pytest.mark.parametrize(("name", "fields"), [
    ("BuildSummary", SEED_SUMMARY), ("BuildURL", SEED_URL), ("Usage", SEED_USAGE), ("BuildOutput", SEED_OUTPUT),
])
def test_openapi_other_schemas_match_the_seed(openapi, name, fields):
    schema = openapi["components"]["schemas"][name]
    assert set(schema["properties"]) == set(fields)
    assert set(schema["required"]) == set(fields)
    for field, expected in fields.items():
        assert kind(schema["properties"][field]) == (expected, False), field


def test_openapi_url_expiry_is_a_date_time(openapi):
    assert openapi["components"]["schemas"]["BuildURL"]["properties"]["expires_at"]["format"] == "date-time"


def test_openapi_problem_schema_is_rfc_9457(openapi):
    schema = openapi["components"]["schemas"]["Problem"]
    assert {"type", "title", "status", "detail"} <= set(schema["required"])
    assert "invalid_params" in schema["properties"]


def _examples(node, inside: bool = False):
    """Every value given as an example anywhere in the document, nested values included."""
    if inside:
        yield node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _examples(value, inside or key in ("examples", "example"))
    elif isinstance(node, list):
        for item in node:
            yield from _examples(item, inside)


def test_openapi_examples_are_valid_values(openapi):
    """Random generated examples (negative durations, dates for date-times, status 7809) mislead readers."""
    for value in _examples(openapi):
        if not isinstance(value, dict):
            continue
        if {"build_id", "create_time", "derivation_path"} <= set(value):
            msgspec.json.decode(msgspec.json.encode(value), type=Build)
        if {"build_id", "url", "expires_at"} <= set(value):
            assert value["url"].startswith("http"), value
            assert value["expires_at"].endswith("Z"), value
        if {"type", "title", "status", "detail"} <= set(value):
            assert 400 <= value["status"] <= 599, value
        if "wall_time_seconds" in value:
            assert all(number >= 0 for number in value.values()), value
    schemas = openapi["components"]["schemas"]
    for name in ("Build", "BuildSummary", "BuildURL", "Usage"):
        for field, schema in schemas[name]["properties"].items():
            for example in _examples(schema):
                if isinstance(example, int | float) and ("seconds" in field or "count" in field):
                    assert example >= 0, (name, field, example)


# --- 503 ---------------------------------------------------------------------------------------


def test_unreadable_database_is_503_without_sql_in_the_body(env):
    env.load([record(1)])
    secret = env.token()
    with env.client() as client:
        assert client.get("/builds/1", headers=auth(secret)).status_code == 200
        for table in ("build_logs", "builds", "hourly_totals", "daily_usage"):
            query(env.db, f"DROP TABLE {table}")
        for path in ("/builds", "/builds/1", "/builds/summary", "/usage"):
            response = client.get(path, headers=auth(secret))
            body = assert_problem(response, 503)
            assert "builds" not in body["detail"]
            assert response.headers.get("retry-after")


@pytest.mark.parametrize(("path", "name", "expected"), [
    ("/builds", "limit", {"type": "integer", "minimum": 1, "maximum": 10000, "default": 500}),
    ("/builds/{build_id}", "build_id", {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}),
    ("/builds/{build_id}/url", "build_id", {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}),
    ("/builds/{build_id}/url", "ttl_seconds", {"type": "integer", "minimum": 1, "maximum": 604800, "default": 3600}),
    ("/usage", "from", {"type": "string", "format": "date"}),
    ("/usage", "to", {"type": "string", "format": "date"}),
])
def test_openapi_documents_parameter_types_and_bounds(openapi, path, name, expected):
    (parameter,) = [p for p in openapi["paths"][path]["get"]["parameters"] if p["name"] == name]
    schema = parameter["schema"]
    assert {key: schema.get(key) for key in expected} == expected
    assert parameter["required"] == (name == "build_id")


# --- bounded requests and canonical paths ------------------------------------------------------


def test_many_bad_status_values_give_a_small_problem(api):
    client, secret = api
    response = client.get("/builds?status=" + ",".join(f"bad{i}" for i in range(5000)), headers=auth(secret))
    body = assert_problem(response, 400)
    assert len(response.content) < 4000
    assert "at most 32" in body["detail"]


def test_problem_lists_a_few_dozen_bad_parameters_and_counts_the_rest(api):
    client, secret = api
    query = "&".join(f"unknown{i}=1" for i in range(500))
    response = client.get(f"/builds?{query}", headers=auth(secret))
    body = assert_problem(response, 400)
    assert len(body["invalid_params"]) == 30
    assert body["more_invalid_params"] == 470
    assert "and 495 more" in body["detail"]
    assert len(response.content) < 10_000


def test_too_many_tag_pairs_is_a_400_not_an_outage(api):
    client, secret = api
    response = client.get("/builds?tags=" + ",".join(f"k{i}:v" for i in range(1000)), headers=auth(secret))
    body = assert_problem(response, 400)
    assert "at most 32" in body["detail"]


@pytest.mark.parametrize("path", ["/builds", "/builds/summary"])
def test_the_largest_filter_allowed_stays_within_sqlite_limits(api, path):
    client, secret = api
    params = [("tags", f"k{i}:{'v' * 200}") for i in range(32)]
    params.append(("status", ",".join(["built", "pending", "running", "timeout"] * 8)))  # 32 values
    params += [("create_time_from", "2000-01-01"), ("create_time_to", "2100-01-01")]
    if path == "/builds":
        params.append(("derivation_path", "/nix/store/" + "x" * 1000 + ".drv"))
    response = client.get(path, params=params, headers=auth(secret))
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    "path", ["/builds/1%2Furl", "/builds/1%2furl", "/builds%2F1", "/b/x%2Flog", "/b/static/..%2Fweb.py", "/healthz%2F"]
)
def test_an_encoded_slash_in_a_path_is_never_routed(api, path):
    client, secret = api
    response = client.get(path, headers=auth(secret))
    body = assert_problem(response, 404)
    assert "%2F" in body["detail"]
    assert response.headers["x-request-id"]
    assert client.head(path, headers=auth(secret)).content == b""


@pytest.mark.parametrize("path", ["/builds/007", "/builds/01/url", "/builds/+1", "/builds/1/url?ttl_seconds=060",
                                  "/builds?limit=05"])
def test_numbers_with_leading_zeros_or_signs_are_400(api, path):
    client, secret = api
    assert_problem(client.get(path, headers=auth(secret)), 400)


def test_a_cursor_with_an_extra_element_is_400(api):
    client, secret = api
    extra = base64.urlsafe_b64encode(b"[1,2,3]").rstrip(b"=").decode()
    body = assert_problem(client.get(f"/builds?cursor={extra}", headers=auth(secret)), 400)
    assert body["invalid_params"][0]["name"] == "cursor"
