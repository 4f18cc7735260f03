"""nix/module.nix and flake.nix, evaluated by this machine's Nix with nixpkgs' lib and stand-ins for NixOS's options;
the server unit the README's example describes is then run here and answers."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import free_port
from test_http_sdnotify import receive

from buildreport.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
EVAL = ROOT / "tests" / "nix" / "eval-module.nix"
FAKE_PROGRAM = "/fake-package/bin/buildreport"
VENV_BUILDREPORT = Path(sys.executable).parent / "buildreport"
STATE_DIR = "/var/lib/buildreport"


def required(what: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is missing")
    pytest.skip(f"{what} is missing")


def nixpkgs_lib() -> str:
    """nixpkgs' lib/: NIXPKGS_LIB, else the copy kept beside the checkout (../shared/nixpkgs-lib), else
    <nixpkgs/lib> from NIX_PATH."""
    if os.environ.get("NIXPKGS_LIB"):
        return os.environ["NIXPKGS_LIB"]
    for folder in (ROOT.parent / "shared", ROOT.parent.parent / "shared"):
        if (folder / "nixpkgs-lib" / "lib" / "default.nix").exists():
            return str(folder / "nixpkgs-lib" / "lib")
    return "<nixpkgs/lib>"


@pytest.fixture
def nix_eval(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Evaluate a Nix expression (with `lib` in scope) to JSON, read-only, with Nix's state in tmp_path."""
    program = shutil.which("nix-instantiate")
    if program is None:
        required("nix-instantiate (apt-get install nix-bin)")
    home = tmp_path / "nix-home"
    env = {
        "PATH": os.environ.get("PATH", ""), "HOME": str(home), "NIX_STATE_DIR": str(home / "state"),
        "NIX_STORE_DIR": str(home / "store"), "NIX_LOG_DIR": str(home / "log"), "NIX_CONF_DIR": str(home / "conf"),
        "NIX_PATH": os.environ.get("NIX_PATH", ""),
    }

    def evaluate(expression: str) -> Any:
        text = f"let lib = import {nixpkgs_lib()}; in {expression}"
        result = subprocess.run([program, "--eval", "--strict", "--json", "--readonly-mode", "-E", text],
                                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        if result.returncode != 0 and "nixpkgs/lib" in result.stderr and "not found" in result.stderr:
            required("nixpkgs' lib (set NIXPKGS_LIB)")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    return evaluate


@pytest.fixture
def module(nix_eval, tmp_path: Path):  # type: ignore[no-untyped-def]
    """The module evaluated with the option values of a Nix module given as text."""
    count = 0

    def evaluate(settings: str) -> dict[str, Any]:
        nonlocal count
        count += 1
        path = tmp_path / f"settings-{count}.nix"
        path.write_text(settings)
        return nix_eval(f"import {EVAL} {{ inherit lib; settings = {path}; }}")

    return evaluate


def readme_block(starting: str, language: str = "nix") -> str:
    """The README's code block in `language` whose first line is `starting`."""
    blocks = re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.S)
    (block,) = [b for b in blocks if b.splitlines()[0].strip() == starting]
    return block


def readme_command() -> str:
    """The command line the README says the example's service runs."""
    (line,) = [b for b in re.findall(r"```sh\n(.*?)```", README.read_text(), flags=re.S)
               if b.startswith("/nix/store/…-buildreport-")]
    return line.strip()


def test_the_readme_example_runs_the_command_line_the_readme_shows(module):
    unit = module(readme_block("# configuration.nix"))
    assert unit["failedAssertions"] == []
    exec_start = unit["services"]["buildreport"]["serviceConfig"]["ExecStart"]
    assert exec_start.replace(FAKE_PROGRAM, "/nix/store/…-buildreport-0.1.0/bin/buildreport") == readme_command()


