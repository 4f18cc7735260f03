"""Events derived from a build, its status before and its series' state."""

from __future__ import annotations

from datetime import UTC, datetime

from buildreport.events.derive import Rules, SeriesState, derive, series_of
from buildreport.events.models import EventType, Series
from buildreport.models import Build, BuildStatus

RULES = Rules()
T0 = datetime(2026, 11, 1, tzinfo=UTC)


def build(build_id: int, status: str = "built", duration: float | None = 60.0, name: str = "hello-2.12") -> Build:
    status_ = BuildStatus(status)
    return Build(
        build_id=build_id, create_time=T0, start_time=T0, queue_time_seconds=0.0,
        duration_seconds=None if status in ("pending", "running") else duration, build_status=status_, status=status_,
        status_message=None, cpu_count=1, allocated_megabytes=1024, cpu_seconds=1, average_cpu_utilization=None,
        peak_memory_use_kilobytes=None, peak_storage_use_kilobytes=None,
        derivation_path=f"/nix/store/{'a' * 32}-{name}.drv", outputs=[], system="x86_64-linux", tags={},
        restart_of_build_id=None, restarted_as_build_id=None,
    )


def types(events: list) -> list[str]:
    return [e.type.value for e in events]


def run(state: SeriesState, *statuses: str) -> list[list[str]]:
    return [types(derive(build(i, s), None, state, RULES)) for i, s in enumerate(statuses, 1)]


def test_series_is_the_derivation_name_without_hash_and_the_system() -> None:
    assert series_of(build(1, name="hello-2.12")) == Series("hello-2.12", "x86_64-linux")


def test_a_running_build_starts_once_and_a_finished_one_makes_no_more_events() -> None:
    state = SeriesState()
    assert types(derive(build(1, "pending"), None, state, RULES)) == []
    assert types(derive(build(1, "running"), BuildStatus.pending, state, RULES)) == ["build.started"]
    assert types(derive(build(1, "running"), BuildStatus.running, state, RULES)) == []
    assert types(derive(build(1, "built"), BuildStatus.running, state, RULES)) == ["build.finished"]
    assert types(derive(build(1, "built"), BuildStatus.built, state, RULES)) == []


def test_a_series_that_stays_broken_makes_one_failure_and_recovers_once() -> None:
    assert run(SeriesState(), "built", "build_failed", "timeout", "build_failed", "built", "built") == [
        ["build.finished"],
        ["build.finished", "build.failed"],
        ["build.finished"],
        ["build.finished"],
        ["build.finished", "build.recovered"],
        ["build.finished"],
    ]


def test_a_first_build_that_fails_is_a_failure_and_discarded_builds_change_nothing() -> None:
    state = SeriesState()
    assert run(state, "build_failed", "internal_error", "built") == [
        ["build.finished", "build.failed"], ["build.finished"], ["build.finished", "build.recovered"]
    ]


def test_recovered_names_the_failed_build_before_it() -> None:
    state = SeriesState()
    derive(build(7, "build_failed", 12.5), None, state, RULES)
    recovered = derive(build(8, "built"), None, state, RULES)[1]
    assert recovered.type is EventType.recovered
    assert (recovered.previous.build_id, recovered.previous.status, recovered.previous.duration_seconds) == (
        7, BuildStatus.build_failed, 12.5)


def durations(state: SeriesState, *seconds: float) -> list[list[str]]:
    return [types(derive(build(i, duration=s), None, state, RULES)) for i, s in enumerate(seconds, 1)]


def test_a_regression_is_reported_once_per_episode() -> None:
    state = SeriesState()
    made = durations(state, *[100.0] * 20, 200, 200, 200, 200, 200)
    assert [i for i, t in enumerate(made) if "build.regressed" in t] == [21]  # the second slow build of three
    back = durations(state, *[100.0] * 3)
    assert not any("build.regressed" in t for t in back)
    assert not state.slow
    again = durations(state, 300, 300)
    assert ["build.finished", "build.regressed"] in again


def test_no_regression_below_either_threshold_or_with_a_short_baseline() -> None:
    assert not state_regressed([100.0] * 20 + [149.0] * 3)  # +49 %
    assert not state_regressed([30.0] * 20 + [80.0] * 3)  # +167 % but only 50 s
    assert not state_regressed([100.0] * 9 + [300.0] * 3)  # 9 builds of baseline
    assert state_regressed([100.0] * 10 + [160.0] * 3)  # +60 %, 60 s, 10 builds


def state_regressed(seconds: list[float]) -> bool:
    return any("build.regressed" in t for t in durations(SeriesState(), *seconds))


def test_thresholds_are_rules() -> None:
    state = SeriesState()
    made = [types(derive(build(i, duration=s), None, state, Rules(percent=10, seconds=5, min_baseline=2)))
            for i, s in enumerate([100.0, 100.0, 111.0, 111.0, 111.0], 1)]
    assert "build.regressed" in made[-1]
