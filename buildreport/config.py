"""Settings, from command-line flags and `BUILDREPORT_*` environment variables, in one struct."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import msgspec

DEFAULT_DB = "buildreport.db"
DEFAULT_RATE_LIMIT = 3000  # requests a minute per token and process
SETTINGS_ENV = "BUILDREPORT_SETTINGS"


class Settings(msgspec.Struct, frozen=True):
    db: str = DEFAULT_DB
    host: str = "127.0.0.1"
    port: int = 8000
    public_url: str | None = None
    secret_keys: tuple[str, ...] = ()
    rate_limit: int = DEFAULT_RATE_LIMIT
    workers: int = 1
    access_log: bool = True
    metrics_loopback: bool = False  # /metrics answers loopback clients without a token

    @property
    def base_url(self) -> str:
        """The address users reach the service at; links and `Link` headers are built from it."""
        if self.public_url:
            return self.public_url.rstrip("/")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


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


def load_secret_keys(settings: Settings) -> tuple[str, ...]:
    """Signing keys, oldest first: configured ones, or one generated once and kept beside the database."""
    if settings.secret_keys:
        return settings.secret_keys
    path = secret_path(settings.db)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_text().strip()
        if not key:
            raise RuntimeError(f"{path} is empty; delete it to generate a new signing key") from None
        return (key,)
    key = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    return (key,)
