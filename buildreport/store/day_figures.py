"""Each day's figures per status, kept by the writer for statistics over long windows.

A row of `day_figures` holds, for one account, UTC day and status, the builds created that day: their count,
CPU seconds, and their durations and queue times, each sorted, as one binary value. Grouped by day, a year
then reads some 365 rows per status instead of every build, and Python merges a few sorted runs per day
(which its sort finds and merges) instead of sorting every value.

The value is little-endian: the count of builds, CPU seconds and the number of durations (int64 each), then
the durations and the queue times (float64 each, ascending). A float64 holds exactly the number the build's
JSON writes (its shortest text reads back as the same double), so figures read from here equal those read
from the builds themselves.

A day's builds of one status may be kept in several parts, each a row of its own (`part`, from 0): its
count, CPU seconds and numbers are those of the parts added up, and each part's numbers are sorted on their
own. A write adds its builds to the last part, or starts a new one once that part holds PART_BUILDS builds:
a write into a busy day then rewrites one bounded part, where rewriting the whole day grew with every build
the day already held (bench/notes.md). Readers take a day's values as the runs its parts give.

A write brings the days it touched in step by its differences (`Delta`, `apply`), reading no build of the
day again. One that takes builds out merges the day's parts into one. A large import, which touches most
days anyway, rebuilds each of them from its builds (`recompute`), as one part.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from buildreport.store.kept import US_PER_DAY, WINDOW, KeptTable

_HEADER = struct.Struct("<qqq")
_SWAP = sys.byteorder != "little"

# A day's builds of every status, with the figures the value holds (read through builds_by_time).
_DAY_BUILDS = (
    "SELECT status, cpu_seconds, duration_text, queue_text FROM builds"
    " WHERE account_id = ? AND create_us >= ? AND create_us < ?"
)
_DELETE = "DELETE FROM day_figures WHERE account_id = ? AND day_us = ?"
INSERT = "INSERT INTO day_figures (account_id, day_us, status, figures) VALUES (?, ?, ?, ?)"  # part 0
# A write adds to a day's last part until it holds this many builds, then starts another: what a write rewrites
# stays under some 64 KiB of numbers however many builds the day holds.
PART_BUILDS = 4096

# What it may answer (kept.answers): builds created in whole days, per status.
DAY_FIGURES = KeptTable("day_figures", WINDOW | {"status"}, US_PER_DAY).check()

# The table (a rowid table: its values run to many kilobytes) and, for SQLite, its filling from stored builds.
TABLE = """
    CREATE TABLE day_figures (
        account_id {integer} NOT NULL,
        day_us {integer} NOT NULL,
        status TEXT NOT NULL,
        part INTEGER NOT NULL DEFAULT 0,
        figures {blob} NOT NULL,
        PRIMARY KEY (account_id, day_us, status, part)
    );"""
FILL = f"""
    INSERT INTO day_figures (account_id, day_us, status, figures)
    SELECT account_id, create_us - create_us % {US_PER_DAY}, status,
           buildreport_day_figures(cpu_seconds, duration_text, queue_text)
    FROM builds GROUP BY 1, 2, 3;"""


def pack(builds: int, cpu_seconds: int, durations: list[float], queue_times: list[float]) -> bytes:
    """The stored value of a day's builds of one status; sorts both lists in place."""
    durations.sort()
    queue_times.sort()
    values = array("d", durations)
    values.extend(queue_times)
    if _SWAP:
        values.byteswap()
    return _HEADER.pack(builds, cpu_seconds, len(durations)) + values.tobytes()


def builds_of(value: bytes) -> int:
    """The number of builds a stored value holds."""
    return int(_HEADER.unpack_from(value)[0])


