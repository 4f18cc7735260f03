"""Fixtures: real SQLite files in temporary folders, the app in process, and a real server process."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient
from records import NOW, record, write_jsonl  # noqa: F401 (tests import them from here)

from buildreport.app import create_app
from buildreport.config import Settings
from buildreport.ingest import import_files
from buildreport.store.admin import ensure_account, insert_token
from buildreport.store.schema import open_database
from buildreport.times import US_PER_DAY, to_us
from buildreport.tokens import new_token

TEST_KEY = "test-signing-key"


class Env:
    """A database file with helpers to fill it and to mint tokens."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.db = tmp / "test.db"
        self._files = 0

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
        conn = open_database(self.db)
        now = int(time.time() * 1_000_000)
        with conn:
            account_id = ensure_account(conn, account, now)
            token_id, secret, digest = new_token()
            insert_token(
                conn,
                token_id=token_id,
                account_id=account_id,
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
        return TestClient(create_app(self.settings(**overrides)), base_url="http://testserver.local")


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


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
    def __init__(self, process: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.process = process
        self.url = url
        self.log = log

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        return self.process.returncode


def start_server(
    db: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 20.0, port: int | None = None
) -> Server:
    """`buildreport serve` on a free port (or the one given) of 127.0.0.1, once /healthz answers."""
    port = port or free_port()
    log = db.parent / f"server-{port}.log"
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
        *args,
    ]
    handle = log.open("wb")
    process = subprocess.Popen(
        command, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})}
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return Server(process, url, log)
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"server did not answer within {timeout}s:\n{log.read_text()}")


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def _start(db: Path, *args: str, **kwargs: Any) -> Server:
        server = start_server(db, *args, **kwargs)
        started.append(server)
        return server

    yield _start
    for server in started:
        server.stop()