def test_every_server_option_is_mapped_to_its_flag_and_credential(module):
    unit = module("""{
      services.buildreport = {
        enable = true; host = "0.0.0.0"; port = 8443; publicUrl = "https://builds.example.com/api";
        secretKeyFile = "/run/secrets/key"; tls.certFile = "/etc/ssl/builds.pem"; tls.keyFile = "/run/secrets/tls";
        workers = 3; retention = "30d"; extraArgs = [ "--rate-limit" "0" ]; openFirewall = true;
        databaseUrlFile = "/run/secrets/db-url";
      };
    }""")
    assert unit["failedAssertions"] == []
    config = unit["services"]["buildreport"]["serviceConfig"]
    assert shlex.split(config["ExecStart"]) == [
        FAKE_PROGRAM, "serve", "--create", "--db-file", "%d/database-url", "--host", "0.0.0.0", "--port", "8443",
        "--public-url", "https://builds.example.com/api", "--workers", "3", "--secret-key-file", "%d/secret-key",
        "--tls-cert", "%d/tls-cert", "--tls-key", "%d/tls-key", "--retention", "30d", "--rate-limit", "0",
    ]
    assert config["LoadCredential"] == [
        "database-url:/run/secrets/db-url", "secret-key:/run/secrets/key", "tls-cert:/etc/ssl/builds.pem",
        "tls-key:/run/secrets/tls",
    ]
    assert unit["firewall"] == [8443]
    assert config["Type"] == "notify" and config["WatchdogSec"] == "30s"
    assert config["DynamicUser"] is True and config["StateDirectory"] == "buildreport"


def test_every_flag_the_server_unit_passes_is_one_serve_takes(module):
    unit = module("""{
      services.buildreport = {
        enable = true; publicUrl = "https://b.example.com"; secretKeyFile = "/run/k"; workers = 2;
        tls.certFile = "/run/c"; tls.keyFile = "/run/k2";
      };
    }""")
    serve = main.commands["serve"]
    known = {opt for param in serve.params for opt in param.opts}
    used = {a for a in shlex.split(unit["services"]["buildreport"]["serviceConfig"]["ExecStart"]) if a[:2] == "--"}
    assert used <= known


def test_the_hardening_is_the_same_on_every_service(module):
    unit = module("""{
      services.buildreport = {
        enable = true;
        runner = { enable = true; pushUrl = "https://b"; pushTokenFile = "/run/t"; };
        collector = { enable = true; pushUrl = "https://b"; pushTokenFile = "/run/t"; };
      };
    }""")
    names = set(unit["services"]) - {"nix-daemon"}
    assert names == {"buildreport", "buildreport-push", "buildreport-collect", "buildreport-collect-push"}
    for name in names:
        config = unit["services"][name]["serviceConfig"]
        assert config["CapabilityBoundingSet"] == "" and config["NoNewPrivileges"] is True, name
        assert config["ProtectSystem"] == "strict" and config["ProtectHome"] is True, name
        assert config["PrivateTmp"] is True and config["MemoryDenyWriteExecute"] is True, name
        assert config["SystemCallFilter"] == ["@system-service", "~@privileged", "~@resources"], name
        assert config["LockPersonality"] is True and config["RestrictNamespaces"] is True, name


@pytest.mark.parametrize("option", ["secretKeyFile", "databaseUrlFile", "tls.keyFile", "runner.pushTokenFile",
                                    "collector.pushTokenFile"])
@pytest.mark.parametrize("value", ['"/nix/store/00000000000000000000000000000000-secret"',
                                   '"${builtins.storeDir}/00000000000000000000000000000000-secret"',
                                   "./a-file-beside-the-configuration"])
def test_a_secret_in_the_nix_store_is_refused(module, option, value):
    extra = {"tls.keyFile": 'tls.certFile = "/run/c";', "runner.pushTokenFile": 'runner.pushUrl = "https://b";',
             "collector.pushTokenFile": 'collector.pushUrl = "https://b";'}.get(option, "")
    unit = module(f"{{ services.buildreport = {{ enable = true; {option} = {value}; {extra} }}; }}")
    assert [m for m in unit["failedAssertions"] if m.startswith(f"services.buildreport.{option} is in the Nix store")]


def test_a_secret_outside_the_store_is_accepted(module):
    unit = module('{ services.buildreport = { enable = true; secretKeyFile = "/run/secrets/nix-store-key"; }; }')
    assert unit["failedAssertions"] == []


def test_a_database_outside_the_state_directory_or_a_url_in_the_store_is_refused(module):
    for database in ("/srv/builds.db", "postgresql://builds:password@db/builds"):
        unit = module(f'{{ services.buildreport = {{ enable = true; database = "{database}"; }}; }}')
        assert any("through databaseUrlFile" in m for m in unit["failedAssertions"]), database


