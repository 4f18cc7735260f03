"""Errors as values: each carries the HTTP status and an RFC 9457 type and title."""

from __future__ import annotations

from typing import Any

from litestar.plugins.problem_details import ProblemDetailsException

from buildreport.models import InvalidParam
from buildreport.problems import problem_type


class Problem(ProblemDetailsException):
    """An error answered as `application/problem+json`."""

    def __init__(self, status: int, detail: str, *, headers: dict[str, str] | None = None, **extra: Any) -> None:
        type_, title = problem_type(status)
        super().__init__(
            detail=detail, status_code=status, headers=headers, extra=extra or None, type_=type_, title=title
        )


# An error body names at most this many bad parameters (and says how many more there were), and its detail
# the first few of them: a request with thousands of bad values still gets a small answer.
MAX_INVALID_PARAMS = 30
MAX_DETAIL_PARAMS = 5
MAX_SHOWN_CHARS = 100


def shown(text: str) -> str:
    """A value from a request as an error quotes it: repr (control characters escaped), cut to a bounded length."""
    if len(text) > MAX_SHOWN_CHARS:
        return repr(text[:MAX_SHOWN_CHARS]) + f"… ({len(text)} characters)"
    return repr(text)


class InvalidParams(Problem):
    """A 400 naming the query or path parameters that were wrong and why (the first few dozen of them)."""

    def __init__(self, params: list[InvalidParam]) -> None:
        listed = params[:MAX_INVALID_PARAMS]
        names = ", ".join(dict.fromkeys(p.name for p in params[:MAX_DETAIL_PARAMS]))
        detail = "; ".join(f"{p.name}: {p.reason}" for p in params[:MAX_DETAIL_PARAMS])
        if len(params) > MAX_DETAIL_PARAMS:
            detail += f"; and {len(params) - MAX_DETAIL_PARAMS} more"
        extra: dict[str, Any] = {"invalid_params": [{"name": p.name, "reason": p.reason} for p in listed]}
        if len(params) > len(listed):
            extra["more_invalid_params"] = len(params) - len(listed)
        super().__init__(400, f"Invalid parameter{'s' if len(params) > 1 else ''} {names}: {detail}", **extra)
        self.params = params


class NotFound(Problem):
    def __init__(self, detail: str) -> None:
        super().__init__(404, detail)
