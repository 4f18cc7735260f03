"""How a server learns that a commit changed what a token grants, or a build, without reading it on every request.

The schema's triggers notify TOKENS_CHANNEL whenever a token or an account changes, and BUILDS_CHANNEL once per
transaction that writes builds, whoever commits it (schema.py). A server keeps one connection that LISTENs on
both. PostgreSQL signals every listener as part of the commit, before the committer hears it is done (its
async.c), and a listening session delivers what it was signalled at the latest just after its next transaction
ends (the NOTIFY documentation). So before a version is given, this connection makes one round trip (a
query) that begins after the caller asked: every notification of a commit that returned before the request
was sent has then arrived, and a revocation, or a build written through another server, is seen at once.
Callers that ask while a round trip is under way share the next one, so under load one round trip serves many
requests.

Nothing is trusted without that connection: while it is down (a restart, a failover, a network fault) or a
round trip fails or takes longer than ROUND_TRIP_SECONDS, the version is None, tokens and builds are read on
every request, and a new connection is tried at most every few seconds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import psycopg

from buildreport.store.postgres.connection import BUILDS_CHANNEL, TOKENS_CHANNEL, connect_kwargs

log = logging.getLogger("buildreport.store")

RETRY_SECONDS = 5.0
ROUND_TRIP_SECONDS = 2.0
# A silent peer is given up after keepalives_idle + keepalives_count * keepalives_interval seconds.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3,
              "connect_timeout": 5}  # fmt: skip


# Each channel and the table whose changes it announces. DDL notifies no channel, so the round trip also reads each
# table's identity: a table dropped leaves its channel's version None, a table made anew (a restore) changes it.
TABLES = {TOKENS_CHANNEL: "auth.tokens", BUILDS_CHANNEL: "public.builds"}
CHANNELS = tuple(TABLES)
_ROUND_TRIP = "SELECT " + ", ".join(f"to_regclass('{table}')::oid" for table in TABLES.values())


class Changes:
    """The version of what each channel announces changes to (tokens, builds), as this server has heard it: it
    differs after each notification received on the channel and each new connection; None while no connection
    listens."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._broken: psycopg.AsyncConnection[Any] | None = None
        self._opened = 0  # connections opened: each may follow a change missed
        self._heard = dict.fromkeys(CHANNELS, 0)  # notifications heard on each channel
        self._tables: dict[str, int | None] = dict.fromkeys(CHANNELS)  # each table's identity at the last round trip
        self._next_try = 0.0
        self._connecting: asyncio.Task[None] | None = None
        self._turn = asyncio.Lock()
        self._begun = self._finished = 0

    async def open(self) -> None:
        """Listen; a failure leaves the version None until a later try succeeds."""
        self._next_try = time.monotonic() + RETRY_SECONDS
        conn = None
        try:
            conn = await psycopg.AsyncConnection.connect(self._url, **connect_kwargs(), **KEEPALIVES)
            conn.add_notify_handler(self._notified)
            for channel in CHANNELS:
                await conn.execute(f"LISTEN {channel}")
        except BaseException as exc:  # a server that stops while this connects closes it too
            if conn is not None:
                await conn.close()
            if not isinstance(exc, psycopg.Error):
                raise
            log.warning("not listening for changes (tokens and builds are read on every request): %s", exc)
            return
        self._opened += 1
        self._conn = conn

    async def close(self) -> None:
        if self._connecting is not None:
            self._connecting.cancel()
            await asyncio.gather(self._connecting, return_exceptions=True)
        for conn in (self._conn, self._broken):
            if conn is not None:
                await conn.close()
        self._conn = self._broken = None

    async def version(self, channel: str) -> bytes | None:
        """The version of `channel` once every notification of a commit made before this call has arrived."""
        target = self._begun + 1  # the first round trip that begins after this call
        async with self._turn:  # one round trip at a time; those waiting behind it share the next
            conn = self._conn
            if conn is None or conn.closed:
                self._try_again()
                return None
            if self._finished < target:
                self._begun += 1
                try:
                    async with asyncio.timeout(ROUND_TRIP_SECONDS):
                        row = await (await conn.execute(_ROUND_TRIP)).fetchone()
                except (psycopg.Error, TimeoutError) as exc:
                    log.warning("stopped listening for changes (tokens and builds are read on every request): %r", exc)
                    self._drop()
                    return None
                self._tables = dict(zip(CHANNELS, row or (None,) * len(CHANNELS), strict=True))
                self._finished = self._begun
            table = self._tables[channel]
            return None if table is None else b"%d.%d.%d" % (self._opened, table, self._heard[channel])

    def _notified(self, notify: psycopg.Notify) -> None:
        if notify.channel in self._heard:
            self._heard[notify.channel] += 1

    def _drop(self) -> None:
        self._broken, self._conn = self._conn, None
        self._try_again()

    def _try_again(self) -> None:
        if self._connecting is not None or time.monotonic() < self._next_try:
            return
        self._connecting = asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        try:
            if self._broken is not None:
                broken, self._broken = self._broken, None
                await broken.close()  # nothing to say goodbye on: this frees the socket
            await self.open()
        finally:
            self._connecting = None
