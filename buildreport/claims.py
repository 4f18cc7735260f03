"""The rules of OIDC claims that need no JOSE library: which URLs may be issuers, which claims become build
tags, and how a trusted identity's patterns match. The command line and the write path use them without
loading the verifier (buildreport.oidc)."""

from __future__ import annotations

import ipaddress
import re
from fnmatch import fnmatchcase
from typing import Any
from urllib.parse import urlsplit

import msgspec

from buildreport.faults import printable
from buildreport.models import MAX_TAG_KEY_LENGTH, MAX_TAG_VALUE_LENGTH

MAX_LIFETIME_S = 6 * 3600
# Claims of GitHub Actions' ID tokens and the tags (the names of GitHub's own variables) they become; the mapping of
# any issuer that has none of its own (serve --oidc-claim-tag).
GITHUB_TAGS = (
    ("repository", "GITHUB_REPOSITORY"),
    ("run_id", "GITHUB_RUN_ID"),
    ("run_attempt", "GITHUB_RUN_ATTEMPT"),
    ("sha", "GITHUB_SHA"),
    ("ref", "GITHUB_REF"),
)
_CLAIM_TAG = re.compile(r"(?P<issuer>[^\x00]+):(?P<claim>[^:=\x00]+)=(?P<tag>[^=\x00]+)")


def parse_claim_tag(text: str) -> tuple[str, str, str]:
    """(issuer or `*`, claim, tag) of an `ISSUER_OR_*:CLAIM=TAG` setting; ValueError when malformed."""
    match = _CLAIM_TAG.fullmatch(text.strip())
    if match is None or len(match["tag"]) > MAX_TAG_KEY_LENGTH:
        raise ValueError(f"{printable(text)!r} is not ISSUER:CLAIM=TAG (or *:CLAIM=TAG)")
    return match["issuer"], match["claim"], match["tag"]


def tag_mapping(settings: tuple[str, ...], issuer: str) -> list[tuple[str, str]]:
    """(claim, tag) pairs for tokens of `issuer`: its own and those of `*`; GitHub's when there are none."""
    chosen = [(claim, tag) for who, claim, tag in map(parse_claim_tag, settings) if who in (issuer, "*")]
    return chosen or list(GITHUB_TAGS)


def claim_text(value: object) -> str | None:
    """A claim as a tag value or a pattern's subject: text and whole numbers; None for anything else."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def claim_tags(settings: tuple[str, ...], claims_json: str | None) -> dict[str, str]:
    """The trusted tags of builds written with a token that carries these claims (none for other tokens).
    A claim missing, or not fit to be a tag value, gives no tag."""
    if claims_json is None:
        return {}
    claims = msgspec.json.decode(claims_json)
    tags = {}
    for claim, tag in tag_mapping(settings, str(claims.get("iss", ""))):
        value = claim_text(claims.get(claim))
        if value is not None and len(value) <= MAX_TAG_VALUE_LENGTH and "\x00" not in value:
            tags[tag] = value
    return tags


def matches(patterns: dict[str, str], claims: dict[str, Any]) -> bool:
    """Whether every claim pattern (a glob over the whole value, case-sensitive) matches the claims."""
    for claim, pattern in patterns.items():
        value = claim_text(claims.get(claim))
        if value is None or not fnmatchcase(value, pattern):
            return False
    return bool(patterns)


def issuer_problem(url: str) -> str | None:
    """Why `url` cannot be an issuer (https, or http on a loopback address only), or None."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return "it is not a URL"
    if not host or parts.query or parts.fragment or parts.username or parts.password:
        return "it must be an https URL with a host and no query, fragment or user"
    if parts.scheme == "https":
        return None
    if parts.scheme == "http" and _loopback(host):
        return None
    return "it must be https (http is accepted on a loopback address only)"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
