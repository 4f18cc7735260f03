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
UtcDatetime = Annotated[
    datetime,
    msgspec.Meta(tz=True, description="RFC 3339 time with an offset, 1970-01-01 to 9900-01-01 UTC; returned in UTC."),
]
StartTime = Annotated[
    datetime,
    msgspec.Meta(tz=True, description="RFC 3339 time with an offset, 1970-01-01 to 9900-01-01 UTC, never before "
                 "`create_time`; returned in UTC."),
]
AccountName = Annotated[
    str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$", description="Short account name, e.g. `acme`.")
]

# Value ranges of a stored build. Every value that is summed (CPU seconds, durations in microseconds, NAR bytes)
# is at most 2^50 per build, so a sum reaches 2^63 only after 2^13 builds at the top of the range; the import
# also keeps each account's totals below 2^62 (store.totals.oversized_totals), so no sum over any set of builds can
# overflow SQLite's 64-bit integers. Floats are finite (JSON has no NaN or Infinity, and every float is bounded).
MAX_CPU_SECONDS = 2**40  # 34,000 CPU-years in one build
MAX_DURATION_SECONDS = 10 * 31_557_600  # ten years, queued or running
MAX_CPU_COUNT = 2**16
MAX_MEGABYTES = 2**30  # 1 PiB of memory
MAX_KILOBYTES = 2**40  # 1 PiB of memory or storage
MAX_NAR_SIZE_BYTES = 2**44  # 16 TiB an output
MAX_CPU_UTILIZATION = 2**16.0  # a share of the allocated CPUs; above 1 when a build outgrows its allocation
MAX_OUTPUTS = 64
MAX_TAGS = 64
# Text that PostgreSQL's indexes hold (store paths, the system, tag keys and values) is bounded so that an index
# entry stays under its 2,704-byte limit at four UTF-8 bytes a character: a tag row's key and value, or a time
# index entry's derivation path and system, with the numbers beside them.
MAX_PATH_LENGTH = 512
MAX_SYSTEM_LENGTH = 64
MAX_NAME_LENGTH = 256
MAX_MESSAGE_LENGTH = 4096
MAX_TAG_KEY_LENGTH = 128
MAX_TAG_VALUE_LENGTH = 256
MAX_LOG_CHARACTERS = 2**27  # 128 Mi characters


def _bounded_int(low: int, high: int, description: str) -> Any:
    return Annotated[int, msgspec.Meta(ge=low, le=high, description=description)]


# Text that is kept in its own column (tags, store paths, source ids) never holds NUL: no database takes it there.
NO_NUL = "^[^\x00]*$"


def _bounded_str(high: int, description: str, low: int = 0, *, pattern: str | None = None) -> Any:
    return Annotated[str, msgspec.Meta(min_length=low, max_length=high, pattern=pattern, description=description)]


Seconds = Annotated[
    float, msgspec.Meta(ge=0, le=MAX_DURATION_SECONDS, description=f"Seconds, 0 to {MAX_DURATION_SECONDS} (ten years).")
]
TagKey = _bounded_str(MAX_TAG_KEY_LENGTH, "Tag name (after `SERVICE_TAG_`).", low=1, pattern=NO_NUL)
TagValue = _bounded_str(MAX_TAG_VALUE_LENGTH, "Tag value.", pattern=NO_NUL)
Tags = Annotated[dict[TagKey, TagValue], msgspec.Meta(max_length=MAX_TAGS, description=f"At most {MAX_TAGS} tags.")]
OutputName = _bounded_str(MAX_NAME_LENGTH, "Output name, e.g. `out`.", low=1)
StorePath = _bounded_str(MAX_PATH_LENGTH, "A Nix store path.", low=1, pattern=NO_NUL)
NarHash = _bounded_str(MAX_NAME_LENGTH, "Hash of the NAR serialisation.")
NarSize = _bounded_int(0, MAX_NAR_SIZE_BYTES, "Size of the NAR serialisation, up to 16 TiB.")
StatusMessage = _bounded_str(MAX_MESSAGE_LENGTH, "Why the build ended as it did.")
CpuCount = _bounded_int(1, MAX_CPU_COUNT, "CPUs allocated.")
Megabytes = _bounded_int(0, MAX_MEGABYTES, "Memory allocated, up to 1 PiB.")
CpuSeconds = _bounded_int(0, MAX_CPU_SECONDS, "CPU time used, up to 2^40 seconds.")
Utilization = Annotated[
    float, msgspec.Meta(ge=0, le=MAX_CPU_UTILIZATION, description="Average share of the allocated CPUs used.")
]
Kilobytes = _bounded_int(0, MAX_KILOBYTES, "Up to 1 PiB.")
SystemName = _bounded_str(MAX_SYSTEM_LENGTH, "Nix system, e.g. `x86_64-linux`.", low=1, pattern=NO_NUL)
Outputs = Annotated[list["BuildOutput"], msgspec.Meta(max_length=MAX_OUTPUTS, description=f"At most {MAX_OUTPUTS}.")]
LogText = Annotated[str, msgspec.Meta(max_length=MAX_LOG_CHARACTERS, description="The build log.")]


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

    name: OutputName
    path: StorePath
    nar_hash: NarHash
    nar_size_bytes: NarSize


