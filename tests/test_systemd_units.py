"""The systemd units in packaging/systemd/: verified by systemd itself, hardened, and their commands run here."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import free_port
from test_http_sdnotify import receive

from buildreport.cli.main import main

UNITS = Path(__file__).resolve().parent.parent / "packaging" / "systemd"
INSTALLED = "/usr/local/bin/buildreport"
VENV_BUILDREPORT = Path(sys.executable).parent / "buildreport"
SERVICES = sorted(p.name for p in UNITS.glob("*.service"))
HARDENING = {
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "PrivateDevices": "yes",
    "CapabilityBoundingSet": "",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectKernelLogs": "yes",
    "ProtectControlGroups": "yes",
    "RestrictNamespaces": "yes",
    "RestrictSUIDSGID": "yes",
    "LockPersonality": "yes",
    "MemoryDenyWriteExecute": "yes",
    "SystemCallArchitectures": "native",
}


def tool(name: str) -> str:
    """The path of a systemd program; under CI=true a missing one fails, elsewhere the test is skipped."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is missing: apt-get install systemd"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def unit(name: str) -> dict[str, dict[str, list[str]]]:
    """A unit file's sections and their settings; a setting given several times keeps every value."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in (UNITS / name).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key, []).append(value)
    return sections


def command_line(name: str) -> list[str]:
    """The argv of a service's ExecStart, unwrapped from `sh -c 'exec …'`."""
    (line,) = unit(name)["Service"]["ExecStart"]
    argv = shlex.split(line)
    if Path(argv[0]).name == "sh" and argv[1] == "-c":
        argv = shlex.split(argv[2])
        argv = argv[1:] if argv[0] == "exec" else argv
    return argv


