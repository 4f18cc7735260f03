"""The server's writes run in a process of their own, one per server worker, started on its first write.

A write is Python work (the writer's bookkeeping) between many short database calls, and each of those
calls lets go of the interpreter lock. In a worker that is answering reads at the same time, every one of
them hands the lock to the event loop and waits to get it back, several times slower (bench/store.md). In a
process of its own the write keeps a core and an interpreter to itself, and the reads lose nothing to it.

`Writes` is the worker's side: it sends the validated records (`WriteJob`, as JSON, so times keep their
offsets) over a pipe and waits for the `Outcome`. The process ends when the pipe closes, and with the worker
if that dies first. A process that dies mid-write takes its open transaction with it: nothing of that
request is stored.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import signal
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

import msgspec

from buildreport.events.derive import Rules
from buildreport.lifeline import follow_parent_process
from buildreport.models import BuildRecord, InvalidRecord, WriteResult
from buildreport.store import engine_errors, engine_message
from buildreport.store.errors import DatabaseError, DatabaseUnavailable
from buildreport.store.transaction import DEFAULT_RULES, WriteConflicts, WriteSession

STOP_SECONDS = 10.0


class WriteJob(msgspec.Struct, array_like=True):
    account: str
    now_us: int
    records: list[BuildRecord]


class Outcome(msgspec.Struct, omit_defaults=True, array_like=True):
    """Exactly one of: what was written, the records that conflict, or why the database could not be written."""

    result: WriteResult | None = None
    conflicts: list[InvalidRecord] | None = None
    unavailable: str | None = None  # the database failed or refused (a 503)
    failed: str | None = None  # anything else (a 500)
    events: int = 0  # how many events the write made, with `result`


_JOB = msgspec.json.Decoder(WriteJob)
_OUTCOME = msgspec.json.Decoder(Outcome)
_ENCODER = msgspec.json.Encoder()


def encode_job(account: str, records: list[BuildRecord], now_us: int) -> bytes:
    return _ENCODER.encode(WriteJob(account, now_us, records))


def _outcome_of(session: WriteSession, payload: bytes) -> Outcome:
    try:
        job = _JOB.decode(payload)
        result, events = session.write_counted(job.account, job.records, job.now_us)
        return Outcome(result=result, events=events)
    except WriteConflicts as exc:
        return Outcome(conflicts=exc.invalid)
    except (DatabaseError, *engine_errors()) as exc:
        return Outcome(unavailable=engine_message(exc))
    except Exception as exc:  # reported to the worker, which logs it and answers 500
        return Outcome(failed=f"{type(exc).__name__}: {exc}")


def serve(channel: Connection, db: str, rules: Rules = DEFAULT_RULES) -> None:
    """The write process: one job at a time from the pipe, each answered, until the pipe closes."""
    # Ctrl-C at a terminal and a stop sent to the whole process group are the server's to act on: it finishes
    # the write under way, then closes the pipe, which ends this process.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    follow_parent_process()
    session = WriteSession(db, rules)
    try:
        while True:
            try:
                payload = channel.recv_bytes()
                channel.send_bytes(_ENCODER.encode(_outcome_of(session, payload)))
            except (EOFError, OSError):  # the server closed its end, or is gone
                return
    finally:
        session.close()


class WriteProcess:
    """The worker's end of the write process; called by one thread at a time."""

    def __init__(self, db: str, rules: Rules = DEFAULT_RULES) -> None:
        self._db = db
        self._rules = rules
        self._process: BaseProcess | None = None
        self._channel: Connection | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _start(self) -> Connection:
        context = multiprocessing.get_context("spawn")  # never fork a process that runs threads
        ours, theirs = context.Pipe()
        process = context.Process(target=serve, args=(theirs, self._db, self._rules), name="buildreport-writer")
        process.start()
        theirs.close()
        self._process, self._channel = process, ours
        return ours

    def run(self, payload: bytes) -> Outcome:
        """Send one job and wait for its outcome; a process that has died is started again for the next job."""
        channel = self._channel if self._process is not None and self._process.is_alive() else None
        if channel is None:
            self.stop()
            channel = self._start()
        try:
            channel.send_bytes(payload)
            return _OUTCOME.decode(channel.recv_bytes())
        except (EOFError, OSError):
            self.stop()
            return Outcome(unavailable="the write process stopped before it answered")

    def stop(self) -> None:
        """Close the pipe (the process ends on it) and wait for the process; kill it past STOP_SECONDS."""
        channel, process = self._channel, self._process
        self._channel = self._process = None
        if channel is not None:
            channel.close()
        if process is not None:
            process.join(STOP_SECONDS)
            if process.is_alive():
                process.kill()
                process.join(STOP_SECONDS)
            process.close()


class Writes:
    """The server's writes, in the order requests arrive, done by its write process."""

    def __init__(
        self, path: Path | str, rules: Rules = DEFAULT_RULES, on_events: Callable[[int], None] | None = None
    ) -> None:  # a file or a postgresql:// URL; `on_events` is told of each write that made events
        self._process = WriteProcess(str(path), rules)
        self._on_events = on_events
        # One thread waits on the process, so jobs go to it one at a time, in order.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="buildreport-write")

    def _write(self, account: str, records: list[BuildRecord], now_us: int) -> Outcome:
        outcome = self._process.run(encode_job(account, records, now_us))
        if outcome.result is not None:
            return outcome
        if outcome.conflicts is not None:
            raise WriteConflicts(outcome.conflicts)
        if outcome.unavailable is not None:
            raise DatabaseUnavailable(outcome.unavailable)
        raise RuntimeError(f"the write failed: {outcome.failed}")

    async def write(self, account: str, records: list[BuildRecord], now_us: int) -> WriteResult:
        loop = asyncio.get_running_loop()
        outcome = await loop.run_in_executor(self._thread, self._write, account, records, now_us)
        if outcome.events and self._on_events is not None:
            self._on_events(outcome.events)
        assert outcome.result is not None
        return outcome.result

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, self._process.stop)
        self._thread.shutdown(wait=True)
