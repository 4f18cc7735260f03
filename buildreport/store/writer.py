"""One writer per server: every write of the server runs in one process of its own, whatever its workers.

Why a process: a write is Python work (the writer's bookkeeping) between many short database calls, and each
of those calls lets go of the interpreter lock. In a worker that is answering reads at the same time, every one
of them hands the lock to the event loop and waits to get it back, several times slower (bench/store.md). In a
process of its own the write keeps a core and an interpreter to itself, and the reads lose nothing to it.
Why one per server: the database then has one writer, whose jobs take turns in the order they arrive, with
`--workers 1` or `--workers 8` alike.

`WriterProcess` owns it: `serve` starts one before its workers and names it to them in the environment
(`shared_writer`); an app created without `serve` (tests, a TestClient) starts one for itself. A writer that
dies is started again at the same address; the job it was doing dies with its open transaction, so nothing of
that request is stored and the request is answered 503. `WriterClient` is a worker's connection to it, and
`Writes` the worker's asynchronous face (jobs in store/writer_jobs.py, the process in store/writer_server.py).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import multiprocessing
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Client, Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

from buildreport.events.derive import Rules
from buildreport.models import BuildRecord, WriteResult
from buildreport.store.errors import DatabaseUnavailable
from buildreport.store.transaction import DEFAULT_RULES, WriteConflicts
from buildreport.store.writer_jobs import ENCODER, OUTCOME, Job, Outcome, encode_job
from buildreport.store.writer_server import serve

log = logging.getLogger("buildreport.writer")
STOP_SECONDS = 10.0
START_SECONDS = 60.0
RESTART_SECONDS = 0.2
CONNECT_SECONDS = 10.0  # how long a job waits for a writer that is starting (again)
ADDRESS_ENV = "BUILDREPORT_WRITER"
KEY_ENV = "BUILDREPORT_WRITER_KEY"
MAX_BASE_CHARS = 70
GONE = "the write process stopped before it answered"


def _socket_base() -> str:
    """The temporary folder, unless its path is too long for a Unix socket's address (108 bytes on Linux)."""
    base = tempfile.gettempdir()
    return base if len(base) <= MAX_BASE_CHARS else "/tmp"


class WriterProcess:
    """Starts the one writer, starts it again if it dies, stops it; its socket lives in a private folder."""

    def __init__(self, db: str, rules: Rules = DEFAULT_RULES) -> None:
        self._db, self._rules = db, rules
        self.authkey = secrets.token_bytes(32)
        self._process: BaseProcess | None = None
        self._control: Connection | None = None
        self._stopping = threading.Event()
        self._started = threading.Event()
        # It starts the writer, and starts it again whenever it dies, until the owner stops it.
        self._keeper = threading.Thread(target=self._keep, name="buildreport-writer-keeper", daemon=True)
        self._folder = tempfile.mkdtemp(prefix="buildreport-writer-", dir=_socket_base())  # mode 0700
        self.address = os.path.join(self._folder, "writer.sock")
        # An owner that ends without stopping it (an app never shut down) must not wait at exit for a writer
        # that waits for it: multiprocessing joins its children at exit, after this runs.
        atexit.register(self.stop)
        try:
            self._keeper.start()
            if not self._started.wait(START_SECONDS):
                log.warning("the writer is slow to start")
        except BaseException:  # a signal's exception while it starts: nothing is left behind
            self.stop()
            raise

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None else None

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")  # never fork a process that runs threads
        ours, theirs = context.Pipe()
        process = context.Process(target=serve, args=(theirs, self.address, self.authkey, self._db, self._rules),
                                  name="buildreport-writer")
        process.start()
        theirs.close()
        with contextlib.suppress(EOFError, OSError):
            if ours.poll(START_SECONDS):
                ours.recv_bytes()  # READY: the socket listens
        self._process, self._control = process, ours

    def _keep(self) -> None:
        while not self._stopping.is_set():
            self._start()
            self._started.set()
            process = self._process
            assert process is not None
            while not self._stopping.is_set() and process.is_alive():
                multiprocessing.connection.wait([process.sentinel], 0.2)
            if not self._stopping.is_set():
                log.warning("the writer stopped (exit status %s); starting another", process.exitcode)
            self._end()
            self._stopping.wait(RESTART_SECONDS)  # a writer that cannot start is not started in a tight loop

    def _end(self) -> None:
        control, process = self._control, self._process
        self._control = self._process = None
        if control is not None:
            control.close()  # the writer ends on it, after the job under way
        if process is not None:
            process.join(STOP_SECONDS)
            if process.is_alive():
                process.kill()
                process.join(STOP_SECONDS)
            process.close()

    def stop(self) -> None:
        atexit.unregister(self.stop)
        self._stopping.set()
        if self._keeper.ident is not None:  # started
            self._keeper.join(2 * STOP_SECONDS + 1)  # it ends the writer, after the job under way
        shutil.rmtree(self._folder, ignore_errors=True)


