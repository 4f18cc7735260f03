"""Smoke tests of the one-file executable: every command, every endpoint, clean stops, clear errors.

    make binary smoke
    BUILDREPORT_EXE=dist/buildreport .venv/bin/python -m pytest packaging/smoke_test.py

The executable runs with a bare environment (no virtual environment, no PYTHONPATH, PATH without
the venv) and the tests check that no process of it loads anything from this Python installation.
Every server is started in a process group of its own; after SIGTERM the whole group (the
bootloader, the Python process, uvicorn's workers and multiprocessing's resource tracker) must be gone.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import os
import re
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from records import NOW, record, write_jsonl

EXE = shlex.split(os.environ.get("BUILDREPORT_EXE", ""))
pytestmark = pytest.mark.skipif(
    not EXE,
    reason="BUILDREPORT_EXE is not set: build the executable with `make binary`, then run `make smoke` "
    "(or BUILDREPORT_EXE=dist/buildreport .venv/bin/python -m pytest packaging/smoke_test.py)",
)
if EXE and os.sep in EXE[0]:
    EXE[0] = str(Path(EXE[0]).resolve())  # the tests run commands from other folders

START_TIMEOUT = 30.0  # seconds for a server to answer /healthz
STOP_TIMEOUT = 10.0  # seconds for a server to exit after SIGTERM
ERROR_TIMEOUT = 30.0  # seconds for a command that must fail to do so
# Orderly ends on SIGTERM: uvicorn re-raises the signal after a graceful shutdown of a single process.
CLEAN_EXITS = {0, -signal.SIGTERM, 128 + signal.SIGTERM}
# Where this test's own Python lives: the executable must not load anything from there.
HOST_PYTHON_DIRS = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}


# --- helpers -------------------------------------------------------------------------------------


def three_records() -> list[dict[str, Any]]:
    return [
        record(101, tags={"branch": "main"}),
        record(102, build_status="build_failed", status_message="builder failed with exit code 2",
               log="building hello\n\x1b[31merror: make: *** [Makefile:3] Error 2\x1b[0m\n"),
        record(103, create_time=NOW - timedelta(minutes=30), derivation_path=f"/nix/store/{'b' * 32}-curl-8.9.1.drv"),
    ]


def private_tmpdir(tmp: Path) -> Path:
    """A new, empty $TMPDIR for one run of the executable, which unpacks itself there (_MEI…)."""
    for n in itertools.count():
        path = tmp / f"tmpdir-{n}"
        with contextlib.suppress(FileExistsError):
            path.mkdir()
            return path
    raise AssertionError("unreachable")


def bare_env(tmp: Path, tmpdir: Path) -> dict[str, str]:
    """An environment that offers the executable no Python: no venv, no PYTHON* variables."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp), "LANG": "C.UTF-8", "TMPDIR": str(tmpdir)}
    for name in ("TZ",):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def run(tmp: Path, *args: str, cwd: Path | None = None, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    tmpdir = private_tmpdir(tmp)
    result = subprocess.run(
        [*EXE, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd or tmp, env=bare_env(tmp, tmpdir),
        stdin=subprocess.DEVNULL,
    )
    assert_unpacked_removed(tmpdir)
    return result


def assert_unpacked_removed(tmpdir: Path) -> None:
    """The one-file executable unpacks itself into $TMPDIR/_MEI…; every exit must remove that again."""
    left = sorted(p.name for p in tmpdir.iterdir())
    assert not left, f"left behind in $TMPDIR {tmpdir}: {left}"


def ok(tmp: Path, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    result = run(tmp, *args, **kwargs)
    assert result.returncode == 0, f"{args} exited with {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def auth(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


class Proc:
    """A line of /proc/PID/stat."""

    def __init__(self, pid: int, stat: str) -> None:
        self.pid = pid
        rest = stat[stat.rindex(")") + 2 :].split()
        self.state, self.ppid, self.pgrp = rest[0], int(rest[1]), int(rest[2])


def processes() -> dict[int, Proc]:
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):  # gone meanwhile
                table[int(entry)] = Proc(int(entry), Path(f"/proc/{entry}/stat").read_text())
    return table


def descendants(table: dict[int, Proc], pid: int) -> list[int]:
    """Every process below `pid` in the process tree `table`."""
    found, parents = [], [pid]
    while parents:
        parent = parents.pop()
        children = [p.pid for p in table.values() if p.ppid == parent]
        found += children
        parents += children
    return found


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


class Server:
    """The executable serving in a process group of its own, its output in a log file."""

    def __init__(self, tmp: Path, args: list[str], port: int, cwd: Path | None = None) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = tmp / f"server-{port}.log"
        self.stdout = tmp / f"server-{port}.out"
        self.tmpdir = private_tmpdir(tmp)
        with self.log.open("wb") as err, self.stdout.open("wb") as out:
            self.process = subprocess.Popen(
                [*EXE, *args], stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=cwd or tmp,
                env=bare_env(tmp, self.tmpdir), start_new_session=True,
            )
        self.pgid = self.process.pid
        self.started = time.monotonic()
        self.ready_after: float | None = None

    def output(self) -> str:
        return self.stdout.read_text(errors="replace") + self.log.read_text(errors="replace")

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"server exited with {self.process.returncode} before answering:\n{self.output()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    self.ready_after = time.monotonic() - self.started
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
        pytest.fail(f"server did not answer /healthz within {timeout}s:\n{self.output()}")

    def members(self) -> list[int]:
        """Live (not zombie) processes of the server's process group."""
        return [p.pid for p in processes().values() if p.pgrp == self.pgid and p.state != "Z"]

    def descendants(self) -> list[int]:
        return descendants(processes(), self.process.pid)

    def stop(self, signum: int = signal.SIGTERM, *, to_group: bool = False,
             timeout: float = STOP_TIMEOUT) -> tuple[int, float]:
        """A signal to the executable (or its whole group); its exit code and the seconds it took."""
        started = time.monotonic()
        if to_group:
            os.killpg(self.pgid, signum)
        else:
            self.process.send_signal(signum)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"server still running {timeout}s after signal {signum}:\n{self.output()}")
        return code, time.monotonic() - started

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signal.SIGKILL)
        if self.process.poll() is None:
            self.process.wait(timeout=5)


