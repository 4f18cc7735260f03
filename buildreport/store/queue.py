"""The queue of reads waiting for one of a server process's connections to a database.

A process keeps a few connections to each database; a burst of requests beyond them waits here, first come
first served, rather than being refused. Only past the queue's bound (as many reads already waiting as its
length allows, or a wait as long as its time allows) is a read refused, with DatabaseBusy: the server answers
503 with Retry-After and says it is busy.

A read takes a turn here before it takes a connection from the pool, and there are as many turns as the pool
has connections: a read that holds a turn waits for a connection only while one opens. The pool's own short
timeout therefore still tells a database that does not answer (503, the database cannot be read) apart from a
server that is merely busy.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from buildreport.store.errors import DatabaseBusy

RETRY_AFTER_S = 5  # what a refused client is told to wait: about the time a busy queue takes to move on


class Turns:
    """`size` reads at once; the others wait in arrival order, at most `length` of them, each at most `wait`
    seconds."""

    def __init__(self, size: int, length: int, wait: float) -> None:
        self.size = size
        self.length = length
        self.wait = wait
        self._held = 0
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        await self._take()
        try:
            yield
        finally:
            self._give_back()

    async def _take(self) -> None:
        if self._held < self.size and not self._waiting:
            self._held += 1
            return
        if len(self._waiting) >= self.length:
            raise DatabaseBusy(
                f"{len(self._waiting)} requests are already waiting for a database connection, as many as the "
                "queue holds", RETRY_AFTER_S,
            )  # fmt: skip
        called: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(called)
        try:
            async with asyncio.timeout(self.wait):
                await called  # the turn is handed over with its count: _held already counts it
        except BaseException as exc:
            if called.done() and not called.cancelled():
                self._give_back()  # handed a turn at the moment the wait ended: pass it on
            elif called in self._waiting:  # a handing-over may have passed it by already
                self._waiting.remove(called)
            if isinstance(exc, TimeoutError):
                raise DatabaseBusy(
                    f"no database connection came free within {self.wait:g} s", RETRY_AFTER_S
                ) from None
            raise

    def _give_back(self) -> None:
        """Hand the turn to the longest waiting read, or free it."""
        while self._waiting:
            called = self._waiting.popleft()
            if not called.done():
                called.set_result(None)
                return
        self._held -= 1
