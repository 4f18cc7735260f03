"""A bare Litestar app, the yardstick for buildreport's own HTTP overhead: a constant 800-byte JSON body.

Served by uvicorn as `buildreport serve --workers 1` is (uvloop, httptools, no access log), so that
the difference between the two is buildreport's routing, authentication, validation and query.
Run as `python bench/bare.py PORT [PAGE_BYTES]`; /healthz answers as buildreport's does, for the bench's start
check. /page answers a constant JSON array of PAGE_BYTES, the size of a page of builds: what sending that many
bytes costs the bare app.
"""

from __future__ import annotations

import sys

import msgspec
import uvicorn
from litestar import Litestar, MediaType, get

# A JSON object of exactly 800 bytes, encoded once.
_FILLER = "x" * (800 - len(msgspec.json.encode({"build_id": 1, "filler": ""})))
BODY = msgspec.json.encode({"build_id": 1, "filler": _FILLER})
assert len(BODY) == 800


@get("/build", media_type=MediaType.JSON, sync_to_thread=False)
def build() -> bytes:
    return BODY


@get("/healthz", media_type=MediaType.JSON, sync_to_thread=False)
def healthz() -> bytes:
    return b'{"status":"ok"}'


def page_of(size: int) -> bytes:
    """A JSON array of exactly `size` bytes (at least 2): copies of BODY, padded with spaces to fit."""
    copies = max(0, (size - 1) // (len(BODY) + 1))
    array = b"[" + b",".join([BODY] * copies)
    return array + b" " * (size - 1 - len(array)) + b"]"


PAGE = page_of(int(sys.argv[2]) if len(sys.argv) > 2 else 460_000)


@get("/page", media_type=MediaType.JSON, sync_to_thread=False)
def page() -> bytes:
    return PAGE


app = Litestar(route_handlers=[build, healthz, page])

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=False, log_config=None, ws="none",
                loop="uvloop", http="httptools")