class Build(msgspec.Struct, forbid_unknown_fields=True):
    """One remote build of a derivation. Every field is always present in a response; nullable ones as null."""

    build_id: BuildId
    create_time: UtcDatetime
    start_time: StartTime
    queue_time_seconds: Seconds
    duration_seconds: Seconds | None
    build_status: BuildStatus
    # The hosted service's own clients read `status`; both names are always sent, always equal.
    status: Annotated[BuildStatus, msgspec.Meta(description="Alias of `build_status`: always the same value.")]
    status_message: StatusMessage | None
    cpu_count: CpuCount
    allocated_megabytes: Megabytes
    cpu_seconds: CpuSeconds
    average_cpu_utilization: Utilization | None
    peak_memory_use_kilobytes: Kilobytes | None
    peak_storage_use_kilobytes: Kilobytes | None
    derivation_path: StorePath
    outputs: Outputs
    system: SystemName
    tags: Tags
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


class BadgeURL(msgspec.Struct):
    """A signed, long-lived address of a badge (SVG) of a series' newest finished build; it needs no token."""

    url: str
    expires_at: datetime


class Usage(msgspec.Struct):
    """Billable usage over a range of stop dates."""

    billable_cpu_seconds: int
    billable_build_count: int


class Health(msgspec.Struct):
    status: str


STATUS_FIELDS = ("build_status", "status")


def _import_fields() -> list[tuple[str, Any, Any]]:
    """Build's fields as an import record takes them: nullable ones, outputs and tags may be left out.

    `build_status` and its alias `status` are each optional (ingest requires one of them); an unset one is
    left out when a record is encoded, so a record written with only `build_status` reads as before.
    """
    hints = get_type_hints(Build, include_extras=True)
    fields: list[tuple[str, Any, Any]] = []
    for name in Build.__struct_fields__:
        kind = hints[name]
        if name in STATUS_FIELDS:
            fields.append((name, BuildStatus | msgspec.UnsetType, msgspec.UNSET))
        elif name == "outputs":
            fields.append((name, kind, msgspec.field(default_factory=list)))
        elif name == "tags":
            fields.append((name, kind, msgspec.field(default_factory=dict)))
        elif type(None) in get_args(kind):
            fields.append((name, kind, None))
        else:
            fields.append((name, kind, msgspec.NODEFAULT))
    return [*fields, ("account", AccountName, msgspec.NODEFAULT), ("log", LogText | None, None)]


# One line of an import file: a Build, its account and, optionally, its log.
ImportRecord = msgspec.defstruct(
    "ImportRecord", _import_fields(), kw_only=True, forbid_unknown_fields=True, module=__name__
)

SourceId = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=200,
        pattern=NO_NUL,
        description="The sender's own id of a build, unique within the account, e.g. `runner-3:8f14e45f`.",
    ),
]


def _write_fields() -> list[tuple[str, Any, Any]]:
    """The import record's fields as `POST /builds` takes them: no account (the token's), `build_id` optional,
    and the sender's own ids of the build and of the build it restarts."""
    fields: list[tuple[str, Any, Any]] = []
    for name, kind, default in _import_fields():
        if name == "account":
            continue
        fields.append((name, kind | None, None) if name == "build_id" else (name, kind, default))
    return [*fields, ("source_id", SourceId | None, None), ("restart_of_source_id", SourceId | None, None)]


# One record of `POST /builds` (and of a spool file): it names its build by `build_id` or `source_id`.
BuildRecord = msgspec.defstruct(
    "BuildRecord", _write_fields(), kw_only=True, forbid_unknown_fields=True, module=__name__
)


class WriteResult(msgspec.Struct):
    """What `POST /builds` did: counts, and each record's build id in request order."""

    created: int
    updated: int
    unchanged: int
    build_ids: list[int]


class InvalidRecord(msgspec.Struct):
    index: int
    field: str
    reason: str


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
    more_invalid_params: int | None = None  # bad parameters beyond those `invalid_params` lists


class InvalidRecordsProblem(Problem):
    """The 400 of `POST /builds`: every bad record, by its 0-based position in the request."""

    invalid_records: list[InvalidRecord] | None = None
    invalid_record_count: int | None = None
    max_records: int | None = None  # when the request held more records than this


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
