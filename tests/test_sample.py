"""The sample-data generator: reproducible, valid and believable builds."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest

from buildreport.models import DISCARDED, UNFINISHED, BuildStatus, ImportRecord
from buildreport.sample import (
    SAMPLE_ACCOUNTS,
    SAMPLE_BUILDS,
    SAMPLE_DAYS,
    SAMPLE_END,
    SAMPLE_PATH,
    SAMPLE_SEED,
    generate,
    write_jsonl,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
SMALL_END = datetime(2026, 3, 2, 12, tzinfo=UTC)


def _small(seed: int = 5, **overrides: object) -> list[ImportRecord]:
    args: dict = {"builds": 400, "days": 7, "accounts": ["acme", "globex"], "seed": seed, "end": SMALL_END}
    args.update(overrides)
    return list(generate(**args))


@pytest.fixture(scope="module")
def sample() -> list[ImportRecord]:
    """The records of the committed sample dataset, as decoded from the file."""
    lines = gzip.decompress((REPO_ROOT / SAMPLE_PATH).read_bytes()).splitlines()
    decoder = msgspec.json.Decoder(ImportRecord)
    return [decoder.decode(line) for line in lines]


def test_same_arguments_give_identical_bytes(tmp_path: Path) -> None:
    first, second = tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz"
    assert write_jsonl(generate(builds=300, days=3, accounts=["acme"], seed=9, end=SMALL_END), first) == 300
    assert write_jsonl(generate(builds=300, days=3, accounts=["acme"], seed=9, end=SMALL_END), second) == 300
    assert first.read_bytes() == second.read_bytes()


def test_different_seed_gives_different_data(tmp_path: Path) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_jsonl(generate(builds=300, days=3, accounts=["acme"], seed=9, end=SMALL_END), first)
    write_jsonl(generate(builds=300, days=3, accounts=["acme"], seed=10, end=SMALL_END), second)
    assert first.read_bytes() != second.read_bytes()


def test_plain_file_is_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "builds.jsonl"
    assert write_jsonl(_small(builds=50), path) == 50
    lines = path.read_bytes().splitlines()
    assert len(lines) == 50
    assert all(isinstance(msgspec.json.decode(line, type=ImportRecord), ImportRecord) for line in lines)


def test_log_share_changes_only_the_logs() -> None:
    with_logs, without_logs = _small(log_share=1.0), _small(log_share=0.0)
    assert all(r.log is None for r in without_logs)
    assert sum(r.log is not None for r in with_logs) > 350
    for a, b in zip(with_logs, without_logs, strict=True):
        a.log = None
        assert a == b


def test_requested_count_accounts_and_time_range() -> None:
    records = _small()
    assert len(records) == 400
    assert {r.account for r in records} == {"acme", "globex"}
    assert sum(r.account == "acme" for r in records) > sum(r.account == "globex" for r in records)
    times = [r.create_time for r in records]
    assert times == sorted(times)
    assert times[0] >= SMALL_END - timedelta(days=7)
    assert times[-1] < SMALL_END
    assert all(t.utcoffset() == timedelta(0) for t in times)


def test_committed_sample_matches_a_fresh_run(tmp_path: Path) -> None:
    path = tmp_path / "builds.jsonl.gz"
    write_jsonl(
        generate(builds=SAMPLE_BUILDS, days=SAMPLE_DAYS, accounts=SAMPLE_ACCOUNTS, seed=SAMPLE_SEED, end=SAMPLE_END),
        path,
    )
    assert gzip.decompress(path.read_bytes()) == gzip.decompress((REPO_ROOT / SAMPLE_PATH).read_bytes())


def test_sample_is_small_enough_to_commit() -> None:
    assert (REPO_ROOT / SAMPLE_PATH).stat().st_size < 2_000_000


def test_sample_has_every_status(sample: list[ImportRecord]) -> None:
    assert len(sample) == SAMPLE_BUILDS
    assert {r.build_status for r in sample} == set(BuildStatus)
    assert sum(r.build_status is BuildStatus.built for r in sample) > 0.7 * len(sample)


def test_build_ids_are_unique_and_follow_creation_order(sample: list[ImportRecord]) -> None:
    ids = [r.build_id for r in sample]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)


def test_times_and_durations_fit_together(sample: list[ImportRecord]) -> None:
    for r in sample:
        assert r.start_time >= r.create_time
        if r.build_status in UNFINISHED:
            assert r.duration_seconds is None
            assert r.average_cpu_utilization is None
            assert r.create_time > SAMPLE_END - timedelta(hours=12)
        else:
            assert r.duration_seconds is not None
            assert r.start_time + timedelta(seconds=r.duration_seconds) <= SAMPLE_END


def test_restart_links_agree_in_both_directions(sample: list[ImportRecord]) -> None:
    by_id = {r.build_id: r for r in sample}
    restarted = [r for r in sample if r.restarted_as_build_id is not None]
    assert restarted
    for failed in restarted:
        restart = by_id[failed.restarted_as_build_id]
        assert failed.build_status in DISCARDED
        assert restart.restart_of_build_id == failed.build_id
        assert restart.account == failed.account
        assert restart.derivation_path == failed.derivation_path
        assert restart.create_time > failed.create_time
    for restart in sample:
        if restart.restart_of_build_id is not None:
            assert by_id[restart.restart_of_build_id].restarted_as_build_id == restart.build_id


def test_outputs_messages_and_tags_look_real(sample: list[ImportRecord]) -> None:
    for r in sample:
        assert r.derivation_path.startswith("/nix/store/") and r.derivation_path.endswith(".drv")
        assert bool(r.outputs) == (r.build_status is BuildStatus.built)
        assert (r.status_message is None) == (r.build_status is BuildStatus.built or r.build_status in UNFINISHED)
        assert all(o.nar_hash.startswith("sha256-") and o.path.startswith("/nix/store/") for o in r.outputs)
        assert not r.tags or set(r.tags) == {"GITHUB_REPOSITORY", "GITHUB_RUN_ID", "GITHUB_RUN_ATTEMPT", "project"}
    assert any(not r.tags for r in sample)
    assert sum(bool(r.tags) for r in sample) > 0.8 * len(sample)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        generate(builds=10, days=1, accounts=[], seed=1, end=SMALL_END)
    with pytest.raises(ValueError):
        generate(builds=10, days=1, accounts=["acme"], seed=1, end=datetime(2026, 1, 1))


@pytest.mark.parametrize("seed", range(6))
def test_generated_builds_never_start_before_they_are_created(seed: int) -> None:
    """Such a build is refused by import and POST /builds alike."""
    for r in _small(seed, builds=300, days=2):
        assert r.start_time >= r.create_time
