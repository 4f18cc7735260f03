"""The signed build page and raw log."""

from __future__ import annotations

from litestar import Router


def web_router() -> Router:
    return Router(path="/b", route_handlers=[])
