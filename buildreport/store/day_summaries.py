"""Each day's statistics over builds of every status, kept by the writer beside the day's figures per status.

Statistics grouped by day without a status filter answer a whole day from its row here: the builds of each
kind, CPU seconds (all and billable), and the percentiles of durations and queue times, already ranked. A year
then reads some 365 small rows, where reading each status's values of every day and ranking them grows with the
number of builds a day holds (bench/notes.md).

A row is derived from the day's rows of `day_figures` (day_figures.py) whenever those change, and only from
them, so the two tables cannot disagree. Percentiles follow figures.py's nearest rank over the day's values of
every status together.

The value is little-endian: the successful, failed, discarded and running builds, CPU seconds, billable CPU
seconds, and the number of durations and of queue times (int64 each); then p50, p90, p95, p99 and the maximum
of the durations and of the queue times (float64 each, zero where there are no values).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from itertools import groupby
from typing import Any, NamedTuple

from buildreport.figures import BILLABLE_STATUSES, KIND_INDEX, percentiles_of_runs
from buildreport.models import Percentiles
from buildreport.store import day_figures
from buildreport.store.kept import US_PER_DAY, WINDOW, KeptTable

_VALUE = struct.Struct("<8q10d")
_RANKED = len(Percentiles.__struct_fields__)
# What it may answer (kept.answers): builds of every status created in whole days.
DAY_SUMMARIES = KeptTable("day_summaries", WINDOW, US_PER_DAY).check()

TABLE = """
    CREATE TABLE day_summaries (
        account_id {integer} NOT NULL,
        day_us {integer} NOT NULL,
        figures {blob} NOT NULL,
        PRIMARY KEY (account_id, day_us)
    ){without_rowid};"""
INSERT = "INSERT INTO day_summaries (account_id, day_us, figures) VALUES (?, ?, ?)"
_UPSERT = INSERT + " ON CONFLICT (account_id, day_us) DO UPDATE SET figures = excluded.figures"
_DELETE = "DELETE FROM day_summaries WHERE account_id = ? AND day_us = ?"
_DAY_FIGURES = "SELECT status, figures FROM day_figures WHERE account_id = ? AND day_us = ?"
_DAYS = "SELECT DISTINCT account_id, day_us FROM day_figures"


class Part(NamedTuple):
    """A day's builds of one status, or a part of them, as day_figures keeps them: durations and queue times
    ascending."""

    status: str
    builds: int
    cpu_seconds: int
    durations: Sequence[float]
    queue_times: Sequence[float]


class Summary(NamedTuple):
    """A stored value read back; `durations` and `queue_times` None for a day without such values."""

    counts: tuple[int, int, int, int]  # successful, failed, discarded, running
    cpu_seconds: int
    billable_cpu_seconds: int
    durations: Percentiles | None
    queue_times: Percentiles | None


def _ranked(runs: list[Sequence[float]]) -> tuple[int, tuple[float, ...]]:
    """(number of values, their percentiles then maximum) over ascending runs."""
    ranked = percentiles_of_runs(runs)
    if ranked is None:
        return 0, (0.0,) * _RANKED
    return sum(len(run) for run in runs), tuple(getattr(ranked, name) for name in Percentiles.__struct_fields__)


def summarize(parts: Iterable[Part]) -> bytes | None:
    """The stored value of a day from its parts per status; None for a day without builds."""
    counts = [0, 0, 0, 0]
    cpu = billable = 0
    durations: list[Sequence[float]] = []
    queue_times: list[Sequence[float]] = []
    for part in parts:
        counts[KIND_INDEX[part.status]] += part.builds
        cpu += part.cpu_seconds
        if part.status in BILLABLE_STATUSES:
            billable += part.cpu_seconds
        durations.append(part.durations)
        queue_times.append(part.queue_times)
    if not any(counts):
        return None
    duration_count, duration_ranks = _ranked(durations)
    queue_count, queue_ranks = _ranked(queue_times)
    return _VALUE.pack(*counts, cpu, billable, duration_count, queue_count, *duration_ranks, *queue_ranks)


def unpack(value: bytes) -> Summary:
    fields = _VALUE.unpack(value)
    duration_count, queue_count = fields[6], fields[7]
    return Summary(
        fields[0:4],  # type: ignore[arg-type]
        fields[4],
        fields[5],
        Percentiles(*fields[8 : 8 + _RANKED]) if duration_count else None,
        Percentiles(*fields[8 + _RANKED :]) if queue_count else None,
    )


def _stored_parts(conn: Any, account_id: int, day: int) -> list[Part]:
    rows = conn.execute(_DAY_FIGURES, (account_id, day)).fetchall()
    return [Part(status, *day_figures.unpack(bytes(value))) for status, value in rows]


def refresh(conn: Any, days: Iterable[tuple[int, int]]) -> None:
    """Derive each (account, day start)'s row again from its rows of day_figures, as they are now."""
    for account_id, day in sorted(set(days)):
        value = summarize(_stored_parts(conn, account_id, day))
        if value is None:
            conn.execute(_DELETE, (account_id, day))
        else:
            conn.execute(_UPSERT, (account_id, day, value))


def fill(conn: Any) -> None:
    """Derive the row of every day that day_figures holds: the schema step that adds the table, and a bulk load
    on PostgreSQL."""
    refresh(conn, conn.execute(_DAYS).fetchall())


def rows_of(parts: Iterable[tuple[int, int, Part]]) -> list[tuple[int, int, bytes]]:
    """Rows to insert for `(account, day start, part)` given ordered by account and day (a fresh load's)."""
    rows = []
    for (account_id, day), same_day in groupby(parts, key=lambda item: (item[0], item[1])):
        value = summarize(part for _, _, part in same_day)
        if value is not None:
            rows.append((account_id, day, value))
    return rows
