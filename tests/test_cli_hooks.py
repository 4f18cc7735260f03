"""`buildreport hook …`: add prints an id and a secret once; list, test, deliveries, redeliver and remove."""

from __future__ import annotations

import base64
import re

import pytest
from click.testing import CliRunner
from conftest import Env
from receiver import Receiver

from buildreport.cli.main import main


def run(env: Env, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["hook", *args, "--db", str(env.db)])
    return result.exit_code, result.stdout, result.stderr


def test_add_prints_the_id_and_a_secret_once_and_list_never_shows_it(env: Env) -> None:
    code, out, _ = run(env, "add", "--account", "acme", "--url", "https://example.test/hook", "--event",
                       "build.failed", "--event", "build.recovered", "--tags", "project:web", "--format", "slack")
    assert code == 0
    hook_id, secret = out.splitlines()
    assert re.fullmatch(r"hook_[0-9a-f]{16}", hook_id)
    assert secret.startswith("whsec_") and 24 <= len(base64.b64decode(secret.removeprefix("whsec_"))) <= 64
    code, listed, _ = run(env, "list")
    assert code == 0 and hook_id in listed and secret.removeprefix("whsec_") not in listed
    assert "build.failed,build.recovered" in listed and "project:web" in listed and "slack" in listed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--url", "ftp://example.test/x"), "is not an http:// or https:// address"),
        (("--url", "https://"), "is not an http:// or https:// address"),
        (("--url", "https://example.test/x", "--tags", "novalue"), "is not KEY:VALUE"),
        (("--url", "https://example.test/x", "--event", "build.exploded"), "build.exploded"),
    ],
)
def test_add_refuses_bad_input_in_one_line(env: Env, args: tuple[str, ...], message: str) -> None:
    code, out, err = run(env, "add", "--account", "acme", *args)
    assert code == 2 and out == "" and message in err and "Traceback" not in err


def test_test_sends_a_signed_message_and_remove_takes_the_hook_away(env: Env) -> None:
    with Receiver() as receiver:
        _, out, _ = run(env, "add", "--account", "acme", "--url", receiver.url)
        hook_id, receiver.secret = out.split()
        code, said, _ = run(env, "test", hook_id)
        (got,) = receiver.wait_for(1)
    assert code == 0 and said.startswith("HTTP 200")
    assert got.verified and got.json["type"] == "hook.test"
    assert run(env, "remove", hook_id)[0] == 0
    assert hook_id not in run(env, "list")[1]
    code, _, err = run(env, "remove", hook_id)
    assert code == 1 and f"no hook {hook_id}" in err


def test_test_reports_a_receiver_that_refuses(env: Env) -> None:
    with Receiver(answer=lambda n: 500) as receiver:
        _, out, _ = run(env, "add", "--account", "acme", "--url", receiver.url)
        code, _, err = run(env, "test", out.split()[0])
    assert code == 1 and "answered HTTP 500" in err


def test_unknown_hooks_and_deliveries_are_one_clear_line(env: Env) -> None:
    for args in (("deliveries", "hook_nope"), ("test", "hook_nope"), ("redeliver", "999")):
        code, _, err = run(env, *args)
        assert code == 1 and "no " in err and len(err.strip().splitlines()) == 1
