"""The shapes of events, their feed and their webhooks: msgspec structs, the single source of JSON and OpenAPI."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Annotated

import msgspec

from buildreport.models import Build, BuildStatus


class EventType(enum.StrEnum):
    """What happened to a build, or to its series."""

    started = "build.started"
    finished = "build.finished"
    failed = "build.failed"
    recovered = "build.recovered"
    regressed = "build.regressed"


class Series(msgspec.Struct, frozen=True):
    """Builds of one derivation name (the store path's name without hash and `.drv`) on one system."""

    derivation: str
    system: str


class PreviousBuild(msgspec.Struct, frozen=True):
    """The series' finished build before this one, where the event is about a change from it."""

    build_id: int
    status: BuildStatus
    duration_seconds: float | None


class Regression(msgspec.Struct, frozen=True):
    """Why a build.regressed event was made: median durations of the series' successful builds."""

    recent_median_seconds: float
    baseline_median_seconds: float
    recent_builds: int
    baseline_builds: int


class EventLink(msgspec.Struct):
    """A signed link to the build's page, made when the event is read or delivered."""

    url: str
    expires_at: datetime


class Event(msgspec.Struct):
    """One event: `build` is exactly what `GET /builds/{build_id}` returned when the event was made."""

    id: Annotated[str, msgspec.Meta(description="Unique; also the `webhook-id` of its deliveries.")]
    type: EventType
    time: datetime
    account: str
    series: Series
    build: Build
    previous: PreviousBuild | None = None
    regression: Regression | None = None
    link: EventLink | None = None


class StoredEvent(msgspec.Struct):
    """An event as stored and sent: the Event's fields, its build kept as the stored JSON, byte for byte."""

    id: str
    type: EventType
    time: datetime
    account: str
    series: Series
    build: msgspec.Raw
    previous: PreviousBuild | None = None
    regression: Regression | None = None
    link: EventLink | None = None


class HookFormat(enum.StrEnum):
    json = "json"
    slack = "slack"


class DeliveryState(enum.StrEnum):
    pending = "pending"
    delivered = "delivered"
    failed = "failed"


class Hook(msgspec.Struct):
    """A webhook as `hook list` shows it (never its secret)."""

    hook_id: str
    account: str
    url: str
    events: list[EventType]
    tags: dict[str, str]
    format: HookFormat
    created_at: datetime
    disabled_at: datetime | None = None
    disabled_reason: str | None = None


class Delivery(msgspec.Struct):
    """One event sent to one hook: its attempts and how the last one went."""

    delivery_id: int
    hook_id: str
    event_id: str
    event_type: EventType
    state: DeliveryState
    attempts: int
    created_at: datetime
    next_attempt_at: datetime | None
    last_status: int | None
    last_error: str | None
    done_at: datetime | None


class SlackMessage(msgspec.Struct):
    """What `--format slack` sends: Slack's incoming-webhook body, which Mattermost and Rocket.Chat take too."""

    text: str