def test_the_runner_is_an_ssh_user_whose_keys_run_the_runner_only(module):
    unit = module("""{
      services.buildreport.runner = {
        enable = true; authorizedKeys = [ "ssh-ed25519 AAAAC3Nza ci@example.com" ]; timeout = 7200;
        spool = "/var/spool/br"; pushUrl = "https://builds.example.com"; pushTokenFile = "/run/secrets/push";
      };
    }""")
    assert unit["failedAssertions"] == []
    user = unit["users"]["buildreport-runner"]
    assert user["openssh"]["authorizedKeys"]["keys"] == [
        f'command="{FAKE_PROGRAM} runner --spool /var/spool/br --timeout 7200",restrict '
        "ssh-ed25519 AAAAC3Nza ci@example.com"
    ]
    assert user["isSystemUser"] is True and user["useDefaultShell"] is True
    assert unit["nixSettings"]["trusted-users"] == ["buildreport-runner"]
    assert "AcceptEnv SERVICE_TAG_*" in unit["sshExtraConfig"]
    assert unit["tmpfiles"] == ["d /var/spool/br 0700 buildreport-runner buildreport-runner -"]
    push = unit["services"]["buildreport-push"]["serviceConfig"]
    assert shlex.split(push["ExecStart"]) == [
        FAKE_PROGRAM, "push", "--follow", "--to", "https://builds.example.com", "--token-file", "%d/token",
        "/var/spool/br",
    ]
    assert push["LoadCredential"] == ["token:/run/secrets/push"] and push["ReadWritePaths"] == ["/var/spool/br"]
    assert "buildreport" not in unit["services"]  # the server is not enabled


def test_the_runner_command_is_one_the_runner_takes(module):
    unit = module('{ services.buildreport.runner = { enable = true; authorizedKeys = [ "k" ]; timeout = 60; }; }')
    (line,) = unit["users"]["buildreport-runner"]["openssh"]["authorizedKeys"]["keys"]
    argv = shlex.split(line.split('"')[1])
    runner = main.commands["runner"]
    known = {opt for param in runner.params for opt in param.opts}
    assert argv[1] == "runner" and {a for a in argv if a[:2] == "--"} <= known
    assert "buildreport-push" not in unit["services"]  # no push address: no pusher


def test_the_collector_listens_where_nix_writes_its_json_log(module):
    unit = module('{ services.buildreport.collector = { enable = true; socket = "/run/br/nix-log.sock"; }; }')
    assert unit["nixSettings"]["json-log-path"] == "/run/br/nix-log.sock"
    config = unit["services"]["buildreport-collect"]["serviceConfig"]
    assert shlex.split(config["ExecStart"]) == [
        FAKE_PROGRAM, "collect", "--socket", "/run/br/nix-log.sock", "--spool", "/var/spool/buildreport-collector",
    ]
    assert config["RuntimeDirectory"] == "br" and config["RestrictAddressFamilies"] == ["AF_UNIX"]
    assert unit["services"]["nix-daemon"]["wants"] == ["buildreport-collect.service"]
    assert unit["failedAssertions"] == []
    elsewhere = module('{ services.buildreport.collector = { enable = true; socket = "/var/lib/nix.sock"; }; }')
    assert any("collector.socket must be a file in a folder of /run" in m for m in elsewhere["failedAssertions"])


def test_the_flake_gives_the_module_and_a_package_of_the_projects_dependencies(nix_eval):
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {re.split(r"[\[<>=]", d)[0].lower() for d in pyproject["dependencies"]}
    names = sorted(wanted | {"setuptools", "uvloop", "httptools", "psycopg-pool"})
    stand_in = "{ " + " ".join(f'"{n}" = "{n}";' for n in names) + " buildPythonApplication = a: a; }"
    flake = nix_eval(f"""
      let
        flake = import {ROOT}/flake.nix;
        python3Packages = {stand_in};
        nixpkgs = {{
          inherit lib;
          legacyPackages = lib.genAttrs [ "x86_64-linux" "aarch64-linux" ] (_: {{
            callPackage = path: args: import path ({{ inherit lib python3Packages; }} // args);
          }});
        }};
        outputs = flake.outputs {{ self = outputs; inherit nixpkgs; }};
        package = outputs.packages.x86_64-linux.default;
      in {{
        module = toString outputs.nixosModules.default;
        inherit (package) pname version pyproject;
        dependencies = package.dependencies;
        program = package.meta.mainProgram;
      }}""")
    assert flake["module"] == str(ROOT / "nix" / "module.nix")
    assert (flake["pname"], flake["version"], flake["program"]) == ("buildreport", pyproject["version"], "buildreport")
    assert wanted <= set(flake["dependencies"]), wanted - set(flake["dependencies"])


