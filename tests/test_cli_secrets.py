"""Secrets read from files: `serve --secret-key-file` and `--db-file`, `push --token-file`."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

import click
import httpx
import pytest
from conftest import Env, buildreport_command, free_port
from test_transaction import write_record

from buildreport.cli.secrets import MAX_SECRET_FILE_BYTES, given_or_from_file, one_secret, secret_lines
from buildreport.record.spool import pending_files, write_spool_file

KEY_1, KEY_2 = "k1-" + "abcdefghij" * 5, "k2-" + "ABCDEFGHIJ" * 5


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*buildreport_command(), *args], capture_output=True, text=True, timeout=timeout)


def test_secret_lines_are_the_stripped_non_blank_lines(tmp_path):
    path = tmp_path / "keys"
    path.write_text(f"\n  {KEY_1}  \n\n{KEY_2}\n")
    assert secret_lines(str(path), "--secret-key-file") == (KEY_1, KEY_2)


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"", "is empty"), (b"\n \n", "is empty"), (b"\xff\xfe", "not UTF-8"),
     (b"x" * (MAX_SECRET_FILE_BYTES + 1), "larger than")],
)
def test_a_secret_file_that_holds_no_secret_is_refused(tmp_path, content, message):
    path = tmp_path / "secret"
    path.write_bytes(content)
    with pytest.raises(click.BadParameter, match=message):
        secret_lines(str(path), "--token-file")


def test_a_missing_secret_file_is_refused_by_name(tmp_path):
    with pytest.raises(click.BadParameter, match=r"cannot read .*missing"):
        secret_lines(str(tmp_path / "missing"), "--token-file")


def test_one_secret_refuses_a_file_of_several_lines(tmp_path):
    path = tmp_path / "token"
    path.write_text("a\nb\n")
    with pytest.raises(click.BadParameter, match="holds 2 lines"):
        one_secret(str(path), "--token-file")


def test_a_value_and_its_file_together_are_refused(tmp_path):
    path = tmp_path / "token"
    path.write_text("from-file\n")
    assert given_or_from_file(None, str(path), "--token", "--token-file") == "from-file"
    assert given_or_from_file("given", None, "--token", "--token-file") == "given"
    with pytest.raises(click.UsageError, match="not both"):
        given_or_from_file("given", str(path), "--token", "--token-file")


def test_serve_signs_with_the_keys_of_its_key_file_and_generates_none(tmp_path, serve):
    keys = tmp_path / "keys"
    keys.write_text(f"{KEY_1}\n{KEY_2}\n")
    db = tmp_path / "builds.db"
    server = serve(db, "--secret-key-file", str(keys))
    assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200
    assert not (tmp_path / "builds.db.secret").exists()


def test_serve_refuses_a_weak_key_from_its_key_file(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("short\n")
    result = run("serve", "--db", str(tmp_path / "builds.db"), "--secret-key-file", str(keys))
    assert result.returncode == 2
    assert "too weak" in result.stderr and "Traceback" not in result.stderr


def test_serve_refuses_a_key_and_a_key_file_together(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text(KEY_1)
    result = run("serve", "--db", str(tmp_path / "b.db"), "--secret-key", KEY_1, "--secret-key-file", str(keys))
    assert result.returncode == 2
    assert "--secret-key or --secret-key-file, not both" in result.stderr


def test_serve_reads_its_database_from_the_db_file(tmp_path):
    db = tmp_path / "named-in-a-file.db"
    db_file = tmp_path / "database-url"
    db_file.write_text(f"{db}\n")
    port = free_port()
    command = [*buildreport_command(), "serve", "--create", "--db-file", str(db_file), "--port", str(port),
               "--workers", "1"]
    process = subprocess.Popen(command, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and process.poll() is None:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            time.sleep(0.05)
        assert process.poll() is None
        assert db.exists()
        assert not (tmp_path / "buildreport.db").exists()  # the default, in the working folder, is not used
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_serve_refuses_a_db_and_a_db_file_together(tmp_path):
    db_file = tmp_path / "database-url"
    db_file.write_text("other.db\n")
    result = run("serve", "--db", str(tmp_path / "b.db"), "--db-file", str(db_file))
    assert result.returncode == 2
    assert "--db or --db-file, not both" in result.stderr


def test_serve_refuses_a_db_file_that_is_missing(tmp_path):
    result = run("serve", "--db-file", str(tmp_path / "missing"))
    assert result.returncode == 2
    assert "--db-file" in result.stderr and "Traceback" not in result.stderr


def test_push_reads_its_token_from_the_token_file(env: Env, tmp_path, serve):
    env.load([])
    server = serve(env.db)
    token_file = tmp_path / "token"
    token_file.write_text(env.token("acme", ("build:write",)) + "\n")
    spool = tmp_path / "spool"
    write_spool_file(spool, [json.dumps(write_record("file-token:1")).encode()])
    result = run("push", "--to", server.url, "--token-file", str(token_file), str(spool))
    assert result.returncode == 0, result.stderr
    assert "pushed 1 records" in result.stderr
    assert pending_files(spool) == []


def test_push_without_any_token_says_how_to_give_one(tmp_path):
    result = run("push", "--to", "http://127.0.0.1:9", str(tmp_path))
    assert result.returncode == 2
    assert "--token-file" in result.stderr and "Traceback" not in result.stderr


def test_push_refuses_a_token_file_that_is_not_a_token(tmp_path: Path):
    token_file = tmp_path / "token"
    token_file.write_text("secret\n")
    result = run("push", "--to", "http://127.0.0.1:9", "--token-file", str(token_file), str(tmp_path))
    assert result.returncode == 2
    assert "not a buildreport token" in result.stderr


def test_push_token_file_is_meant_over_a_token_in_the_environment(tmp_path: Path):
    token_file = tmp_path / "token"
    token_file.write_text("secret\n")  # not a token: the error shows which one was read
    result = subprocess.run(
        [*buildreport_command(), "push", "--to", "http://127.0.0.1:9", "--token-file", str(token_file), str(tmp_path)],
        capture_output=True, text=True, timeout=60, env={**os.environ, "BUILDREPORT_TOKEN": "brt_" + "A" * 43},
    )
    assert result.returncode == 2
    assert "not a buildreport token" in result.stderr


def test_push_refuses_a_token_and_a_token_file_on_the_command_line(tmp_path: Path):
    token_file = tmp_path / "token"
    token_file.write_text("brt_" + "A" * 43 + "\n")
    result = run("push", "--to", "http://127.0.0.1:9", "--token", "brt_" + "B" * 43, "--token-file", str(token_file),
                 str(tmp_path))
    assert result.returncode == 2
    assert "--token or --token-file, not both" in result.stderr