def alive(pids: list[int]) -> list[int]:
    table = processes()
    return [pid for pid in pids if pid in table and table[pid].state != "Z"]


def assert_all_gone(server: Server, pids: list[int], timeout: float = 5.0) -> None:
    """None of `pids` (taken while it ran) nor any other process of the server's group is left."""
    deadline = time.monotonic() + timeout
    while True:
        left = sorted(set(alive(pids) + server.members()))
        if not left:
            return
        if time.monotonic() > deadline:
            described = {pid: " ".join(cmdline(pid)) for pid in left}
            pytest.fail(f"processes left running after the server exited: {described}\n{server.output()}")
        time.sleep(0.05)


def assert_self_contained(pids: list[int]) -> None:
    """No process of the executable maps a file of the Python installation running these tests."""
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        paths = {line.split(maxsplit=5)[5] for line in maps.splitlines() if len(line.split(maxsplit=5)) == 6}
        borrowed = sorted(p for p in paths if any(p.startswith(d + os.sep) for d in HOST_PYTHON_DIRS))
        assert not borrowed, f"process {pid} ({' '.join(cmdline(pid))}) loads host Python files: {borrowed}"


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[Server]]:
    """Servers a test started; whatever is left of them is killed at the end."""
    started: list[Server] = []
    yield started
    for server in started:
        server.kill()


def start(servers: list[Server], tmp: Path, *args: str, cwd: Path | None = None) -> Server:
    port = free_port()
    server = Server(tmp, [*args, "--host", "127.0.0.1", "--port", str(port)], port, cwd=cwd)
    servers.append(server)
    server.wait_ready()
    return server


def stop_cleanly(server: Server, signum: int = signal.SIGTERM, *, to_group: bool = False) -> None:
    pids = [server.process.pid, *server.descendants()]
    code, seconds = server.stop(signum, to_group=to_group)
    assert code in CLEAN_EXITS | {-signum, 128 + signum}, f"exit code {code} after signal {signum}:\n{server.output()}"
    assert "Traceback" not in server.output(), server.output()
    assert_all_gone(server, pids)
    assert_unpacked_removed(server.tmpdir)
    print(f"stopped {len(pids)} processes with signal {signum} in {seconds:.2f}s (exit code {code})")


# --- the executable as a command line --------------------------------------------------------------


def test_version(tmp_path: Path) -> None:
    result = ok(tmp_path, "--version")
    match = re.fullmatch(r"buildreport, version (\S+)\n", result.stdout)
    assert match, result.stdout
    try:
        from buildreport import __version__
    except ImportError:
        return
    assert match[1] == __version__


