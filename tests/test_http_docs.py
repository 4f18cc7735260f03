"""The API's own documentation: a page that loads nothing from elsewhere, and a document no fuzzer can fault."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
from click.testing import CliRunner
from conftest import auth, record

from buildreport.cli.main import main
from buildreport.demo import sample_data_path
from buildreport.http.docs import MAX_INT64
from buildreport.imports.load import import_files
from buildreport.store import open_database
from buildreport.times import now_us

HOOKS = Path(__file__).resolve().parent / "schemathesis_hooks.py"
PHASES = "examples,coverage,fuzzing,stateful"
MAX_EXAMPLES = 60


def test_docs_page_loads_nothing_from_elsewhere(env):
    env.load([record(1)])
    with env.client() as client:
        page = client.get("/docs")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert "<script" not in page.text
    references = re.findall(r'(?:src|href)="([^"]*)"', page.text)
    assert references and all(ref.startswith(("/", "#")) for ref in references), references
    for operation in ("listBuilds", "summarizeBuilds", "getBuild", "getBuildUrl", "getUsage", "health"):
        assert f'id="{operation}"' in page.text
    assert "Alias of <code>build_status</code>" in page.text


def test_front_door_leads_to_the_docs(env):
    with env.client() as client:
        answer = client.get("/", follow_redirects=False)
    assert answer.status_code == 302 and answer.headers["location"] == "/docs"


def test_serve_help_documents_host_port_and_their_environment():
    text = CliRunner().invoke(main, ["serve", "--help"], terminal_width=200).output
    for words in ("--host", "BUILDREPORT_HOST", "--port", "BUILDREPORT_PORT", "--tls-cert", "BUILDREPORT_TLS_CERT",
                  "--tls-key", "BUILDREPORT_TLS_KEY", "BUILDREPORT_PUBLIC_URL"):
        assert words in text, words


def test_document_states_exact_bounds_headers_and_answers(env):
    with env.client() as client:
        doc = client.get("/docs/openapi.json").json()
    build = doc["components"]["schemas"]["Build"]["properties"]
    assert build["build_id"]["maximum"] == MAX_INT64 and isinstance(build["build_id"]["maximum"], int)
    assert build["status"]["$ref"].endswith("/BuildStatus") and "build_status" in build["status"]["description"]
    health = doc["paths"]["/healthz"]["get"]["responses"]
    assert health["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/Health")
    assert health["503"]["content"]["application/json"]["schema"]["$ref"].endswith("/Health")
    builds = doc["paths"]["/builds"]["get"]
    assert {"ETag", "Link", "X-Request-ID", "RateLimit-Limit"} <= set(builds["responses"]["200"]["headers"])
    assert "WWW-Authenticate" in builds["responses"]["401"]["headers"]
    assert "Retry-After" in builds["responses"]["429"]["headers"]
    assert "Allow" in builds["responses"]["405"]["headers"]
    params = {p["name"]: p["schema"] for p in builds["parameters"]}
    for name in ("tags", "status", "derivation_path", "cursor"):
        assert params[name]["minLength"] == 1, name
    assert "If-None-Match" in params


def test_document_describes_what_the_server_answers(env):
    """Each documented header of an answer is sent with it, and each answer sent is documented."""
    env.load([record(1), record(2)])
    secret = env.token()
    with env.client() as client:
        doc = client.get("/docs/openapi.json").json()
        ok = client.get("/builds", params={"limit": 1}, headers=auth(secret))
        not_modified = client.get("/builds/1", headers={**auth(secret), "If-None-Match": "*"})
        refused = client.post("/builds/1", headers=auth(secret))
    documented = {name.lower() for name in doc["paths"]["/builds"]["get"]["responses"]["200"]["headers"]}
    assert documented <= {name.lower() for name in ok.headers}
    assert not_modified.status_code == 304 and "304" in doc["paths"]["/builds/{build_id}"]["get"]["responses"]
    assert refused.status_code == 405 and refused.headers["allow"] == "GET, HEAD"


# Its ID token must be signed by an OIDC issuer, which schemathesis cannot be: tests/test_exchange.py covers it.
UNFUZZED = "/auth/oidc-token-exchange"


def _schemathesis(url: str, token: str, cwd: Path, *selection: str) -> tuple[str, float]:
    """Schemathesis's command line over the served document with every check and phase; its output and time."""
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable, "-m", "schemathesis.cli", "run", f"{url}/docs/openapi.json",
            "--header", f"Authorization: Bearer {token}",
            "--checks", "all", "--phases", PHASES, "--max-examples", str(MAX_EXAMPLES),
            "--workers", "1", "--seed", "20261123", "--generation-deterministic", "--no-color",
            "--max-failures", "20", "--exclude-path", UNFUZZED, *selection,
        ],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, cwd=cwd,  # its cache goes there
        env={**os.environ, "SCHEMATHESIS_HOOKS": HOOKS.stem, "PYTHONPATH": str(HOOKS.parent)},
    )
    output = result.stdout + result.stderr
    # Reproduction commands can carry megabytes of body: long lines are cut so that every error shows.
    shown = "\n".join(line if len(line) <= 400 else line[:400] + " …" for line in output.splitlines())
    assert result.returncode == 0, shown[-12000:]
    assert "No issues found" in output, output[-5000:]
    return output, time.monotonic() - started


