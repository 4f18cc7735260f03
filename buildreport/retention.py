"""The server's retention: once a day, `prune` with the server's settings, in a thread of the serving process.

It runs in the process `serve` starts (the supervisor when there are several workers), so that one server
prunes once however many workers it has, and the server's one writer does it (store/writer.py): each batch
takes the writer's turn like a request's write, so writes wait at most one batch (store/prune.py); the space
freed is given back afterwards, a step at a time.
"""

from __future__ import annotations

import logging
import threading
import time

from buildreport.config import Settings
from buildreport.store import engine_errors
from buildreport.store.errors import DatabaseError, DatabaseUnavailable
from buildreport.store.prune import Policy, Pruned
from buildreport.store.writer import WriteProcess, WriterClient, server_writer
from buildreport.store.writer_jobs import ENCODER, Outcome, Prune

log = logging.getLogger("buildreport.retention")
FIRST_RUN_SECONDS = 60.0  # after the start: the server answers first
EVERY_SECONDS = 86_400.0


def policy_of(settings: Settings) -> Policy | None:
    if settings.retention_us is None:
        return None
    return Policy(settings.retention_us, logs_only=settings.retention_logs_only, keep_usage=settings.keep_usage)


def run_once(settings: Settings, policy: Policy) -> Pruned:
    """One prune of the server's database by `policy`, by the server's writer (one of its own outside `serve`),
    then its space given back."""
    job = ENCODER.encode(Prune(policy, int(time.time() * 1_000_000)))
    shared = server_writer()
    if shared is not None:
        return _pruned(_run(shared, job))
    own = WriteProcess(settings.db)
    try:
        return _pruned(own.run(job))
    finally:
        own.stop()


def _run(client: WriterClient, job: bytes) -> Outcome:
    try:
        return client.run(job)
    finally:
        client.close()


def _pruned(outcome: Outcome) -> Pruned:
    if outcome.unavailable is not None:
        raise DatabaseUnavailable(outcome.unavailable)
    if outcome.pruned is None:
        raise RuntimeError(f"the prune failed: {outcome.failed}")
    return outcome.pruned


def _loop(settings: Settings, policy: Policy, first: float, every: float, stop: threading.Event) -> None:
    wait = first
    while not stop.wait(wait):
        wait = every
        try:
            done = run_once(settings, policy)
        except (DatabaseError, *engine_errors()) as exc:  # the next day tries again; nothing is half-done
            log.error("retention: pruning failed: %s", exc)
            continue
        except Exception as exc:  # a fault of the program: said in the log, and the server serves on
            log.error("retention: pruning failed: %s: %s", type(exc).__name__, exc)
            continue
        log.info("retention: removed %d builds and %d logs created over %d s ago; gave back %d bytes",
                 done.builds, done.logs, policy.older_than_us // 1_000_000, done.freed_bytes)


def start(settings: Settings, first: float = FIRST_RUN_SECONDS, every: float = EVERY_SECONDS) -> threading.Event:
    """Start pruning by the server's retention setting, if it has one; set the event returned to stop."""
    stop = threading.Event()
    policy = policy_of(settings)
    if policy is not None:
        threading.Thread(target=_loop, args=(settings, policy, first, every, stop), name="retention",
                         daemon=True).start()
    return stop
