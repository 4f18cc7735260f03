"""Value ranges of a build: import refuses what is out of range, line by line; values at the edges are served."""

from __future__ import annotations

import json

import httpx
import msgspec
import pytest
from click.testing import CliRunner
from conftest import auth, query, record, write_jsonl

from buildreport.cli.main import main
from buildreport.models import (
    MAX_CPU_SECONDS,
    MAX_DURATION_SECONDS,
    MAX_LOG_CHARACTERS,
    MAX_NAR_SIZE_BYTES,
    MAX_OUTPUTS,
    MAX_PATH_LENGTH,
    MAX_SYSTEM_LENGTH,
    MAX_TAG_KEY_LENGTH,
    MAX_TAG_VALUE_LENGTH,
    MAX_TAGS,
    Build,
    ImportRecord,
)
from buildreport.store.totals import MAX_ACCOUNT_TOTAL

LATEST = "9899-12-31T23:59:59.999999Z"


def import_cli(db, *files):
    return CliRunner().invoke(main, ["import", "--db", str(db), *map(str, files)], catch_exceptions=False)


def count_builds(db) -> int:
    return query(db, "SELECT count(*) FROM builds")[0][0]


def output(size: int, name: str = "out") -> dict:
    return {"name": name, "path": f"/nix/store/{'b' * 32}-{name}", "nar_hash": "sha256-x", "nar_size_bytes": size}


BAD_FIELDS = {
    "cpu_seconds 2^64": ({"cpu_seconds": 2**64}, "cpu_seconds", "<="),
    "cpu_seconds past its range": ({"cpu_seconds": MAX_CPU_SECONDS + 1}, "cpu_seconds", "<="),
    "negative cpu_seconds": ({"cpu_seconds": -1}, "cpu_seconds", ">="),
    "duration 1e15": ({"duration_seconds": 1e15}, "duration_seconds", "<="),
    "duration 1e400": ({"duration_seconds": "1e400"}, "duration_seconds", "out of range"),
    "queue time past ten years": ({"queue_time_seconds": MAX_DURATION_SECONDS + 1}, "queue_time_seconds", "<="),
    "utilization 1e308": ({"average_cpu_utilization": 1e308}, "average_cpu_utilization", "<="),
    "cpu_count 0": ({"cpu_count": 0}, "cpu_count", ">="),
    "huge allocated memory": ({"allocated_megabytes": 2**63}, "allocated_megabytes", "<="),
    "huge peak memory": ({"peak_memory_use_kilobytes": 2**62}, "peak_memory_use_kilobytes", "<="),
    "huge NAR": ({"outputs": [output(MAX_NAR_SIZE_BYTES + 1)]}, "outputs[0].nar_size_bytes", "<="),
    "too many outputs": ({"outputs": [output(1, f"o{i}") for i in range(MAX_OUTPUTS + 1)]}, "outputs", "length"),
    "too many tags": ({"tags": {f"k{i}": "v" for i in range(MAX_TAGS + 1)}}, "tags", "length"),
    "empty tag key": ({"tags": {"": "v"}}, "tags", "length"),
    "long tag value": ({"tags": {"k": "v" * (MAX_TAG_VALUE_LENGTH + 1)}}, "tags[...]", "length"),
    "long derivation path": ({"derivation_path": "/" + "d" * MAX_PATH_LENGTH}, "derivation_path", "length"),
    "long system": ({"system": "x" * (MAX_SYSTEM_LENGTH + 1)}, "system", "length"),
    "NUL in system": ({"system": "x86_64\x00linux"}, "system", "regex"),
    "long status message": ({"status_message": "m" * 5000}, "status_message", "length"),
    "year 0001": ({"create_time": "0001-01-01T00:00:00+01:00"}, "create_time", "1970"),
    "before 1970": ({"start_time": "1969-12-31T23:59:59Z"}, "start_time", "1970"),
    "written past 9899": (
        {"create_time": "9900-01-01T00:00:00+01:00", "start_time": "9900-01-01T00:00:00+01:00"},
        "create_time",
        "9899",
    ),
    "1970-01-01 east of UTC": (
        {"create_time": "1970-01-01T05:00:00+01:00", "start_time": "1970-01-01T05:00:00+01:00"},
        "create_time",
        "east of UTC",
    ),
}


@pytest.mark.parametrize("name", list(BAD_FIELDS))
def test_out_of_range_values_are_reported_by_line_and_field(env, name):
    fields, field, reason = BAD_FIELDS[name]
    env.load([record(1)])
    lines = [json.dumps(record(2)), json.dumps(record(3, **fields)).replace('"1e400"', "1e400")]
    path = env.tmp / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = import_cli(env.db, path)
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    line = next(line for line in result.stderr.splitlines() if line.startswith(f"{path}:2: "))
    assert line.startswith(f"{path}:2: {field}: ") and reason in line, line
    assert count_builds(env.db) == 1


@pytest.mark.parametrize(
    "raw",
    [
        b'{"account": "acme", "build_id": 5, "system": "x86\xff\xfe"}',
        b'{"account": "acme\xc3", "build_id": 5}',
        b'{"build_id": NaN}',
        b'{"build_id": Infinity}',
        b"\xff\xfe{}",
    ],
    ids=["bad utf-8 in a string", "truncated utf-8", "NaN", "Infinity", "bom-like bytes"],
)
def test_undecodable_lines_are_reported_without_a_traceback(env, raw):
    env.load([record(1)])
    path = env.tmp / "bad.jsonl"
    path.write_bytes(json.dumps(record(2)).encode() + b"\n" + raw + b"\n")
    result = import_cli(env.db, path)
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert any(line.startswith(f"{path}:2: ") for line in result.stderr.splitlines()), result.stderr
    assert count_builds(env.db) == 1


