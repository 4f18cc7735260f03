"""OIDC ID tokens of CI jobs, verified in full with PyJWT: the issuer's published keys, audience, times, algorithm.

An issuer's keys are read from `{issuer}/.well-known/openid-configuration` → `jwks_uri` in a thread (the event
loop never waits on the issuer), kept for an hour, and read again early when a token names a key that is not
among them, at most once a minute per issuer: a stream of made-up key ids costs the issuer nothing.
"""

from __future__ import annotations

import asyncio
import http.client
import time
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import jwt
import msgspec

from buildreport.claims import issuer_problem

# Signatures with a public key only: never `none`, never HMAC (whose "key" would be the issuer's public key).
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
MAX_TOKEN_BYTES = 8 * 1024  # GitHub's and GitLab's ID tokens are about 1 to 2 KB
LEEWAY_S = 60  # clocks of CI runners and of this server may differ this much
FETCH_TIMEOUT_S = 5.0
MAX_DOCUMENT_BYTES = 256 * 1024  # a discovery document or key set larger than this is refused
MAX_KEYS = 100
KEYS_FRESH_S = 3600.0  # keys are read again after an hour
REFETCH_INTERVAL_S = 60.0  # an unknown key id makes the keys be read again at most this often per issuer


class Rejected(Exception):
    """A token that is not accepted; `reason` labels it in metrics and logs, the message says why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class KeysUnavailable(Exception):
    """The issuer's keys cannot be read and none are kept: the service, not the token, is at fault."""


Fetch = Callable[[str], Awaitable[Any]]


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """An issuer's documents are read where it says they are: a redirect is an error, never followed."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def _read(url: str) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": "application/json", "User-Agent": "buildreport"})
    try:
        with _OPENER.open(request, timeout=FETCH_TIMEOUT_S) as response:
            body = response.read(MAX_DOCUMENT_BYTES + 1)
    except (OSError, http.client.HTTPException, ValueError) as exc:  # HTTP errors, refusals, time-outs, bad URLs
        raise KeysUnavailable(f"{url}: {exc}") from exc
    if len(body) > MAX_DOCUMENT_BYTES:
        raise KeysUnavailable(f"{url} is larger than {MAX_DOCUMENT_BYTES} bytes")
    return body


async def fetch_json(url: str) -> Any:
    """A JSON document from an https (or loopback http) URL, bounded in time and size; redirects are refused.
    Read in a thread (urllib answers a loopback request in half a millisecond, where a new httpx client took
    over 100), so the event loop goes on serving meanwhile."""
    if (problem := issuer_problem(url)) is not None:
        raise KeysUnavailable(f"{url}: {problem}")
    try:
        body = await asyncio.wait_for(asyncio.to_thread(_read, url), timeout=2 * FETCH_TIMEOUT_S)
    except TimeoutError as exc:
        raise KeysUnavailable(f"{url} did not answer within {2 * FETCH_TIMEOUT_S:g} s") from exc
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise KeysUnavailable(f"{url} is not JSON: {exc}") from exc


class _IssuerKeys:
    """One issuer's keys by id, when they were read, and when reading them was last tried."""

    def __init__(self) -> None:
        self.keys: dict[str | None, dict[str, Any]] = {}
        self.read_at = -float("inf")
        self.tried_at = -float("inf")
        self.lock = asyncio.Lock()


