"""Errors as values: each carries the HTTP status and an RFC 9457 type and title."""

from __future__ import annotations

from typing import Any

from litestar.plugins.problem_details import ProblemDetailsException

from buildreport.models import InvalidParam

PROBLEM_BASE = "https://buildreport.dev/problems/"

_TITLES = {
    400: ("invalid-request", "Invalid request"),
    401: ("unauthorized", "Unauthorized"),
    403: ("forbidden", "Forbidden"),
    404: ("not-found", "Not found"),
    405: ("method-not-allowed", "Method not allowed"),
    406: ("not-acceptable", "Not acceptable"),
    410: ("gone", "Gone"),
    413: ("content-too-large", "Content too large"),
    415: ("unsupported-media-type", "Unsupported media type"),
    429: ("rate-limited", "Too many requests"),
    500: ("internal-error", "Internal server error"),
    503: ("unavailable", "Service unavailable"),
}


def problem_type(status: int) -> tuple[str, str]:
    slug, title = _TITLES.get(status, ("error", "Error"))
    return PROBLEM_BASE + slug, title


class Problem(ProblemDetailsException):
    """An error answered as `application/problem+json`."""

    def __init__(self, status: int, detail: str, *, headers: dict[str, str] | None = None, **extra: Any) -> None:
        type_, title = problem_type(status)
        super().__init__(
            detail=detail, status_code=status, headers=headers, extra=extra or None, type_=type_, title=title
        )


class InvalidParams(Problem):
    """A 400 naming every query or path parameter that was wrong and why."""

    def __init__(self, params: list[InvalidParam]) -> None:
        names = ", ".join(dict.fromkeys(p.name for p in params))
        detail = "; ".join(f"{p.name}: {p.reason}" for p in params)
        super().__init__(
            400,
            f"Invalid parameter{'s' if len(params) > 1 else ''} {names}: {detail}",
            invalid_params=[{"name": p.name, "reason": p.reason} for p in params],
        )
        self.params = params


class NotFound(Problem):
    def __init__(self, detail: str) -> None:
        super().__init__(404, detail)
