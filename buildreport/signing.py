"""Signed build links: account, build id and expiry inside, signed with the newest key, checked with all."""

from __future__ import annotations

import hmac

import msgspec
from itsdangerous import BadSignature, URLSafeSerializer

SALT = "buildreport.build-link.v1"


class LinkClaims(msgspec.Struct, frozen=True, array_like=True):
    account_id: int
    build_id: int
    expires_us: int


class LinkSigner:
    def __init__(self, secret_keys: tuple[str, ...]) -> None:
        if not secret_keys:
            raise ValueError("at least one signing key is needed")
        # itsdangerous signs with the last key and accepts any of them: keys are listed oldest first.
        self._serializer = URLSafeSerializer(list(secret_keys), salt=SALT)
        self._each_key = [URLSafeSerializer(key, salt=SALT) for key in secret_keys]

    def sign(self, claims: LinkClaims) -> str:
        return self._serializer.dumps(msgspec.to_builtins(claims))

    def link_url(self, base_url: str, claims: LinkClaims) -> str:
        """The absolute address of the build page these claims open."""
        return f"{base_url}/b/{self.sign(claims)}"

    def verify(self, token: str) -> LinkClaims | None:
        """The claims of a token this server signed, or None when the signature is wrong or the text altered."""
        try:
            payload = self._serializer.loads(token)
            claims = msgspec.convert(payload, LinkClaims)
        except (BadSignature, msgspec.ValidationError, TypeError):
            return None
        # itsdangerous decodes base64 leniently (added padding, other unused bits in the last character):
        # only the exact text one of the keys issues for these claims is accepted.
        presented = token.encode("utf-8", "replace")
        canonical = msgspec.to_builtins(claims)
        if not any(hmac.compare_digest(each.dumps(canonical).encode(), presented) for each in self._each_key):
            return None
        return claims
