"""POST /builds against a real server process: media types, gzip, every limit, invalid records, scopes,
account isolation, and builds sent as running then completed."""

from __future__ import annotations

import gzip
import json
import threading
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import ENGINES, Env, Server, auth, new_database, start_server
from test_transaction import write_record

from buildreport.errors import Problem
from buildreport.http.ingestion import JSON, MAX_REPORTED_RECORDS, NDJSON, inflate

MAX_BODY = 64 * 1024
MAX_RECORDS = 150


class Service:
    def __init__(self, server: Server, env: Env) -> None:
        self.server = server
        self.writer = env.token("acme", ("build:write",))
        self.reader = env.token("acme", ("build:read",))
        self.both = env.token("acme", ("build:read", "build:write"))
        self.other_writer = env.token("globex", ("build:write",))
        self.other_reader = env.token("globex", ("build:read",))
        self.client = httpx.Client(base_url=server.url, timeout=30)

    def post(self, body: Any, token: str | None = None, kind: str = JSON, **headers: str) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.client.post(
            "/builds", content=content, headers={**auth(token or self.writer), "Content-Type": kind, **headers}
        )

    def get(self, path: str, token: str | None = None) -> httpx.Response:
        return self.client.get(path, headers=auth(token or self.reader))


@pytest.fixture(scope="module", params=ENGINES)
def service(request, tmp_path_factory) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("ingestion")
    env = Env(tmp, new_database(request, request.param, tmp))
    env.load([])
    server = start_server(env.db, "--max-body-bytes", str(MAX_BODY), "--max-records", str(MAX_RECORDS))
    try:
        yield Service(server, env)
    finally:
        server.stop()


def problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert "Traceback" not in response.text
    return response.json()


def test_json_array_creates_builds_and_answers_their_ids_in_order(service):
    response = service.post([write_record("json:1"), write_record("json:2", build_status="running")])
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["created"], body["updated"], body["unchanged"]) == (2, 0, 0)
    first, second = body["build_ids"]
    assert service.get(f"/builds/{first}").json()["build_status"] == "built"
    assert service.get(f"/builds/{second}").json()["build_status"] == "running"


def test_json_lines_and_gzip_are_accepted(service):
    lines = b"".join(json.dumps(write_record(f"lines:{i}")).encode() + b"\n\n" for i in range(3))
    plain = service.post(lines, kind="application/x-ndjson")
    assert plain.json()["created"] == 3
    zipped = service.post(gzip.compress(lines), kind=NDJSON + "; charset=utf-8", **{"Content-Encoding": "gzip"})
    assert zipped.status_code == 200, zipped.text
    assert (zipped.json()["unchanged"], zipped.json()["build_ids"]) == (3, plain.json()["build_ids"])


def test_running_then_built_completes_the_build(service):
    started = service.post([write_record("runner-3:8f14", build_status="running")]).json()
    finished = service.post([write_record("runner-3:8f14", build_status="built", duration_seconds=42.5)]).json()
    assert finished["build_ids"] == started["build_ids"]
    assert finished["updated"] == 1
    build = service.get(f"/builds/{started['build_ids'][0]}").json()
    assert (build["build_status"], build["duration_seconds"]) == ("built", 42.5)
    late = service.post([write_record("runner-3:8f14", build_status="running")]).json()
    assert late["unchanged"] == 1
    assert service.get(f"/builds/{started['build_ids'][0]}").json()["build_status"] == "built"


def test_other_media_types_and_encodings_are_415(service):
    assert "application/x-ndjson" in problem(service.post([], kind="text/plain"), 415)["detail"]
    problem(service.client.post("/builds", content=b"[]", headers=auth(service.writer)), 415)
    problem(service.post([], **{"Content-Encoding": "br"}), 415)


def test_a_body_over_the_limit_is_413(service):
    filler = "x" * (MAX_BODY + 1)
    problem(service.post([write_record("big", status_message=filler)]), 413)


