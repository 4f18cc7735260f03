"""The msgspec structs that define every shape buildreport reads or writes.

They are the single source of the schema: responses are encoded from them, the
OpenAPI document is generated from them and the import format is decoded by them.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Annotated, Any, get_args, get_type_hints

import msgspec

BuildId = Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1, description="Positive 64-bit build identifier.")]
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]
NonNegativeFloat = Annotated[float, msgspec.Meta(ge=0)]
UtcDatetime = Annotated[datetime, msgspec.Meta(tz=True, description="RFC 3339 time with an offset; returned in UTC.")]
AccountName = Annotated[
    str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$", description="Short account name, e.g. `acme`.")
]


class BuildStatus(enum.StrEnum):
    """Where a build ended up, or where it is now."""

    built = "built"
    build_failed = "build_failed"
    cancelled = "cancelled"
    timeout = "timeout"
    internal_error = "internal_error"
    out_of_memory = "out_of_memory"
    max_memory_exceeded = "max_memory_exceeded"
    client_disconnect = "client_disconnect"
    client_error = "client_error"
    pending = "pending"
    running = "running"


SUCCESSFUL = frozenset({BuildStatus.built})
FAILED = frozenset(
    {
        BuildStatus.build_failed,
        BuildStatus.cancelled,
        BuildStatus.timeout,
        BuildStatus.max_memory_exceeded,
        BuildStatus.client_disconnect,
        BuildStatus.client_error,
    }
)
# Failures of the service, not of the user: not billed, and the service restarts them.
DISCARDED = frozenset({BuildStatus.internal_error, BuildStatus.out_of_memory})
UNFINISHED = frozenset({BuildStatus.pending, BuildStatus.running})
BILLABLE = SUCCESSFUL | FAILED


class BuildOutput(msgspec.Struct, forbid_unknown_fields=True):
    """One store path a build produced."""

    name: str
    path: str
    nar_hash: str
    nar_size_bytes: NonNegativeInt


class Build(msgspec.Struct, forbid_unknown_fields=True):
    """One remote build of a derivation. Every field is always present in a response; nullable ones as null."""

    build_id: BuildId
    create_time: UtcDatetime
    start_time: UtcDatetime
    queue_time_seconds: NonNegativeFloat
    duration_seconds: NonNegativeFloat | None
    build_status: BuildStatus
    status_message: str | None
    cpu_count: Annotated[int, msgspec.Meta(ge=1)]
    allocated_megabytes: NonNegativeInt
    cpu_seconds: NonNegativeInt
    average_cpu_utilization: NonNegativeFloat | None
    peak_memory_use_kilobytes: NonNegativeInt | None
    peak_storage_use_kilobytes: NonNegativeInt | None
    derivation_path: Annotated[str, msgspec.Meta(min_length=1)]
    outputs: list[BuildOutput]
    system: Annotated[str, msgspec.Meta(min_length=1)]
    tags: dict[str, str]
    restart_of_build_id: BuildId | None
    restarted_as_build_id: BuildId | None


class BuildSummary(msgspec.Struct):
    """Counts and totals over every build a filter selects."""

    build_count: int
    running_build_count: int
    discarded_build_count: int
    failed_build_count: int
    successful_build_count: int
    total_cpu_seconds: int
    billable_cpu_seconds: int
    total_duration_seconds: float
    wall_time_seconds: float
    total_output_nar_size_kilobytes: int


class BuildURL(msgspec.Struct):
    """A signed, time-limited web address for one build's page and log."""

    build_id: int
    url: str
    expires_at: datetime


class Usage(msgspec.Struct):
    """Billable usage over a range of stop dates."""

    billable_cpu_seconds: int
    billable_build_count: int


class Health(msgspec.Struct):
    status: str


def _import_fields() -> list[tuple[str, Any, Any]]:
    """Build's fields as an import record takes them: nullable ones, outputs and tags may be left out."""
    hints = get_type_hints(Build, include_extras=True)
    fields: list[tuple[str, Any, Any]] = []
    for name in Build.__struct_fields__:
        kind = hints[name]
        if name == "outputs":
            fields.append((name, kind, msgspec.field(default_factory=list)))
        elif name == "tags":
            fields.append((name, kind, msgspec.field(default_factory=dict)))
        elif type(None) in get_args(kind):
            fields.append((name, kind, None))
        else:
            fields.append((name, kind, msgspec.NODEFAULT))
    return [*fields, ("account", AccountName, msgspec.NODEFAULT), ("log", str | None, None)]


# One line of an import file: a Build, its account and, optionally, its log.
ImportRecord = msgspec.defstruct(
    "ImportRecord", _import_fields(), kw_only=True, forbid_unknown_fields=True, module=__name__
)


class InvalidParam(msgspec.Struct):
    name: str
    reason: str


class Problem(msgspec.Struct, omit_defaults=True):
    """An RFC 9457 problem document, the body of every error."""

    type: str
    title: str
    status: int
    detail: str
    invalid_params: list[InvalidParam] | None = None


# --- insights ---------------------------------------------------------------------------------


class Percentiles(msgspec.Struct):
    """Exact percentiles by the nearest-rank method, and the maximum, in seconds."""

    p50: float
    p90: float
    p95: float
    p99: float
    max: float


class BuildStatsGroup(msgspec.Struct):
    """Counts, rates, CPU and time percentiles over one group of builds."""

    key: Annotated[
        str,
        msgspec.Meta(
            description="The UTC date `YYYY-MM-DD`, the hour as RFC 3339, or the system, status, derivation "
            "name, derivation path or tag value."
        ),
    ]
    build_count: int
    running_build_count: int
    discarded_build_count: int
    failed_build_count: int
    successful_build_count: int
    success_rate: Annotated[
        float | None, msgspec.Meta(description="built / (built + failed); null when both are zero.")
    ]
    total_cpu_seconds: int
    billable_cpu_seconds: int
    duration_seconds: Annotated[
        Percentiles | None, msgspec.Meta(description="Over the group's builds with a duration; null when none.")
    ]
    queue_time_seconds: Percentiles | None


class UsageBreakdownGroup(msgspec.Struct):
    """Billable usage of one group; `key` is null for builds without the grouping tag."""

    key: str | None
    billable_cpu_seconds: int
    billable_build_count: int


class DashboardURL(msgspec.Struct):
    """A signed, time-limited web address for the account's dashboard page."""

    url: str
    expires_at: datetime