def test_a_corrupt_gzip_file_is_reported_by_file(env):
    path = env.tmp / "broken.jsonl.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 20)
    result = import_cli(env.db, path)
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert f"{path}:1: (file): cannot be read" in result.stderr


def edge_record(build_id: int, **overrides):
    """A build at the top of every range."""
    fields = dict(
        create_time="9899-12-31T23:59:59Z",  # a build starts at or after its creation
        start_time="9899-12-31T23:59:59Z",
        duration_seconds=0.999999,
        queue_time_seconds=MAX_DURATION_SECONDS,
        cpu_seconds=MAX_CPU_SECONDS,
        cpu_count=2**16,
        allocated_megabytes=2**30,
        average_cpu_utilization=2.0**16,
        peak_memory_use_kilobytes=2**40,
        peak_storage_use_kilobytes=2**40,
        status_message="\x1b[31m<b>m</b>" * 100,
        outputs=[output(MAX_NAR_SIZE_BYTES, f"o{i}") for i in range(MAX_OUTPUTS)],
        tags={f"k{i}": "v" * MAX_TAG_VALUE_LENGTH for i in range(MAX_TAGS)},
        build_status="timeout",
    )
    fields.update(overrides)
    return record(build_id, **fields)


def test_values_at_the_edges_of_their_ranges_are_served(env):
    env.load([
        edge_record(1, log="x\n" * 10),
        edge_record(2, create_time="1970-01-01T00:00:00Z", start_time="1970-01-01T00:00:00Z",
                    duration_seconds=MAX_DURATION_SECONDS, build_status="built"),
        edge_record(3, build_status="running", duration_seconds=None),
    ])
    secret = env.token()
    with env.client() as client:
        for build_id in (1, 2, 3):
            assert client.get(f"/builds/{build_id}", headers=auth(secret)).status_code == 200
            link = client.get(f"/builds/{build_id}/url", headers=auth(secret)).json()["url"]
            page = client.get(link.removeprefix("http://testserver.local"))
            assert page.status_code == 200, page.text[:500]
        for path in ("/builds/summary?create_time_from=1970-01-01", "/usage?from=1970-01-01",
                     "/builds?create_time_from=1970-01-01&limit=1"):
            assert client.get(path, headers=auth(secret)).status_code == 200, path


def test_an_accounts_totals_are_kept_below_two_to_the_62(env):
    """2^62 / 2^50 = 4096 builds at the top of the NAR range; the import that would pass it is refused."""
    per_build = MAX_OUTPUTS * MAX_NAR_SIZE_BYTES
    builds = MAX_ACCOUNT_TOTAL // per_build
    outputs = [output(MAX_NAR_SIZE_BYTES, f"o{i}") for i in range(MAX_OUTPUTS)]
    path = write_jsonl(env.tmp / "big.jsonl", [record(i, outputs=outputs) for i in range(1, builds + 1)])
    result = import_cli(env.db, path)
    assert result.exit_code == 1
    assert f"{path}:{builds}: outputs: the account's total would reach 2^62" in result.stderr
    assert count_builds(env.db) == 0


def _widest(length: int, seed: int) -> str:
    """Text of `length` characters of four UTF-8 bytes each, in no order a compressor could shorten."""
    return "".join(chr(0x1F300 + (seed * 7919 + i * 104729) % 0x900) for i in range(length))


def test_the_widest_text_of_every_indexed_field_is_written_on_either_engine(env, serve):
    """A store path and a system, and a tag's key and value, as long as their ranges allow in four-byte characters:
    each engine takes them by import and over HTTP, so that neither refuses a build the other accepts."""
    wide = {
        "derivation_path": "/" + _widest(MAX_PATH_LENGTH - 1, 1),
        "system": _widest(MAX_SYSTEM_LENGTH, 2),
        "tags": {_widest(MAX_TAG_KEY_LENGTH, 3): _widest(MAX_TAG_VALUE_LENGTH, 4)},
    }
    env.load([record(1, **wide)])
    writer = env.token(scopes=("build:read", "build:write"))
    body = {k: v for k, v in record(2, **wide).items() if k not in ("account", "build_id")} | {"source_id": "w:2"}
    server = serve(env.db)
    written = httpx.post(server.url + "/builds", json=[body], headers=auth(writer), timeout=30)
    assert written.status_code == 200, written.text
    for build_id in (1, *written.json()["build_ids"]):
        read = httpx.get(f"{server.url}/builds/{build_id}", headers=auth(writer), timeout=30).json()
        assert {key: read[key] for key in wide} == wide


def test_ranges_appear_in_the_openapi_document(env):
    env.load([record(1)])
    with env.client() as client:
        schema = client.get("/docs/openapi.json").json()["components"]["schemas"]
    build = next(s for name, s in schema.items() if name.endswith("Build"))["properties"]
    assert build["cpu_seconds"]["maximum"] == MAX_CPU_SECONDS
    assert build["queue_time_seconds"]["maximum"] == MAX_DURATION_SECONDS


def test_the_import_record_bounds_the_log():
    hints = msgspec.inspect.type_info(ImportRecord)
    log = next(f for f in hints.fields if f.name == "log").type
    lengths = [getattr(getattr(t, "type", t), "max_length", None) for t in log.types]
    assert MAX_LOG_CHARACTERS in lengths
    assert set(Build.__struct_fields__) < {f.name for f in hints.fields}