@pytest.mark.parametrize("command", [[], ["serve"], ["demo"], ["import"], ["token"], ["token", "create"],
                                     ["token", "list"], ["token", "revoke"], ["sample"], ["push"]])
def test_help(tmp_path: Path, command: list[str]) -> None:
    result = ok(tmp_path, *command, "--help")
    assert "Usage: buildreport" in result.stdout
    if not command:
        for name in ("serve", "demo", "import", "token", "sample", "push"):
            assert re.search(rf"^\s+{name}\s", result.stdout, re.M), result.stdout


def test_sample_then_import(tmp_path: Path) -> None:
    out = tmp_path / "sample.jsonl.gz"
    ok(tmp_path, "sample", "-o", str(out), "--builds", "40", "--days", "2", "--seed", "7")
    with gzip.open(out, "rt") as lines:
        assert sum(1 for line in lines if line.strip()) == 40
    result = ok(tmp_path, "import", "--db", str(tmp_path / "s.db"), str(out))
    assert "imported 40 builds" in result.stderr


def test_import_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    """A large import on a terminal draws rich's progress bar: the part of rich the executable keeps."""
    import pty

    log = "".join(f"line {n} of a long build log\n" for n in range(3500))  # about 100 kB
    big = write_jsonl(tmp_path / "big.jsonl", [record(n, log=log) for n in range(1, 91)])
    assert big.stat().st_size > 8 * 1024 * 1024  # cli/data.py draws the bar from 8 MiB on
    tmpdir = private_tmpdir(tmp_path)
    controller, terminal = pty.openpty()
    process = subprocess.Popen([*EXE, "import", "--db", str(tmp_path / "big.db"), str(big)], stdin=terminal,
                               stdout=terminal, stderr=terminal, cwd=tmp_path, env=bare_env(tmp_path, tmpdir))
    os.close(terminal)
    output = b""
    with contextlib.suppress(OSError):  # EIO once the command has exited
        while chunk := os.read(controller, 65536):
            output += chunk
    os.close(controller)
    assert process.wait(timeout=120) == 0, output.decode(errors="replace")
    text = output.decode(errors="replace")
    assert "importing" in text and "imported 90 builds" in text, text[-2000:]
    assert "Traceback" not in text
    assert_unpacked_removed(tmpdir)


