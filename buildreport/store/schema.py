"""The schema, created and migrated by the program; `PRAGMA user_version` is its version."""

from __future__ import annotations

import sqlite3
from pathlib import Path

# "brep": marks a SQLite file as a buildreport database.
APPLICATION_ID = 0x62726570

_TOTALS_TABLE = """
    CREATE TABLE {name} (
        account_id INTEGER NOT NULL,
        period_us INTEGER NOT NULL,
        status TEXT NOT NULL,
        builds INTEGER NOT NULL,
        cpu_seconds INTEGER NOT NULL,
        duration_us INTEGER NOT NULL,
        nar_size_bytes INTEGER NOT NULL,
        first_start_us INTEGER NOT NULL,
        last_stop_us INTEGER,
        PRIMARY KEY (account_id, period_us, status)
    ) WITHOUT ROWID;"""

# Each entry migrates from version i to i + 1.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE accounts (
        account_id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        created_us INTEGER NOT NULL
    );

    CREATE TABLE tokens (
        token_id TEXT PRIMARY KEY,
        account_id INTEGER NOT NULL REFERENCES accounts(account_id),
        digest BLOB NOT NULL UNIQUE,
        scopes TEXT NOT NULL,
        label TEXT NOT NULL DEFAULT '',
        created_us INTEGER NOT NULL,
        expires_us INTEGER NOT NULL,
        revoked_us INTEGER,
        last_used_us INTEGER
    );

    -- Columns are what filters and totals need; `body` is the Build as JSON, encoded once when written.
    CREATE TABLE builds (
        build_id INTEGER PRIMARY KEY,
        account_id INTEGER NOT NULL REFERENCES accounts(account_id),
        create_us INTEGER NOT NULL,
        start_us INTEGER NOT NULL,
        duration_us INTEGER,
        stop_us INTEGER,
        status TEXT NOT NULL,
        cpu_seconds INTEGER NOT NULL,
        nar_size_bytes INTEGER NOT NULL,
        derivation_path TEXT NOT NULL,
        restart_of_build_id INTEGER,
        restarted_as_build_id INTEGER,
        body BLOB NOT NULL,
        body_hash INTEGER NOT NULL
    );
    CREATE INDEX builds_by_time ON builds (account_id, create_us, build_id);
    CREATE INDEX builds_by_derivation ON builds (account_id, derivation_path, create_us, build_id);
    CREATE INDEX builds_by_stop ON builds (account_id, stop_us) WHERE stop_us IS NOT NULL;
    CREATE INDEX builds_by_restart_of ON builds (restart_of_build_id) WHERE restart_of_build_id IS NOT NULL;
    CREATE INDEX builds_by_restarted_as ON builds (restarted_as_build_id) WHERE restarted_as_build_id IS NOT NULL;

    -- One row a tag, ordered so that a tag filter reads the newest matching builds first.
    CREATE TABLE build_tags (
        account_id INTEGER NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        create_us INTEGER NOT NULL,
        build_id INTEGER NOT NULL,
        PRIMARY KEY (account_id, key, value, create_us, build_id)
    ) WITHOUT ROWID;

    -- Totals per account, UTC hour (and day) of creation and status, kept exactly in step with builds by
    -- every import. A summary adds whole days and hours from here to the raw builds at its window's edges.
{hourly_totals}
{daily_totals}

    -- Billable builds per account and UTC day of their stop time: usage is a sum over days.
    CREATE TABLE daily_usage (
        account_id INTEGER NOT NULL,
        day_us INTEGER NOT NULL,
        builds INTEGER NOT NULL,
        cpu_seconds INTEGER NOT NULL,
        PRIMARY KEY (account_id, day_us)
    ) WITHOUT ROWID;

    CREATE TABLE build_logs (
        build_id INTEGER PRIMARY KEY REFERENCES builds(build_id) ON DELETE CASCADE,
        size_bytes INTEGER NOT NULL,
        zlib BLOB NOT NULL
    );
    """.format(
        hourly_totals=_TOTALS_TABLE.format(name="hourly_totals"),
        daily_totals=_TOTALS_TABLE.format(name="daily_totals"),
    ),
    """
    -- The sender's own id of a build written over HTTP: unique per account, so a retry updates the same build.
    ALTER TABLE builds ADD COLUMN source_id TEXT;
    CREATE UNIQUE INDEX builds_by_source ON builds (account_id, source_id) WHERE source_id IS NOT NULL;
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


class DatabaseError(Exception):
    """The database file cannot be used; the message says why and what to do."""


# Settings every connection needs: a busy timeout so readers and the importer wait for each other,
# foreign keys, and a page cache and memory map large enough for the hot part of the indexes.
CONNECTION_PRAGMAS = (
    "PRAGMA busy_timeout = 10000",
    "PRAGMA foreign_keys = ON",
    "PRAGMA synchronous = NORMAL",
    "PRAGMA cache_size = -65536",
    "PRAGMA mmap_size = 1073741824",
)


def configure(conn: sqlite3.Connection) -> None:
    for pragma in CONNECTION_PRAGMAS:
        conn.execute(pragma)


def check_version(conn: sqlite3.Connection, path: Path | str) -> int:
    """The schema version of a database file, after making sure buildreport can use it."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    has_tables = conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0] > 0
    if app_id != APPLICATION_ID and (app_id != 0 or has_tables):
        raise DatabaseError(f"{path} is not a buildreport database")
    if version > SCHEMA_VERSION:
        raise DatabaseError(
            f"{path} has schema version {version}, newer than this buildreport understands ({SCHEMA_VERSION}); "
            "use a newer buildreport"
        )
    return version


def migrate(conn: sqlite3.Connection, path: Path | str) -> None:
    """Bring the schema up to date, each step in its own transaction."""
    version = check_version(conn, path)
    if version < SCHEMA_VERSION and conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        conn.execute("PRAGMA journal_mode = WAL")
    while version < SCHEMA_VERSION:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if check_version(conn, path) != version:
                conn.rollback()  # another process migrated meanwhile
                version = check_version(conn, path)
                continue
            for statement in _statements(MIGRATIONS[version]):
                conn.execute(statement)
            version += 1
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {version}")
            conn.commit()
        except BaseException:
            conn.rollback()
            raise


def _statements(script: str) -> list[str]:
    """Split a migration script into statements, so it runs inside our own transaction."""
    statements, current = [], ""
    for line in script.splitlines(keepends=True):
        if line.strip().startswith("--"):
            continue
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    return [s for s in statements if s]


def open_database(path: Path | str, *, create: bool = True) -> sqlite3.Connection:
    """A synchronous connection to an up-to-date database, for the command line and start-up."""
    path = Path(path)
    if not create and not path.exists():
        raise DatabaseError(f"{path} does not exist; create it with `buildreport import` or `buildreport demo`")
    if not path.parent.exists():
        raise DatabaseError(f"cannot create {path}: directory {path.parent} does not exist")
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        configure(conn)
        migrate(conn, path)
    except sqlite3.DatabaseError as exc:
        message = str(exc)
        if "file is not a database" in message:
            raise DatabaseError(f"{path} is not a buildreport database") from exc
        if "readonly" in message or "unable to open" in message:
            raise DatabaseError(f"cannot write to {path}: {message}") from exc
        raise DatabaseError(f"{path}: {message}") from exc
    return conn