class WriterClient:
    """A connection to the one writer; used by one thread at a time."""

    def __init__(self, address: str, authkey: bytes) -> None:
        self._address, self._authkey = address, authkey
        self._conn: Connection | None = None

    def _connect(self) -> Connection:
        deadline = time.monotonic() + CONNECT_SECONDS
        while True:
            try:
                return Client(self._address, family="AF_UNIX", authkey=self._authkey)
            except (OSError, EOFError):  # starting again: its socket is not there yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def run(self, payload: bytes) -> Outcome:
        """Send one job and wait for its outcome; a writer that is gone is reached again for the next job."""
        try:
            if self._conn is None:
                self._conn = self._connect()
        except (OSError, EOFError) as exc:
            return Outcome(unavailable=f"the writer cannot be reached: {exc}")
        try:
            self._conn.send_bytes(payload)
            return OUTCOME.decode(self._conn.recv_bytes())
        except (EOFError, OSError):
            self.close()
            return Outcome(unavailable=GONE)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class WriteProcess:
    """A writer of one's own with a connection to it (an app created without `serve`, tests)."""

    def __init__(self, db: str, rules: Rules = DEFAULT_RULES) -> None:
        self._process = WriterProcess(db, rules)
        self._client = WriterClient(self._process.address, self._process.authkey)

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def address(self) -> str:
        return self._process.address

    def run(self, payload: bytes) -> Outcome:
        return self._client.run(payload)

    def stop(self) -> None:
        self._client.close()
        self._process.stop()


@contextlib.contextmanager
def shared_writer(db: str, rules: Rules = DEFAULT_RULES) -> Iterator[WriterProcess]:
    """The server's one writer, named to the workers (and the app in this process) for as long as it serves."""
    writer = WriterProcess(db, rules)
    os.environ[ADDRESS_ENV], os.environ[KEY_ENV] = writer.address, writer.authkey.hex()
    try:
        yield writer
    finally:
        os.environ.pop(ADDRESS_ENV, None)
        os.environ.pop(KEY_ENV, None)
        writer.stop()


def server_writer() -> WriterClient | None:
    """A connection to the server's one writer, under `serve`; None elsewhere."""
    address, key = os.environ.get(ADDRESS_ENV), os.environ.get(KEY_ENV)
    return WriterClient(address, bytes.fromhex(key)) if address and key else None


class Writes:
    """A worker's writes, in the order its requests arrive, done by the server's one writer."""

    def __init__(
        self, path: Path | str, rules: Rules = DEFAULT_RULES, on_events: Callable[[int], None] | None = None
    ) -> None:  # a file or a postgresql:// URL; `on_events` is told of each write that made events
        self._own: WriteProcess | None = None
        self._path, self._rules = str(path), rules
        self._client = server_writer()  # under `serve`; else a writer of its own, started on the first write
        self._on_events = on_events
        # One thread waits on the writer, so this worker's jobs go to it one at a time, in order.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="buildreport-write")

    @property
    def writer(self) -> WriteProcess | WriterClient:
        if self._client is not None:
            return self._client
        if self._own is None:
            self._own = WriteProcess(self._path, self._rules)
        return self._own

    def _run(self, payload: bytes) -> Outcome:
        outcome = self.writer.run(payload)
        if outcome.conflicts is not None:
            raise WriteConflicts(outcome.conflicts)
        if outcome.unavailable is not None:
            raise DatabaseUnavailable(outcome.unavailable)
        if outcome.failed is not None:
            raise RuntimeError(f"the write failed: {outcome.failed}")
        return outcome

    async def run(self, job: Job) -> Outcome:
        """Any job (a delivery's bookkeeping, ...) done by the writer; DatabaseUnavailable when it could not be."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._run, ENCODER.encode(job))

    async def write(self, account: str, records: list[BuildRecord], now_us: int) -> WriteResult:
        return (await self.write_outcome(account, records, now_us)).result  # type: ignore[return-value]

    async def write_outcome(self, account: str, records: list[BuildRecord], now_us: int) -> Outcome:
        """The write's outcome, with the writer that did it."""
        loop = asyncio.get_running_loop()
        outcome = await loop.run_in_executor(self._thread, self._run, encode_job(account, records, now_us))
        if outcome.events and self._on_events is not None:
            self._on_events(outcome.events)
        return outcome

    def _close(self) -> None:
        if self._client is not None:
            self._client.close()
        if self._own is not None:
            self._own.stop()

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, self._close)
        self._thread.shutdown(wait=True)
