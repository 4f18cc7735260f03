"""Retention: what `prune` leaves equals a plain computation over the builds that remain, on both engines."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from conftest import write_jsonl
from hypothesis import given, settings
from hypothesis import strategies as st
from test_day_figures import kept_days, plain_days
from test_day_summaries import kept_summaries, plain_summaries
from test_tag_totals import check_kept, patched, tags_strategy
from test_totals import (
    ACCOUNT_OF,
    ORIGIN,
    SLOW_AND_FIXTURE,
    build_strategy,
    daily_from_builds,
    stored_totals,
    to_record,
    totals_from_builds,
)

from buildreport.filters import UsageQuery
from buildreport.imports.load import import_files
from buildreport.store import DatabaseError, open_database, queries
from buildreport.store.prune import Policy, give_back_space, preview, prune
from buildreport.store.queries import US_PER_DAY, US_PER_HOUR
from buildreport.times import to_us

MINUTE = 60 * 1_000_000
_LINKS = "SELECT build_id, restart_of_build_id, restarted_as_build_id FROM builds ORDER BY 1"

pruned_build = st.tuples(build_strategy, tags_strategy, st.booleans(), st.booleans())  # tags, a log, a restart


def to_pruned_record(spec: dict, tags: dict, log: bool, restart: bool) -> dict:
    body = to_record(spec) | {"tags": tags}
    if log:
        body["log"] = f"log of build {spec['build_id']}\n" * 3
    if restart and spec["build_id"] > 2:
        body["restart_of_build_id"] = spec["build_id"] - 2  # the same account: ids of one parity share one
    return body


def load(conn, folder: Path, builds: list[tuple]) -> None:
    unique = {spec["build_id"]: (spec, *rest) for spec, *rest in builds}
    import_files(conn, [write_jsonl(folder / "b.jsonl", [to_pruned_record(*b) for b in unique.values()])], 0)


def usage_by_day(conn) -> dict[tuple[int, int], tuple[int, int]]:
    """(account, day) -> (builds, cpu seconds) of daily_usage and kept_usage added together."""
    days: dict[tuple[int, int], tuple[int, int]] = {}
    for table in ("daily_usage", "kept_usage"):
        rows = conn.execute(f"SELECT account_id, day_us, builds, cpu_seconds FROM {table}").fetchall()
        for account_id, day, builds, cpu in rows:
            before = days.get((account_id, day), (0, 0))
            days[(account_id, day)] = (before[0] + builds, before[1] + cpu)
    return days


def check_figures(conn, promote_at: int) -> None:
    """Every kept figure equals a computation over the builds stored."""
    hourly, daily, usage = stored_totals(conn)
    assert hourly == totals_from_builds(conn, US_PER_HOUR)
    assert daily == totals_from_builds(conn, US_PER_DAY)
    assert usage == daily_from_builds(conn)
    assert kept_days(conn) == plain_days(conn)
    assert kept_summaries(conn) == plain_summaries(conn)
    check_kept(conn, promote_at)


@settings(max_examples=25, deadline=None, suppress_health_check=SLOW_AND_FIXTURE)
@given(
    builds=st.lists(pruned_build, min_size=1, max_size=30),
    cut_minutes=st.integers(-60, 60 * 24 * 3 + 60),
    logs_only=st.booleans(),
    account=st.sampled_from([None, *ACCOUNT_OF]),
    keep_usage=st.booleans(),
    promote_at=st.integers(1, 4),
    batch=st.integers(1, 7),
)
def test_every_kept_figure_equals_a_plain_computation_after_any_prune(
    fresh_db, builds, cut_minutes, logs_only, account, keep_usage, promote_at, batch
):
    with tempfile.TemporaryDirectory() as tmp, patched(PROMOTE_AT=promote_at):
        conn = open_database(fresh_db(Path(tmp)))
        load(conn, Path(tmp), builds)
        cutoff = to_us(ORIGIN) + cut_minutes * MINUTE
        names = dict(conn.execute("SELECT name, account_id FROM accounts").fetchall())
        stored = conn.execute("SELECT build_id, account_id, create_us FROM builds").fetchall()
        links = {row[0]: row[1:] for row in conn.execute(_LINKS).fetchall()}
        usage = usage_by_day(conn)
        logs = {row[0] for row in conn.execute("SELECT build_id FROM build_logs").fetchall()}
        named = {i for i, a, c in stored if c < cutoff and (account is None or names.get(account) == a)}
        policy = Policy(older_than_us=MINUTE, logs_only=logs_only, account=account, keep_usage=keep_usage)
        if account is not None and account not in names:
            with pytest.raises(DatabaseError):
                prune(conn, policy, cutoff + MINUTE, batch=batch)
            return
        would = preview(conn, policy, cutoff + MINUTE)
        done = prune(conn, policy, cutoff + MINUTE, batch=batch)
        assert (done.builds, done.logs) == (would.builds, would.logs) == (0 if logs_only else len(named),
                                                                             len(named & logs))
        remaining = {row[0] for row in conn.execute("SELECT build_id FROM builds").fetchall()}
        gone = set() if logs_only else named
        assert remaining == {row[0] for row in stored} - gone
        assert {row[0] for row in conn.execute("SELECT build_id FROM build_logs").fetchall()} == logs - named
        check_figures(conn, promote_at)
        # A link to a pruned build becomes null, in the column and in the build's JSON alike.
        expected = {i: tuple(None if peer in gone else peer for peer in links[i]) for i in remaining}
        assert {row[0]: row[1:] for row in conn.execute(_LINKS).fetchall()} == expected
        for body, restart_of, restarted_as in conn.execute(
            "SELECT body, restart_of_build_id, restarted_as_build_id FROM builds"
        ).fetchall():
            text = bytes(body).decode()
            assert f'"restart_of_build_id":{"null" if restart_of is None else restart_of},' in text
            assert text.endswith(f'"restarted_as_build_id":{"null" if restarted_as is None else restarted_as}}}')
        # Usage: kept whole, or only that of the builds that remain.
        if keep_usage:
            assert usage_by_day(conn) == usage
        else:
            assert conn.execute("SELECT count(*) FROM kept_usage").fetchone()[0] == 0
        for account_id in names.values():
            (answer,) = conn.execute(*queries.usage(account_id, UsageQuery(from_us=0))).fetchall()
            days = [v for (a, _), v in usage_by_day(conn).items() if a == account_id]
            assert tuple(answer) == (sum(cpu for _, cpu in days), sum(n for n, _ in days))
        conn.close()


def test_space_of_pruned_builds_is_given_back_to_the_file_system(tmp_path):
    records = [
        to_pruned_record({"build_id": i, "minutes": i - 1, "status": "built", "duration": 5, "cpu": 1, "nar": 1},
                         {"project": "a"}, True, False) | {"log": f"{i} " * 5000}
        for i in range(1, 301)
    ]
    conn = open_database(tmp_path / "t.db")
    import_files(conn, [write_jsonl(tmp_path / "b.jsonl", records)], 0)
    size = (tmp_path / "t.db").stat().st_size
    done = prune(conn, Policy(older_than_us=MINUTE), to_us(ORIGIN) + 201 * MINUTE)
    assert done.builds == 200
    freed = give_back_space(conn)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    assert freed is not None and freed > 0
    assert (tmp_path / "t.db").stat().st_size <= size - freed


def test_postgres_leaves_space_to_autovacuum(pg_url):
    conn = open_database(pg_url)
    try:
        assert give_back_space(conn) is None
    finally:
        conn.close()
