"""The SQLite schema, created and migrated by the program; `PRAGMA user_version` is its version."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from buildreport.faults import describe_sqlite_error
from buildreport.store import build_rows, day_figures, day_summaries, events_schema, tag_figures, tag_totals, trust
from buildreport.store.dialect import SQLITE
from buildreport.store.errors import DatabaseError
from buildreport.store.sqlite.writelock import lock_path

# "brep": marks a SQLite file as a buildreport database.
APPLICATION_ID = 0x62726570

# A badge shows the newest finished build of a derivation name (store.badges), whatever its store path's hash.
_NAME_INDEX = (
    f"CREATE INDEX IF NOT EXISTS builds_by_name ON builds (account_id, ({SQLITE.derivation_name}), create_us,"
    " build_id, status, duration_us);"
)
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


def _add_day_summaries(conn: sqlite3.Connection) -> None:
    """Once each day's statistics over every status; a later step drops the table: there is nothing to add."""


def _keep_day_summaries(conn: sqlite3.Connection) -> None:
    """Each day's statistics over every status, ranked (see day_summaries.py): a year by day reads these. Made
    anew from day_figures, whatever a database taken back to an earlier step still holds."""
    conn.execute("DROP TABLE IF EXISTS day_summaries")
    conn.execute(day_summaries.TABLE.format(integer="INTEGER", blob="BLOB", without_rowid=" WITHOUT ROWID"))
    day_summaries.fill(conn)


def _add_tag_hourly_totals(conn: sqlite3.Connection) -> None:
    tag_totals.add_hourly(conn, tag_totals.TABLE.format(name="tag_hourly_totals"))


def _add_tag_day_figures(conn: sqlite3.Connection) -> None:
    """Each day's figures of the promoted tag pairs (see tag_figures.py), made anew from their tag rows,
    whatever a database taken back to an earlier step still holds."""
    conn.execute("DROP TABLE IF EXISTS tag_day_figures")
    conn.execute(tag_figures.TABLE.format(integer="INTEGER", blob="BLOB"))
    tag_figures.fill_all(conn)


def _keep_figures_in_parts(conn: sqlite3.Connection) -> None:  # see day_figures.py: a write rewrites one part
    for module in (day_figures, tag_figures):
        day_figures.key_by_part(conn, module.KEPT_DAYS, module.TABLE.format(integer="INTEGER", blob="BLOB"))