class KeyStore:
    """The keys of the configured issuers, read when first needed and kept (see the module's docstring)."""

    def __init__(self, fetch: Fetch = fetch_json, clock: Callable[[], float] = time.monotonic) -> None:
        self._fetch = fetch
        self._clock = clock
        self._issuers: dict[str, _IssuerKeys] = {}
        self._parsed: dict[tuple[str, str | None, str], jwt.PyJWK] = {}
        self.fetches = 0  # key sets read, for tests and benchmarks

    async def key(self, issuer: str, kid: str | None, alg: str) -> jwt.PyJWK:
        """The issuer's key `kid` for algorithm `alg`; Rejected when the issuer does not publish it."""
        entry = self._issuers.setdefault(issuer, _IssuerKeys())
        if self._clock() - entry.read_at > KEYS_FRESH_S or _find(entry.keys, kid) is None:
            await self._refresh(issuer, entry)
        jwk = _find(entry.keys, kid)
        if jwk is None:
            named = f"key {kid!r}" if kid is not None else "a key without a key id (kid)"
            raise Rejected("unknown_key", f"The token is signed with {named}, which the issuer does not publish")
        return self._parse(issuer, kid, alg, jwk)

    async def _refresh(self, issuer: str, entry: _IssuerKeys) -> None:
        """Read the issuer's keys, unless they were read or tried within REFETCH_INTERVAL_S; one read at a time."""
        async with entry.lock:
            if self._clock() - entry.tried_at < REFETCH_INTERVAL_S:
                if not entry.keys and entry.read_at < entry.tried_at:
                    raise KeysUnavailable(f"the keys of {issuer} could not be read lately; trying again shortly")
                return
            entry.tried_at = self._clock()
            try:
                keys = await self._read(issuer)
            except KeysUnavailable:
                if entry.keys:  # keys kept from before still verify what they signed
                    return
                raise
            entry.keys, entry.read_at = keys, self._clock()
            self._parsed = {k: v for k, v in self._parsed.items() if k[0] != issuer}

    async def _read(self, issuer: str) -> dict[str | None, dict[str, Any]]:
        self.fetches += 1
        discovery = await self._fetch(issuer.rstrip("/") + "/.well-known/openid-configuration")
        if not isinstance(discovery, dict) or discovery.get("issuer") != issuer:
            raise KeysUnavailable(f"the discovery document of {issuer} does not name it as its issuer")
        jwks_uri = discovery.get("jwks_uri")
        if not isinstance(jwks_uri, str) or issuer_problem(jwks_uri) is not None:
            raise KeysUnavailable(f"the discovery document of {issuer} has no usable jwks_uri")
        document = await self._fetch(jwks_uri)
        listed = document.get("keys") if isinstance(document, dict) else None
        if not isinstance(listed, list):
            raise KeysUnavailable(f"{jwks_uri} holds no key set")
        keys = {}
        for jwk in listed[:MAX_KEYS]:
            if isinstance(jwk, dict) and jwk.get("use", "sig") == "sig":
                kid = jwk.get("kid")
                keys[kid if isinstance(kid, str) else None] = jwk
        return keys

    def _parse(self, issuer: str, kid: str | None, alg: str, jwk: dict[str, Any]) -> jwt.PyJWK:
        """The key as PyJWT uses it, for `alg`; a key published for another algorithm or of another type is
        refused."""
        parsed = self._parsed.get((issuer, kid, alg))
        if parsed is None:
            if jwk.get("alg", alg) != alg:
                raise Rejected("algorithm", f"The token's algorithm {alg} is not the one its key is published for")
            try:
                parsed = jwt.PyJWK(jwk, algorithm=alg)
            except jwt.PyJWTError as exc:
                raise Rejected("algorithm", f"The token's key does not suit its algorithm {alg}: {exc}") from exc
            self._parsed[(issuer, kid, alg)] = parsed
        return parsed


def _find(keys: dict[str | None, dict[str, Any]], kid: str | None) -> dict[str, Any] | None:
    """The key `kid`; a token without a kid takes the issuer's only key."""
    if kid is None and len(keys) == 1:
        return next(iter(keys.values()))
    return keys.get(kid)


def unverified(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The header and claims of a token before its signature is checked, to find its issuer and key."""
    if len(token.encode()) > MAX_TOKEN_BYTES:
        raise Rejected("oversized", f"The OIDC ID token is longer than {MAX_TOKEN_BYTES} bytes")
    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError as exc:
        raise Rejected("malformed", f"The OIDC ID token is not a signed JWT: {exc}") from exc
    return header, claims


class Verifier:
    """Verifies ID tokens of the configured issuers for the configured audience."""

    def __init__(self, issuers: tuple[str, ...], audience: str, keys: KeyStore | None = None) -> None:
        self.issuers = frozenset(issuers)
        self.audience = audience
        self.keys = keys if keys is not None else KeyStore()

    async def verify(self, token: str) -> dict[str, Any]:
        """The token's claims once every check passed; Rejected (or KeysUnavailable) otherwise."""
        header, claims = unverified(token)
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            accepted = ", ".join(ALGORITHMS)
            raise Rejected("algorithm", f"The token's algorithm {str(alg)[:20]!r} is not accepted; one of {accepted}")
        issuer = claims.get("iss")
        if not isinstance(issuer, str) or issuer not in self.issuers:
            raise Rejected("issuer", f"The token's issuer {str(issuer)[:200]!r} is not one this service trusts")
        kid = header.get("kid")
        key = await self.keys.key(issuer, kid if isinstance(kid, str) else None, alg)
        return self._decode(token, key, alg, issuer)

    def _decode(self, token: str, key: jwt.PyJWK, alg: str, issuer: str) -> dict[str, Any]:
        try:
            return jwt.decode(
                token, key, algorithms=[alg], audience=self.audience, issuer=issuer, leeway=LEEWAY_S,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )  # fmt: skip
        except jwt.ExpiredSignatureError as exc:
            raise Rejected("expired", "The OIDC ID token has expired") from exc
        except jwt.ImmatureSignatureError as exc:
            raise Rejected("not_yet_valid", f"The OIDC ID token is not valid yet: {exc}") from exc
        except jwt.InvalidAudienceError as exc:
            raise Rejected("audience", f"The OIDC ID token is not meant for audience {self.audience!r}") from exc
        except jwt.InvalidSignatureError as exc:
            raise Rejected("signature", "The OIDC ID token's signature does not verify") from exc
        except jwt.MissingRequiredClaimError as exc:
            raise Rejected("claims", f"The OIDC ID token lacks a claim: {exc}") from exc
        except jwt.PyJWTError as exc:
            raise Rejected("invalid", f"The OIDC ID token is not valid: {exc}") from exc
