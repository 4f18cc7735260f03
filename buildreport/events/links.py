"""A stored event made ready to be read or sent: with a fresh signed link to its build's page."""

from __future__ import annotations

import msgspec

from buildreport.events.models import EventLink, StoredEvent
from buildreport.signing import LinkClaims, LinkSigner
from buildreport.times import US_PER_SECOND, from_us, now_us

_STORED = msgspec.json.Decoder(StoredEvent)
_ENCODE = msgspec.json.Encoder()


def linked(body: bytes, account_id: int, build_id: int, signer: LinkSigner, base_url: str, ttl: float) -> bytes:
    """The stored event `body` with a link that expires `ttl` seconds from now (rounded up to a whole second)."""
    event = _STORED.decode(body)
    expires_us = -(-(now_us() + int(ttl * US_PER_SECOND)) // US_PER_SECOND) * US_PER_SECOND
    url = signer.link_url(base_url, LinkClaims(account_id, build_id, expires_us))
    event.link = EventLink(url, from_us(expires_us))
    return _ENCODE.encode(event)
