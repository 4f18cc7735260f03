"""The one writer's process: every write of a server, whatever its number of workers, in turn.

It listens on a Unix socket in a folder only the server's user can enter, and answers only clients that
know the server's key (multiprocessing.connection's challenge). Each client (a worker) has a connection of its
own, read by a thread of its own; the jobs of all of them run one at a time on one write connection, each whole
in one transaction (store/transaction.py), so the database sees one writer per server. The process ends when
the control pipe closes, after the job under way: when its owner stops it, and when its owner dies (the kernel
closes the owner's end), so a killed server leaves neither a writer nor its socket folder behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection, Listener
from typing import Any

from buildreport.events.derive import Rules
from buildreport.store import queries, trust
from buildreport.store.engines import connect, engine_errors, engine_message, is_postgres
from buildreport.store.errors import DatabaseError
from buildreport.store.hooks import Claimed, claim, delivered, drop_old_events, give_up, retry_later
from buildreport.store.prune import give_back_space, prune, writers_turn
from buildreport.store.transaction import WriteConflicts, WriteSession
from buildreport.store.writer_jobs import (
    ENCODER,
    JOB,
    ClaimDeliveries,
    Delivered,
    GiveUp,
    IssueToken,
    Job,
    Outcome,
    Prune,
    Settled,
    TouchToken,
    WriteBuilds,
)

READY = b"ready"


def _settle(conn: Any, settled: Settled) -> None:
    if isinstance(settled, Delivered):
        delivered(conn, settled.delivery_id, settled.status, settled.now_us)
    elif isinstance(settled, GiveUp):
        give_up(conn, settled.delivery_id, settled.status, settled.error, settled.now_us, settled.disable)
    else:
        retry_later(conn, settled.delivery_id, settled.status, settled.error, settled.next_us)


def _claim(conn: Any, job: ClaimDeliveries) -> list[Claimed]:
    if job.settled is not None:
        _settle(conn, job.settled)
    return claim(conn, job.now_us, job.lease_until_us, job.owner, job.room) if job.room > 0 else []


class Tokens:
    """Where tokens are written: SQLite's tokens file, on a connection of its own (the builds' file stays free
    for others meanwhile), or PostgreSQL's database, on the write connection. Each statement commits at once."""

    def __init__(self, db: str, session: WriteSession) -> None:
        self._db, self._session = db, session
        self._conn: Any = None

    def execute(self, query: queries.Query) -> None:
        sql, params = query
        if is_postgres(self._db):
            self._session.run(lambda conn: conn.execute(sql, params))
            return
        if self._conn is None:
            from buildreport.store.sqlite.schema import open_auth

            self._conn = open_auth(self._db)
        self._conn.execute(sql, params)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def do(session: WriteSession, tokens: Tokens, job: Job) -> Outcome:
    """Do one job on the writer's connections, in its turn among the server's writers."""
    if isinstance(job, TouchToken):
        tokens.execute(queries.touch_token(job.token_id, job.now_us))
        return Outcome()
    if isinstance(job, IssueToken):
        tokens.execute(trust.insert_token(job.token))
        return Outcome()
    if isinstance(job, WriteBuilds):
        result, events = session.write_counted(job.account, job.records, job.now_us)
        return Outcome(result=result, events=events)
    if isinstance(job, ClaimDeliveries):
        return Outcome(claimed=session.run(lambda conn: _claim(conn, job)))
    return Outcome(count=session.run(lambda conn: drop_old_events(conn, job.before_us, job.batch)))


class Jobs:
    """One write connection and the turn every client's job takes on it."""

    def __init__(self, db: str, rules: Rules) -> None:
        self.db = db
        self.session = WriteSession(db, rules)
        self.tokens = Tokens(db, self.session)
        self.turn = threading.Lock()
        self.pid = os.getpid()

    def outcome(self, payload: bytes) -> Outcome:
        try:
            job = JOB.decode(payload)
            if isinstance(job, Prune):
                outcome = self.prune(job)  # it takes the turn batch by batch
            else:
                with self.turn:
                    outcome = do(self.session, self.tokens, job)
            outcome.writer = self.pid
            return outcome
        except WriteConflicts as exc:
            return Outcome(conflicts=exc.invalid, writer=self.pid)
        except (DatabaseError, *engine_errors()) as exc:
            return Outcome(unavailable=engine_message(exc), writer=self.pid)
        except Exception as exc:  # reported to the worker, which logs it and answers 500
            return Outcome(failed=f"{type(exc).__name__}: {exc}", writer=self.pid)


    def prune(self, job: Prune) -> Outcome:
        """Retention's prune on a connection of its own, each batch (and each step giving space back) in the turn
        of this writer's jobs and of the database's writers (store/prune.py), then its space given back."""
        conn = connect(self.db)
        try:
            with writers_turn(self.db) as database_turn:

                @contextlib.contextmanager
                def turn() -> Iterator[None]:
                    with self.turn, database_turn():
                        yield

                done = prune(conn, job.policy, job.now_us, turn)
                done.freed_bytes = give_back_space(conn, turn) or 0
        finally:
            conn.close()
        return Outcome(pruned=done)


def _answer(client: Connection, jobs: Jobs) -> None:
    """One client's jobs, each answered, until it hangs up."""
    with contextlib.closing(client):
        while True:
            try:
                payload = client.recv_bytes()
                client.send_bytes(ENCODER.encode(jobs.outcome(payload)))
            except (EOFError, OSError):
                return


def _accept(listener: Listener, jobs: Jobs) -> None:
    while True:
        try:
            client = listener.accept()
        except OSError:  # the listener was closed: the writer is stopping
            return
        except Exception:  # a client without the key (AuthenticationError) or gone before the handshake
            continue
        threading.Thread(target=_answer, args=(client, jobs), name="writer-client", daemon=True).start()


def serve(control: Connection, address: str, authkey: bytes, db: str, rules: Rules) -> None:
    """The writer process: listen at `address`, say so on `control`, write until `control` closes."""
    # Ctrl-C at a terminal and a stop sent to the whole process group are the server's to act on: it finishes
    # what is under way, then closes the control pipe, which ends this process.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    jobs = Jobs(db, rules)
    with contextlib.suppress(FileNotFoundError):  # left by a writer that was killed
        os.unlink(address)
    listener = Listener(address, family="AF_UNIX", authkey=authkey)
    threading.Thread(target=_accept, args=(listener, jobs), name="writer-accept", daemon=True).start()
    control.send_bytes(READY)
    try:
        with contextlib.suppress(EOFError, OSError):
            control.recv_bytes()  # nothing is ever sent: this waits for the owner to close it
        with jobs.turn:  # the job under way ends first
            listener.close()
            jobs.tokens.close()
            jobs.session.close()
    finally:  # even when a connection fails to close (its database gone): nothing is left behind
        _remove(address)


def _remove(address: str) -> None:
    """The socket and the owner's private folder, when the owner could not remove them (it was killed)."""
    for remove, path in ((os.unlink, address), (os.rmdir, os.path.dirname(address))):
        with contextlib.suppress(OSError):
            remove(path)
