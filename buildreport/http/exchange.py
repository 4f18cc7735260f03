"""`/auth/oidc-token-exchange`: a CI job's OIDC ID token exchanged for a short-lived buildreport token.

Called as nixbuild-action calls it: `Authorization: Bearer <token>` and `NIXBUILDNET-OIDC-ID-TOKEN: <jwt>`; the
answer's whole body is the new token. With a token, the new one has its account and scopes; without one, a
trusted CI identity (`buildreport token trust`) of some account must match the ID token's claims. Either way
the new token expires within 6 hours and keeps the verified claims, which become tags of the builds it writes.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from litestar import Request, Response, get, post
from litestar.openapi.datastructures import ResponseSpec

from buildreport.claims import MAX_LIFETIME_S, matches
from buildreport.errors import Problem
from buildreport.faults import printable
from buildreport.http import metrics
from buildreport.http.auth import REALM, Principal
from buildreport.models import Problem as ProblemShape
from buildreport.oidc import KeysUnavailable, Rejected, Verifier
from buildreport.store.reader import Reader
from buildreport.store.trust import NewToken
from buildreport.times import US_PER_SECOND, now_us
from buildreport.tokens import new_token

log = logging.getLogger("buildreport.oidc")
HEADER = b"nixbuildnet-oidc-id-token"
def _challenge(message: str) -> dict[str, str]:
    description = printable(message).replace('"', "'").replace("\\", "/")
    return {"WWW-Authenticate": f'{REALM}, error="invalid_token", error_description="{description}"'}


def _refuse(reason: str, message: str, claims: dict[str, Any] | None = None) -> Problem:
    metrics.count_exchange("refused", reason)
    log.warning("OIDC token exchange refused (%s): %s%s", reason, message, _who(claims))
    return Problem(401, message, headers=_challenge(message))


def _who(claims: dict[str, Any] | None) -> str:
    if not claims:
        return ""
    issuer, subject = str(claims.get("iss", "-"))[:200], str(claims.get("sub", "-"))[:300]
    return f"; issuer {printable(issuer)}, subject {printable(subject)}"


def id_token_of(headers: list[tuple[bytes, bytes]]) -> str:
    """The ID token of the NIXBUILDNET-OIDC-ID-TOKEN header, or a 401 that says what is wrong."""
    values = [value for key, value in headers if key == HEADER]
    if not values:
        raise _refuse("missing", "The NIXBUILDNET-OIDC-ID-TOKEN header with an OIDC ID token is required")
    if len(values) > 1:
        raise _refuse("malformed", "Send one NIXBUILDNET-OIDC-ID-TOKEN header")
    text = values[0].decode("latin-1").strip()
    if text.lower().startswith("bearer "):
        text = text[7:].strip()
    if not text:
        raise _refuse("malformed", "The NIXBUILDNET-OIDC-ID-TOKEN header is empty")
    return text


async def verified_claims(verifier: Verifier, token: str) -> dict[str, Any]:
    try:
        return await verifier.verify(token)
    except Rejected as exc:
        raise _refuse(exc.reason, str(exc)) from None
    except KeysUnavailable as exc:
        metrics.count_exchange("failed", "keys_unavailable")
        log.error("OIDC token exchange failed: %s", exc)
        raise Problem(
            503, "The issuer's keys cannot be read right now; try again shortly", headers={"Retry-After": "30"}
        ) from None


async def _trusted(reader: Reader, claims: dict[str, Any]) -> tuple[str, tuple[str, ...], int, str]:
    """(account, scopes, lifetime in seconds, policy id) of the first policy whose claim patterns all match."""
    for policy_id, account, patterns, scopes, lifetime_s in await reader.trust_policies(claims["iss"]):
        if matches(msgspec.json.decode(patterns), claims):
            return account, tuple(scopes.split()), min(lifetime_s, MAX_LIFETIME_S), policy_id
    raise _refuse("no_policy", "No trusted CI identity of any account matches this OIDC ID token's claims", claims)


async def _exchange(request: Request[Any, Any, Any]) -> Response[bytes]:
    state = request.app.state
    principal: Principal | None = request.scope["auth"]
    if principal is not None and principal.claims is not None:
        raise _refuse("exchanged", "A token got by an exchange cannot be exchanged again; present the job's own token")
    claims = await verified_claims(state.oidc, id_token_of(request.scope["headers"]))
    now = now_us()
    if principal is not None:
        account, scopes = principal.account, tuple(sorted(principal.scopes))
        expires, by = min(now + MAX_LIFETIME_S * US_PER_SECOND, principal.expires_us), f"token {principal.token_id}"
    else:
        account, scopes, lifetime_s, policy_id = await _trusted(state.reader, claims)
        expires, by = now + lifetime_s * US_PER_SECOND, f"trusted identity {policy_id}"
    token_id, secret, digest = new_token()
    await state.reader.add_token(
        NewToken(token_id, account, digest, scopes, f"OIDC exchange by {by}", now, expires,
                 msgspec.json.encode(claims).decode())
    )  # fmt: skip
    metrics.count_exchange("issued", "token" if principal is not None else "trusted_identity")
    log.info("OIDC token exchange issued %s to account %s by %s%s", token_id, account, by, _who(claims))
    return Response(content=secret.encode(), media_type="text/plain", headers={"Cache-Control": "no-store"})


_DOC = {
    "summary": "Exchange a CI job's OIDC ID token for a buildreport token (at most 6 hours)",
    "description": "The ID token goes in the `NIXBUILDNET-OIDC-ID-TOKEN` header. With `Authorization: Bearer`, the "
    "new token has that token's account and scopes and expires with it at the latest; without, a trusted CI "
    "identity must match the ID token's claims. The body of the answer is the new token alone.",
    "tags": ["auth"],
    "opt": {"scope": None, "token_optional": True},
    "security": [{"bearer": []}, {}],
    "responses": {
        200: ResponseSpec(str, description="The new token.", media_type="text/plain", generate_examples=False),
        **{
            code: ResponseSpec(ProblemShape, description=text, media_type="application/problem+json",
                               generate_examples=False)
            for code, text in (
                (401, "A bad, missing or untrusted ID token, or a bad token; `detail` says which."),
                (429, "Rate limit reached; see Retry-After."),
                (503, "The issuer's keys cannot be read right now."),
            )
        },
    },
}


@get("/auth/oidc-token-exchange", operation_id="exchangeOidcToken", **_DOC)
async def exchange_get(request: Request[Any, Any, Any]) -> Response[bytes]:
    return await _exchange(request)


@post("/auth/oidc-token-exchange", operation_id="exchangeOidcTokenPost", status_code=200, **_DOC)
async def exchange_post(request: Request[Any, Any, Any]) -> Response[bytes]:
    return await _exchange(request)


def exchange_handlers() -> list[Any]:
    return [exchange_get, exchange_post]
