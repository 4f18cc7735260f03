"""Settings, from command-line flags and `BUILDREPORT_*` environment variables, in one struct."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from urllib.parse import urlsplit

import msgspec

from buildreport.store import stored_signing_key
from buildreport.store.errors import QUEUE_LENGTH, QUEUE_WAIT

DEFAULT_DB = "buildreport.db"
DEFAULT_RATE_LIMIT = 3000  # requests a minute per token and process
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024  # of a POST /builds body, after gzip inflation too
DEFAULT_MAX_RECORDS = 5000  # records in one POST /builds
SETTINGS_ENV = "BUILDREPORT_SETTINGS"
# A signing key must carry at least 32 random bytes: 43 base64url characters, as generated keys are.
MIN_KEY_CHARS = 43
MIN_KEY_DISTINCT_CHARS = 8  # refuses "aaaa…" and a short word repeated, accepts hex and base64 keys
KEY_ADVICE = "generate one with: python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
# Limits of the HTTP server, per worker process (see README, "Security and limits").
DEFAULT_MAX_HEADER_BYTES = 32 * 1024
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_KEEP_ALIVE_TIMEOUT = 5.0
DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_LINK_RATE_LIMIT = 120  # requests a minute per client address to /b/…
DEFAULT_LOG_STREAMS = 4
DEFAULT_LOG_STREAMS_PER_CLIENT = 2


class Settings(msgspec.Struct, frozen=True):
    db: str = DEFAULT_DB
    host: str = "127.0.0.1"
    port: int = 8000
    public_url: str | None = None
    secret_keys: tuple[str, ...] = ()
    rate_limit: int = DEFAULT_RATE_LIMIT
    workers: int = 1
    access_log: bool = True
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    keep_alive_timeout: float = DEFAULT_KEEP_ALIVE_TIMEOUT
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    link_rate_limit: int = DEFAULT_LINK_RATE_LIMIT
    log_streams: int = DEFAULT_LOG_STREAMS
    log_streams_per_client: int = DEFAULT_LOG_STREAMS_PER_CLIENT
    # Requests waiting for a database connection or a turn to compute statistics (store/queue.py), and seconds
    # one waits, before the answer is 503, busy.
    queue_length: int = QUEUE_LENGTH
    queue_wait: float = QUEUE_WAIT
    tls_cert: str | None = None  # served over https with this certificate (chain) and key
    tls_key: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_records: int = DEFAULT_MAX_RECORDS
    metrics_loopback: bool = False  # /metrics answers loopback clients without a token
    read_dbs: tuple[str, ...] = ()  # PostgreSQL replicas that range queries are sent to
    retention_us: int | None = None  # once a day, prune builds created longer ago than this (retention.py)
    retention_logs_only: bool = False  # retention removes only their logs
    keep_usage: bool = True  # retention keeps the billable usage of the builds it removes
    oidc_issuers: tuple[str, ...] = ()  # whose ID tokens /auth/oidc-token-exchange takes (see exchange.py)
    oidc_audience: str = "nixbuild.net"
    oidc_claim_tags: tuple[str, ...] = ()  # ISSUER_OR_*:CLAIM=TAG
    # Events and webhooks (README "Events and webhooks"); durations in seconds.
    event_link_ttl: float = 7 * 86400
    event_retention: float = 30 * 86400
    hook_retry_base: float = 1.0
    hook_retry_for: float = 86400.0
    hook_timeout: float = 10.0
    regression_percent: float = 50.0
    regression_seconds: float = 60.0
    regression_baseline: int = 10

    @property
    def base_url(self) -> str:
        """The address users reach the service at; links and `Link` headers are built from it."""
        if self.public_url:
            return self.public_url.rstrip("/")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls_cert else 'http'}://{host}:{self.port}"

    @property
    def path_prefix(self) -> str:
        """The path of the public URL (e.g. `/api/v1`), under which every route is served; empty for none."""
        return urlsplit(self.base_url).path.rstrip("/")


def default_db() -> str:
    return os.environ.get("BUILDREPORT_DB") or DEFAULT_DB


def to_env(settings: Settings) -> str:
    """Settings passed to worker processes, which start from an import string."""
    return msgspec.json.encode(settings).decode()


def from_env() -> Settings:
    raw = os.environ.get(SETTINGS_ENV)
    if not raw:
        raise RuntimeError(f"{SETTINGS_ENV} is not set; start the server with `buildreport serve`")
    return msgspec.json.decode(raw, type=Settings)


def secret_path(db: str) -> Path:
    return Path(db + ".secret")


class WeakKey(ValueError):
    """A configured signing key that does not carry 32 random bytes; links signed with it could be forged."""


def key_weakness(key: str) -> str | None:
    """Why a signing key is too weak to sign links, or None when it is long and varied enough."""
    if not key:
        return "it is empty"
    if len(key) < MIN_KEY_CHARS:
        return f"it has {len(key)} characters; at least {MIN_KEY_CHARS} (32 random bytes) are needed"
    if len(set(key)) < MIN_KEY_DISTINCT_CHARS:
        return f"it uses only {len(set(key))} different characters; it does not look random"
    return None


def check_keys(keys: tuple[str, ...], source: str) -> tuple[str, ...]:
    for number, key in enumerate(keys, 1):
        if (reason := key_weakness(key)) is not None:
            which = f"key {number} of {source}" if len(keys) > 1 else f"the key of {source}"
            raise WeakKey(f"refusing to sign links: {which} is too weak: {reason}; {KEY_ADVICE}")
    return keys


def load_secret_keys(settings: Settings) -> tuple[str, ...]:
    """Signing keys, oldest first: configured ones, or one generated once and kept beside the database.

    Raises WeakKey for any key shorter or plainer than 32 random bytes, wherever it came from."""
    if settings.secret_keys:
        return check_keys(settings.secret_keys, "--secret-key / BUILDREPORT_SECRET_KEY")
    stored = stored_signing_key(settings.db)  # a PostgreSQL database keeps it, for all its servers
    if stored is not None:
        return check_keys((stored,), "the signing key stored in the database")
    path = secret_path(settings.db)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_text().strip()
        if not key:
            raise WeakKey(f"{path} is empty; delete it to generate a new signing key") from None
        return check_keys((key,), f"{path} (delete it to generate a new one; links signed with it stop working)")
    key = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    return (key,)
