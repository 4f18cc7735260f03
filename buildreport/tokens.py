"""API tokens: their format and digest. Only the digest is ever stored; the secret is shown once."""

from __future__ import annotations

import base64
import hashlib
import re
import secrets

TOKEN_PREFIX = "brt_"
TOKEN_ID_PREFIX = "tok_"
SCOPES = ("build:read", "build:write", "metrics:read")
METRICS_SCOPE = "metrics:read"
READ_SCOPE = "build:read"
WRITE_SCOPE = "build:write"
TOKEN_SHAPE = re.compile(r"brt_[A-Za-z0-9_-]{43}")


def new_token() -> tuple[str, str, bytes]:
    """(public id, secret, digest) for a new token."""
    secret = TOKEN_PREFIX + base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()
    return TOKEN_ID_PREFIX + secrets.token_hex(8), secret, digest(secret)


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()