def test_the_service_the_readme_example_describes_answers(module, tmp_path):
    """Its ExecStart run here: this checkout's program, a temporary state directory and credentials, a free port."""
    settings = readme_block("# configuration.nix")
    port = free_port()
    (tmp_path / "readme.nix").write_text(settings)
    unit = module(f"""{{ lib, ... }}: {{
      imports = [ ./readme.nix ];
      services.buildreport.port = lib.mkForce {port};
    }}""")
    config = unit["services"]["buildreport"]["serviceConfig"]
    state, credentials = tmp_path / "state", tmp_path / "credentials"
    state.mkdir()
    credentials.mkdir()
    for entry in config["LoadCredential"]:  # the files systemd would copy in, made here
        name, _, _source = entry.partition(":")
        assert name == "secret-key"
        (credentials / name).write_text("a-signing-key-for-the-nixos-module-test-" + "Qz81" * 4 + "\n")
    argv = [a.replace("%d", str(credentials)).replace(STATE_DIR, str(state)) for a in shlex.split(config["ExecStart"])]
    assert argv[0] == FAKE_PROGRAM
    argv[0] = str(VENV_BUILDREPORT)
    notify_path = tmp_path / "notify"
    env = {**os.environ, "NOTIFY_SOCKET": str(notify_path), "WATCHDOG_USEC": "1000000"}
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(str(notify_path))
        process = subprocess.Popen(argv, env=env, cwd=state, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        try:
            receive(notify, "READY=1", timeout=60)
            health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
            assert health.status_code == 200 and health.json() == {"status": "ok"}
            receive(notify, "WATCHDOG=1")
            assert (state / "buildreport.db").exists()
            assert not (state / "buildreport.db.secret").exists()  # the credential signs
        finally:
            process.terminate()
            deadline = time.monotonic() + 15
            while process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if process.poll() is None:
                process.kill()
            process.wait(timeout=5)


def unit_file(service: dict[str, Any]) -> str:
    """A unit file as NixOS writes one from systemd.services.NAME: a list gives one line per item."""

    def lines(section: str, settings: dict[str, Any]) -> list[str]:
        out = [f"[{section}]"]
        for key, value in settings.items():
            for item in value if isinstance(value, list) else [value]:
                out.append(f"{key}={str(item).lower() if isinstance(item, bool) else item}")
        return out

    unit = {"Description": service["description"]}
    unit |= {key.capitalize(): " ".join(service[key]) for key in ("after", "wants", "before") if key in service}
    config = {k: v.replace(FAKE_PROGRAM, str(VENV_BUILDREPORT)) if k == "ExecStart" else v
              for k, v in service["serviceConfig"].items()}
    install = {"WantedBy": " ".join(service.get("wantedBy", []))}
    return "\n".join([*lines("Unit", unit), *lines("Service", config), *lines("Install", install)]) + "\n"


def test_the_modules_units_pass_systemd_analyze_verify_and_security(module, tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        required("systemd-analyze (apt-get install systemd)")
    unit = module("""{
      services.buildreport = {
        enable = true; secretKeyFile = "/run/secrets/key"; databaseUrlFile = "/run/secrets/db";
        runner = { enable = true; pushUrl = "https://b"; pushTokenFile = "/run/t"; };
        collector = { enable = true; pushUrl = "https://b"; pushTokenFile = "/run/t"; };
      };
    }""")
    units = tmp_path / "units"
    units.mkdir()
    names = sorted(f"{n}.service" for n in unit["services"] if n != "nix-daemon")
    for name in names:
        (units / name).write_text(unit_file(unit["services"][name.removesuffix(".service")]))
    verify = subprocess.run([analyze, "verify", "--man=no", *names], cwd=units, capture_output=True, text=True,
                            timeout=120)
    assert verify.returncode == 0 and verify.stdout + verify.stderr == "", verify.stdout + verify.stderr
    for name in names:
        security = subprocess.run([analyze, "security", "--offline=true", "--threshold=20", "--no-pager", name],
                                  cwd=units, capture_output=True, text=True, timeout=120)
        assert security.returncode == 0, (name, security.stdout[-300:], security.stderr)
