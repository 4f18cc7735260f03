"""Signed links verify only as the exact text the service issued: no padding, no other spelling of a character."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from conftest import TEST_KEY, auth, record
from itsdangerous.encoding import base64_decode

from buildreport.signing import LinkClaims, LinkSigner

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
OTHER_KEY = "another-signing-key-" + "q8Zr2LwXv5NmPc7TjKd3Hs9Yb"
CLAIMS = LinkClaims(account_id=1, build_id=1, expires_us=4_000_000_000_000_000)


def same_bytes_spellings(token: str) -> list[str]:
    """The token with its last character replaced by every other one that decodes to the same signature."""
    head, last = token[:-1], token[-1]
    signature = base64_decode(token.rsplit(".", 1)[1])
    spellings = [head + c for c in ALPHABET if c != last]
    return [t for t in spellings if base64_decode(t.rsplit(".", 1)[1]) == signature]


def test_a_link_altered_to_decode_the_same_does_not_verify():
    signer = LinkSigner((TEST_KEY,))
    token = signer.sign(CLAIMS)
    assert signer.verify(token) == CLAIMS
    variants = [token + "=", token + "==", token + "===", *same_bytes_spellings(token)]
    assert len(variants) >= 4  # the last character of a 20-byte signature has unused bits
    for variant in variants:
        assert signer.verify(variant) is None, variant


def test_links_of_every_listed_key_still_verify_exactly():
    old = LinkSigner((OTHER_KEY,)).sign(CLAIMS)
    rotated = LinkSigner((OTHER_KEY, TEST_KEY))
    assert rotated.verify(old) == CLAIMS
    assert rotated.verify(rotated.sign(CLAIMS)) == CLAIMS
    assert rotated.verify(old + "=") is None


@pytest.fixture
def issued(env):
    env.load([record(1, log="hello\n")])
    secret = env.token()
    client = env.client()
    with client:
        url = client.get("/builds/1/url", headers=auth(secret)).json()["url"]
        yield client, urlsplit(url).path


@pytest.mark.parametrize("suffix", ["=", "==", "%3D", "%3d%3D"])
@pytest.mark.parametrize("route", ["", "/log"])
def test_page_and_raw_log_refuse_a_link_with_padding_appended(issued, suffix, route):
    client, path = issued
    assert client.get(path + route).status_code == 200
    response = client.get(path + suffix + route)
    assert response.status_code == 403
    assert "not valid" in response.text


@pytest.mark.parametrize("route", ["", "/log"])
def test_page_and_raw_log_refuse_another_spelling_of_the_last_character(issued, route):
    client, path = issued
    variants = same_bytes_spellings(path)
    assert variants
    for variant in variants:
        assert client.get(variant + route).status_code == 403, variant
