"""The filter specification: one entry per field of a build filter (filters.BuildFilter), as requests name it.

Pure data. Parsing (filters.py), the OpenAPI parameters (http/parameters.py), the SQL `WHERE`
(store/filter_sql.py) and the choice of kept figures (store/kept.py) all follow these entries, so a field
added here is parsed, documented and filtered on, and every kept table that does not declare it steps aside.
"""

from __future__ import annotations

import msgspec

from buildreport.models import BuildStatus

# Per request: far more than any report needs, and few enough that every query stays far inside SQLite's
# limits on expression depth (1000) and bound variables (32766) whatever else the filter holds.
MAX_TAG_PAIRS = 32
MAX_STATUS_VALUES = 32


class FilterField(msgspec.Struct, frozen=True):
    """One field of a build filter: its query name, the BuildFilter attribute it sets, how its text is read
    (`kind`: moment, store_path, statuses or tags, each a parser in filters.py), whether it may repeat, and its
    documentation as plain JSON-schema facts. `summaries`: /builds/summary and /builds/stats take it too, not
    only the list and the export."""

    name: str
    attr: str
    kind: str
    repeats: bool
    description: str
    pattern: str | None = None
    formats: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    min_length: int | None = None
    summaries: bool = True


_TAG = "[^,:\\x00]+:[^,\\x00]*"
_ONE_STATUS = "(" + "|".join(s.value for s in BuildStatus) + ")"
# In the order a request's problems are reported: the window first, then the other fields.
FILTER_FIELDS: tuple[FilterField, ...] = (
    FilterField(
        "create_time_from", "create_from_us", "moment", False,
        "Date (midnight UTC) or date-time; builds created at or after it. Default: 24 hours ago. "
        "Not later than `create_time_to`.",
        formats=("date", "date-time"), examples=("2026-11-01",),
    ),
    FilterField(
        "create_time_to", "create_to_us", "moment", False,
        "Date (midnight UTC) or date-time; builds created before it. Default: no bound.",
        formats=("date", "date-time"), examples=("2026-12-01T00:00:00Z",),
    ),
    # Text kept in a column of its own never holds NUL (models.NO_NUL), so no filter on it does either.
    FilterField(
        "derivation_path", "derivation_path", "store_path", False, "Exact derivation path.",
        pattern="^[^\\x00]+$", min_length=1, summaries=False,
    ),
    FilterField(
        "status", "statuses", "statuses", True, "One or more comma-separated build statuses. May be repeated.",
        pattern=f"^{_ONE_STATUS}(,{_ONE_STATUS}){{0,{MAX_STATUS_VALUES - 1}}}$",
        examples=("build_failed,timeout",), min_length=1,
    ),
    FilterField(
        "tags", "tags", "tags", True,
        "Comma-separated `KEY:VALUE` pairs, split at the first colon; a build must carry every pair. "
        "May be repeated.",
        pattern=f"^{_TAG}(,{_TAG}){{0,{MAX_TAG_PAIRS - 1}}}$",
        examples=("GITHUB_REPOSITORY:acme/webshop,project:web",), min_length=1,
    ),
)
FIELDS_BY_NAME = {field.name: field for field in FILTER_FIELDS}
# The window's two ends: their defaults and order are checked together, after both are read.
WINDOW_FIELDS = ("create_time_from", "create_time_to")