# A step of the schema: a script, or a function given the connection (inside the step's transaction).
Migration = str | Callable[[sqlite3.Connection], None]
# Each entry migrates from version i to i + 1.
MIGRATIONS: tuple[Migration, ...] = (
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
    # Builds carry `status`, an alias of `build_status`, right after it: stored JSON gains it in place, byte for
    # byte as the encoder writes it now (the first `"build_status":` is the build's own; tags come after it).
    """
    UPDATE builds SET body = CAST(
        substr(CAST(body AS TEXT), 1, instr(CAST(body AS TEXT), '"build_status":"' || status || '"')
               + length('"build_status":"' || status || '"') - 1)
        || ',"status":"' || status || '"'
        || substr(CAST(body AS TEXT), instr(CAST(body AS TEXT), '"build_status":"' || status || '"')
                  + length('"build_status":"' || status || '"'))
        AS BLOB);
    UPDATE builds SET body_hash = buildreport_body_hash(body);
    """,
)
MIGRATIONS += (
    # Tokens live in the file beside the database (AUTH_MIGRATIONS); open_database copies them there first.
    "DROP TABLE IF EXISTS tokens;",
    """
    -- The sender's own id of a build written over HTTP: unique per account, so a retry updates the same build.
    ALTER TABLE builds ADD COLUMN source_id TEXT;
    CREATE UNIQUE INDEX builds_by_source ON builds (account_id, source_id) WHERE source_id IS NOT NULL;
    """,
    # Daily totals of the tag pairs that match many builds, computed once for the builds already stored.
    tag_totals.MIGRATION,
    """
    -- A build's duration and queue time as its JSON writes them (the shortest text that reads back as the same
    -- number): statistics read them, exactly, from the indexes below instead of parsing every build's JSON.
    ALTER TABLE builds ADD COLUMN duration_text TEXT;
    ALTER TABLE builds ADD COLUMN queue_text TEXT;
    UPDATE builds SET duration_text = nullif(body -> '$.duration_seconds', 'null'),
                      queue_text = body -> '$.queue_time_seconds';
    -- Statistics by time read each period's builds of one status from here alone.
    CREATE INDEX builds_for_stats ON builds (account_id, status, create_us, cpu_seconds, duration_text, queue_text);
    -- The time and derivation indexes carry the same figures, for statistics by tag and by derivation.
    DROP INDEX builds_by_time;
    CREATE INDEX builds_by_time ON builds (account_id, create_us, build_id, status, cpu_seconds, duration_text,
                                           queue_text);
    DROP INDEX builds_by_derivation;
    CREATE INDEX builds_by_derivation ON builds (account_id, derivation_path, create_us, build_id, status,
                                                 cpu_seconds, duration_text, queue_text);
    """,
    """
    -- Each tag row carries its build's figures: statistics by tag read one range of build_tags per value
    -- instead of looking up every tagged build. The writer keeps them equal to the build's columns.
    ALTER TABLE build_tags ADD COLUMN status TEXT;
    ALTER TABLE build_tags ADD COLUMN cpu_seconds INTEGER;
    ALTER TABLE build_tags ADD COLUMN duration_text TEXT;
    ALTER TABLE build_tags ADD COLUMN queue_text TEXT;
    UPDATE build_tags AS t SET status = b.status, cpu_seconds = b.cpu_seconds, duration_text = b.duration_text,
                               queue_text = b.queue_text
    FROM builds AS b WHERE b.build_id = t.build_id;
    -- Each day's durations and queue times per status, sorted (see day_figures.py): a year by day reads these.
    """
    + day_figures.TABLE.format(integer="INTEGER", blob="BLOB")
    + day_figures.FILL,
    _add_day_summaries,
    _NAME_INDEX,
)
MIGRATIONS += (
    # Billable usage of builds that `prune` removed, per account and UTC day of their stop time: /usage adds it
    # to daily_usage, which follows the builds that remain.
    """
    CREATE TABLE IF NOT EXISTS kept_usage (account_id INTEGER NOT NULL, day_us INTEGER NOT NULL,
        builds INTEGER NOT NULL, cpu_seconds INTEGER NOT NULL, PRIMARY KEY (account_id, day_us)) WITHOUT ROWID;
    """,
    events_schema.TABLES.format(integer="INTEGER", blob="BLOB", serial="INTEGER PRIMARY KEY AUTOINCREMENT"),
    # Statistics by day read day_figures alone: their day summaries are no longer kept.
    "DROP TABLE IF EXISTS day_summaries;",
    # The name index over an expression that repeats less of itself (dialect.py): each write computes it.
    f"""
    DROP INDEX IF EXISTS builds_by_name;
    {_NAME_INDEX}
    """,
    # Day summaries again: at ten million builds, ranking each day's values of every status grows past what a
    # year by day may take (bench/notes.md).
    _keep_day_summaries,
    # Hourly totals of the promoted tag pairs: a summary over one reads at most an hour of builds at each edge.
    _add_tag_hourly_totals,
    # A build's system as a column of its own: statistics and usage by system group by it without taking every
    # build's JSON apart, and PostgreSQL's indexes carry it (see its schema).
    """
    ALTER TABLE builds ADD COLUMN system TEXT;
    UPDATE builds SET system = body ->> '$.system';
    """,
    # Each day's figures of the promoted tag pairs: statistics by tag over a month read some 30 rows per status
    # for each common value instead of its every build.
    _add_tag_day_figures,
    _keep_figures_in_parts,
    build_rows.TAG_STOP_MIGRATION.format(integer="INTEGER"),  # usage by tag from the tag rows
)
SCHEMA_VERSION = len(MIGRATIONS)

