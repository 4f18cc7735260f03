"""Each day's kept figures: exact values, and always those of the builds stored, whatever was written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from conftest import record, write_jsonl
from hypothesis import given
from hypothesis import strategies as st

from buildreport.imports.load import import_files
from buildreport.store import day_figures
from buildreport.store import open_database as store_database
from buildreport.store.sqlite.schema import open_database
from buildreport.times import US_PER_DAY

DAY0 = datetime(2026, 10, 1, tzinfo=UTC)
numbers = st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False)


def unpacked(value: bytes) -> tuple[int, int, list[float], list[float]]:
    """day_figures.unpack with its two arrays of doubles as lists."""
    builds, cpu, durations, queue_times = day_figures.unpack(value)
    return builds, cpu, list(durations), list(queue_times)


@given(st.integers(0, 2**40), st.integers(0, 2**40), st.lists(numbers), st.lists(numbers))
def test_a_packed_day_reads_back_the_same_numbers_sorted(builds, cpu, durations, queue_times):
    value = day_figures.pack(builds, cpu, list(durations), list(queue_times))
    assert unpacked(value) == (builds, cpu, sorted(durations), sorted(queue_times))


def plain_days(conn) -> dict[tuple[int, int, str], tuple]:
    """The figures of each (account, day, status) computed from the builds, in plain Python."""
    return plain_figures(conn.execute(
        "SELECT account_id, create_us, status, cpu_seconds, duration_text, queue_text FROM builds"
    ))


def plain_figures(rows) -> dict[tuple, tuple]:
    """Day figures of rows `(*owner, create_us, status, cpu, duration text, queue text)`, keyed by
    `(*owner, day, status)`: the count, CPU seconds and the sorted numbers."""
    days: dict[tuple, list] = {}
    for *owner, create_us, status, cpu, duration, queue in rows:
        entry = days.setdefault((*owner, create_us - create_us % US_PER_DAY, status), [0, 0, [], []])
        entry[0] += 1
        entry[1] += cpu
        if duration is not None:
            entry[2].append(float(duration))
        if queue is not None:
            entry[3].append(float(queue))
    return {key: (n, cpu, sorted(d), sorted(q)) for key, (n, cpu, d, q) in days.items()}


def merged_parts(rows) -> dict[tuple, tuple]:
    """Kept figures of rows `(*key, figures)`, each key's parts added up: the count, CPU seconds and the sorted
    numbers."""
    days: dict[tuple, list] = {}
    for *key, value in rows:
        builds, cpu, durations, queue_times = unpacked(bytes(value))
        assert builds > 0 and durations == sorted(durations) and queue_times == sorted(queue_times)
        entry = days.setdefault(tuple(key), [0, 0, [], []])
        entry[0] += builds
        entry[1] += cpu
        entry[2].extend(durations)
        entry[3].extend(queue_times)
    return {key: (n, cpu, sorted(d), sorted(q)) for key, (n, cpu, d, q) in days.items()}


def kept_days(conn) -> dict[tuple[int, int, str], tuple]:
    return merged_parts(conn.execute("SELECT account_id, day_us, status, figures FROM day_figures"))


def at(day: int, hour: int) -> str:
    return (DAY0 + timedelta(days=day, hours=hour)).isoformat()


# Builds written, then written again: built and failed swap, build 3 finishes, build 1 moves to another day,
# build 4 changes nothing.
WRITTEN_FIRST = [
    record(1, create_time=at(0, 1), duration_seconds=0.1 + 0.2, queue_time_seconds=1e-7),
    record(2, create_time=at(0, 5), build_status="timeout", duration_seconds=12.0),
    record(3, create_time=at(1, 2), build_status="running", duration_seconds=None),
    record(4, create_time=at(2, 23), cpu_seconds=7, account="other"),
]
WRITTEN_AGAIN = [
    record(1, create_time=at(3, 0), build_status="build_failed", duration_seconds=99.5),
    record(2, create_time=at(0, 5), duration_seconds=1234567.891011),
    record(3, create_time=at(1, 2), duration_seconds=60.25, queue_time_seconds=0.0),
    record(4, create_time=at(2, 23), cpu_seconds=7, account="other"),
]


def test_kept_figures_follow_builds_written_again_moved_and_finished(tmp_path):
    from test_day_summaries import kept_summaries, plain_summaries  # which imports this module

    conn = open_database(tmp_path / "t.db")
    import_files(conn, [write_jsonl(tmp_path / "a.jsonl", WRITTEN_FIRST)], 0)
    assert kept_days(conn) == plain_days(conn)
    assert kept_summaries(conn) == plain_summaries(conn)
    import_files(conn, [write_jsonl(tmp_path / "b.jsonl", WRITTEN_AGAIN)], 0)
    kept = kept_days(conn)
    assert kept == plain_days(conn)
    # Each day's summary over every status is derived again with them (test_day_summaries.py).
    assert kept_summaries(conn) == plain_summaries(conn) and len(kept_summaries(conn)) == 4
    assert {(day, status) for _, day, status in kept} == {
        (DAY0.timestamp() * 1_000_000 + d * US_PER_DAY, s)
        for d, s in ((0, "built"), (1, "built"), (2, "built"), (3, "build_failed"))
    }
    conn.close()


def test_a_day_out_of_step_with_its_builds_is_rebuilt_by_the_next_write(env):
    """A write changes a day's kept value by its differences; a value that lacks what a difference takes out
    (only a table damaged by hand gives one) is rebuilt from the day's builds instead of going wrong."""
    env.load(
        [record(1, create_time=at(0, 1), duration_seconds=5.0), record(2, create_time=at(0, 2), duration_seconds=6.0)]
    )
    conn = store_database(env.db)
    try:
        with conn:
            conn.execute(
                "UPDATE day_figures SET figures = ? WHERE status = 'built'",
                (day_figures.pack(2, 240, [5.0], [0.5, 0.5]),),  # build 2's duration lost
            )
        env.load([record(2, create_time=at(0, 2), duration_seconds=7.0)])  # takes 6.0 out, adds 7.0
        assert kept_days(conn) == plain_days(conn)
        assert kept_days(conn)[(1, to_day(0), "built")][2] == [5.0, 7.0]
    finally:
        conn.close()


