"""One clear line for each way the database or a file can fail under a command: full disk, read-only file,
another writer holding the lock, a damaged file; and text from outside shown without its control characters."""

from __future__ import annotations

import sqlite3

# SQLite's primary result codes (the extended ones share their low byte).
_BUSY, _LOCKED, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _NOTADB, _TOOBIG = 5, 6, 8, 10, 11, 13, 14, 26, 18


def printable(text: str) -> str:
    """`text` with every character a terminal could act on (newline, escape, bidi controls …) written as an
    escape sequence, so that stored or user-given text can never forge output lines or colours."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def describe_sqlite_error(exc: sqlite3.Error, db: str | None) -> str:
    """What went wrong, for a person: which file, why, and that nothing was changed."""
    where = f" {printable(db)}" if db else ""
    code = (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF
    message = str(exc)
    if code in (_BUSY, _LOCKED) or "locked" in message:
        return (
            f"the database{where} is locked: another process (an import?) is writing to it; "
            "nothing was changed, try again when it has finished"
        )
    if code == _FULL or "disk is full" in message:
        return f"the disk holding the database{where} is full; nothing was changed (free some space and retry)"
    if code == _READONLY or "readonly" in message:
        return f"the database{where} is read-only for this user; nothing was changed"
    if code == _IOERR or "disk I/O error" in message:
        return (
            f"the database{where} could not be written or read (disk I/O error: the disk may be full or failing); "
            "nothing was changed"
        )
    if code in (_CORRUPT, _NOTADB):
        return f"the database{where} is damaged or not a buildreport database ({message})"
    if code == _CANTOPEN:
        return f"the database{where} cannot be opened ({message})"
    if code == _TOOBIG:
        return f"a value is too big for the database{where} ({message}); nothing was changed"
    if "integer overflow" in message:
        return f"the totals of the database{where} would overflow 64-bit integers; nothing was changed"
    return f"database error{' in' + where if where else ''}: {printable(message)}; nothing was changed"
