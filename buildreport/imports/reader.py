"""The reading process of a large import into a database with no builds (see store.fresh_load).

It decodes and checks the records as every import does (files.read_records), makes their rows and adds up
their totals, and sends them over a pipe in batches, as MessagePack: the importing process only inserts
them. It never opens the database. Should any record be bad it sends no more rows, reads on to name every
bad record, and ends with them: the import writes nothing.
"""

from __future__ import annotations

import gc
import multiprocessing
import queue
import signal
import threading
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

import msgspec

from buildreport.imports.files import MAX_REPORTED_ERRORS, Location, RecordError, read_records
from buildreport.lifeline import follow_parent_process
from buildreport.store.build_rows import BATCH_SIZE, Row, pack_log, to_build
from buildreport.store.fresh_load import FreshLoad, TagTotals

STOP_SECONDS = 10.0
SENDS_AHEAD = 8  # batches of rows queued to be sent: some 16 MiB


class Batch(msgspec.Struct, tag=True, array_like=True):
    read: int  # records read so far, for progress
    accounts: list[tuple[int, str]]  # accounts first named in this batch: (id, name)
    builds: list[tuple]
    logs: list[tuple]
    locations: list[Location]  # of each build's record
    tag_hours: list[tuple] = []  # a part of the hourly figures of tag pairs, when the reader's are full (TagTotals)


class Finished(msgspec.Struct, tag=True, array_like=True):
    read: int
    errors: list[RecordError]  # the first MAX_REPORTED_ERRORS
    total_errors: int
    tag_hours: list[tuple]  # the last part of the hourly figures of tag pairs (TagTotals); none after errors


class Failed(msgspec.Struct, tag=True, array_like=True):
    """The reading process met a fault of its own (not a bad record)."""

    kind: str
    message: str


Message = Batch | Finished | Failed
_DECODER = msgspec.msgpack.Decoder(Message)


class ReadingStopped(Exception):
    """The reading process ended before it finished; the import wrote nothing."""

    def __str__(self) -> str:
        return f"{super().__str__()}; nothing was imported"


def messages(paths: list[Path], accounts: dict[str, int]) -> Iterator[Batch | Finished]:
    """The batches of rows of every record in `paths`, then what was read; accounts not in `accounts` (name to
    id) get the ids after the highest there."""
    errors: list[RecordError] = []
    totals = TagTotals()
    next_id = max(accounts.values(), default=0) + 1
    read = 0
    batch = Batch(0, [], [], [], [])
    for location, record in read_records(paths, errors):
        read += 1
        if errors:
            if read % BATCH_SIZE == 0:
                yield Batch(read, [], [], [], [])
            continue
        account_id = accounts.get(record.account)
        if account_id is None:
            account_id = accounts[record.account] = next_id
            next_id += 1
            batch.accounts.append((account_id, record.account))
        row = Row.of(location, account_id, to_build(record, record.build_id, record.restart_of_build_id),
                     pack_log(record.log), None)
        values = row.values()
        batch.builds.append(values)
        totals.add(values, row.build.tags)
        if row.log is not None:
            batch.logs.append(row.log_values())
        batch.locations.append(location)
        if len(batch.builds) >= BATCH_SIZE:
            batch.read = read
            if totals.full:
                batch.tag_hours = totals.take()
            yield batch
            batch = Batch(read, [], [], [], [])
    if errors:
        yield Finished(read, errors[:MAX_REPORTED_ERRORS], len(errors), [])
        return
    if batch.builds:
        batch.read = read
        yield batch
    yield Finished(read, [], 0, totals.take())


def run(channel: Connection, paths: list[Path], accounts: dict[str, int]) -> None:
    """The reading process: every message, in order, down the pipe."""
    # Ctrl-C at a terminal reaches the whole process group: the importing process acts on it and ends this one.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    follow_parent_process()
    # Nothing here makes reference cycles, and the collector's passes over the objects a large import keeps
    # in its totals would only cost time.
    gc.disable()
    encoder = msgspec.msgpack.Encoder()
    sender = _Sender(channel)
    try:
        for message in messages(paths, accounts):
            if not sender.send(encoder.encode(message)):
                return  # the importing process stopped listening: it has given up the import
    except BaseException as exc:  # told to the importing process, which reports it without a traceback
        sender.send(encoder.encode(Failed(type(exc).__name__, str(exc))))
    finally:
        sender.close()
        channel.close()


class _Sender:
    """Sends from a thread of its own, a few messages ahead: while the importing process inserts one batch,
    the next ones wait in the pipe's queue and this process goes on reading instead of blocking on a send."""

    def __init__(self, channel: Connection) -> None:
        self._channel = channel
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=SENDS_AHEAD)
        self._broken = False
        self._thread = threading.Thread(target=self._run, name="buildreport-import-send", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (payload := self._queue.get()) is not None:
            if self._broken:
                continue  # drained, so that send() never waits on a full queue
            try:
                self._channel.send_bytes(payload)
            except OSError:  # BrokenPipeError, ConnectionResetError: the other end is closed
                self._broken = True

    def send(self, payload: bytes) -> bool:
        """Queue a message; False once the importing process no longer takes them."""
        if not self._broken:
            self._queue.put(payload)
        return not self._broken

    def close(self) -> None:
        """Wait until every queued message is sent."""
        self._queue.put(None)
        self._thread.join()


def load(
    into: FreshLoad, paths: list[Path], errors: list[RecordError], on_progress: Callable[[int], None] | None
) -> tuple[int, int]:
    """Import `paths` through a reading process `into` a load: (records read, bad records not in `errors`)."""
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: never fork a process's threads
    ours, theirs = context.Pipe(duplex=False)
    process = context.Process(target=run, args=(theirs, paths, into.accounts), name="buildreport-import-reader")
    process.start()
    theirs.close()
    try:
        return take(into, _received(ours, process), errors, on_progress)
    finally:
        ours.close()
        process.join(STOP_SECONDS if process.exitcode is not None else 0.5)
        if process.is_alive():
            process.kill()
            process.join(STOP_SECONDS)
        process.close()


def _received(channel: Connection, process: BaseProcess) -> Iterator[Batch | Finished]:
    """The reading process's messages; its faults raised here."""
    while True:
        try:
            message = _DECODER.decode(channel.recv_bytes())
        except (EOFError, OSError):  # the pipe closed, between messages or within one
            process.join(STOP_SECONDS)
            raise ReadingStopped(f"the import's reading process ended early (exit code {process.exitcode})") from None
        if isinstance(message, Failed):
            if message.kind == "MemoryError":
                raise MemoryError(message.message)
            raise ReadingStopped(f"the import's reading process failed: {message.kind}: {message.message}")
        yield message


def take(
    into: FreshLoad,
    received: Iterator[Batch | Finished],
    errors: list[RecordError],
    on_progress: Callable[[int], None] | None,
) -> tuple[int, int]:
    """Insert what the reading process sends: (records read, bad records not in `errors`). Bad records and
    conflicts are appended to `errors`; once there are any, no more rows are inserted."""
    for message in received:
        if isinstance(message, Finished):
            errors += message.errors
            if not errors:
                into.finish(message.tag_hours)
            return message.read, message.total_errors - len(message.errors)
        if not errors and message.builds:
            into.add(message.accounts, message.builds, message.logs, message.locations, message.tag_hours)
        if on_progress is not None:
            on_progress(message.read)
    raise ReadingStopped("the import's reading process sent no end")