def test_token_create_list_revoke(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    created = ok(tmp_path, "token", "create", "--db", db, "--account", "acme", "--label", "smoke")
    secret = created.stdout.strip()
    assert created.stdout == secret + "\n" and " " not in secret and len(secret) >= 20, created.stdout
    token_id = re.search(r"created (\S+) for account acme", created.stderr)
    assert token_id, created.stderr
    listed = ok(tmp_path, "token", "list", "--db", db)
    assert token_id[1] in listed.stdout and "smoke" in listed.stdout and secret not in listed.stdout
    ok(tmp_path, "token", "revoke", "--db", db, token_id[1])
    missing = run(tmp_path, "token", "revoke", "--db", db, "no-such-token")
    assert missing.returncode != 0 and "no token no-such-token" in missing.stderr


# --- serving: every endpoint, the signed page, a clean stop ------------------------------------------


def test_push_a_spool_to_the_service(tmp_path: Path, servers: list[Server]) -> None:
    db = tmp_path / "push.db"
    secret = ok(tmp_path, "token", "create", "--db", str(db), "--account", "acme", "--scope", "build:write").stdout
    server = start(servers, tmp_path, "serve", "--db", str(db), "--workers", "1")
    spool = tmp_path / "spool"
    spool.mkdir()
    records = []
    for number, original in enumerate(three_records()):
        del original["account"], original["build_id"]
        records.append({**original, "source_id": f"smoke:{number}"})
    (spool / "00000000000000000001-1-abcd.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    pushed = ok(tmp_path, "push", "--to", server.url, "--token", secret.strip(), str(spool))
    assert "pushed 3 records from 1 files (3 new" in pushed.stderr, pushed.stderr
    assert list(spool.iterdir()) == []
    stop_cleanly(server)


def test_serve_every_endpoint(tmp_path: Path, servers: list[Server]) -> None:
    db = tmp_path / "smoke.db"
    imported = ok(tmp_path, "import", "--db", str(db), str(write_jsonl(tmp_path / "three.jsonl", three_records())))
    assert "imported 3 builds" in imported.stderr
    secret = ok(tmp_path, "token", "create", "--db", str(db), "--account", "acme").stdout.strip()

    server = start(servers, tmp_path, "serve", "--db", str(db), "--workers", "1")
    assert_self_contained([server.process.pid, *server.descendants()])
    print(f"first /healthz answer {server.ready_after:.2f}s after start")
    with httpx.Client(base_url=server.url, timeout=10) as http:
        health = http.get("/healthz")
        assert health.status_code == 200 and health.json() == {"status": "ok"}

        assert http.get("/builds").status_code == 401
        builds = http.get("/builds", headers=auth(secret))
        assert builds.status_code == 200, builds.text
        assert sorted(b["build_id"] for b in builds.json()) == [101, 102, 103]

        summary = http.get("/builds/summary", headers=auth(secret))
        assert summary.status_code == 200, summary.text
        assert summary.json()["build_count"] == 3 and summary.json()["failed_build_count"] == 1

        build = http.get("/builds/102", headers=auth(secret))
        assert build.status_code == 200 and build.json()["build_status"] == "build_failed", build.text
        assert http.get("/builds/999", headers=auth(secret)).status_code == 404

        usage = http.get("/usage", params={"from": "2000-01-01"}, headers=auth(secret))
        assert usage.status_code == 200, usage.text
        assert usage.json()["billable_build_count"] >= 2

        link = http.get("/builds/102/url", headers=auth(secret))
        assert link.status_code == 200, link.text
        url = link.json()["url"]
        assert url.startswith(server.url + "/b/"), url

        # The signed page: templates and static files must be inside the executable.
        page = http.get(url)
        assert page.status_code == 200, f"signed page answered {page.status_code}: {page.text[:500]}"
        assert page.headers["content-type"].startswith("text/html")
        assert "102" in page.text
        stylesheets = re.findall(r'href="([^"]*/b/static/[^"]+)"', page.text)
        assert stylesheets, page.text[:2000]
        for href in stylesheets:
            asset = http.get(href)
            assert asset.status_code == 200 and asset.content, href
        raw_log = http.get(url + "/log")
        assert raw_log.status_code == 200 and "Error 2" in raw_log.text, raw_log.text[:500]

        # The OpenAPI document and the docs page rendered from it, both from inside the executable.
        spec = http.get("/docs/openapi.json")
        assert spec.status_code == 200 and "/builds/summary" in spec.json()["paths"]
        rendered = http.get("/docs")
        assert rendered.status_code == 200 and rendered.headers["content-type"].startswith("text/html")
        assert 'id="getBuild"' in rendered.text
    stop_cleanly(server)


def open_files(pid: int) -> set[str]:
    found = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                found.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return found


def unix_socket_paths(pid: int) -> set[str]:
    """The paths of the Unix sockets `pid` holds open (bound ones have a path in /proc/net/unix)."""
    inodes = {link[len("socket:["):-1] for link in open_files(pid) if link.startswith("socket:[")}
    with contextlib.suppress(OSError):
        rows = [line.split() for line in Path("/proc/net/unix").read_text().splitlines()[1:]]
        return {row[7] for row in rows if len(row) >= 8 and row[6] in inodes}
    return set()


def writers(pids: list[int]) -> list[int]:
    """The server's one writer among `pids`: the process listening in its private `buildreport-writer-` folder."""
    return [pid for pid in pids if any("/buildreport-writer-" in path for path in unix_socket_paths(pid))]


# How a server gets stopped: by its process manager (SIGTERM to the main process, or to the whole group as
# systemd's default KillMode=control-group does) or by Ctrl-C in a terminal (SIGINT to the whole group).
STOPS = {"sigterm-main": (False, signal.SIGTERM), "sigterm-group": (True, signal.SIGTERM),
         "sigint-group": (True, signal.SIGINT)}


@pytest.fixture(scope="module")
def postgres() -> Iterator[Any]:
    from pgcluster import PgCluster, require_postgres

    cluster = PgCluster.start(require_postgres())
    try:
        yield cluster
    finally:
        cluster.stop()


def test_postgresql_import_token_migrate_and_serve(tmp_path: Path, servers: list[Server], postgres: Any) -> None:
    """The executable carries the PostgreSQL driver: import, a token, a SQLite database migrated, and serving."""
    url = postgres.url(postgres.create_database())
    records = write_jsonl(tmp_path / "three.jsonl", three_records())
    assert "imported 3 builds" in ok(tmp_path, "import", "--db", url, str(records)).stderr
    secret = ok(tmp_path, "token", "create", "--db", url, "--account", "acme").stdout.strip()
    ok(tmp_path, "import", "--db", str(tmp_path / "s.db"), str(records))
    copy = postgres.url(postgres.create_database())
    assert "counts and totals match" in ok(tmp_path, "migrate", "--from", str(tmp_path / "s.db"), "--to", copy).stderr
    server = start(servers, tmp_path, "serve", "--db", url, "--workers", "1")
    assert_self_contained([server.process.pid, *server.descendants()])
    with httpx.Client(base_url=server.url, timeout=10) as http:
        builds = http.get("/builds", headers=auth(secret))
        assert builds.status_code == 200, builds.text
        assert sorted(b["build_id"] for b in builds.json()) == [101, 102, 103]


@pytest.mark.parametrize("how", list(STOPS))
def test_serve_two_workers_stop_all(tmp_path: Path, servers: list[Server], how: str) -> None:
    db = tmp_path / "workers.db"
    ok(tmp_path, "import", "--db", str(db), str(write_jsonl(tmp_path / "three.jsonl", three_records())))
    secret = ok(tmp_path, "token", "create", "--db", str(db), "--account", "acme").stdout.strip()

    server = start(servers, tmp_path, "serve", "--db", str(db), "--workers", "2")
    # uvicorn's supervisor spawns the workers (the executable again, as `--multiprocessing-fork`); a worker
    # is up once its lifespan has opened the database.
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        pids = [server.process.pid, *server.descendants()]
        writer = writers(pids)
        workers = [pid for pid in pids if "--multiprocessing-fork" in cmdline(pid) and pid not in writer]
        ready = [pid for pid in workers if str(db) in open_files(pid)]
        if (len(ready) >= 2 and writer) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(workers) == 2 and len(ready) == 2, {pid: cmdline(pid) for pid in pids}
    assert len(writer) == 1, {pid: cmdline(pid) for pid in pids}  # one writer for both workers
    assert_self_contained(pids)
    with httpx.Client(base_url=server.url, timeout=10) as http:
        for _ in range(6):
            response = http.get("/builds/summary", headers=auth(secret))
            assert response.status_code == 200 and response.json()["build_count"] == 3
    to_group, signum = STOPS[how]
    stop_cleanly(server, signum, to_group=to_group)


def test_demo_from_empty_directory(tmp_path: Path, servers: list[Server]) -> None:
    cwd = tmp_path / "empty"
    cwd.mkdir()
    db = tmp_path / "demo" / "demo.db"
    db.parent.mkdir()
    server = start(servers, tmp_path, "demo", "--db", str(db), "--workers", "1", cwd=cwd)
    printed = server.stdout.read_text()
    tokens = re.findall(r"^token for account (\S+): (\S+)$", printed, re.M)
    assert tokens, printed
    with httpx.Client(base_url=server.url, timeout=10) as http:
        builds = http.get("/builds", params={"limit": "3"}, headers=auth(tokens[0][1]))
        assert builds.status_code == 200 and len(builds.json()) == 3, builds.text
        page = re.search(r"A build page \(no token needed\): (\S+)", printed)
        if page:
            assert http.get(page[1]).status_code == 200
    stop_cleanly(server)
    assert list(cwd.iterdir()) == [], "demo wrote into the current directory"


# --- clear errors and a non-zero exit ------------------------------------------------------------


def assert_clear_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode != 0, f"exited with 0:\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in result.stderr, f"{needle!r} not in:\n{result.stderr}"


@pytest.mark.parametrize("command", ["serve", "import", "token create"])
@pytest.mark.parametrize(
    ("db", "message"),
    [("/nonexistent-buildreport-dir/x.db", "does not exist"), ("/proc/buildreport.db", "cannot write to")],
)
def test_unwritable_database(tmp_path: Path, command: str, db: str, message: str) -> None:
    args = {"serve": ["serve", "--port", str(free_port())],
            "import": ["import", str(write_jsonl(tmp_path / "one.jsonl", [record(1)]))],
            "token create": ["token", "create", "--account", "acme"]}[command]
    result = run(tmp_path, *args, "--db", db, timeout=ERROR_TIMEOUT)
    # `serve` never creates a database: for it, a missing file is the error, wherever it would have been made.
    assert_clear_error(result, "Error:", "does not exist" if command == "serve" else message)


def test_not_a_database(tmp_path: Path) -> None:
    text = tmp_path / "notes.db"
    text.write_text("these are my notes, not a database\n" * 100)
    result = run(tmp_path, "serve", "--db", str(text), "--port", str(free_port()), timeout=ERROR_TIMEOUT)
    assert_clear_error(result, "is not a buildreport database")
    assert text.read_text().startswith("these are my notes")


def test_port_taken(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run(tmp_path, "serve", "--db", str(tmp_path / "p.db"), "--port", str(port), timeout=ERROR_TIMEOUT)
        assert_clear_error(result, f"cannot listen on 127.0.0.1:{port}")
        demo_db = tmp_path / "demo.db"
        result = run(tmp_path, "demo", "--db", str(demo_db), "--port", str(port), timeout=ERROR_TIMEOUT)
        assert_clear_error(result, f"cannot listen on 127.0.0.1:{port}")
        assert not demo_db.exists()


def test_schema_newer_than_executable(tmp_path: Path) -> None:
    db = tmp_path / "future.db"
    ok(tmp_path, "token", "create", "--db", str(db), "--account", "acme")
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 999")
    conn.close()
    result = run(tmp_path, "serve", "--db", str(db), "--port", str(free_port()), timeout=ERROR_TIMEOUT)
    assert_clear_error(result, "schema version 999", "newer than this buildreport understands")
    result = run(tmp_path, "token", "list", "--db", str(db), timeout=ERROR_TIMEOUT)
    assert_clear_error(result, "schema version 999")


# --- kill -9 of the bootloader -------------------------------------------------------------------------


def test_kill_9_of_the_bootloader_ends_the_server_and_its_workers(tmp_path: Path, servers: list[Server]) -> None:
    db = tmp_path / "killed.db"
    ok(tmp_path, "import", "--db", str(db), str(write_jsonl(tmp_path / "three.jsonl", three_records())))
    secret = ok(tmp_path, "token", "create", "--db", str(db), "--account", "acme", "--scope", "build:write").stdout
    server = start(servers, tmp_path, "serve", "--db", str(db), "--workers", "2")
    deadline = time.monotonic() + START_TIMEOUT
    while len(pids := server.descendants()) < 3 and time.monotonic() < deadline:  # Python, two workers and more
        time.sleep(0.05)
    written = dict(three_records()[0], source_id="killed:1")
    del written["account"], written["build_id"]
    answer = httpx.post(server.url + "/builds", json=[written], headers=auth(secret.strip()), timeout=30)
    assert answer.status_code == 200 and answer.json()["created"] == 1, answer.text
    pids = server.descendants()
    assert len(pids) >= 4 and len(writers(pids)) == 1, {pid: cmdline(pid) for pid in pids}  # and the writer
    os.kill(server.process.pid, signal.SIGKILL)  # the bootloader alone, as `kill -9 PID` does
    server.process.wait(timeout=5)
    deadline = time.monotonic() + 10
    while (left := alive(pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, {pid: " ".join(cmdline(pid)) for pid in left}


def test_kill_9_of_the_bootloader_ends_an_import(tmp_path: Path) -> None:
    db = tmp_path / "import.db"
    ok(tmp_path, "token", "list", "--db", str(db))
    log = "a long line of a build log that takes a while to compress and store\n" * 50
    data = write_jsonl(tmp_path / "many.jsonl", [record(i, log=log) for i in range(1, 200_001)])
    tmpdir = private_tmpdir(tmp_path)
    process = subprocess.Popen([*EXE, "import", "--db", str(db), str(data)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env=bare_env(tmp_path, tmpdir), start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        table = processes()
        while not [p.pid for p in table.values() if p.ppid == process.pid]:
            assert time.monotonic() < deadline and process.poll() is None, "the import never started its program"
            time.sleep(0.05)
            table = processes()
        # The program, and the process that reads the records for it.
        while len(family := descendants(processes(), process.pid)) < 2:
            assert time.monotonic() < deadline and process.poll() is None, "the import never started reading"
            time.sleep(0.05)
        time.sleep(1.0)  # well into the import
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=5)
        deadline = time.monotonic() + 10
        while (left := alive(family)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not left, {pid: " ".join(cmdline(pid)) for pid in left}
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    assert sqlite3.connect(db).execute("SELECT count(*) FROM builds").fetchone() == (0,)  # all or nothing
