"""`buildreport push`: send the spool's files to `POST /builds`, oldest first, without losing or doubling one.

A file is deleted only once every record of it was acknowledged; until then a retry resends it, which
changes nothing for the records already written (they name their builds by id). Each file is locked
(fcntl) while it is sent, so several pushers can drain one spool.

What an answer means for a file:
- 200: the batch is written; the next one follows.
- connection errors, timeouts, 408, 429, 5xx: the same batch again after a pause that doubles each
  time, with jitter, or what `Retry-After` asks for.
- 413 for a batch of more than one record: the batch is halved and sent again; a 400 that names the
  service's `max_records` below the batch size: batches of that size from then on.
- 400, 409, 413, 415, 422: the file itself is wrong. It moves to `rejected/` with the problem document
  beside it (`NAME.problem.json`), and the pusher goes on with the next file.
- any other answer (401, 403, 404, a redirect, a 200 that is not buildreport's): the token or the
  address is wrong, not the file. Nothing moves; the pusher stops and says why.
"""

from __future__ import annotations

import errno
import fcntl
import gzip
import json
import os
import random
import threading
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from pathlib import Path

import httpx
import msgspec

from buildreport import __version__
from buildreport.record.spool import REJECTED, pending_files

FILE_ERRORS = frozenset({400, 409, 413, 415, 422})
RETRY_STATUSES = frozenset({408, 429})
FIRST_DELAY = 0.5  # seconds before the first retry; doubled each time up to max_delay
LONGEST_RETRY_AFTER = 600.0


class PushStopped(Exception):
    """The service refuses the pusher itself (token, address): nothing more can be sent."""


class GaveUp(Exception):
    """Retries ran out; the file stays in the spool."""


class PushStats(msgspec.Struct):
    files_sent: int = 0
    files_rejected: int = 0
    files_left: int = 0
    records: int = 0
    created: int = 0
    updated: int = 0
    unchanged: int = 0


