"""The store's own errors, the same for both engines, and the bound past which a read is refused as busy."""

# How many requests of a server process may wait for a database connection or a turn to compute statistics, and
# for how long, before the next is refused with DatabaseBusy (`serve --queue-length`, `--queue-wait`; queue.py).
QUEUE_LENGTH = 1000
QUEUE_WAIT = 30.0


class DatabaseError(Exception):
    """The database cannot be used; the message says why and what to do."""


class DatabaseUnavailable(DatabaseError):
    """A write the database failed or refused (an outage, a full disk, a write process that stopped): the
    request's records are stored whole or not at all, and sending them again is safe (writes are upserts)."""


class DatabaseBusy(DatabaseError):
    """A request that waited for a database connection or a turn to compute as long as the server's queue allows
    (its length or its wait), while the database itself answers: the server is busy, and the same request later
    will succeed."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after
