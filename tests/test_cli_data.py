"""`buildreport import` and `sample`: import errors and closing lines; the sample command's defaults."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from conftest import query, record, write_jsonl

from buildreport.cli.main import main


def run(*args: str, expect: int = 0):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == expect, (result.stdout, result.stderr)
    return result


def test_import_reports_every_bad_record_and_exits_non_zero(env, tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [record(1), {**record(2), "cpu_count": "four"}, {"build_id": 3}])
    result = run("import", "--db", str(env.db), str(path), expect=1)
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"{path}:2: cpu_count: expected `int`, got `str`")
    assert lines[1].startswith(f"{path}:3: ")
    assert "nothing was imported" in result.stderr
    assert query(env.db, "SELECT count(*) FROM builds") == [(0,)]


def test_import_closing_line_counts_builds(env, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [record(1), record(2)])
    assert (
        "imported 2 builds from 1 file (2 new, 0 updated, 0 unchanged)"
        in run("import", "--db", str(env.db), str(path)).stderr
    )
    assert "(0 new, 0 updated, 2 unchanged)" in run("import", "--db", str(env.db), str(path)).stderr


def test_import_of_a_missing_file_fails_clearly(env, tmp_path):
    result = run("import", "--db", str(env.db), str(tmp_path / "nope.jsonl"), expect=2)
    assert "does not exist" in result.stderr


def test_sample_command_with_its_defaults_reproduces_the_committed_sample(tmp_path):
    from buildreport.sample import SAMPLE_PATH

    out = tmp_path / "builds.jsonl.gz"
    run("sample", "-o", str(out))
    committed = Path(__file__).resolve().parent.parent / SAMPLE_PATH
    assert out.read_bytes() == committed.read_bytes()


def test_import_of_deeply_nested_lines_names_them_and_exits_non_zero(env, tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps(record(1)) + "\n" + "[" * 10_000 + "]" * 10_000 + "\n")
    result = run("import", "--db", str(env.db), str(path), expect=1)
    assert result.stderr.splitlines()[0] == f"{path}:2: (record): arrays and objects are nested more than 32 deep;" \
        " no build record is"
    assert "Traceback" not in result.stderr
    assert query(env.db, "SELECT count(*) FROM builds") == [(0,)]
