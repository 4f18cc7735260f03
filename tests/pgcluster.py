"""A throwaway PostgreSQL cluster for tests: Debian's server binaries, `initdb` in a temporary folder owned by a
non-root user, trust authentication for 127.0.0.1 only, a free port, and a fresh database per test.

Nothing outside the folder is configured: the server reads the files `initdb` wrote there and the settings
given on its command line; its unix socket lives in the folder too. PostgreSQL refuses to run as root, so
under root the server runs as Debian's `postgres` system user (or `nobody` where there is none).
The server is the postmaster itself, started without a shell, and stopped by its pid (SIGINT: fast shutdown);
should the test process die first, the kernel stops it the same way (the parent-death signal).
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import psycopg
import pytest
from psycopg import sql

BIN_ROOT = Path("/usr/lib/postgresql")  # Debian: /usr/lib/postgresql/<major>/bin
HOST = "127.0.0.1"
SUPERUSER = "postgres"  # the database role initdb creates, whatever the operating-system user
INSTALL_HINT = "apt-get install postgresql"

# For speed: a test cluster needs no durability. Listening and the socket place are set per cluster.
SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_wal_size": "1GB",
    "max_connections": "200",
    "shared_buffers": "64MB",
    "log_min_messages": "warning",
}

# Local connections (the socket in the folder) and TCP from 127.0.0.1 only; anything else has no line, so it
# is refused.
# Streaming replicas of the cluster connect from 127.0.0.1 too.
HBA = "local all all trust\nhost all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n"


_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the server's child process before exec: should the test process die without stopping the cluster
    (SIGKILL, a timeout's SIGTERM), the kernel sends the postmaster SIGINT, its fast shutdown. Python runs this
    after the child dropped root, so the change of ids cannot clear it."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGINT)


class PostgresMissing(Exception):
    """No PostgreSQL server binaries on this machine."""


def find_bin_dir(root: Path = BIN_ROOT, path: str | None = None) -> Path:
    """The folder holding `initdb` and `postgres`: Debian's newest major version, else one on PATH."""
    versions = sorted(
        (int(entry.name), entry / "bin")
        for entry in (root.iterdir() if root.is_dir() else ())
        if entry.name.isdigit() and (entry / "bin" / "initdb").is_file() and (entry / "bin" / "postgres").is_file()
    )
    if versions:
        return versions[-1][1]
    initdb = shutil.which("initdb", path=path)
    if initdb is not None:
        folder = Path(initdb).resolve().parent
        if (folder / "postgres").is_file():
            return folder
    raise PostgresMissing(f"no PostgreSQL server (initdb and postgres) under {root}/<version>/bin or on PATH")


def require_postgres(root: Path = BIN_ROOT, path: str | None = None) -> Path:
    """The server binaries' folder; without one, skip the test, or fail it under CI=true."""
    try:
        return find_bin_dir(root, path)
    except PostgresMissing as exc:
        reason = f"PostgreSQL tests need Debian's PostgreSQL: {exc} ({INSTALL_HINT})"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI=true, so they may not be skipped")
        pytest.skip(reason)


