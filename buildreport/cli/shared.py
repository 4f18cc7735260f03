"""What every command group shares: the database option, opening a database or its tokens, durations,
labels and times as a person reads them, and the group that turns any fault into one line."""

from __future__ import annotations

import re
import sqlite3
import unicodedata
from pathlib import Path

import click

from buildreport.config import default_db
from buildreport.faults import describe_sqlite_error, printable
from buildreport.store import DatabaseError, describe, engine_errors, engine_message, open_auth, open_database
from buildreport.times import format_us

DURATION = re.compile(r"([0-9]{1,12})([smhd])")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_TOKEN_DAYS = 36_500  # a hundred years: any expiry stays far inside the times the service can show
MAX_LABEL_LENGTH = 200
ACCOUNT_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
opened_dbs: list[str] = []  # the database a command opened, named in messages about faults


def err(message: str) -> None:
    click.echo(message, err=True)


class CommandGroup(click.Group):
    """Every fault a command meets ends in one clear line and a non-zero exit, never a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.Abort, click.ClickException):
            raise
        except DatabaseError as exc:
            raise click.ClickException(printable(str(exc))) from exc
        except sqlite3.Error as exc:
            raise click.ClickException(describe_sqlite_error(exc, opened_dbs[-1] if opened_dbs else None)) from exc
        except engine_errors() as exc:  # PostgreSQL's: the server's own message names the fault
            opened = opened_dbs[-1] if opened_dbs else None
            db = describe(opened) if opened else "the database"
            raise click.ClickException(f"{db}: {printable(engine_message(exc, opened))}") from exc
        except OSError as exc:
            name = f"{printable(str(exc.filename))}: " if exc.filename else ""
            raise click.ClickException(f"{name}{exc.strerror or printable(str(exc))}") from exc
        except MemoryError as exc:
            raise click.ClickException("out of memory") from exc
        except Exception as exc:
            raise click.ClickException(f"unexpected error: {type(exc).__name__}: {printable(str(exc))}") from exc


def db_option(func):  # type: ignore[no-untyped-def]
    return click.option(
        "--db",
        default=default_db,
        show_default="$BUILDREPORT_DB or ./buildreport.db",
        help="SQLite database file, or a postgresql://user@host/dbname URL.",
    )(func)


def open_db(db: str, *, create: bool = True):  # type: ignore[no-untyped-def]
    opened_dbs.append(db)
    try:
        return open_database(db, create=create)
    except DatabaseError as exc:
        raise click.ClickException(printable(str(exc))) from exc


def open_tokens(db: str):  # type: ignore[no-untyped-def]
    """The tokens file of a database, checked and migrated: never waits for an import of builds."""
    open_db(db).close()
    try:
        return open_auth(db)
    except DatabaseError as exc:
        raise click.ClickException(printable(str(exc))) from exc


def duration_seconds(text: str) -> int:
    match = DURATION.fullmatch(text.strip())
    if not match or int(match[1]) == 0:
        raise click.BadParameter(
            f"{printable(text)!r} is not a duration such as 30d, 12h, 90m or 3600s", param_hint="--expires-in"
        )
    seconds = int(match[1]) * UNIT_SECONDS[match[2]]
    if seconds > MAX_TOKEN_DAYS * UNIT_SECONDS["d"]:
        raise click.BadParameter(
            f"{printable(text)!r} is too long; at most {MAX_TOKEN_DAYS}d (a hundred years)", param_hint="--expires-in"
        )
    return seconds


def check_label(label: str) -> str:
    if len(label) > MAX_LABEL_LENGTH:
        raise click.BadParameter(f"at most {MAX_LABEL_LENGTH} characters", param_hint="--label")
    bad = [c for c in label if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")]
    if bad:
        shown = printable(bad[0]) if not bad[0].isprintable() else f"U+{ord(bad[0]):04X}"
        raise click.BadParameter(
            f"contains a control or invisible character ({shown}); a label is one line of plain text",
            param_hint="--label",
        )
    return label


def when(us: int | None) -> str:
    if us is None:
        return "-"
    try:
        return format_us(us)[:19].replace("T", " ")
    except OverflowError:  # a row written by an older version, out of the range of dates
        return str(us)


def echo_table(table: list[tuple[str, ...]]) -> None:
    """Rows of cells (the header first) in columns as wide as their widest cell."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def destination_options(func):  # type: ignore[no-untyped-def]
    """Where a recorder that serves many builds (runner, collect) puts them: a spool folder, or a database."""
    for option in reversed((
        click.option("--spool", type=click.Path(file_okay=False, path_type=Path), envvar="BUILDREPORT_SPOOL",
                     help="Spool folder for build records (sent on by `buildreport push`). Env: BUILDREPORT_SPOOL."),
        click.option("--db", help="Write builds to this database instead (a SQLite file or a postgresql:// URL)."),
        click.option("--account", help="The account builds belong to, with --db."),
    )):
        func = option(func)
    return func