# Tokens are kept in a second SQLite file, DB + "-auth": SQLite allows one writer per file, so a token is
# created or revoked at once even while an import holds the builds database's write lock for minutes.
# A token names its account; the account's id comes from the builds database when the token is used.
AUTH_SUFFIX = "-auth"
# "brat": marks the tokens file of a buildreport database.
AUTH_APPLICATION_ID = 0x62726174
AUTH_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE tokens (
        token_id TEXT PRIMARY KEY,
        account TEXT NOT NULL,
        digest BLOB NOT NULL UNIQUE,
        scopes TEXT NOT NULL,
        label TEXT NOT NULL DEFAULT '',
        created_us INTEGER NOT NULL,
        expires_us INTEGER NOT NULL,
        revoked_us INTEGER,
        last_used_us INTEGER
    );
    """,
    trust.TABLES.format(schema="", integer="INTEGER", if_not_exists=""),  # OIDC claims of tokens, trusted CI identities
)
# Tokens of a database made before they moved: copied once, before migration 1 -> 2 drops them.
_MOVE_TOKENS = """
INSERT OR IGNORE INTO tokens (token_id, account, digest, scopes, label, created_us, expires_us, revoked_us,
                              last_used_us)
SELECT t.token_id, a.name, t.digest, t.scopes, t.label, t.created_us, t.expires_us, t.revoked_us, t.last_used_us
FROM old.tokens t JOIN old.accounts a USING (account_id)
"""


# How long a connection waits for another's lock before it fails.
BUSY_TIMEOUT_MS = 10_000

# Settings every connection needs: a busy timeout so readers and the importer wait for each other,
# foreign keys, and a page cache large enough for the hot part of the indexes.
#
# No memory map: lists and exports read newest first, so they walk the file backwards, and a page fault
# reads one page with no read-ahead, ten times slower than reads on a file the kernel no longer caches
# (bench/store.md).
CONNECTION_PRAGMAS = (
    f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}",
    "PRAGMA foreign_keys = ON",
    "PRAGMA synchronous = NORMAL",
    "PRAGMA cache_size = -32768",
    "PRAGMA mmap_size = 0",
)


def configure(conn: sqlite3.Connection) -> None:
    for pragma in CONNECTION_PRAGMAS:
        conn.execute(pragma)


def set_journal(conn: sqlite3.Connection, mode: str, wait_ms: int) -> bool:
    """Switch the database's journal mode; False when another connection holds the file open."""
    conn.execute(f"PRAGMA busy_timeout = {wait_ms}")
    try:
        return conn.execute(f"PRAGMA journal_mode = {mode}").fetchone()[0] == mode
    except sqlite3.OperationalError:  # "database is locked"
        return False
    finally:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")


def check_version(
    conn: sqlite3.Connection,
    path: Path | str,
    app_id_expected: int = APPLICATION_ID,
    latest: int = SCHEMA_VERSION,
) -> int:
    """The schema version of a database file, after making sure buildreport can use it."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    has_tables = conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0] > 0
    if app_id != app_id_expected and (app_id != 0 or has_tables):
        raise DatabaseError(f"{path} is not a buildreport database")
    if version > latest:
        raise DatabaseError(
            f"{path} has schema version {version}, newer than this buildreport understands ({latest}); "
            "use a newer buildreport"
        )
    return version


def migrate(
    conn: sqlite3.Connection,
    path: Path | str,
    migrations: tuple[Migration, ...] = MIGRATIONS,
    app_id: int = APPLICATION_ID,
) -> None:
    """Bring the schema up to date, each step in its own transaction."""
    from buildreport.store.build_rows import body_hash  # the digest stored beside each build's JSON

    conn.create_function("buildreport_body_hash", 1, body_hash, deterministic=True)
    conn.create_aggregate("buildreport_day_figures", 3, day_figures.Aggregate)
    latest = len(migrations)
    version = check_version(conn, path, app_id, latest)
    if version == 0:  # before the first table: pages `prune` frees can go back to the file system
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        if version < latest:
            conn.execute("PRAGMA journal_mode = WAL")
        else:
            # An import into it runs with a rollback journal (see bulk.bulk_write) and sets WAL when done; this sets it
            # if that import could not, and leaves it to the import while it runs.
            set_journal(conn, "wal", 0)
    while version < latest:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if check_version(conn, path, app_id, latest) != version:
                conn.rollback()  # another process migrated meanwhile
                version = check_version(conn, path, app_id, latest)
                continue
            step = migrations[version]
            if callable(step):
                step(conn)
            else:
                for statement in _statements(step):
                    conn.execute(statement)
            version += 1
            conn.execute(f"PRAGMA application_id = {app_id}")
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


def auth_path(path: Path | str) -> Path:
    """The file that holds the tokens of the database at `path`."""
    return Path(str(path) + AUTH_SUFFIX)


def create_private(path: Path) -> None:
    """Create an empty file readable by its owner alone, unless it exists. SQLite gives the -wal and -shm
    files it makes later the mode of their database file, so they are private too."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def rw_uri(path: Path | str) -> str:
    """A URI that opens an existing database for reading and writing and never creates one."""
    return "file:" + quote(os.path.abspath(path)) + "?mode=rw"