def _stored(value: bytes) -> tuple[int, int, int, array]:
    """(builds, CPU seconds, number of durations, the durations then the queue times) of a stored value."""
    builds, cpu_seconds, count = _HEADER.unpack_from(value)
    numbers = array("d")
    numbers.frombytes(memoryview(value)[_HEADER.size :])
    if _SWAP:
        numbers.byteswap()
    return builds, cpu_seconds, count, numbers


def unpack(value: bytes) -> tuple[int, int, Sequence[float], Sequence[float]]:
    """(builds, CPU seconds, durations, queue times) of a stored value, both ascending: views of the value's
    doubles, 8 bytes a value where a Python float takes 32, not copied (a year's values are read at once)."""
    builds, cpu_seconds, count = _HEADER.unpack_from(value)
    view = memoryview(value)
    middle = _HEADER.size + 8 * count
    if not _SWAP:
        return builds, cpu_seconds, view[_HEADER.size : middle].cast("d"), view[middle:].cast("d")
    durations, queue_times = array("d"), array("d")
    durations.frombytes(view[_HEADER.size : middle])
    queue_times.frombytes(view[middle:])
    durations.byteswap()
    queue_times.byteswap()
    return builds, cpu_seconds, durations, queue_times


class _Day:
    __slots__ = ("builds", "cpu_seconds", "durations", "queue_times")

    def __init__(self) -> None:
        self.builds = 0
        self.cpu_seconds = 0
        self.durations: list[float] = []
        self.queue_times: list[float] = []

    def add(self, cpu_seconds: int, duration_text: str | None, queue_text: str | None) -> None:
        self.builds += 1
        self.cpu_seconds += cpu_seconds
        if duration_text is not None:
            self.durations.append(float(duration_text))
        if queue_text is not None:
            self.queue_times.append(float(queue_text))

    def value(self) -> bytes:
        return pack(self.builds, self.cpu_seconds, self.durations, self.queue_times)


class Aggregate:
    """`buildreport_day_figures(cpu_seconds, duration_text, queue_text)`: the stored value of a group of builds,
    for the migration that fills the table from the builds already stored."""

    def __init__(self) -> None:
        self._day = _Day()

    def step(self, cpu_seconds: int, duration_text: str | None, queue_text: str | None) -> None:
        self._day.add(cpu_seconds, duration_text, queue_text)

    def finalize(self) -> bytes:
        return self._day.value()

    def numbers(self) -> tuple[int, int, list[float], list[float]]:
        """(builds, CPU seconds, durations, queue times) of the group; the numbers ascending once finalized."""
        day = self._day
        return day.builds, day.cpu_seconds, day.durations, day.queue_times


def recompute(conn: Any, days: Iterable[tuple[int, int]]) -> set[tuple[int, int]]:
    """Rebuild the figures of each (account, day start) from the builds created that day; the days, for the
    summaries derived from them (day_summaries.py)."""
    days = set(days)
    for account_id, day in sorted(days):
        by_status: dict[str, _Day] = {}
        for status, cpu_seconds, duration_text, queue_text in conn.execute(
            _DAY_BUILDS, (account_id, day, day + US_PER_DAY)
        ).fetchall():
            entry = by_status.get(status)
            if entry is None:
                entry = by_status[status] = _Day()
            entry.add(cpu_seconds, duration_text, queue_text)
        conn.execute(_DELETE, (account_id, day))
        if by_status:
            conn.executemany(INSERT, [(account_id, day, s, entry.value()) for s, entry in by_status.items()])
    return days


class Delta:
    """What one write changes in a day's figures of one status: builds and CPU seconds added or taken away,
    and the durations and queue times that come and go, as their stored text until the day is applied (a tag
    pair's differences are collected for every pair and applied only to the promoted ones)."""

    __slots__ = ("added", "builds", "cpu_seconds", "removed")

    def __init__(self) -> None:
        self.builds = 0
        self.cpu_seconds = 0
        self.added: tuple[list[str], list[str]] = ([], [])
        self.removed: tuple[list[str], list[str]] = ([], [])

    def add(self, sign: int, cpu_seconds: int, duration_text: str | None, queue_text: str | None) -> None:
        self.builds += sign
        self.cpu_seconds += sign * cpu_seconds
        into = self.added if sign > 0 else self.removed
        if duration_text is not None:
            into[0].append(duration_text)
        if queue_text is not None:
            into[1].append(queue_text)

    def numbers(self) -> tuple[list[float], list[float], list[float], list[float]]:
        """The durations and queue times added, then those taken away."""
        return tuple([float(text) for text in texts] for texts in (*self.added, *self.removed))  # type: ignore[return-value]


