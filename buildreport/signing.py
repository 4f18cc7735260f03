"""Signed links: build pages and dashboards, their claims inside, signed with the newest key, checked with all.

A link made with an API token names that token (`token_id`); the page it opens checks that the token is still
live, so revoking a token ends its links. Links the server makes by itself carry no token id; they, and links
made before links named their token, live until their own expiry or until the signing key is rotated away.
"""

from __future__ import annotations

import hmac
from typing import Generic, TypeVar

import msgspec
from itsdangerous import BadSignature, URLSafeSerializer

SALT = "buildreport.build-link.v1"
# A different salt: a build link never opens a dashboard, and a dashboard link never opens a build.
DASHBOARD_SALT = "buildreport.dashboard.v1"


class LinkClaims(msgspec.Struct, frozen=True, array_like=True):
    account_id: int
    build_id: int
    expires_us: int
    token_id: str | None = None  # the API token the link was made with; its revocation ends the link


class DashboardClaims(msgspec.Struct, frozen=True, array_like=True):
    account_id: int
    expires_us: int
    token_id: str | None = None


Claims = TypeVar("Claims", LinkClaims, DashboardClaims)


class Signer(Generic[Claims]):
    """Signs claims into the path of a link (`{base}/{path}/{token}`) and verifies what comes back."""

    def __init__(self, secret_keys: tuple[str, ...], claims: type[Claims], salt: str, path: str) -> None:
        if not secret_keys:
            raise ValueError("at least one signing key is needed")
        self._claims = claims
        self._path = path
        # itsdangerous signs with the last key and accepts any of them: keys are listed oldest first.
        self._serializer = URLSafeSerializer(list(secret_keys), salt=salt)
        self._each_key = [URLSafeSerializer(key, salt=salt) for key in secret_keys]

    def sign(self, claims: Claims) -> str:
        return self._serializer.dumps(_payload(claims))

    def link_url(self, base_url: str, claims: Claims) -> str:
        """The absolute address of the page these claims open."""
        return f"{base_url}/{self._path}/{self.sign(claims)}"

    def verify(self, token: str) -> Claims | None:
        """The claims of a token this server signed, or None when the signature is wrong or the text altered."""
        try:
            claims = msgspec.convert(self._serializer.loads(token), self._claims)
        except (BadSignature, msgspec.ValidationError, TypeError):
            return None
        # itsdangerous decodes base64 leniently (added padding, other unused bits in the last character):
        # only the exact text one of the keys issues for these claims is accepted.
        presented = token.encode("utf-8", "replace")
        canonical = _payload(claims)
        if not any(hmac.compare_digest(each.dumps(canonical).encode(), presented) for each in self._each_key):
            return None
        return claims


def _payload(claims: LinkClaims | DashboardClaims) -> list[object]:
    """The claims as the link carries them; a missing token id is left out, so claims without one sign exactly
    as they did before links named their token."""
    values = msgspec.to_builtins(claims)
    return values[:-1] if values[-1] is None else values


class LinkSigner(Signer[LinkClaims]):
    """Links to one build's page and log."""

    def __init__(self, secret_keys: tuple[str, ...]) -> None:
        super().__init__(secret_keys, LinkClaims, SALT, "b")


class DashboardSigner(Signer[DashboardClaims]):
    """Links to an account's dashboard, with the same keys and rotation as build links."""

    def __init__(self, secret_keys: tuple[str, ...]) -> None:
        super().__init__(secret_keys, DashboardClaims, DASHBOARD_SALT, "d")