def test_schemathesis_finds_nothing_in_the_document(demo, tmp_path):
    """Every read operation, every check, every phase, against a real server on the sample data."""
    output, seconds = _schemathesis(demo.url, demo.tokens["acme"], tmp_path, "--include-method", "GET")
    operations = re.search(r"Operations:\s+(\d+) selected / (\d+) total", output)
    reads = [path for path, item in httpx.get(f"{demo.url}/docs/openapi.json").json()["paths"].items()
             if "get" in item and path != UNFUZZED]
    assert operations and int(operations[1]) == len(reads) >= 6, output[-3000:]
    cases = re.search(r"(\d+) generated, (\d+) passed", output)
    assert cases and cases[1] == cases[2] and int(cases[1]) > 300, output[-3000:]
    print(f"schemathesis: {operations[1]} operations, {cases[1]} cases, {seconds:.1f}s")


def test_schemathesis_finds_nothing_with_a_token_that_reads_and_writes(env, serve, tmp_path):
    """Every operation, POST /builds included, with a read+write token on a database of its own: every
    schema-valid body is taken (or is a 409 conflict), every invalid one refused with a 4xx, the stateful
    phase follows written builds to their pages, and the fuzzer's records really were written."""
    conn = open_database(env.db)
    try:
        import_files(conn, [sample_data_path()], now_us())
    finally:
        conn.close()
    token = env.token("acme", scopes=("build:read", "build:write"))
    server = serve(env.db)
    before = _build_count(server.url, token)
    output, seconds = _schemathesis(server.url, token, tmp_path)
    operations = re.search(r"Operations:\s+(\d+) selected / (\d+) total", output)
    document = httpx.get(f"{server.url}/docs/openapi.json").json()
    assert "post" in document["paths"]["/builds"]
    every = sum(1 for path, item in document["paths"].items() for method in item
                if method in ("get", "post") and path != UNFUZZED)
    assert operations and int(operations[1]) == every >= 7, output[-3000:]
    assert re.search(r"Stateful \(in ", output), output[-3000:]
    cases = re.search(r"(\d+) generated, (\d+) passed", output)
    assert cases and cases[1] == cases[2] and int(cases[1]) > 300, output[-3000:]
    written = _build_count(server.url, token) - before
    assert written > 0, output[-3000:]  # records were taken, not only refused
    print(f"schemathesis: {operations[1]} operations, {cases[1]} cases, {written} builds written, {seconds:.1f}s")


def _build_count(url: str, token: str) -> int:
    answer = httpx.get(f"{url}/builds/summary", headers=auth(token))
    assert answer.status_code == 200, answer.text
    return answer.json()["build_count"]


def test_an_unknown_path_under_docs_is_a_problem_document(env):
    with env.client() as client:
        answer = client.get("/docs/swagger")
    assert answer.status_code == 404
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["title"] == "Not found"