def _changed(values: list[float], added: list[float], removed: list[float]) -> list[float] | None:
    """`values` sorted with `added` in and `removed` out (each once); None when a value to take out is not
    there, which only a table out of step with its builds gives."""
    if removed:
        left = Counter(removed)
        kept = []
        for value in values:
            if left[value] > 0:
                left[value] -= 1
            else:
                kept.append(value)
        if +left:
            return None
        values = kept
    values.extend(added)
    values.sort()  # a few sorted runs (the parts', the added): the sort finds and merges them
    return values


def _merged(run: array, added: list[float]) -> array:
    """The ascending `run` with the ascending `added` put in place, copied slice by slice: a busy day's value
    holds hundreds of thousands of numbers, and a write adds a few hundred."""
    out = array("d")
    start = 0
    for value in added:
        at = bisect_right(run, value, start)
        out.extend(run[start:at])
        out.append(value)
        start = at
    out.extend(run[start:])
    return out


def with_added(value: bytes, builds: int, cpu_seconds: int, durations: list[float], queue_times: list[float]) -> bytes:
    """A stored value with builds, CPU seconds and numbers added (none taken away), without turning its numbers
    into Python objects: what the day holds is copied, not decoded, so a write of a few builds into a busy
    day costs a copy of the day, not its decoding (bench/notes.md)."""
    had, had_cpu, count, numbers = _stored(value)
    merged = _merged(numbers[:count], sorted(durations))
    merged.extend(_merged(numbers[count:], sorted(queue_times)))
    if _SWAP:
        merged.byteswap()
    header = _HEADER.pack(had + builds, had_cpu + cpu_seconds, count + len(durations))
    return header + merged.tobytes()


class KeptDays(NamedTuple):
    """Where one kind of kept day figures is stored, its parts keyed by `(*day, status)` and their part number:
    a day being an (account, day start) here, or a tag pair's day (tag_figures.py). `rebuild` makes days anew
    from their builds."""

    table: str
    key_columns: str  # the columns that name a `(*day, status)`, comma-separated
    rebuild: Callable[[Any, set[tuple]], object]

    @property
    def key(self) -> str:
        return " AND ".join(f"{column} = ?" for column in self.key_columns.split(", "))

    @property
    def last(self) -> str:
        return f"SELECT part, figures FROM {self.table} WHERE {self.key} ORDER BY part DESC LIMIT 1"

    @property
    def parts(self) -> str:
        return f"SELECT figures FROM {self.table} WHERE {self.key}"

    @property
    def upsert(self) -> str:
        marks = ", ".join("?" * (len(self.key_columns.split(", ")) + 2))
        return (
            f"INSERT INTO {self.table} ({self.key_columns}, part, figures) VALUES ({marks})"
            f" ON CONFLICT ({self.key_columns}, part) DO UPDATE SET figures = excluded.figures"
        )

    @property
    def delete(self) -> str:
        return f"DELETE FROM {self.table} WHERE {self.key}"