class Pusher:
    def __init__(
        self,
        url: str,
        token: str,
        spool: Path,
        *,
        batch_size: int = 500,
        retries: int | None = 8,
        timeout: float = 60.0,
        max_delay: float = 30.0,
        stop: threading.Event | None = None,
        say: Callable[[str], None] = print,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.endpoint = url.rstrip("/") + "/builds"
        self.spool = spool
        self.batch_size = batch_size
        self.retries = retries  # None: retry for as long as it takes (--follow)
        self.max_delay = max_delay
        self.stop = stop or threading.Event()
        self.say = say
        self.stats = PushStats()
        self.client = httpx.Client(
            transport=transport,
            timeout=timeout,
            headers={
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/x-ndjson",
                "Content-Encoding": "gzip",
                "User-Agent": f"buildreport-push/{__version__}",
            },
        )

    def close(self) -> None:
        self.client.close()

    def push_all(self) -> bool:
        """One pass over the spool; True when nothing this pusher could send is left behind."""
        files = pending_files(self.spool)
        for index, path in enumerate(files):
            if self.stop.is_set():
                self.stats.files_left += len(files) - index
                return False
            try:
                self.push_file(path)
            except GaveUp as exc:
                self.say(f"{path.name}: left in the spool: {exc}")
                self.stats.files_left += len(files) - index
                return False
        return True

    def push_file(self, path: Path) -> None:
        """Send one file under its lock, then delete it; or move it to rejected/ when the service refuses it."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return  # another pusher sent it meanwhile
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
                    return  # another pusher is sending it
                raise
            try:
                if os.stat(path).st_ino != os.fstat(fd).st_ino:
                    return
            except FileNotFoundError:
                return  # sent and deleted by another pusher between our open and our lock
            with os.fdopen(os.dup(fd), "rb") as handle:
                lines = [line.rstrip(b"\r\n") for line in handle if line.strip()]
            problem = self._send_lines(path, lines)
            if problem is None:
                path.unlink(missing_ok=True)  # missing: removed by hand meanwhile; it was sent all the same
                self.stats.files_sent += 1
            else:
                self._reject(path, problem)
        finally:
            os.close(fd)  # releases the lock

    def _send_lines(self, path: Path, lines: list[bytes]) -> bytes | None:
        """Send a file's records in batches; None when all are acknowledged, else the refusal's problem."""
        start, size = 0, self.batch_size
        while start < len(lines):
            batch = lines[start : start + size]
            response = self._post(b"\n".join(batch) + b"\n")
            if response.status_code == 413 and size > 1:
                size = max(1, size // 2)
                continue
            limit = _max_records(response)
            if limit is not None and 1 <= limit < len(batch):
                size = self.batch_size = limit
                continue
            if response.status_code != 200:
                return _problem_document(response)
            try:
                answer = response.json()
                counts = (int(answer["created"]), int(answer["updated"]), int(answer["unchanged"]))
            except (ValueError, KeyError, TypeError) as exc:
                raise PushStopped(f"{self.endpoint} answered 200, but not as buildreport does") from exc
            self.stats.records += len(batch)
            self.stats.created += counts[0]
            self.stats.updated += counts[1]
            self.stats.unchanged += counts[2]
            start += len(batch)
        self.say(f"{path.name}: sent {len(lines)} record{'s' if len(lines) != 1 else ''}")
        return None

    def _post(self, body: bytes) -> httpx.Response:
        """The answer to one batch that is not worth retrying; GaveUp when retries or time ran out."""
        content = gzip.compress(body, compresslevel=6)
        attempt = 0
        while True:
            try:
                response = self.client.post(self.endpoint, content=content)
            except httpx.TransportError as exc:
                reason, wait = f"{type(exc).__name__}: {exc}", None
            else:
                status = response.status_code
                if status == 200 or status in FILE_ERRORS:
                    return response
                if status not in RETRY_STATUSES and status < 500:  # a redirect, 401, 403, 404, …
                    raise PushStopped(f"{self.endpoint} answered {status}: {_detail(response)}")
                reason, wait = f"HTTP {status}: {_detail(response)}", retry_after(response)
            attempt += 1
            if self.retries is not None and attempt > self.retries:
                raise GaveUp(f"{reason} (after {self.retries} retries)")
            delay = wait if wait is not None else backoff(attempt, self.max_delay)
            self.say(f"retrying in {delay:.1f}s: {reason}")
            if self.stop.wait(delay):
                raise GaveUp("stopped")

    def _reject(self, path: Path, problem: bytes) -> None:
        rejected = self.spool / REJECTED
        rejected.mkdir(exist_ok=True)
        (rejected / (path.name + ".problem.json")).write_bytes(problem)
        os.rename(path, rejected / path.name)
        self.stats.files_rejected += 1
        self.say(f"{path.name}: rejected, moved to {REJECTED}/ with {path.name}.problem.json")


def backoff(attempt: int, max_delay: float) -> float:
    """Exponential backoff with jitter: half the capped delay, plus up to as much again at random."""
    cap = min(max_delay, FIRST_DELAY * 2 ** (attempt - 1))
    return cap / 2 + random.uniform(0, cap / 2)


def retry_after(response: httpx.Response) -> float | None:
    """Seconds a `Retry-After` header asks for (delta-seconds or an HTTP date), bounded; None without one."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    if value.isdigit():
        return min(float(value), LONGEST_RETRY_AFTER)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return min(max(0.0, moment.timestamp() - time.time()), LONGEST_RETRY_AFTER)


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail", "")) or response.reason_phrase
    except (ValueError, AttributeError):
        return response.reason_phrase


def _problem_document(response: httpx.Response) -> bytes:
    """The service's problem document, or one made from the status when the body is not one."""
    try:
        document = response.json()
        if isinstance(document, dict):
            return json.dumps(document, indent=2).encode() + b"\n"
    except ValueError:
        pass
    made = {"status": response.status_code, "title": response.reason_phrase, "detail": response.text[:2000]}
    return json.dumps(made, indent=2).encode() + b"\n"


def _max_records(response: httpx.Response) -> int | None:
    """The service's records-per-request limit, from a 400 that refused a batch for being over it."""
    if response.status_code != 400:
        return None
    try:
        limit = response.json().get("max_records")
    except (ValueError, AttributeError):
        return None
    return limit if isinstance(limit, int) and not isinstance(limit, bool) else None
