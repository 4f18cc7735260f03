"""Events from builds as they are written: pure functions of a build, what it was before, and its series' state.

A series' state holds what its events depend on: its last finished build that succeeded or failed (a discarded
build, a fault of the service, says nothing about the series) and the durations of its latest successful builds,
enough for the regression test, and whether it is in a slow episode. The store keeps one per series and hands
each build the state its series had before it, in the order the builds were written.
"""

from __future__ import annotations

from statistics import median

import msgspec

from buildreport.events.models import EventType, PreviousBuild, Regression, Series
from buildreport.models import FAILED, SUCCESSFUL, UNFINISHED, Build, BuildStatus
from buildreport.storepath import derivation_name


class Rules(msgspec.Struct, frozen=True):
    """When a series counts as slower (`serve --regression-*`): the median of its last `recent` successful
    builds exceeds the median of the `window` before them by `percent` and by `seconds`, with at least
    `min_baseline` builds in that baseline."""

    percent: float = 50.0
    seconds: float = 60.0
    min_baseline: int = 10
    recent: int = 3
    window: int = 20


class SeriesState(msgspec.Struct, array_like=True):
    last: PreviousBuild | None = None  # the last finished build that succeeded or failed
    durations: list[float] = msgspec.field(default_factory=list)  # of the latest successful builds, oldest first
    slow: bool = False  # a build.regressed was made and the series has not come back below the threshold


class Derived(msgspec.Struct):
    """An event about to be stored: its type and what it says beyond the build."""

    type: EventType
    previous: PreviousBuild | None = None
    regression: Regression | None = None


def series_of(build: Build) -> Series:
    return Series(derivation_name(build.derivation_path), build.system)


def derive(build: Build, before: BuildStatus | None, state: SeriesState, rules: Rules) -> list[Derived]:
    """The events of writing `build`, which was stored with status `before` (None: new), given its series'
    `state`, which is brought up to date in place. A build that was finished already makes none."""
    status = build.build_status
    if before is not None and before not in UNFINISHED:
        return []
    if status in UNFINISHED:
        started = status is BuildStatus.running and before is not BuildStatus.running
        return [Derived(EventType.started)] if started else []
    events = [Derived(EventType.finished)]
    last = state.last
    if status in FAILED:
        if last is None or last.status in SUCCESSFUL:
            events.append(Derived(EventType.failed, previous=last))
    elif status in SUCCESSFUL:
        if last is not None and last.status in FAILED:
            events.append(Derived(EventType.recovered, previous=last))
        if build.duration_seconds is not None:
            regression = _record_duration(state, build.duration_seconds, rules)
            if regression is not None:
                events.append(Derived(EventType.regressed, previous=last, regression=regression))
    else:
        return events  # discarded: the series' state stays as it was
    state.last = PreviousBuild(build.build_id, status, build.duration_seconds)
    return events


def _record_duration(state: SeriesState, duration: float, rules: Rules) -> Regression | None:
    """Add a successful build's duration; a Regression when this build starts a slow episode."""
    state.durations.append(duration)
    del state.durations[: -(rules.recent + rules.window)]
    recent, baseline = state.durations[-rules.recent :], state.durations[: -rules.recent]
    if len(recent) < rules.recent or len(baseline) < rules.min_baseline:
        return None
    now, before = median(recent), median(baseline)
    slower = now >= before * (1 + rules.percent / 100) and now - before >= rules.seconds
    if not slower:
        state.slow = False
        return None
    if state.slow:
        return None  # the same episode
    state.slow = True
    return Regression(now, before, len(recent), len(baseline))
