"""Fixtures: real SQLite files in temporary folders, the app in process, and a real server process."""

from __future__ import annotations

import getpass
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient
from pgcluster import PgCluster, require_postgres
from records import NOW, record, write_jsonl  # noqa: F401 (tests import them from here)

from buildreport.config import Settings
from buildreport.http.app import create_app
from buildreport.imports.load import import_files
from buildreport.store import is_postgres, open_auth, open_database
from buildreport.store.admin import insert_token
from buildreport.times import US_PER_DAY, to_us
from buildreport.tokens import new_token

TEST_KEY = "test-signing-key-0123456789-abcdefghijklmnopqrstuvwxyz"

RUN_TMP = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    """Everything a run writes to the temporary folder (pytest's tmp_path folders, servers' metrics folders, the
    demo's database, the PostgreSQL cluster, Nix's build folders) goes into one folder of the run's own, set
    before any test or process starts; the end of the session checks that nothing is left in it."""
    folder = Path(tempfile.mkdtemp(prefix="buildreport-tests-"))
    folder.chmod(0o711)  # the PostgreSQL cluster's user (not root) must reach its folder inside; nobody can list it
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = str(folder)
    config.stash[RUN_TMP] = folder


# Every test that takes a database runs on each engine.
ENGINES = ("sqlite", "postgresql")


