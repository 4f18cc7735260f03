"""The deliverer: one task per server worker that sends events to webhooks, at least once, nothing lost.

Deliveries are rows written with their events. The deliverer leases the first due delivery of each hook
(store/hooks.py), sends each on its own task, one hook's one at a time, many hooks at once, and records how it
went: delivered (2xx); failed for good after `hook_retry_for` or at once on 410 Gone (which also disables the
hook); otherwise tried again after `hook_retry_base` seconds, doubling. Its database work runs on a thread of
its own, so neither a slow receiver nor the database holds up the event loop that answers requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Callable
from typing import TypeVar

import httpx
import msgspec

from buildreport.config import Settings
from buildreport.events import sign
from buildreport.events.derive import Rules
from buildreport.events.links import linked
from buildreport.events.models import HookFormat, SlackMessage, StoredEvent
from buildreport.signing import LinkSigner
from buildreport.store import engine_errors
from buildreport.store.errors import DatabaseError
from buildreport.store.hooks import Claimed
from buildreport.store.writer import Writes
from buildreport.store.writer_jobs import ClaimDeliveries, Delivered, DropOldEvents, GiveUp, RetryLater, Settled
from buildreport.times import US_PER_SECOND, now_us

log = logging.getLogger("buildreport.events")
T = TypeVar("T")
# Hooks one worker sends to at once.
MAX_SENDING = 64
# How often the deliverer looks for due deliveries when nothing told it of new ones (other workers' events,
# retries coming due, leases expiring).
POLL_SECONDS = 0.5
# A lease outlives the attempt's time-out by this much; a dead deliverer's deliveries wait this long.
LEASE_MARGIN_SECONDS = 5.0
RETENTION_EVERY_SECONDS = 600.0
RETENTION_BATCH = 1000
MAX_ERROR_CHARS = 300
_STORED = msgspec.json.Decoder(StoredEvent)


def event_rules(settings: Settings) -> Rules:
    return Rules(settings.regression_percent, settings.regression_seconds, settings.regression_baseline)


def slack_body(body: bytes) -> bytes:
    """A Slack-style message for an event (with its link) as sent."""
    event = _STORED.decode(body)
    build = msgspec.json.decode(event.build)
    what = {"build.started": "started", "build.finished": "finished", "build.failed": "broke",
            "build.recovered": "recovered", "build.regressed": "got slower"}[event.type.value]
    text = (f"{event.series.derivation} ({event.series.system}) {what}: build {build['build_id']}, "
            f"{build['status']}")
    if event.regression is not None:
        text += (f"; median {event.regression.recent_median_seconds:.0f}s, was "
                 f"{event.regression.baseline_median_seconds:.0f}s")
    if event.link is not None:
        text += f" {event.link.url}"
    return msgspec.json.encode(SlackMessage(text))


class Deliverer:
    def __init__(self, settings: Settings, signer: LinkSigner, count: Callable[[str], None]) -> None:
        self._settings = settings
        self._count = count  # each delivery's outcome, for the server's metrics
        self._signer = signer
        self._writes: Writes | None = None
        self._owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._woken = asyncio.Event()
        self._sending: set[asyncio.Task[None]] = set()
        self._client = httpx.AsyncClient(timeout=settings.hook_timeout, follow_redirects=False)
        self._task: asyncio.Task[None] | None = None
        self._retention_due = 0.0
        self._closing = False

    def start(self, writes: Writes) -> None:
        """Deliver, with `writes` doing the bookkeeping."""
        self._writes = writes
        self._task = asyncio.get_running_loop().create_task(self._run())

    def wake(self, _events: int = 0) -> None:
        self._woken.set()

    async def close(self) -> None:
        """Stop sending; a delivery under way is left to its lease, and sent again after it expires."""
        self._closing = True  # a cancellation that lands as the wait ends can be lost; this flag is not
        self._woken.set()
        tasks = [t for t in (self._task, *self._sending) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._client.aclose()

    async def _run(self) -> None:
        while not self._closing:
            self._woken.clear()
            try:
                await self._dispatch()
                await self._keep_retention()
            except (DatabaseError, *engine_errors()) as exc:
                log.warning("webhook deliveries wait for the database: %s", exc)
            except Exception:  # the deliverer keeps going; what it leased is sent again once the lease expires
                log.exception("webhook deliveries: unexpected error")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POLL_SECONDS):
                    await self._woken.wait()

    async def _dispatch(self) -> None:
        await self._claim_due(len(self._sending))

    async def _claim_due(self, sending: int, settled: Settled | None = None) -> None:
        """Record how a delivery went, if one did, then lease the deliveries due now, as many as there is room
        for beside `sending`, and send them."""
        room = MAX_SENDING - sending
        if room <= 0 and settled is None:
            return
        now = now_us()
        lease = now + int((self._settings.hook_timeout + LEASE_MARGIN_SECONDS) * US_PER_SECOND)
        assert self._writes is not None, "start() first"
        outcome = await self._writes.run(ClaimDeliveries(now, lease, self._owner, max(room, 0), settled))
        self._spawn(outcome.claimed or [])

    def _spawn(self, claimed: list[Claimed]) -> None:
        for item in claimed:
            task = asyncio.get_running_loop().create_task(self._send(item))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _settle(self, settled: Settled) -> None:
        """Record how a delivery went and, in the same job of the writer, lease what is due now (the hook's
        next delivery among them): a hook's deliveries follow each other without waiting for the loop."""
        await self._claim_due(len(self._sending) - 1, settled)  # this delivery's task is about to end

    async def _keep_retention(self) -> None:
        loop = asyncio.get_running_loop()
        if loop.time() < self._retention_due:
            return
        self._retention_due = loop.time() + RETENTION_EVERY_SECONDS
        before = now_us() - int(self._settings.event_retention * US_PER_SECOND)
        assert self._writes is not None, "start() first"
        while (await self._writes.run(DropOldEvents(before, RETENTION_BATCH))).count == RETENTION_BATCH:
            await asyncio.sleep(0)  # bounded batches, with the loop's other work between them

    def _body(self, item: Claimed) -> bytes:
        settings = self._settings
        body = linked(item.body, item.account_id, item.build_id, self._signer, settings.base_url,
                      settings.event_link_ttl)
        return slack_body(body) if item.format == HookFormat.slack else body

    async def _send(self, item: Claimed) -> None:
        try:
            await self._attempt(item)
            return  # its outcome is recorded, and what was due then leased
        except (DatabaseError, *engine_errors()) as exc:
            log.warning("delivery %d: its outcome waits for the database: %s", item.delivery_id, exc)
        except Exception:
            log.exception("delivery %d: unexpected error; it is sent again once its lease expires", item.delivery_id)
        self.wake()  # the loop looks again

    async def _attempt(self, item: Claimed) -> None:
        body = self._body(item)
        timestamp = now_us() // US_PER_SECOND
        status: int | None = None
        try:
            answer = await self._client.post(item.url, content=body,
                                             headers=sign.headers(item.secret, item.event_id, timestamp, body))
            status, error = answer.status_code, f"HTTP {answer.status_code}"
        except httpx.TimeoutException:
            error = f"no answer within {self._settings.hook_timeout:g}s"
        except httpx.HTTPError as exc:
            error = (str(exc) or type(exc).__name__)[:MAX_ERROR_CHARS]
        now = now_us()
        if status is not None and 200 <= status < 300:
            self._count("delivered")
            await self._settle(Delivered(item.delivery_id, status, now))
            return
        delay = self._settings.hook_retry_base * 2 ** max(item.attempts - 1, 0)
        next_us = now + int(delay * US_PER_SECOND)
        if status == 410 or next_us > item.created_us + int(self._settings.hook_retry_for * US_PER_SECOND):
            self._count("gone" if status == 410 else "failed")
            await self._settle(GiveUp(item.delivery_id, status, error, now, status == 410))
            return
        self._count("retried")
        await self._settle(RetryLater(item.delivery_id, status, error, next_us))
