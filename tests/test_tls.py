"""https and a path prefix, as the hosted service's own client reaches the API: a real server, real TLS."""

from __future__ import annotations

import os
import ssl
import subprocess

import httpx
import pytest
from conftest import auth, buildreport_command, record, self_signed


@pytest.fixture
def certificate(tmp_path):
    return self_signed(tmp_path)


def test_real_client_flow_over_https_under_a_path_prefix(env, serve, certificate):
    """What nixbuild-action's job summary asks: a summary by CI tags, then the builds with the same tags."""
    tags = {"GITHUB_REPOSITORY": "acme/webshop", "GITHUB_RUN_ID": "4711", "GITHUB_RUN_ATTEMPT": "1"}
    env.load([
        record(1, tags=tags, build_status="build_failed", status_message="builder failed"),
        record(2, tags=tags, cpu_seconds=30),
        record(3, tags={**tags, "GITHUB_RUN_ATTEMPT": "2"}),
    ])
    secret = env.token()
    cert, key = certificate
    trust = ssl.create_default_context(cafile=str(cert))
    server = serve(env.db, "--tls-cert", str(cert), "--tls-key", str(key), scheme="https", prefix="/api/v1",
                   verify=trust)
    assert server.url.startswith("https://127.0.0.1:") and server.url.endswith("/api/v1")
    query = {"tags": ",".join(f"{k}:{v}" for k, v in tags.items())}
    with httpx.Client(base_url=server.url, headers=auth(secret), verify=trust, timeout=10) as client:
        summary = client.get("/builds/summary", params=query).json()
        assert (summary["build_count"], summary["successful_build_count"], summary["failed_build_count"]) == (2, 1, 1)
        builds = client.get("/builds", params=query).json()
        assert [(b["build_id"], b["status"]) for b in builds] == [(2, "built"), (1, "build_failed")]
        assert all(b["status"] == b["build_status"] for b in builds)

        page = client.get("/builds", params={**query, "limit": 1})
        assert page.headers["link"].startswith(f'<{server.url}/builds?')
        link = client.get("/builds/1/url").json()["url"]
        assert link.startswith(f"{server.url}/b/")
        assert client.get(link).status_code == 200


def test_every_route_lives_under_the_prefix_and_only_there(env, serve):
    env.load([record(1, log="hello\n")])
    secret = env.token()
    server = serve(env.db, prefix="/api/v1")
    root = server.url.removesuffix("/api/v1")
    with httpx.Client(headers=auth(secret), timeout=10) as client:
        for path in ("/healthz", "/builds", "/builds/1", "/builds/summary", "/usage", "/docs", "/docs/openapi.json"):
            assert client.get(server.url + path).status_code == 200, path
            outside = client.get(root + path)
            assert outside.status_code == 404, path
            assert outside.headers["content-type"] == "application/problem+json"
            assert outside.headers["x-request-id"]
        assert client.get(root + "/api/v10/healthz").status_code == 404
        front = client.get(server.url)
        assert (front.status_code, front.headers["location"]) == (302, "/api/v1/docs")
        docs = client.get(server.url + "/docs").text
        assert 'href="/api/v1/docs/openapi.json"' in docs and 'href="/api/v1/b/static/build.css' in docs
        document = client.get(server.url + "/docs/openapi.json").json()
        assert document["servers"] == [{"url": server.url, "description": "This service."}]
        page_url = client.get(server.url + "/builds/1/url").json()["url"]
        page = client.get(page_url)
        assert page.status_code == 200 and 'href="/api/v1/b/static/build.css' in page.text
        assert client.get(page_url + "/log").text == "hello\n"
        assert client.get(server.url + "/b/static/build.css").status_code == 200


def _serve_fails(tmp_path, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [*buildreport_command(), "serve", "--db", str(tmp_path / "t.db"), "--port", "0", *args],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    return result


def test_a_missing_certificate_is_a_clear_error(tmp_path, certificate):
    _, key = certificate
    result = _serve_fails(tmp_path, "--tls-cert", str(tmp_path / "nope.crt"), "--tls-key", str(key))
    assert f"cannot read TLS file {tmp_path / 'nope.crt'} (--tls-cert): No such file" in result.stderr


def test_an_unreadable_key_is_a_clear_error(tmp_path, certificate):
    cert, _ = certificate
    result = _serve_fails(tmp_path, "--tls-cert", str(cert), "--tls-key", str(tmp_path))
    assert "Invalid value for '--tls-key'" in result.stderr and "is a directory" in result.stderr


def test_a_key_of_another_certificate_is_a_clear_error(tmp_path, certificate):
    cert, _ = certificate
    _, other_key = self_signed(tmp_path, "other")
    result = _serve_fails(tmp_path, "--tls-cert", str(cert), "--tls-key", str(other_key))
    assert "the key does not belong to the certificate" in result.stderr


def test_a_file_that_is_not_a_certificate_is_a_clear_error(tmp_path, certificate):
    _, key = certificate
    junk = tmp_path / "junk.crt"
    junk.write_text("not a certificate\n")
    result = _serve_fails(tmp_path, "--tls-cert", str(junk), "--tls-key", str(key))
    assert "not a PEM certificate" in result.stderr


def test_a_certificate_needs_its_key(tmp_path, certificate):
    cert, _ = certificate
    result = _serve_fails(tmp_path, "--tls-cert", str(cert))
    assert "--tls-cert and --tls-key go together" in result.stderr


def test_tls_files_come_from_the_environment_too(tmp_path, certificate):
    cert, _ = certificate
    result = subprocess.run(
        [*buildreport_command(), "serve", "--db", str(tmp_path / "t.db"), "--port", "0"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env={**os.environ, "BUILDREPORT_TLS_CERT": str(cert), "BUILDREPORT_TLS_KEY": str(tmp_path)},
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert str(tmp_path) in result.stderr


def test_a_public_url_that_is_not_an_http_address_is_refused(tmp_path):
    for url in ("ftp://example.com", "builds.example.com/api", "https://example.com/api?x=1"):
        result = _serve_fails(tmp_path, "--public-url", url)
        assert "--public-url" in result.stderr and "is not an http(s) address" in result.stderr, url