def test_every_unit_passes_systemd_analyze_verify(tmp_path):
    analyze = tool("systemd-analyze")
    assert VENV_BUILDREPORT.exists()
    names = [p.name for p in UNITS.iterdir() if p.suffix in (".service", ".timer")]
    assert {"buildreport.service", "buildreport-push.service", "buildreport-collect.service",
            "buildreport-backup.service", "buildreport-backup.timer"} <= set(names)
    assert installable_copies(tmp_path) == sorted(names)
    result = subprocess.run(
        [analyze, "verify", "--man=no", *sorted(names)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    # systemd only warns about an unknown or misspelled setting: any word from it is a failure.
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stdout + result.stderr


def installable_copies(folder: Path) -> list[str]:
    """Copies of every unit in `folder` naming this checkout's program (systemd checks that it exists)."""
    names = sorted(p.name for p in UNITS.iterdir() if p.suffix in (".service", ".timer"))
    for name in names:
        (folder / name).write_text((UNITS / name).read_text().replace(INSTALLED, str(VENV_BUILDREPORT)))
    return names


@pytest.mark.parametrize("name", SERVICES)
def test_every_service_is_rated_safe_or_ok_by_systemd_analyze_security(tmp_path, name):
    analyze = tool("systemd-analyze")
    installable_copies(tmp_path)
    # --threshold: a non-zero exit above 2.0 of 10, the top of systemd's "OK" (2.1 and above is "MEDIUM").
    result = subprocess.run([analyze, "security", "--offline=true", "--threshold=20", "--no-pager", name],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    rating = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr
    assert result.returncode == 0, rating
    assert re.search(r"exposure level for .*: [0-2]\.[0-9] (SAFE|OK)", rating), rating


def test_every_unit_file_the_readme_names_exists():
    readme = (UNITS.parent.parent / "README.md").read_text()
    named = set(re.findall(r"packaging/systemd/([\w.@*-]+)", readme))
    named |= {m for m in re.findall(r"`(buildreport[\w.@-]*\.(?:service|timer|conf))`", readme)
              if not m.startswith("buildreport-collect-push")}  # a unit of the NixOS module alone
    missing = sorted(n for n in named if not list(UNITS.glob(n)))
    assert len(named) >= 6 and not missing, missing


def test_the_spool_entry_makes_a_folder_only_root_can_enter(tmp_path):
    tmpfiles = tool("systemd-tmpfiles")
    result = subprocess.run([tmpfiles, "--create", f"--root={tmp_path}", str(UNITS / "buildreport-spool.conf")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    spool = tmp_path / "var" / "spool" / "buildreport"
    assert spool.is_dir()
    assert spool.stat().st_mode & 0o777 == 0o700
    if os.geteuid() == 0:
        assert spool.stat().st_uid == 0


@pytest.mark.parametrize("name", SERVICES)
def test_every_service_is_hardened(name):
    service = unit(name)["Service"]
    for key, value in HARDENING.items():
        assert service.get(key) == [value], f"{name}: {key}={value} expected, found {service.get(key)}"
    assert service["SystemCallFilter"][0] == "@system-service"
    assert set(service["RestrictAddressFamilies"][0].split()) <= {"AF_UNIX", "AF_INET", "AF_INET6"}
    assert service["UMask"] == ["0077"]


def test_the_server_and_its_backup_run_as_one_dynamic_user_with_a_state_directory():
    for name in ("buildreport.service", "buildreport-backup.service"):
        service = unit(name)["Service"]
        assert service["DynamicUser"] == ["yes"] and service["User"] == ["buildreport"]
        assert "buildreport" in service["StateDirectory"][0].split()
    assert unit("buildreport.service")["Service"]["Environment"] == ["BUILDREPORT_DB=%S/buildreport/buildreport.db"]


def test_secrets_reach_the_services_as_credentials_never_on_the_command_line():
    serve, push = unit("buildreport.service")["Service"], unit("buildreport-push.service")["Service"]
    assert serve["LoadCredential"] == ["secret-key:/etc/buildreport/secret-key"]
    assert command_line("buildreport.service")[-2:] == ["--secret-key-file", "%d/secret-key"]
    assert push["LoadCredential"] == ["token:/etc/buildreport/push-token"]
    argv = command_line("buildreport-push.service")
    assert argv[argv.index("--token-file") + 1] == "%d/token"
    for name in SERVICES:
        assert "--token" not in command_line(name) and "--secret-key" not in command_line(name)


def test_the_server_tells_systemd_it_is_ready_and_alive():
    serve = unit("buildreport.service")["Service"]
    assert serve["Type"] == ["notify"] and serve["NotifyAccess"] == ["main"]
    assert serve["WatchdogSec"] == ["30s"]
    assert unit("buildreport-backup.timer")["Timer"]["Persistent"] == ["true"]


@pytest.mark.parametrize("name", SERVICES)
def test_every_option_a_unit_passes_is_one_its_command_takes(name):
    argv = command_line(name)
    assert argv[0] == INSTALLED
    command = main.commands[argv[1]]
    known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    used = [arg for arg in argv[2:] if arg.startswith("--")]
    assert used and set(used) <= known, f"{name}: {set(used) - known} are not options of `buildreport {argv[1]}`"


def test_the_server_units_command_serves_and_says_ready(tmp_path):
    """ExecStart as systemd would run it: state and credentials directories, environment, notify socket."""
    state, credentials = tmp_path / "state", tmp_path / "credentials"
    (state / "buildreport").mkdir(parents=True)
    credentials.mkdir()
    (credentials / "secret-key").write_text("a-key-of-the-credentials-directory-" + "x7Yq2" * 4 + "\n")
    service = unit("buildreport.service")["Service"]
    expand = {"%S": str(state), "%d": str(credentials)}

    def substituted(text: str) -> str:
        for specifier, value in expand.items():
            text = text.replace(specifier, value)
        return text

    argv = [substituted(a) for a in command_line("buildreport.service")]
    argv[0] = str(VENV_BUILDREPORT)
    port = free_port()
    env = {**os.environ, "BUILDREPORT_HOST": "127.0.0.1", "BUILDREPORT_PORT": str(port), "BUILDREPORT_WORKERS": "1"}
    env.update(substituted(e).split("=", 1) for e in service["Environment"])  # type: ignore[misc]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(str(tmp_path / "notify"))
        env |= {"NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": "1000000"}
        process = subprocess.Popen(argv, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            receive(notify, "READY=1")
            assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
            receive(notify, "WATCHDOG=1")
            assert (state / "buildreport" / "buildreport.db").exists()
            assert not (state / "buildreport" / "buildreport.db.secret").exists()  # the credential signs
        finally:
            process.terminate()
            process.wait(timeout=15)


# What the units' MemoryDenyWriteExecute=yes, NoNewPrivileges=yes and SystemCallFilter= set up, done here before
# exec: PR_SET_MDWE with PR_MDWE_REFUSE_EXEC_GAIN (Linux 6.3), then a seccomp filter (libseccomp, which systemd
# uses too) allowing the system calls in ALLOWED_SYSCALLS and failing every other one with EPERM.
CONFINE_THEN_EXEC = """
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(65, 1, 0, 0, 0) != 0:  # before Linux 6.3: the filter alone
    print(f"PR_SET_MDWE: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: a filter may then be loaded without privileges
seccomp = ctypes.CDLL("libseccomp.so.2")
seccomp.seccomp_init.restype = ctypes.c_void_p
seccomp.seccomp_init.argtypes = [ctypes.c_uint32]
seccomp.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
seccomp.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
seccomp.seccomp_load.argtypes = [ctypes.c_void_p]
context = seccomp.seccomp_init(0x00050000 | errno.EPERM)
for name in os.environ.pop("ALLOWED_SYSCALLS").split():
    number = seccomp.seccomp_syscall_resolve_name(name.encode())
    if number >= 0:  # names of other architectures resolve to nothing here
        seccomp.seccomp_rule_add(context, 0x7FFF0000, number, 0)
if seccomp.seccomp_load(context) != 0:
    sys.exit("seccomp_load failed")
os.execv(sys.argv[1], sys.argv[1:])
"""


def syscalls(analyze: str, group: str) -> set[str]:
    """The system calls of a systemd group such as @system-service, its nested groups expanded."""
    listing = subprocess.run([analyze, "syscall-filter", group], capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0, listing.stderr
    names: set[str] = set()
    for line in listing.stdout.splitlines()[1:]:
        word = line.strip()
        if word.startswith("@"):
            names |= syscalls(analyze, word)
        elif word and not word.startswith("#"):
            names.add(word)
    return names


def unit_syscalls(analyze: str, name: str) -> set[str]:
    """The system calls a unit's SystemCallFilter= lines allow: the first list, less every `~` list after it."""
    allowed: set[str] = set()
    for number, value in enumerate(unit(name)["Service"]["SystemCallFilter"]):
        groups = value.lstrip("~").split()
        found = set().union(*(syscalls(analyze, g) if g.startswith("@") else {g} for g in groups))
        assert number == 0 or value.startswith("~")
        allowed = found if number == 0 else allowed - found
    return allowed


def confined(analyze: str, *argv: str) -> tuple[list[str], dict[str, str]]:
    """argv that runs `argv` confined as buildreport.service confines the server, and its environment."""
    return [sys.executable, "-c", CONFINE_THEN_EXEC, *argv], {
        **os.environ, "ALLOWED_SYSCALLS": " ".join(sorted(unit_syscalls(analyze, "buildreport.service")))}


def test_the_server_runs_confined_as_its_unit_confines_it(tmp_path, env):
    """Python, uvloop, httptools, SQLite or psycopg and the worker processes need neither memory both writable
    and executable nor a system call outside @system-service less @privileged and @resources."""
    analyze = tool("systemd-analyze")
    for probe, refused in (("import mmap; mmap.mmap(-1, 4096, prot=7)", "PermissionError"),
                           ("import os; os.setpriority(os.PRIO_PROCESS, 0, 5)", "PermissionError")):
        command, environment = confined(analyze, sys.executable, "-c", probe)
        result = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=30)
        if "PR_SET_MDWE" in result.stderr and "mmap" in probe:
            continue  # this kernel cannot deny write+execute memory; the system-call filter is still tried
        assert result.returncode != 0 and refused in result.stderr, (probe, result.stderr)  # the confinement holds
    env.load([])
    token = env.token()
    port = free_port()
    command, environment = confined(analyze, str(VENV_BUILDREPORT), "serve", "--create", "--db", str(env.db),
                                    "--host", "127.0.0.1", "--port", str(port), "--workers", "2")
    log = tmp_path / "server.log"
    with log.open("wb") as output:
        process = subprocess.Popen(command, env=environment, stdin=subprocess.DEVNULL, stdout=output,
                                   stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        answer = None
        while time.monotonic() < deadline and process.poll() is None and answer is None:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
            except httpx.HTTPError:
                time.sleep(0.1)
        assert answer is not None and answer.status_code == 200, log.read_text()
        for _ in range(8):  # both workers, with a database read each
            builds = httpx.get(f"http://127.0.0.1:{port}/builds", headers={"Authorization": f"Bearer {token}"},
                               timeout=5)
            assert builds.status_code == 200, builds.text
        assert process.poll() is None
    finally:
        process.terminate()
        process.wait(timeout=15)
    assert "Traceback" not in log.read_text()


def unit_command(name: str, paths: dict[str, Path]) -> list[str]:
    """A service's ExecStart as this machine runs it: this checkout's program, the unit's folders moved under
    temporary ones (longest first, so /var/lib/buildreport-backup is not read as /var/lib/buildreport + -backup)."""
    (line,) = unit(name)["Service"]["ExecStart"]
    line = line.replace(INSTALLED, str(VENV_BUILDREPORT)).replace("%%", "%")
    for folder in sorted(paths, key=len, reverse=True):
        line = line.replace(folder, str(paths[folder]))
    return shlex.split(line)


def test_the_backup_units_command_copies_the_servers_database(tmp_path, serve):
    state, backups = tmp_path / "state", tmp_path / "backups"
    state.mkdir()
    backups.mkdir()
    db = state / "buildreport.db"
    serve(db)  # a live database, as the timer finds it
    argv = unit_command("buildreport-backup.service",
                        {"/var/lib/buildreport-backup": backups, "/var/lib/buildreport": state})
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    (copy,) = backups.glob("buildreport-*.db.gz")
    assert copy.stat().st_size > 0
    restored = tmp_path / "restored.db"
    done = subprocess.run([str(VENV_BUILDREPORT), "restore", "--from", str(copy), "--db", str(restored)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_the_collector_units_command_listens_on_its_socket(tmp_path):
    runtime, spool = tmp_path / "run", tmp_path / "spool"
    runtime.mkdir()
    spool.mkdir(mode=0o700)
    argv = unit_command("buildreport-collect.service", {"/run/buildreport": runtime, "/var/spool/buildreport": spool})
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and process.poll() is None and not (runtime / "collect.sock").exists():
            time.sleep(0.05)
        assert (runtime / "collect.sock").is_socket()
    finally:
        process.terminate()
        process.wait(timeout=15)
