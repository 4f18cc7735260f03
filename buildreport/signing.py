"""Signed build links: account, build id and expiry inside, signed with the newest key, checked with all."""

from __future__ import annotations

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

    def sign(self, claims: LinkClaims) -> str:
        return self._serializer.dumps(msgspec.to_builtins(claims))

    def link_url(self, base_url: str, claims: LinkClaims) -> str:
        """The absolute address of the build page these claims open."""
        return f"{base_url}/b/{self.sign(claims)}"

    def verify(self, token: str) -> LinkClaims | None:
        """The claims of a token this server signed, or None when the signature is wrong."""
        try:
            payload = self._serializer.loads(token)
            return msgspec.convert(payload, LinkClaims)
        except (BadSignature, msgspec.ValidationError, TypeError):
            return None


# A different salt: a build link never opens a dashboard, and a dashboard link never opens a build.
DASHBOARD_SALT = "buildreport.dashboard.v1"


class DashboardClaims(msgspec.Struct, frozen=True, array_like=True):
    account_id: int
    expires_us: int


class DashboardSigner:
    """Signs links to an account's dashboard page with the same keys and rotation as build links."""

    def __init__(self, secret_keys: tuple[str, ...]) -> None:
        if not secret_keys:
            raise ValueError("at least one signing key is needed")
        self._serializer = URLSafeSerializer(list(secret_keys), salt=DASHBOARD_SALT)

    def link_url(self, base_url: str, claims: DashboardClaims) -> str:
        return f"{base_url}/d/{self._serializer.dumps(msgspec.to_builtins(claims))}"

    def verify(self, token: str) -> DashboardClaims | None:
        try:
            return msgspec.convert(self._serializer.loads(token), DashboardClaims)
        except (BadSignature, msgspec.ValidationError, TypeError):
            return None
