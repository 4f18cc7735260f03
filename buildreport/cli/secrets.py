"""Secrets read from files (`--secret-key-file`, `--db-file`, `--token-file`): a secret on the command line is
seen by every user of the machine (`ps`), while a file, such as one systemd passes with `LoadCredential=`, is not."""

from __future__ import annotations

import click

from buildreport.faults import printable

MAX_SECRET_FILE_BYTES = 64 * 1024


def secret_lines(path: str, option: str) -> tuple[str, ...]:
    """The non-blank lines of a secret file, stripped; a missing, unreadable, huge or empty file is refused."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_SECRET_FILE_BYTES + 1)
    except OSError as exc:
        raise click.BadParameter(f"cannot read {printable(path)}: {exc.strerror or exc}", param_hint=option) from exc
    if len(raw) > MAX_SECRET_FILE_BYTES:
        raise click.BadParameter(f"{printable(path)} is larger than {MAX_SECRET_FILE_BYTES} bytes", param_hint=option)
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise click.BadParameter(f"{printable(path)} is not UTF-8 text", param_hint=option) from exc
    lines = tuple(line.strip() for line in text.splitlines() if line.strip())
    if not lines:
        raise click.BadParameter(f"{printable(path)} is empty", param_hint=option)
    return lines


def one_secret(path: str, option: str) -> str:
    """The single secret a file holds (one line)."""
    lines = secret_lines(path, option)
    if len(lines) > 1:
        raise click.BadParameter(f"{printable(path)} holds {len(lines)} lines; one is expected", param_hint=option)
    return lines[0]


def given_or_from_file(value: str | None, path: str | None, option: str, file_option: str) -> str | None:
    """`value`, or the secret in the file at `path`; both at once is a mistake to report, not to resolve."""
    if value is not None and path is not None:
        raise click.UsageError(f"give {option} or {file_option}, not both")
    return one_secret(path, file_option) if path is not None else value
