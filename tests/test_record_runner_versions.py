"""The runner between Nix versions: a client of one Debian Nix (2.8, 2.26, 2.34) building over ssh-ng:// on a
runner whose nix-daemon is another (or the same), each with the protocol version they negotiate."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from nix_runner import Runner, require_tools
from nixversions import NixVersion, prepare

PAIRS = [("2.8", "2.34"), ("2.34", "2.8"), ("2.26", "2.34"), ("2.34", "2.26"), ("2.26", "2.26"), ("2.34", "2.34")]
PROTOCOL = {"2.8": 34, "2.26": 38, "2.34": 38}


def path_on(version: NixVersion, conf: Path, paths: list[str]) -> dict[str, dict[str, Any]]:
    """`nix path-info` of the daemon's store, in the shape of each version, by path."""
    argv = ["nix", "path-info", "--json", *(["--json-format", "1"] if version.at_least(2, 34) else []), *paths]
    done = version.run(argv, env={**version.env(), "NIX_CONF_DIR": str(conf)}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    infos = json.loads(done.stdout)
    return {i["path"]: i for i in infos} if isinstance(infos, list) else {k: {"path": k, **v} for k, v in infos.items()}


@pytest.fixture(params=PAIRS, ids=[f"client-{c}-daemon-{d}" for c, d in PAIRS])
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> Any:
    require_tools()
    client, daemon = (prepare(name, tmp_path_factory) for name in request.param)
    daemon_program = str(daemon.bin_dir / "nix-daemon") if daemon.bin_dir else "nix-daemon"
    runner_env = {"PATH": f"{daemon.bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"} if daemon.bin_dir else {}
    runner = Runner(
        tmp_path / "runner", ["--nix-daemon", daemon_program, "--no-cgroup"], {"project": "web"}, runner_env=runner_env
    )
    (runner.runner_conf / "nix.conf").write_text(daemon.nix_conf)
    (runner.client_conf / "nix.conf").write_text(client.nix_conf)
    runner.start()
    try:
        yield client, daemon, runner
    finally:
        runner.stop()


def run_client(client: NixVersion, runner: Runner, attr: str, nonce: str) -> Any:
    env = {**client.env(runner.client_env()), "NIX_CONF_DIR": str(runner.client_conf)}
    return client.run(runner.build_argv(attr, nonce), env=env, capture_output=True, text=True, timeout=180)


def drv_of(client: NixVersion, runner: Runner, attr: str, nonce: str) -> str:
    argv = ["nix-instantiate", "--store", str(runner.root / "client-store"), str(runner.root / "drv.nix"), "-A", attr]
    env = {**client.env(), "NIX_CONF_DIR": str(runner.client_conf)}
    done = client.run([*argv, "--argstr", "nonce", nonce], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_builds_between_nix_versions_are_recorded_as_each_daemon_answered(pair: Any) -> None:
    client, daemon, runner = pair
    nonce = str(time.time_ns())
    ok_drv, fail_drv = drv_of(client, runner, "ok", nonce), drv_of(client, runner, "fail", nonce)
    ok = run_client(client, runner, "ok", nonce)
    assert ok.returncode == 0, ok.stderr
    failed = run_client(client, runner, "fail", nonce)
    assert failed.returncode != 0
    built = runner.wait_final(ok_drv)[-1]
    assert built["build_status"] == "built" and built["log"] == "building\nto-stderr\n"
    assert built["tags"] == {"project": "web", "drvtag": "yes", "team": "builders"}
    [output] = built["outputs"]
    info = path_on(daemon, runner.runner_conf, [output["path"]])[output["path"]]
    assert (output["nar_hash"], output["nar_size_bytes"]) == (info["narHash"], info["narSize"])
    assert ok.stdout.strip() == output["path"]  # the client got the path the runner recorded
    fail = runner.wait_final(fail_drv)[-1]
    assert fail["build_status"] == "build_failed" and fail["log"] == "about to fail\n" and fail["outputs"] == []
    minor = min(PROTOCOL[client.name], PROTOCOL[daemon.name])
    log = runner.runner_log()
    assert f"negotiated protocol 1.{minor}, client 1.{PROTOCOL[client.name]}, daemon 1.{PROTOCOL[daemon.name]}" in log
    assert f"daemon Nix {daemon.version}" in log
    assert "recording off" not in log