def test_many_small_writes_into_one_day_keep_its_figures_exact(env):
    """Runners send a few builds at a time, all into today: each write adds to the day's value in place."""
    for batch in range(12):
        env.load(
            [
                record(
                    100 * batch + n + 1,
                    create_time=at(0, n % 24),
                    duration_seconds=None if n == 4 else (batch * 7 + n) % 13 + 0.125,
                    queue_time_seconds=(batch + n) / 10,
                    build_status=("built", "timeout", "built", "built", "running")[n],
                )
                for n in range(5)
            ]
        )
    env.load([record(101, create_time=at(0, 3), build_status="build_failed", duration_seconds=1.5)])  # one moves
    conn = store_database(env.db)
    try:
        assert kept_days(conn) == plain_days(conn)
    finally:
        conn.close()


def test_a_busy_day_is_kept_in_parts_each_write_adds_to_or_starts(env, monkeypatch):
    """A write adds to a day's last part until that part holds PART_BUILDS builds, then starts another, so what it
    rewrites stays bounded however busy the day; a write that replaces builds merges the day's parts into one."""
    monkeypatch.setattr(day_figures, "PART_BUILDS", 4)
    env.load([record(1, create_time=at(0, 0))])  # into an empty database: the day made whole, as one part
    for batch in range(5):
        env.load([record(10 * batch + n + 2, create_time=at(0, n), duration_seconds=batch + n / 10) for n in range(3)])
    conn = store_database(env.db)
    try:
        parts = conn.execute("SELECT part, figures FROM day_figures WHERE status = 'built' ORDER BY part").fetchall()
        assert [part for part, _ in parts] == [0, 1, 2]
        assert [day_figures.unpack(bytes(value))[0] for _, value in parts] == [4, 6, 6]
        assert kept_days(conn) == plain_days(conn)
        env.load([record(2, create_time=at(0, 1), duration_seconds=99.0)])  # takes a value out
        assert conn.execute("SELECT count(*) FROM day_figures WHERE status = 'built'").fetchone() == (1,)
        assert kept_days(conn) == plain_days(conn)
    finally:
        conn.close()


def to_day(day: int) -> int:
    return int((DAY0 + timedelta(days=day)).timestamp()) * 1_000_000


@given(
    st.integers(0, 2**40), st.integers(0, 2**40), st.lists(numbers), st.lists(numbers),
    st.integers(0, 1000), st.integers(0, 2**30), st.lists(numbers), st.lists(numbers),
)
def test_numbers_added_to_a_stored_day_read_back_merged(builds, cpu, durations, queues, more, more_cpu, added,
                                                       added_queues):
    value = day_figures.pack(builds, cpu, list(durations), list(queues))
    grown = day_figures.with_added(value, more, more_cpu, list(added), list(added_queues))
    assert unpacked(grown) == (
        builds + more, cpu + more_cpu, sorted(durations + added), sorted(queues + added_queues)
    )
