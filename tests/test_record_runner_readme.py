"""The README's walk-through of a client and a runner on one machine, run with the commands as printed
(paths moved into the test's folder, sshd on a test port, host keys kept there rather than in ~/.ssh)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nix_runner import Runner, require_tools

README = Path(__file__).resolve().parent.parent / "README.md"


def walk_through() -> str:
    text = README.read_text()
    at = text.index("**Client and runner on one machine**")
    match = re.search(r"```sh\n(.*?)```", text[at:], re.S)
    assert match, "the walk-through's commands are missing from the README"
    return match.group(1)


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Runner]:
    require_tools()
    runner = Runner(tmp_path / "runner", ["--no-cgroup"])
    runner.start()
    try:
        yield runner
    finally:
        runner.stop()


def test_the_one_machine_walk_through_builds_and_records_as_printed(runner: Runner, tmp_path: Path) -> None:
    here = tmp_path / "home"
    here.mkdir()
    script = walk_through().replace("/root/", f"{here}/")
    script = script.replace(
        "  HostName 127.0.0.1\n",
        f"  HostName 127.0.0.1\n  Port {runner.port}\n  UserKnownHostsFile {here}/known_hosts\n",
    )
    nonce = str(time.time_ns())
    script = script.replace("release.nix", f"{runner.root}/drv.nix -A ok --argstr nonce {nonce}")
    setup, build = script.split("NIX_SSHOPTS=", 1)
    subprocess.run(["sh", "-euc", setup], check=True, cwd=here)
    # The README's "as above": the new key's public half in authorized_keys, forced into the runner.
    keys = runner.root / "authorized_keys"
    forced = keys.read_text().splitlines()[0].rsplit(" ssh-ed25519 ", 1)[0]
    keys.write_text(keys.read_text() + f"{forced} {(here / 'runner_key.pub').read_text().strip()}\n")
    env = {**os.environ, "NIX_CONF_DIR": str(runner.client_conf)}
    done = subprocess.run(
        ["sh", "-euc", "NIX_SSHOPTS=" + build], env=env, capture_output=True, text=True, timeout=120, cwd=here
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.strip()
    assert out.startswith("/nix/store/") and out.endswith("-ok-test")
    assert (here / "client-store" / out.lstrip("/")).exists()  # the client's own store got the output
    [drv] = {r[0]["derivation_path"] for r in runner.records().values()}
    final = runner.wait_final(drv)[-1]
    assert final["build_status"] == "built" and final["tags"]["project"] == "web"
    assert [o["path"] for o in final["outputs"]] == [out]