def server_user() -> pwd.struct_passwd | None:
    """Who runs the server: None (ourselves) unless we are root, which PostgreSQL refuses to be."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root, and there is neither a 'postgres' nor a 'nobody' user to run PostgreSQL")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _open_to_others(folder: Path) -> bool:
    """Whether another user can reach `folder`: every folder on the way is searchable by others."""
    return all(part.stat().st_mode & stat.S_IXOTH for part in (folder, *folder.parents))


def _base_folder(user: pwd.struct_passwd | None) -> Path | None:
    """Where the cluster's temporary folder goes: the usual temporary folder, unless the server's user cannot
    reach it (a private TMPDIR of root's), then /tmp."""
    base = Path(tempfile.gettempdir())
    if user is None or _open_to_others(base):
        return base
    return Path("/tmp")


def _clean_environment() -> dict[str, str]:
    # PG* variables (PGDATA, PGPORT, PGHOST…) of the calling shell must not steer the test cluster.
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


class PgCluster:
    """A running throwaway cluster. Start with `PgCluster.start()`; `stop()` (or leaving a `with` block) stops
    the postmaster by its pid and removes the folder."""

    def __init__(
        self, bin_dir: Path, folder: Path, user: pwd.struct_passwd | None, port: int, process: subprocess.Popen[bytes]
    ) -> None:
        self.bin_dir = bin_dir
        self.folder = folder
        self.data = folder / "data"
        self.log = folder / "server.log"
        self.user = user
        self.host = HOST
        self.port = port
        self.process = process
        self._names = itertools.count(1)
        self._admin: psycopg.Connection | None = None

    # --- starting and stopping -------------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        bin_dir: Path | None = None,
        timeout: float = 30.0,
        attempts: int = 3,
        settings: dict[str, str] | None = None,
    ) -> PgCluster:
        """initdb in a new temporary folder, then the server on a free port, once it accepts connections.

        `settings` override the test settings above (the benchmark runs with durable writes, for one)."""
        bin_dir = bin_dir or find_bin_dir()
        user = server_user()
        folder = Path(tempfile.mkdtemp(prefix="buildreport-pg-", dir=_base_folder(user)))
        try:
            if user is not None:
                os.chown(folder, user.pw_uid, user.pw_gid)
            cls._initdb(bin_dir, folder, user)
            for attempt in range(attempts):
                # A free port may be taken between finding it and binding it: then try another one.
                cluster = cls._launch(bin_dir, folder, user, free_port(), settings or {})
                if cluster._wait_ready(timeout):
                    return cluster
                log = cluster.log.read_text(errors="replace")
                cluster._stop_process()
                if "could not bind" not in log or attempt == attempts - 1:
                    raise RuntimeError(f"PostgreSQL did not start within {timeout}s; its log:\n{log}")
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        raise AssertionError("unreachable")

    def start_replica(self, timeout: float = 30.0) -> PgCluster:
        """A streaming replica of this cluster (pg_basebackup), in a folder of its own, on another free port;
        stop it with `stop()` like any cluster."""
        folder = Path(tempfile.mkdtemp(prefix="buildreport-pg-replica-", dir=_base_folder(self.user)))
        try:
            if self.user is not None:
                os.chown(folder, self.user.pw_uid, self.user.pw_gid)
            command = [
                str(self.bin_dir / "pg_basebackup"), "--pgdata", str(folder / "data"), "--host", self.host,
                "--port", str(self.port), "--username", SUPERUSER, "--write-recovery-conf", "--wal-method", "stream",
                "--checkpoint", "fast", "--no-sync",
            ]  # fmt: skip
            done = subprocess.run(
                command, cwd=folder, env=_clean_environment(), stdin=subprocess.DEVNULL, capture_output=True,
                timeout=120, **self._run_as(self.user),
            )  # fmt: skip
            if done.returncode != 0:
                raise RuntimeError(f"pg_basebackup failed ({done.returncode}):\n{(done.stdout + done.stderr).decode()}")
            replica = self._launch(self.bin_dir, folder, self.user, free_port(), {})
            if not replica._wait_ready(timeout):
                log = replica.log.read_text(errors="replace")
                replica._stop_process()
                raise RuntimeError(f"the replica did not start within {timeout}s; its log:\n{log}")
            return replica
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise

    @staticmethod
    def _run_as(user: pwd.struct_passwd | None) -> dict[str, object]:
        """Popen arguments that drop root for the server's user (no shell, no su: the child sets its ids)."""
        if user is None:
            return {}
        return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}

    @classmethod
    def _initdb(cls, bin_dir: Path, folder: Path, user: pwd.struct_passwd | None) -> None:
        command = [
            str(bin_dir / "initdb"), "--pgdata", str(folder / "data"), "--username", SUPERUSER, "--auth", "trust",
            "--encoding", "UTF8", "--no-locale", "--no-sync", "--no-instructions",
        ]  # fmt: skip
        done = subprocess.run(
            command, cwd=folder, env=_clean_environment(), stdin=subprocess.DEVNULL, capture_output=True,
            timeout=120, **cls._run_as(user),
        )  # fmt: skip
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace")
            raise RuntimeError(f"initdb failed ({done.returncode}):\n{output}")
        (folder / "data" / "pg_hba.conf").write_text(HBA)

    @classmethod
    def _launch(
        cls, bin_dir: Path, folder: Path, user: pwd.struct_passwd | None, port: int, overrides: dict[str, str]
    ) -> PgCluster:
        settings = {
            **SETTINGS,
            **overrides,
            "listen_addresses": HOST,
            "port": str(port),
            "unix_socket_directories": str(folder),
        }
        command = [str(bin_dir / "postgres"), "-D", str(folder / "data")]
        for name, value in settings.items():
            command += ["-c", f"{name}={value}"]
        log = folder / "server.log"
        with log.open("ab") as handle:
            process = subprocess.Popen(
                command, cwd=folder, env=_clean_environment(), stdin=subprocess.DEVNULL, stdout=handle,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent, **cls._run_as(user),
            )  # fmt: skip
        return cls(bin_dir, folder, user, port, process)

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                psycopg.connect(self.url(), connect_timeout=2).close()
            except psycopg.OperationalError:
                time.sleep(0.05)
            else:
                return True
        return False

    @property
    def pid(self) -> int:
        """The postmaster's pid, as it wrote it in postmaster.pid (the file's first line)."""
        with contextlib.suppress(FileNotFoundError, ValueError, IndexError):
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        return self.process.pid

    def stop(self) -> None:
        """Fast shutdown by the postmaster's pid (SIGINT), then the folder goes."""
        if self._admin is not None:
            with contextlib.suppress(psycopg.Error):
                self._admin.close()
            self._admin = None
        try:
            self._stop_process()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def _stop_process(self) -> None:
        if self.process.poll() is not None:
            return
        pid = self.pid
        # SIGINT: fast shutdown (sessions end, no waiting for clients); SIGQUIT: immediate; SIGKILL: last resort.
        for sig, grace in ((signal.SIGINT, 30.0), (signal.SIGQUIT, 10.0), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            try:
                self.process.wait(timeout=grace)
                return
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> PgCluster:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    # --- databases ---------------------------------------------------------------------------------------------

    def url(self, dbname: str = "postgres") -> str:
        """A connection URL for `dbname`, over TCP to 127.0.0.1, as the superuser (trust: no password)."""
        return f"postgresql://{SUPERUSER}@{self.host}:{self.port}/{dbname}"

    def admin(self) -> psycopg.Connection:
        """One autocommit connection to the `postgres` database, kept for the cluster's life, for DDL."""
        if self._admin is None or self._admin.closed:
            self._admin = psycopg.connect(self.url(), autocommit=True)
        return self._admin

    def create_database(self, template: str | None = None) -> str:
        """A new database with a unique name (a copy of `template`, default template1: empty); its name.

        A template must have no open connections while it is copied (PostgreSQL's rule)."""
        name = f"test_{os.getpid()}_{next(self._names)}"
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        self.admin().execute(statement)
        return name

    def drop_database(self, name: str) -> None:
        """Drop `name`, ending any session still connected to it (tests may leave a pool open)."""
        self.admin().execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def databases(self) -> set[str]:
        """Names of the databases in the cluster, templates included."""
        return {row[0] for row in self.admin().execute("SELECT datname FROM pg_database")}

