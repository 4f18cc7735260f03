"""Webhook signatures as the Standard Webhooks specification makes them: an HMAC-SHA256 of
`{webhook-id}.{webhook-timestamp}.{body}` keyed with the secret's decoded bytes, sent base64 after `v1,`."""

from __future__ import annotations

import hashlib
import hmac
from base64 import b64decode, b64encode

PREFIX = "whsec_"


def secret_bytes(secret: str) -> bytes:
    return b64decode(secret.removeprefix(PREFIX))


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + b64encode(hmac.new(secret_bytes(secret), signed, hashlib.sha256).digest()).decode()


def headers(secret: str, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The headers of one attempt to send `body`; the id stays the same on every retry of one event."""
    return {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret, message_id, timestamp, body),
    }
