"""Export: every matching build, newest first, as JSON Lines or CSV, over HTTP and from the command line."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from datetime import timedelta

import pytest
from click.testing import CliRunner
from conftest import ENGINES, NOW, Env, auth, new_database, record

from buildreport.cli.main import main
from buildreport.filters import BuildFilter
from buildreport.models import Build
from buildreport.store import open_reader

FROM = {"create_time_from": "2000-01-01"}


def records() -> list[dict]:
    out = []
    for i in range(1, 41):
        create = NOW - timedelta(minutes=i // 2)  # pairs share a creation time: ties go by build id
        out.append(
            record(
                i,
                create_time=create,
                build_status="running" if i % 5 == 0 else "built",
                tags={"project": "web" if i % 2 else "api", "note": 'a "quoted", value'},
                outputs=[{"name": "out", "path": f"/nix/store/{i}", "nar_hash": "sha256-x", "nar_size_bytes": i}],
                status_message="line one\nline two" if i % 3 == 0 else None,
            )
        )
    out.append(record(99, account="globex"))
    return out


@pytest.fixture(scope="module", params=ENGINES)
def api(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    env = Env(tmp, new_database(request, request.param, tmp))
    env.load(records())
    secret = env.token()
    with env.client() as client:
        yield env, client, secret


def listed(client, secret, params) -> list[dict]:
    response = client.get("/builds", params={**params, "limit": 10_000}, headers=auth(secret))
    assert response.status_code == 200
    return response.json()


@pytest.mark.parametrize("params", [FROM, {**FROM, "tags": "project:web"}, {**FROM, "status": "running"}, {}])
def test_ndjson_export_is_the_list_of_builds_line_by_line(api, params):
    _, client, secret = api
    response = client.get("/builds/export", params={**params, "format": "ndjson"}, headers=auth(secret))
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-ndjson"
    assert 'filename="builds.ndjson"' in response.headers["content-disposition"]
    lines = response.content.decode().splitlines()
    assert [json.loads(line) for line in lines] == listed(client, secret, params)


def test_csv_export_has_a_header_row_and_nested_values_as_json(api):
    _, client, secret = api
    response = client.get("/builds/export", params={**FROM, "format": "csv"}, headers=auth(secret))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode(), newline="")))
    assert rows[0] == list(Build.__struct_fields__)
    builds = listed(client, secret, FROM)
    assert len(rows) == len(builds) + 1 == 41
    for row, build in zip(rows[1:], builds, strict=True):
        cells = dict(zip(rows[0], row, strict=True))
        assert int(cells["build_id"]) == build["build_id"]
        assert cells["create_time"] == build["create_time"]
        assert json.loads(cells["tags"]) == build["tags"]
        assert json.loads(cells["outputs"]) == build["outputs"]
        assert cells["status_message"] == (build["status_message"] or "")
        duration = build["duration_seconds"]
        assert cells["duration_seconds"] == ("" if duration is None else str(duration))


def test_export_defaults_to_ndjson_of_the_last_day(api):
    _, client, secret = api
    response = client.get("/builds/export", headers=auth(secret))
    assert response.headers["content-type"] == "application/x-ndjson"
    assert len(response.content.splitlines()) == 40


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"format": "xml"}, "format"),
        ({"format": ""}, "format"),
        ({"limit": "5"}, "limit"),
        ({"status": "nope"}, "status"),
    ],
)
def test_bad_export_parameters_are_named(api, params, name):
    _, client, secret = api
    response = client.get("/builds/export", params=params, headers=auth(secret))
    assert response.status_code == 400
    assert name in [p["name"] for p in response.json()["invalid_params"]]


def test_export_reads_in_pages_of_bounded_size_in_list_order(api):
    env, client, secret = api

    async def pages() -> list[list[bytes]]:
        reader = await open_reader(env.db)
        try:
            return [page async for page in reader.export_pages(1, BuildFilter(create_from_us=0), size=7)]
        finally:
            await reader.close()

    chunks = asyncio.run(pages())
    assert [len(c) for c in chunks] == [7, 7, 7, 7, 7, 5]
    ids = [json.loads(body)["build_id"] for chunk in chunks for body in chunk]
    assert ids == [b["build_id"] for b in listed(client, secret, FROM)]


def test_export_reads_one_page_ahead_and_no_further_when_the_client_leaves(api):
    env, _, _ = api
    fetched: list[object] = []

    async def take_two() -> int:
        reader = await open_reader(env.db)
        read_page = reader._export_page

        async def counted(*args: object) -> tuple[list[tuple], list[bytes]]:
            fetched.append(args[2])  # the cursor the page starts after
            return await read_page(*args)

        reader._export_page = counted  # type: ignore[method-assign]
        taken = 0
        try:
            pages = reader.export_pages(1, BuildFilter(create_from_us=0), size=7)
            async for _ in pages:
                taken += 1
                await asyncio.sleep(0.05)  # time for the next page's read to finish
                assert len(fetched) == taken + 1  # the next page is read while this one is sent
                if taken == 2:
                    break
            await pages.aclose()
        finally:
            await reader.close()
        return taken

    assert asyncio.run(take_two()) == 2
    assert len(fetched) == 3 and fetched[0] is None


def test_an_export_page_reads_its_builds_in_two_halves_at_once_on_sqlite_in_one_walk_on_postgresql(api):
    env, _, _ = api
    reads: list[int] = []  # the number of queries of each read, in turn
    halves: list[list[object]] = []  # on SQLite, the build ids of each half

    async def first_page() -> list[bytes]:
        reader = await open_reader(env.db)
        alone, together = reader._rows, reader._rows_together

        async def one(query):
            reads.append(1)
            return await alone(query)

        async def several(parts):
            reads.append(len(parts))
            results = await together(parts)
            halves.extend(json.loads(rows[0][0]) for rows in results)
            return results

        reader._rows, reader._rows_together = one, several  # type: ignore[method-assign]
        try:
            async for page in reader.export_pages(1, BuildFilter(create_from_us=0), size=7):
                return page
            return []
        finally:
            await reader.close()

    page = asyncio.run(first_page())
    ids = [json.loads(body)["build_id"] for body in page]
    assert len(ids) == 7
    if env.engine == "sqlite":
        assert reads[:2] == [1, 2]  # the keys, then the two halves at once (then the next page's, read ahead)
        low, high = halves = halves[:2]
        assert low and high and max(low) < min(high)  # two ranges of ids
        assert all(half == sorted(half) for half in halves)  # each read forwards
        assert sorted(id_ for half in halves for id_ in half) == sorted(ids)
    else:
        assert reads in ([1], [1, 1]) and not halves  # keys and JSON from one query (and the next page's)


def run(*args: str, expect: int = 0):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == expect, (result.stdout, result.stderr)
    return result


def test_export_command_writes_the_same_as_the_api(api, tmp_path):
    env, client, secret = api
    http = client.get("/builds/export", params={**FROM, "format": "csv", "tags": "project:api"}, headers=auth(secret))
    out = tmp_path / "builds.csv"
    args = ["export", "--db", str(env.db), "--account", "acme", "--format", "csv", "--tags", "project:api"]
    run(*args, "--create-time-from", "2000-01-01", "--output", str(out))
    assert out.read_bytes() == http.content
    printed = run("export", "--db", str(env.db), "--account", "acme", "--create-time-from", "2000-01-01")
    assert printed.stdout_bytes == client.get("/builds/export", params=FROM, headers=auth(secret)).content


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--account", "nobody"], 1, "no account 'nobody'"),
        (["--account", "acme", "--status", "done"], 2, "--status: 'done' is not a build status"),
        (["--account", "acme", "--create-time-from", "yesterday"], 2, "--create-time-from: 'yesterday'"),
        (["--account", "acme", "--format", "xml"], 2, "'xml' is not one of"),
    ],
)
def test_export_command_reports_bad_input_in_one_line(api, tmp_path, args, code, message):
    env, _, _ = api
    out = tmp_path / "out.ndjson"
    result = run("export", "--db", str(env.db), *args, "--output", str(out), expect=code)
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_export_command_needs_an_existing_database(tmp_path):
    result = run("export", "--db", str(tmp_path / "none.db"), "--account", "acme", expect=1)
    assert "does not exist" in result.stderr


FORMULAS = ["=HYPERLINK(\"http://evil\",\"x\")", "+1+2", "-2+3", "@SUM(A1)", "\tx=1", "\r=1", "plain", " =1"]


@pytest.mark.parametrize("engine", ENGINES)
def test_csv_cells_a_spreadsheet_would_evaluate_are_written_as_text(request, tmp_path, engine):
    env = Env(tmp_path, new_database(request, engine, tmp_path))
    env.load([record(i, status_message=text, tags={"t": text}, cpu_seconds=7, create_time=NOW - timedelta(minutes=i))
              for i, text in enumerate(FORMULAS, start=1)])
    with env.client() as client:
        response = client.get("/builds/export", params={**FROM, "format": "csv"}, headers=auth(env.token()))
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    rows = list(csv.reader(io.StringIO(response.content.decode(), newline="")))
    cells = [dict(zip(rows[0], row, strict=True)) for row in rows[1:]]
    assert [c["status_message"] for c in cells] == [
        "'" + text if text[0] in "=+-@\t\r" else text for text in FORMULAS
    ]
    assert {(c["cpu_seconds"], c["build_id"][0]) for c in cells} <= {("7", str(i)) for i in range(1, 9)}
    assert json.loads(cells[0]["tags"]) == {"t": FORMULAS[0]}  # JSON cells begin with "{" and stay JSON