def _add(conn: Any, kept: KeptDays, key: tuple, delta: Delta, durations: list[float], queue_times: list[float]) -> bool:
    """Builds added to a `(*day, status)`, none taken out: into its last part, or a new one past PART_BUILDS.
    False for numbers changed in a day that has no parts, which only a table out of step with its builds gives."""
    row = conn.execute(kept.last, key).fetchone()
    if row is None and delta.builds == 0:
        return False
    last = bytes(row[1]) if row is not None else b""
    if last and builds_of(last) < PART_BUILDS:
        conn.execute(kept.upsert, (*key, row[0], with_added(last, delta.builds, delta.cpu_seconds, durations,
                                                             queue_times)))
    else:
        part = 0 if row is None else row[0] + 1
        conn.execute(kept.upsert, (*key, part, pack(delta.builds, delta.cpu_seconds, durations, queue_times)))
    return True


def _whole(conn: Any, kept: KeptDays, key: tuple) -> tuple[int, int, list[float], list[float]]:
    """(builds, CPU seconds, durations, queue times) of a `(*day, status)`'s parts added up; the numbers unsorted."""
    builds = cpu_seconds = 0
    durations: list[float] = []
    queue_times: list[float] = []
    for (value,) in conn.execute(kept.parts, key).fetchall():
        part = unpack(bytes(value))
        builds += part[0]
        cpu_seconds += part[1]
        durations.extend(part[2])
        queue_times.extend(part[3])
    return builds, cpu_seconds, durations, queue_times


def apply_to(conn: Any, kept: KeptDays, deltas: dict[tuple, Delta]) -> set[tuple]:
    """Bring each `(*day, status)` touched by a write in step by its differences, reading no build of the day
    again: added builds go into the last part; taking builds out merges the parts into one. A day whose parts
    do not hold what a difference takes out is rebuilt from its builds. The days whose figures changed."""
    changed: set[tuple] = set()
    rebuild: set[tuple] = set()
    for key, delta in sorted(deltas.items()):
        if delta.builds == 0 and delta.cpu_seconds == 0 and delta.added == delta.removed:
            continue  # a build written again as it was
        day = key[:-1]
        changed.add(day)
        added_durations, added_queue_times, removed_durations, removed_queue_times = delta.numbers()
        if not removed_durations and not removed_queue_times and delta.builds >= 0:
            if not _add(conn, kept, key, delta, added_durations, added_queue_times):
                rebuild.add(day)
            continue
        builds, cpu_seconds, had_durations, had_queue_times = _whole(conn, kept, key)
        durations = _changed(had_durations, added_durations, removed_durations)
        queue_times = _changed(had_queue_times, added_queue_times, removed_queue_times)
        builds += delta.builds
        if durations is None or queue_times is None or builds < 0:
            rebuild.add(day)
            continue
        conn.execute(kept.delete, key)
        if builds > 0:
            value = pack(builds, cpu_seconds + delta.cpu_seconds, durations, queue_times)
            conn.execute(kept.upsert, (*key, 0, value))
    if rebuild:
        kept.rebuild(conn, rebuild)
    return changed


KEPT_DAYS = KeptDays("day_figures", "account_id, day_us, status", recompute)


def key_by_part(conn: Any, kept: KeptDays, definition: str) -> None:
    """SQLite's schema step that keeps a table of day figures in parts: made again from `definition`, each row kept
    so far its day's part 0. A table that an earlier step made in its present shape stays as it is."""
    if conn.execute("SELECT 1 FROM pragma_table_info(?) WHERE name = 'part'", (kept.table,)).fetchone():
        return
    conn.execute(f"ALTER TABLE {kept.table} RENAME TO {kept.table}_whole")
    conn.execute(definition)
    columns = f"{kept.key_columns}, figures"
    conn.execute(f"INSERT INTO {kept.table} ({columns}) SELECT {columns} FROM {kept.table}_whole")
    conn.execute(f"DROP TABLE {kept.table}_whole")


def apply(conn: Any, deltas: dict[tuple, Delta]) -> set[tuple]:
    """`apply_to` the figures of (account, day start, status): the (account, day start) whose figures changed,
    for the summaries derived from them (day_summaries.py)."""
    return apply_to(conn, KEPT_DAYS, deltas)
