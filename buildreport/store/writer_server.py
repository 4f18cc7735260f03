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
from multiprocessing.connection import Connection, Listener

from buildreport.events.derive import Rules
from buildreport.store import engine_errors, engine_message
from buildreport.store.errors import DatabaseError
from buildreport.store.transaction import WriteConflicts, WriteSession
from buildreport.store.writer_jobs import ENCODER, JOB, Outcome, do

READY = b"ready"


class Jobs:
    """One write connection and the turn every client's job takes on it."""

    def __init__(self, db: str, rules: Rules) -> None:
        self.session = WriteSession(db, rules)
        self.turn = threading.Lock()
        self.pid = os.getpid()

    def outcome(self, payload: bytes) -> Outcome:
        try:
            job = JOB.decode(payload)
            with self.turn:
                outcome = do(self.session, job)
            outcome.writer = self.pid
            return outcome
        except WriteConflicts as exc:
            return Outcome(conflicts=exc.invalid, writer=self.pid)
        except (DatabaseError, *engine_errors()) as exc:
            return Outcome(unavailable=engine_message(exc), writer=self.pid)
        except Exception as exc:  # reported to the worker, which logs it and answers 500
            return Outcome(failed=f"{type(exc).__name__}: {exc}", writer=self.pid)


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
    with contextlib.suppress(EOFError, OSError):
        control.recv_bytes()  # nothing is ever sent: this waits for the owner to close it
    with jobs.turn:  # the job under way ends first
        listener.close()  # and removes the socket
        jobs.session.close()
    with contextlib.suppress(OSError):  # the owner's private folder, if the owner could not remove it
        os.rmdir(os.path.dirname(address))
