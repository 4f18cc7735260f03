"""RFC 9457 problem types and titles, and problem bodies for layers that answer before Litestar does.

Kept free of Litestar: the server's protocol and outermost layer use it, and so does the `serve --workers N`
supervisor, which never loads the application.
"""

from __future__ import annotations

import msgspec

from buildreport.models import Problem

PROBLEM_BASE = "https://buildreport.dev/problems/"

_TITLES = {
    400: ("invalid-request", "Invalid request"),
    401: ("unauthorized", "Unauthorized"),
    403: ("forbidden", "Forbidden"),
    404: ("not-found", "Not found"),
    405: ("method-not-allowed", "Method not allowed"),
    406: ("not-acceptable", "Not acceptable"),
    409: ("conflict", "Conflict"),
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


def problem_body(status: int, detail: str) -> bytes:
    type_, title = problem_type(status)
    return msgspec.json.encode(Problem(type=type_, title=title, status=status, detail=detail))
