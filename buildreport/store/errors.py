"""The store's own error, the same for both engines."""


class DatabaseError(Exception):
    """The database cannot be used; the message says why and what to do."""


class DatabaseUnavailable(DatabaseError):
    """A write the database failed or refused (an outage, a full disk, a write process that stopped): the
    request's records are stored whole or not at all, and sending them again is safe (writes are upserts)."""