def test_a_gzip_body_inflating_past_the_limit_is_413(service):
    bomb = gzip.compress(b"[" + b" " * (MAX_BODY * 8) + b"]")
    assert len(bomb) < MAX_BODY
    problem(service.post(bomb, **{"Content-Encoding": "gzip"}), 413)


def test_a_body_sent_in_chunks_without_length_is_bounded_too(service):
    def chunks() -> Iterator[bytes]:
        yield b"["
        for _ in range(MAX_BODY // 1000 + 2):
            yield b" " * 1000
        yield b"]"

    response = service.client.post(
        "/builds", content=chunks(), headers={**auth(service.writer), "Content-Type": "application/json"}
    )
    problem(response, 413)


def test_more_records_than_the_cap_is_400_naming_the_cap(service):
    body = problem(service.post([write_record(f"cap:{i}") for i in range(MAX_RECORDS + 1)]), 400)
    assert str(MAX_RECORDS) in body["detail"] and body["max_records"] == MAX_RECORDS
    assert service.post([write_record(f"cap:{i}") for i in range(MAX_RECORDS)]).status_code == 200


def test_invalid_records_are_each_named_and_nothing_is_written(service):
    good = write_record("invalid:ok")
    body = problem(
        service.post(
            [
                good,
                {**write_record("invalid:1"), "cpu_seconds": "many"},
                {**write_record("invalid:2"), "account": "globex"},
                write_record(),
                {**write_record("invalid:3"), "build_status": "running"},
                {**write_record("invalid:4"), "nope": 1},
                {k: v for k, v in write_record("invalid:5").items() if k != "create_time"},
                write_record("x" * 201),
            ]
        ),
        400,
    )
    fields = [(r["index"], r["field"]) for r in body["invalid_records"]]
    assert fields == [
        (1, "cpu_seconds"),
        (2, "account"),
        (3, "source_id"),
        (4, "duration_seconds"),
        (5, "nope"),
        (6, "create_time"),
        (7, "source_id"),
    ]
    assert all(r["reason"] for r in body["invalid_records"])
    assert body["invalid_record_count"] == 7
    again = service.post([good]).json()
    assert again["created"] == 1, "the valid record of a refused request was not written"


def test_the_list_of_invalid_records_is_bounded(service):
    bad = [{"source_id": f"bad:{i}"} for i in range(MAX_RECORDS)]
    body = problem(service.post(bad), 400)
    assert len(body["invalid_records"]) == MAX_REPORTED_RECORDS
    assert body["invalid_record_count"] == MAX_RECORDS


@pytest.mark.parametrize("body", [b"{", b'{"a": 1}', b"[1, 2", b"", b"[]"])
def test_a_body_that_is_not_an_array_of_records_is_400(service, body):
    problem(service.post(body), 400)


def test_a_bad_gzip_body_is_400(service):
    problem(service.post(b"not gzip at all", **{"Content-Encoding": "gzip"}), 400)
    problem(service.post(gzip.compress(b"[]")[:-6], **{"Content-Encoding": "gzip"}), 400)


def test_a_read_token_cannot_write_and_a_write_token_cannot_read(service):
    refused = service.post([write_record("scope:1")], token=service.reader)
    assert 'error="insufficient_scope"' in refused.headers["www-authenticate"]
    assert "build:write" in problem(refused, 403)["detail"]
    for path in ("/builds", "/builds/summary", "/builds/1", "/builds/1/url", "/usage"):
        assert problem(service.get(path, token=service.writer), 403)["detail"].endswith("build:read scope")
    both = service.post([write_record("scope:2")], token=service.both)
    assert service.get(f"/builds/{both.json()['build_ids'][0]}", token=service.both).status_code == 200


def test_writes_need_a_token(service):
    response = service.client.post("/builds", content=b"[]", headers={"Content-Type": "application/json"})
    problem(response, 401)


def test_a_write_token_cannot_touch_another_accounts_builds(service):
    theirs = service.post([write_record("iso:1", cpu_seconds=1)], token=service.other_writer).json()["build_ids"][0]
    by_id = problem(service.post([write_record(build_id=theirs, cpu_seconds=999)]), 409)
    assert by_id["invalid_records"][0]["field"] == "build_id"
    mine = service.post([write_record("iso:1", cpu_seconds=2)]).json()
    assert mine["created"] == 1 and mine["build_ids"] != [theirs]
    kept = service.get(f"/builds/{theirs}", token=service.other_reader).json()
    assert kept["cpu_seconds"] == 1
    assert service.get(f"/builds/{theirs}").status_code == 404


def test_write_answers_carry_request_id_and_rate_limit_headers(service):
    response = service.post([write_record("headers:1")], **{"X-Request-ID": "push-7"})
    assert response.headers["x-request-id"] == "push-7"
    assert int(response.headers["ratelimit-remaining"]) >= 0
    assert response.headers["cache-control"] == "no-store"


# --- inflating in bounded steps ------------------------------------------------------------------


def test_inflate_returns_the_body_within_the_limit():
    data = b"[" + b"0," * 50_000 + b"0]"
    assert inflate(gzip.compress(data), len(data)) == data


def test_inflate_stops_at_the_limit_without_inflating_everything():
    with pytest.raises(Problem) as caught:
        inflate(gzip.compress(b"\0" * 50_000_000), 1000)
    assert caught.value.status_code == 413


def test_inflate_refuses_a_raw_deflate_stream():
    with pytest.raises(Problem) as caught:
        inflate(zlib.compress(b"[]"), 1000)
    assert caught.value.status_code == 400


def test_reads_go_on_during_a_write_and_never_see_half_of_it(tmp_path, serve):
    env = Env(tmp_path)
    env.load([])
    server = serve(env.db)
    writer_token, reader_token = env.token("acme", ("build:write",)), env.token("acme", ("build:read",))
    count = 5000
    records = [write_record(f"atomic:{i}", log="x" * 200) for i in range(count)]
    body = json.dumps(records).encode()
    answer: dict[str, Any] = {}

    def send() -> None:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            headers = {**auth(writer_token), "Content-Type": JSON}
            answer["response"] = client.post("/builds", content=body, headers=headers)

    seen: set[int] = set()
    reads = 0
    with httpx.Client(base_url=server.url, headers=auth(reader_token), timeout=30) as reader:
        summary = "/builds/summary?create_time_from=2000-01-01"
        writer = threading.Thread(target=send)
        writer.start()
        while writer.is_alive():
            seen.add(reader.get(summary).json()["build_count"])
            reads += 1
        writer.join()
        seen.add(reader.get(summary).json()["build_count"])
    assert answer["response"].status_code == 200, answer["response"].text
    assert seen == {0, count}, "a reader saw part of a request, or never saw it whole"
    assert reads >= 2, reads


def test_a_record_whose_ids_contradict_each_other_is_a_409_and_nothing_is_written(service):
    before = service.get("/builds/summary").json()["build_count"]
    body = problem(service.post([
        write_record("self:ok"),
        write_record("self:1", restart_of_source_id="self:1"),
        write_record("self:2", restart_of_build_id=4, restarted_as_build_id=4),
    ]), 409)
    assert [(r["index"], r["field"]) for r in body["invalid_records"]] == [
        (1, "restart_of_source_id"), (2, "restarted_as_build_id")]
    assert service.get("/builds/summary").json()["build_count"] == before


def test_whole_numbers_written_with_a_fraction_are_taken_as_integers(service):
    record = {**write_record("whole:1"), "cpu_seconds": 42.0, "cpu_count": 2.0}
    answer = service.post([record])
    assert answer.status_code == 200, answer.text
    build = service.get(f"/builds/{answer.json()['build_ids'][0]}").json()
    assert (build["cpu_seconds"], build["cpu_count"]) == (42, 2)
    problem(service.post([{**write_record("whole:2"), "cpu_seconds": 42.5}]), 400)


# --- input a decoder takes but a record must not hold ----------------------------------------------

DEEP = b"[" * 10_000 + b"]" * 10_000


@pytest.mark.parametrize("gzipped", [False, True])
@pytest.mark.parametrize(
    "body, kind",
    [
        (DEEP, JSON),
        (b"[" + DEEP + b"]", JSON),
        (b'[{"tags": {"a": ' + DEEP + b"}}]", JSON),
        (DEEP + b"\n", NDJSON),
        (b'{"tags": {"a": ' + DEEP + b"}}\n", NDJSON),
        (b'{"build_id": 1.5, "tags": {"a": ' + DEEP + b"}}\n", NDJSON),  # decoded again as plain data
    ],
)
def test_deeply_nested_json_is_a_400_naming_the_nesting(service, body, kind, gzipped):
    headers = {"Content-Encoding": "gzip"} if gzipped else {}
    answer = problem(service.post(gzip.compress(body) if gzipped else body, kind=kind, **headers), 400)
    assert "nested more than 32 deep" in json.dumps(answer)


def test_a_key_given_twice_in_one_object_is_a_400_naming_it(service):
    record = json.dumps(write_record("twice:1"))
    top = record[:-1] + ', "build_status": "timeout"}'
    nested = record.replace('"tags": {}', '"tags": {"team": "a", "team": "b"}')
    assert nested != record
    escaped = record[:-1] + ', "build\\u005fstatus": "timeout"}'  # the same key, written another way
    answer = problem(service.post(f"[{top}, {nested}, {escaped}]".encode()), 400)
    assert [(r["index"], r["reason"]) for r in answer["invalid_records"]] == [
        (0, 'the key "build_status" appears twice in one object; each key may appear once'),
        (1, 'the key "team" appears twice in one object; each key may appear once'),
        (2, 'the key "build_status" appears twice in one object; each key may appear once'),
    ]
    colons = json.loads(record)
    colons["tags"] = {"a:b": "c:d", "a\u003ab2": "x"}
    assert service.post([colons]).status_code == 200  # colons inside keys and values are no repeated key


def test_a_build_that_starts_before_it_was_created_is_a_400(service):
    early = write_record("early:1", create_time="2026-11-21T07:33:16+01:00", start_time="2026-11-21T06:33:15Z")
    answer = problem(service.post([early]), 400)
    assert answer["invalid_records"][0]["field"] == "start_time"
    assert answer["invalid_records"][0]["reason"].startswith("is before create_time")
    same = write_record("early:2", create_time="2026-11-21T07:33:16+01:00", start_time="2026-11-21T06:33:16Z")
    assert service.post([same]).status_code == 200


def test_a_gzip_body_with_data_after_its_compressed_stream_is_a_400(service):
    body = gzip.compress(json.dumps([write_record("trailing:1")]).encode())
    answer = problem(service.post(body + b"junk", **{"Content-Encoding": "gzip"}), 400)
    assert "4 bytes of trailing data" in answer["detail"]
    lines = json.dumps(write_record("members:1")).encode() + b"\n"
    two = gzip.compress(lines) + gzip.compress(json.dumps(write_record("members:2")).encode())
    assert service.post(two, kind=NDJSON, **{"Content-Encoding": "gzip"}).json()["created"] == 2  # members may follow


def test_links_to_free_ids_neither_block_nor_name_another_accounts_builds(service):
    mine = service.post([write_record("links:0")]).json()["build_ids"][0]
    dangling = [write_record(f"links:g{i}", restart_of_build_id=mine + 50 + i) for i in range(1, 51)]
    refused = problem(service.post(dangling, token=service.other_writer), 409)
    assert refused["invalid_record_count"] == 50
    taken = problem(service.post([write_record("links:g0", restart_of_build_id=mine)], token=service.other_writer),
                    409)
    free = problem(service.post([write_record("links:g0", restart_of_build_id=mine + 10_000)],
                                token=service.other_writer), 409)
    assert taken["invalid_records"][0]["reason"] == free["invalid_records"][0]["reason"].replace(
        str(mine + 10_000), str(mine))  # an id of another account answers as a free one does
    created = service.post([write_record(f"links:a{i}") for i in range(100)]).json()
    assert created["created"] == 100