def connect_existing(path: Path | str) -> sqlite3.Connection:
    """A configured connection to a database file that must exist already."""
    conn = sqlite3.connect(rw_uri(path), uri=True, isolation_level=None, check_same_thread=False)
    configure(conn)
    return conn


def _describe(path: Path, exc: sqlite3.Error) -> DatabaseError:
    message = str(exc)
    if "file is not a database" in message:
        return DatabaseError(f"{path} is not a buildreport database")
    if "unable to open" in message:
        return DatabaseError(f"cannot write to {path}: {message}")
    return DatabaseError(describe_sqlite_error(exc, str(path)))


def _open_auth(path: Path, legacy: bool) -> None:
    """Create or migrate the tokens file; copy the tokens of a database made before they moved."""
    tokens = auth_path(path)
    create_private(tokens)
    conn = connect_existing(tokens)
    try:
        migrate(conn, tokens, AUTH_MIGRATIONS, AUTH_APPLICATION_ID)
        if legacy:
            conn.execute("ATTACH DATABASE ? AS old", (rw_uri(path),))
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(_MOVE_TOKENS)
                conn.commit()
            except BaseException:
                conn.rollback()
                raise
            conn.execute("DETACH DATABASE old")
    except sqlite3.DatabaseError as exc:
        raise _describe(tokens, exc) from exc
    finally:
        conn.close()


def _auth_behind(path: Path) -> bool:
    """Whether the tokens file has steps of AUTH_MIGRATIONS still to take."""
    conn = connect_existing(auth_path(path))
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0]) < len(AUTH_MIGRATIONS)
    finally:
        conn.close()


def attach_auth(conn: sqlite3.Connection, path: Path | str) -> None:
    """Make the tokens file of the database at `path` readable on `conn` as schema `auth`."""
    conn.execute("ATTACH DATABASE ? AS auth", (rw_uri(auth_path(path)),))


def open_auth(path: Path | str) -> sqlite3.Connection:
    """A connection to the tokens file of an existing, up-to-date database (see open_database)."""
    try:
        return connect_existing(auth_path(path))
    except sqlite3.DatabaseError as exc:
        raise _describe(auth_path(path), exc) from exc


def open_database(path: Path | str, *, create: bool = True) -> sqlite3.Connection:
    """A synchronous connection to an up-to-date database, for the command line and start-up.

    A new database file and its tokens file are created readable by their owner alone (mode 0600).
    """
    path = Path(path)
    if not create and not path.exists():
        raise DatabaseError(
            f"{path} does not exist; create it with `buildreport import --db {path} FILE…`, or start with an "
            f"empty one with `buildreport serve --db {path} --create`"
        )
    if not path.parent.exists():
        raise DatabaseError(f"cannot create {path}: directory {path.parent} does not exist")
    if path.is_dir():
        raise DatabaseError(f"{path} is a directory, not a database file")
    try:
        create_private(path)
    except OSError as exc:
        raise DatabaseError(f"cannot write to {path}: {exc.strerror}") from exc
    try:
        conn = connect_existing(path)
        check_version(conn, path)
        # Databases made before tokens moved to their own file still hold them.
        legacy = conn.execute("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'tokens'").fetchone()
        if legacy is not None or not auth_path(path).exists() or check_version(conn, path) < SCHEMA_VERSION \
                or _auth_behind(path):
            _open_auth(path, legacy is not None)
        migrate(conn, path)
    except sqlite3.DatabaseError as exc:
        raise _describe(path, exc) from exc
    return conn


def remove_files(path: Path | str) -> None:
    """The files a database is made of: its own, its tokens file, their journals, its signing key and the
    servers' writer lock."""
    for base in (str(path), str(path) + AUTH_SUFFIX):
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(base + suffix).unlink(missing_ok=True)
    Path(str(path) + ".secret").unlink(missing_ok=True)
    lock_path(path).unlink(missing_ok=True)
