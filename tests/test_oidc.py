"""Verification of OIDC ID tokens against an issuer served on 127.0.0.1: keys, algorithms, times, audience."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from oidc_issuer import AUDIENCE, Issuer

from buildreport import oidc
from buildreport.claims import issuer_problem
from buildreport.oidc import KeyStore, KeysUnavailable, Rejected, Verifier


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    made = Issuer()
    made.add_key("k1", "RS256")
    made.add_key("k2", "ES256")
    made.add_key("k3", "EdDSA")
    made.start()
    yield made
    made.stop()


def verifier(issuer: Issuer, clock: Clock | None = None) -> Verifier:
    return Verifier((issuer.url,), AUDIENCE, KeyStore(clock=clock or Clock()))


def verify(v: Verifier, token: str) -> dict[str, Any]:
    return asyncio.run(v.verify(token))


def rejected(v: Verifier, token: str) -> str:
    with pytest.raises(Rejected) as caught:
        verify(v, token)
    return caught.value.reason


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hand_made(header: dict[str, Any], claims: dict[str, Any], signature: bytes = b"") -> tuple[str, str]:
    head = b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode())
    return head, head + "." + b64(signature)


@pytest.mark.parametrize("kid", ["k1", "k2", "k3"])
def test_tokens_signed_with_rsa_ec_and_ed25519_keys_verify(issuer: Issuer, kid: str) -> None:
    claims = verify(verifier(issuer), issuer.token(kid))
    assert claims["repository"] == "acme/web"
    assert claims["iss"] == issuer.url


def test_a_token_signed_with_a_key_the_issuer_does_not_publish_is_refused(issuer: Issuer) -> None:
    issuer.add_key("forger", "RS256", publish=False)
    forged = jwt.encode(issuer.claims(), issuer.keys["forger"][0], algorithm="RS256", headers={"kid": "k1"})
    assert rejected(verifier(issuer), forged) == "signature"


def test_a_token_whose_claims_were_altered_after_signing_is_refused(issuer: Issuer) -> None:
    head, claims, signature = issuer.token("k1").split(".")
    altered = json.loads(base64.urlsafe_b64decode(claims + "=="))
    altered["repository"] = "evil/web"
    assert rejected(verifier(issuer), f"{head}.{b64(json.dumps(altered).encode())}.{signature}") == "signature"


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200, "nbf": int(time.time()) - 7200}, "expired"),
        ({"nbf": int(time.time()) + 3600}, "not_yet_valid"),
        ({"iat": int(time.time()) + 3600}, "not_yet_valid"),
        ({"aud": "someone-else"}, "audience"),
        ({"aud": None}, "claims"),
        ({"exp": None}, "claims"),
        ({"sub": None}, "claims"),
    ],
)
def test_times_audience_and_required_claims_are_checked(issuer: Issuer, overrides: dict, reason: str) -> None:
    assert rejected(verifier(issuer), issuer.token("k1", **overrides)) == reason


def test_a_token_expired_within_the_leeway_still_verifies(issuer: Issuer) -> None:
    verify(verifier(issuer), issuer.token("k1", exp=int(time.time()) - oidc.LEEWAY_S // 2))


def test_an_issuer_not_configured_is_refused_without_asking_it_for_keys(issuer: Issuer) -> None:
    v = Verifier(("https://token.actions.githubusercontent.com",), AUDIENCE, KeyStore())
    assert rejected(v, issuer.token("k1")) == "issuer"
    assert rejected(verifier(issuer), issuer.token("k1", iss="https://elsewhere.example")) == "issuer"
    assert issuer.requests == 0


def test_alg_none_is_refused(issuer: Issuer) -> None:
    _, token = hand_made({"alg": "none", "kid": "k1"}, issuer.claims())
    assert rejected(verifier(issuer), token) == "algorithm"


def test_hmac_signed_with_the_issuers_public_key_is_refused(issuer: Issuer) -> None:
    public = issuer.keys["k1"][0].public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    head, _ = hand_made({"alg": "HS256", "kid": "k1", "typ": "JWT"}, issuer.claims())
    token = head + "." + b64(hmac.new(public, head.encode(), hashlib.sha256).digest())
    assert rejected(verifier(issuer), token) == "algorithm"


def test_a_key_of_one_type_never_verifies_another_algorithm(issuer: Issuer) -> None:
    """An RSA key named by an EC-signed token: the key is published for RS256 only."""
    token = jwt.encode(issuer.claims(), issuer.keys["k2"][0], algorithm="ES256", headers={"kid": "k1"})
    assert rejected(verifier(issuer), token) == "algorithm"


def test_an_unknown_kid_is_refused_until_the_issuer_rotates_it_in(issuer: Issuer) -> None:
    clock = Clock()
    v = verifier(issuer, clock)
    verify(v, issuer.token("k1"))
    issuer.add_key("new", "ES256", publish=False)
    assert rejected(v, issuer.token("new")) == "unknown_key"
    issuer.published.append("new")  # rotated in; the keys are read again once the interval has passed
    clock.now += oidc.REFETCH_INTERVAL_S + 1
    assert verify(v, issuer.token("new"))["sub"]


def test_a_stream_of_unknown_kids_reads_the_keys_at_most_once_an_interval(issuer: Issuer) -> None:
    clock = Clock()
    v = verifier(issuer, clock)
    verify(v, issuer.token("k1"))
    issuer.add_key("nope", "RS256", publish=False)
    for interval in range(3):
        for number in range(30):
            kid = f"x{interval}-{number}"
            token = jwt.encode(issuer.claims(), issuer.keys["nope"][0], algorithm="RS256", headers={"kid": kid})
            assert rejected(v, token) == "unknown_key"
        assert issuer.requests == 1 + interval  # the first read, then one an interval
        clock.now += oidc.REFETCH_INTERVAL_S + 1


def test_keys_are_kept_between_tokens(issuer: Issuer) -> None:
    v = verifier(issuer)
    for _ in range(5):
        verify(v, issuer.token("k1"))
        verify(v, issuer.token("k2"))
    assert issuer.requests == 1


def test_an_oversized_token_is_refused_before_anything_else(issuer: Issuer) -> None:
    token = issuer.token("k1", padding="x" * oidc.MAX_TOKEN_BYTES)
    assert rejected(verifier(issuer), token) == "oversized"
    assert issuer.requests == 0


@pytest.mark.parametrize("token", ["", "abc", "a.b.c", "a.b", "Zm9v.YmFy.YmF6", "é.é.é"])
def test_malformed_tokens_are_refused(issuer: Issuer, token: str) -> None:
    assert rejected(verifier(issuer), token) == "malformed"


def test_an_issuer_that_does_not_answer_leaves_its_keys_unavailable(issuer: Issuer) -> None:
    token = issuer.token("k1")
    issuer.stop()
    v = verifier(issuer)
    with pytest.raises(KeysUnavailable):
        verify(v, token)


def test_keys_already_read_keep_verifying_when_the_issuer_goes_away(issuer: Issuer) -> None:
    clock = Clock()
    v = verifier(issuer, clock)
    verify(v, issuer.token("k1"))
    token = issuer.token("k2")
    issuer.stop()
    clock.now += oidc.KEYS_FRESH_S + 1
    assert verify(v, token)["sub"]


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://token.actions.githubusercontent.com", True),
        ("https://gitlab.example.com/sub", True),
        ("http://127.0.0.1:8080", True),
        ("http://[::1]:8080", True),
        ("http://localhost:9000", True),
        ("http://gitlab.example.com", False),
        ("http://10.0.0.1", False),
        ("ftp://example.com", False),
        ("https://", False),
        ("https://example.com/?a=b", False),
        ("https://user@example.com", False),
    ],
)
def test_an_issuer_is_https_or_http_on_a_loopback_address(url: str, ok: bool) -> None:
    assert (issuer_problem(url) is None) == ok


@pytest.mark.parametrize("change", ["redirect", "oversized"])
def test_a_key_set_behind_a_redirect_or_too_large_is_not_read(issuer: Issuer, change: str) -> None:
    if change == "redirect":
        issuer.jwks_path = "/moved"
    else:
        issuer.padding = oidc.MAX_DOCUMENT_BYTES
    with pytest.raises(KeysUnavailable):
        verify(verifier(issuer), issuer.token("k1"))