SERVERS = pytest.StashKey[list["Server"]]()
LOG_TAIL_CHARS = 20_000


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report carries the end of the log of every server it started."""
    report = yield
    if report.failed:
        for server in item.stash.get(SERVERS, []):
            text = server.log.read_text(errors="replace") if server.log.exists() else "(no log)"
            report.sections.append((f"server log {server.url}", text[-LOG_TAIL_CHARS:]))
    return report


def _pytest_pointer(path: Path) -> bool:
    """pytest's own `…current` links to its newest folders, which it keeps whatever its retention policy (its
    numbered `pytest-N` folders, directly under its parent folder, are its own too)."""
    return path.is_symlink() and path.name.endswith("current")


def _nix_build_folder(run_tmp: Path, path: Path) -> bool:
    """What Nix itself keeps in TMPDIR (`nix-PID-N`, `nix-build-PID-N`) when a test kills it mid-build: Nix's,
    not buildreport's; the run's folder, and so they, are removed all the same."""
    top = path.relative_to(run_tmp).parts[0]
    return top.startswith("nix-") and top.split("-")[-1].isdigit()


@pytest.hookimpl(trylast=True)  # after pytest has removed its own tmp_path folders (tmp_path_retention_policy)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when it left anything in the temporary folder; then remove the run's folder, so that a run
    leaves nothing behind either way."""
    run_tmp = session.config.stash[RUN_TMP]
    pytest_root = run_tmp / f"pytest-of-{getpass.getuser()}"  # pytest's own parent folder, empty once it cleaned up
    left = sorted(
        str(p.relative_to(run_tmp))
        for p in run_tmp.rglob("*")
        if p != pytest_root and p.parent != pytest_root and not _pytest_pointer(p) and not _nix_build_folder(run_tmp, p)
        and (p.is_symlink() or not p.is_dir() or not any(p.iterdir()))
    )
    shutil.rmtree(run_tmp, ignore_errors=True)
    if left:
        shown = "\n  ".join(left[:20]) + (f"\n  … and {len(left) - 20} more" if len(left) > 20 else "")
        sys.stderr.write(f"\nthe run left {len(left)} files or folders in its temporary folder:\n  {shown}\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests of the SQLite engine's own behaviour run on SQLite alone."""
    kept, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        on_postgres = "postgresql" in params.values() or params.get("engine") == "postgresql"
        (dropped if on_postgres and item.get_closest_marker("sqlite_only") else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def new_database(request: pytest.FixtureRequest, engine: str, folder: Path, name: str = "test.db") -> Any:
    """A new, empty database of the engine: a file path in `folder`, or a PostgreSQL database of its own
    (dropped when the requesting fixture ends)."""
    if engine == "sqlite":
        return folder / name
    cluster = request.getfixturevalue("pg_cluster")
    dbname = cluster.create_database()
    request.addfinalizer(lambda: cluster.drop_database(dbname))
    return cluster.url(dbname)


def query(db: Any, sql: str, params: tuple = (), *, tokens: bool = False) -> list[tuple]:
    """Rows of one statement (`?` placeholders) on either engine, committed: a look into the database as an
    operator takes it. `tokens` for the tokens, which SQLite keeps in a file of their own."""
    conn = open_auth(str(db)) if tokens else open_database(str(db))
    try:
        with conn:
            rows = conn.execute(sql, params).fetchall()
        return [tuple(row) for row in rows]
    finally:
        conn.close()


class Env:
    """A database (a file, or a PostgreSQL database) with helpers to fill it and to mint tokens."""

    def __init__(self, tmp: Path, db: Any = None) -> None:
        self.tmp = tmp
        self.db = db if db is not None else tmp / "test.db"
        self._files = 0

    @property
    def engine(self) -> str:
        return "postgresql" if is_postgres(str(self.db)) else "sqlite"

    def load(self, records: list[dict[str, Any]]) -> None:
        self._files += 1
        path = write_jsonl(self.tmp / f"import-{self._files}.jsonl", records)
        conn = open_database(self.db)
        try:
            import_files(conn, [path], to_us(NOW))
        finally:
            conn.close()

    def token(
        self,
        account: str = "acme",
        scopes: tuple[str, ...] = ("build:read",),
        expires_days: int = 30,
        revoked: bool = False,
    ) -> str:
        open_database(self.db).close()
        conn = open_auth(self.db)
        now = int(time.time() * 1_000_000)
        with conn:
            token_id, secret, digest = new_token()
            insert_token(
                conn,
                token_id=token_id,
                account=account,
                digest=digest,
                scopes=scopes,
                label="test",
                now_us=now,
                expires_us=now + expires_days * US_PER_DAY,
            )
            if revoked:
                conn.execute("UPDATE tokens SET revoked_us = ? WHERE token_id = ?", (now, token_id))
        conn.close()
        return secret

    def settings(self, **overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "db": str(self.db),
            "secret_keys": (TEST_KEY,),
            "public_url": "http://testserver.local",
        }
        values.update(overrides)
        return Settings(**values)

    def client(self, **overrides: Any) -> TestClient:
        open_database(self.db).close()  # as `serve` does before it starts; the app itself never creates one
        return TestClient(create_app(self.settings(**overrides)), base_url="http://testserver.local")


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def fresh_db(request: pytest.FixtureRequest, engine: str) -> Callable[[Path], Any]:
    """A new, empty database of the engine at each call: property tests take one an example."""
    made = iter(range(1_000_000))
    return lambda folder: new_database(request, engine, folder, f"t{next(made)}.db")


@pytest.fixture
def env(request: pytest.FixtureRequest, engine: str, tmp_path: Path) -> Env:
    return Env(tmp_path, new_database(request, engine, tmp_path))


def auth(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def buildreport_command() -> list[str]:
    """The program under test: the executable named by BUILDREPORT_EXE, or this package."""
    exe = os.environ.get("BUILDREPORT_EXE")
    return shlex.split(exe) if exe else [sys.executable, "-m", "buildreport"]


class Server:
    def __init__(self, process: subprocess.Popen[bytes], url: str, log: Path, tmp: Path | None = None) -> None:
        self.process = process
        self.url = url
        self.log = log
        self.tmp = tmp  # the server's TMPDIR
        self.stopped_cleanly = False

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
                self.stopped_cleanly = True
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        return self.process.returncode

    def left_behind(self) -> list[str]:
        """The temporary folders (metrics, a demo's database) a server that stopped on SIGTERM left in its TMPDIR:
        it must remove them itself (only a killed server cannot)."""
        if self.tmp is None or not self.stopped_cleanly:
            return []
        patterns = ("buildreport-metrics-*", "buildreport-demo-*")
        return sorted(p.name for pattern in patterns for p in self.tmp.glob(pattern))


def self_signed(folder: Path, name: str = "server") -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost and its key, made now (PEM files in `folder`)."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "buildreport test")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / f"{name}.crt", folder / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


_SERVER_FOLDERS: list[Path] = []  # the session's folder for servers of PostgreSQL databases, once made


@pytest.fixture(scope="session", autouse=True)
def _server_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    folder = tmp_path_factory.mktemp("servers")
    _SERVER_FOLDERS.append(folder)
    yield
    shutil.rmtree(folder, ignore_errors=True)


def _server_folders() -> Path:
    return _SERVER_FOLDERS[0]


def start_server(
    db: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 20.0,
    scheme: str = "http",
    prefix: str = "",
    verify: Any = True,
    port: int | None = None,
) -> Server:
    """`buildreport serve` on a free port (or the one given) of 127.0.0.1, once /healthz (under `prefix`) answers."""
    port = port or free_port()
    postgres = is_postgres(str(db))
    if not postgres and not Path(db).exists():
        open_database(db).close()  # a test's empty database, made as Env.client makes it: `serve` never creates one
    # The log and the server's temporary files (its metrics folder) go beside the database, in the test's tmp_path,
    # so they go with it even when a test kills the server; a PostgreSQL database has no folder: the server gets
    # one of its own among pytest's folders, which pytest removes.
    folder = Path(tempfile.mkdtemp(prefix="server-", dir=_server_folders())) if postgres else Path(db).parent
    log = folder / f"server-{port}.log"
    command = [
        *buildreport_command(),
        "serve",
        "--db",
        str(db),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        *(("--public-url", f"{scheme}://127.0.0.1:{port}{prefix}") if prefix else ()),
        *args,
    ]
    handle = log.open("wb")
    environment = {**os.environ, "TMPDIR": str(folder), **(env or {})}
    process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               env=environment)
    handle.close()  # the server holds its own copy
    url = f"{scheme}://127.0.0.1:{port}{prefix}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(url + "/healthz", timeout=1, verify=verify).status_code == 200:
                return Server(process, url, log, Path(environment["TMPDIR"]))
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    Server(process, url, log).stop()
    raise RuntimeError(f"server did not answer within {timeout}s:\n{log.read_text()}")


@pytest.fixture
def serve(request: pytest.FixtureRequest) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []
    request.node.stash[SERVERS] = started  # their logs go into the report of a test that fails

    def _start(db: Path, *args: str, **kwargs: Any) -> Server:
        server = start_server(db, *args, **kwargs)
        started.append(server)
        return server

    yield _start
    for server in started:
        server.stop()
    left = [name for server in started for name in server.left_behind()]
    assert not left, f"servers left {left} in their temporary folder"


class Demo:
    """`buildreport demo` as a newcomer runs it: the bundled sample data, a token per account, its printed lines."""

    def __init__(self, server: Server, output: str) -> None:
        self.server = server
        self.url = server.url
        self.output = output
        self.tokens = dict(re.findall(r"token for account (\S+): (brt_\S+)", output))
        self.write_token = re.findall(r"token that writes builds to account \S+: (brt_\S+)", output)[0]


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    folder = tmp_path_factory.mktemp("demo")
    port = free_port()
    out = folder / "stdout.txt"
    log = folder / "server.log"
    with out.open("wb") as stdout, log.open("wb") as stderr:
        process = subprocess.Popen(
            [*buildreport_command(), "demo", "--port", str(port), "--workers", "1", "--no-access-log"],
            stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL, env={**os.environ, "TMPDIR": str(folder)},
        )
    server = Server(process, f"http://127.0.0.1:{port}", log, tmp=folder)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"demo exited with {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(server.url + "/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    else:
        server.stop()
        raise RuntimeError(f"demo did not answer within 60s:\n{log.read_text()}")
    yield Demo(server, out.read_text())
    server.stop()
    assert not server.left_behind(), f"the demo left {server.left_behind()} in its temporary folder"


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """A throwaway PostgreSQL cluster for the whole session (skipped without PostgreSQL; failed under CI=true)."""
    cluster = PgCluster.start(require_postgres())
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(pg_cluster: PgCluster) -> Iterator[str]:
    """A fresh, empty database of its own for one test, as `postgresql://postgres@127.0.0.1:PORT/NAME`; dropped
    afterwards."""
    name = pg_cluster.create_database()
    yield pg_cluster.url(name)
    pg_cluster.drop_database(name)
