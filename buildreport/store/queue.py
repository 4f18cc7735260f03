"""Queues of requests waiting for something a server process has only a few of: first come, first served, within
a stated bound.

A process keeps a few connections to each PostgreSQL database, and computes a few statistics answers at once;
a burst of requests beyond them waits here rather than being refused. Only past the queue's bound (as many
requests already waiting as its length allows, or a wait as long as its time allows: `serve --queue-length`,
`--queue-wait`) is a request refused, with DatabaseBusy: the server answers 503 with Retry-After and says it is
busy.

A PostgreSQL read takes a turn here before it takes a connection from the pool, and there are as many turns as
the pool has connections: a read that holds a turn waits for a connection only while one opens. The pool's
own short timeout therefore still tells a database that does not answer (503, the database cannot be read)
apart from a server that is merely busy.
"""

from __future__ import annotations

import asyncio
import collections

from buildreport.store.errors import DatabaseBusy

RETRY_AFTER_S = 5  # what a refused client is told to wait: about the time a busy queue takes to move on


class Turns:
    """`size` holders at once; the others wait in arrival order, at most `length` of them, each at most `wait`
    seconds. Used as `async with turns:` (or acquire() and release(), as an asyncio.Semaphore)."""

    def __init__(self, size: int, length: int, wait: float, what: str = "a database connection") -> None:
        self.size = size
        self.length = length
        self.wait = wait
        self.what = what  # what the waiting requests wait for, as a refusal names it
        self._held = 0
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()

    async def acquire(self) -> None:
        """Take a turn: at once when one is free and nobody waits, else in arrival order; DatabaseBusy past the
        bound."""
        if self._held < self.size and not self._waiting:
            self._held += 1
            return
        if len(self._waiting) >= self.length:
            raise DatabaseBusy(
                f"{len(self._waiting)} requests are already waiting for {self.what}, as many as the queue holds",
                RETRY_AFTER_S,
            )
        called: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(called)
        try:
            async with asyncio.timeout(self.wait):
                await called  # the turn is handed over with its count: _held already counts it
        except BaseException as exc:
            if called.done() and not called.cancelled():
                self.release()  # handed a turn at the moment the wait ended: pass it on
            elif called in self._waiting:  # a handing-over may have passed it by already
                self._waiting.remove(called)
            if isinstance(exc, TimeoutError):
                said = f"waited {self.wait:g} s for {self.what}, as long as the queue allows"
                raise DatabaseBusy(said, RETRY_AFTER_S) from None
            raise

    def release(self) -> None:
        """Hand the turn to the longest waiting request, or free it."""
        while self._waiting:
            called = self._waiting.popleft()
            if not called.done():
                called.set_result(None)
                return
        self._held -= 1
