"""Which engine a database is, what its failures look like, and a connection for the server's writes: what every
storage module needs, apart from the interface (store/__init__.py) that the layers above use."""

from __future__ import annotations

import sqlite3
import sys
from typing import Any

from buildreport.store.errors import DatabaseError

# A synchronous connection of either engine: sqlite3's calls (execute, executemany, commit, rollback, close).
Connection = Any


def is_postgres(db: str) -> bool:
    return str(db).startswith(("postgresql://", "postgres://"))


def engine_errors() -> tuple[type[BaseException], ...]:
    """What either engine raises when the database cannot serve a query (an outage, never the client's fault).

    PostgreSQL's driver is loaded only where a PostgreSQL database is used, and always before one of its
    errors can arise: a command on a SQLite file never pays for loading it."""
    driver = sys.modules.get("psycopg")
    return (sqlite3.Error,) if driver is None else (sqlite3.Error, driver.Error)


def engine_message(exc: BaseException, db: str | None = None) -> str:
    """A database server's message on one line: PostgreSQL's spread a fault and its hint over several. A
    message that quotes the URL `db` (libpq does, for one it cannot parse) names it without its password."""
    text = " ".join(part.strip() for part in str(exc).splitlines() if part.strip()) or type(exc).__name__
    return text.replace(db, describe(db)) if db else text


def connect(db: str) -> Any:
    """A synchronous connection to a database that exists and is up to date (the server's writes)."""
    if is_postgres(db):
        from buildreport.store.postgres.connection import PgConnection

        return postgres_opened(lambda: PgConnection.open(str(db)), db)
    from buildreport.store.sqlite.schema import connect_existing

    return connect_existing(db)


def describe(db: str) -> str:
    """The database as a message may name it: a PostgreSQL URL without its password."""
    if not is_postgres(db):
        return db
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(db)
        host = parts.hostname or ""
        netloc = (f"{parts.username}@" if parts.username else "") + host + (f":{parts.port}" if parts.port else "")
    except ValueError:  # too malformed to take apart (a bad port, a broken IPv6 address): only what follows "@"
        scheme, rest = db.split("://", 1)
        return f"{scheme}://{rest.rsplit('@', 1)[-1].split('?', 1)[0]}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def postgres_opened(open_: Any, db: str) -> Any:
    """Run an opening step; a server that cannot be reached, a malformed URL or a foreign schema is a
    DatabaseError."""
    import psycopg

    from buildreport.store.postgres.schema import SchemaError

    try:
        return open_()
    except SchemaError as exc:
        raise DatabaseError(f"{describe(db)}: {exc}") from exc
    except psycopg.Error as exc:  # unreachable, refused, or a URL libpq cannot parse
        raise DatabaseError(f"cannot use {describe(db)}: {engine_message(exc, db)}") from exc
