"""The store's own error, the same for both engines."""


class DatabaseError(Exception):
    """The database cannot be used; the message says why and what to do."""
