"""Signing keys: any key weaker than 32 random bytes is refused at start, wherever it was configured."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import free_port

from buildreport.cli.main import main
from buildreport.cli.serve import serve
from buildreport.config import Settings, WeakKey, key_weakness, load_secret_keys, secret_path

GOOD_KEY = secrets.token_urlsafe(32)


@pytest.mark.parametrize("key", ["", "x", "test-signing-key", "a" * 42, "a" * 100, "password" * 8, "0123456" * 9])
def test_short_or_plain_keys_are_weak(key):
    assert key_weakness(key) is not None


@pytest.mark.parametrize(
    "key", [GOOD_KEY, secrets.token_hex(32), "Yq3JtN0x8sVb2Kf6LmWp9RzC4dHg7AeU1oTiS5nBvXc=", secrets.token_urlsafe(64)]
)
def test_random_keys_of_32_bytes_are_accepted(key):
    assert key_weakness(key) is None


def test_generated_key_is_32_random_bytes_kept_private(tmp_path):
    settings = Settings(db=str(tmp_path / "x.db"))
    (key,) = load_secret_keys(settings)
    assert key_weakness(key) is None and len(key) >= 43
    assert load_secret_keys(settings) == (key,)
    assert os.stat(secret_path(settings.db)).st_mode & 0o077 == 0


def test_a_weak_key_file_is_refused(tmp_path):
    db = str(tmp_path / "x.db")
    secret_path(db).write_text("short\n")
    with pytest.raises(WeakKey, match="token_urlsafe"):
        load_secret_keys(Settings(db=db))


def refused(*args: str, env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.output
    assert "secrets.token_urlsafe(32)" in result.stderr
    return result.stderr


@pytest.mark.parametrize("key", ["", "k", "test-signing-key", "z" * 64])
def test_serve_refuses_a_weak_secret_key_flag(tmp_path, key):
    message = refused("serve", "--db", str(tmp_path / "x.db"), "--port", str(free_port()), "--secret-key", key)
    assert "too weak" in message or "empty" in message


def test_serve_refuses_a_weak_key_among_several(tmp_path):
    refused("serve", "--db", str(tmp_path / "x.db"), "--port", str(free_port()),
            "--secret-key", GOOD_KEY, "--secret-key", "short")


@pytest.mark.parametrize("value", ["", "short", f"{GOOD_KEY},", "tiny,other"])
def test_serve_refuses_a_weak_key_from_the_environment(tmp_path, value):
    refused("serve", "--db", str(tmp_path / "x.db"), "--port", str(free_port()),
            env={"BUILDREPORT_SECRET_KEY": value})


def test_serve_refuses_a_weak_key_file_beside_the_database(tmp_path):
    db = tmp_path / "x.db"
    secret_path(str(db)).write_text("abc\n")
    message = refused("serve", "--db", str(db), "--port", str(free_port()))
    assert str(secret_path(str(db))) in message


def test_demo_refuses_a_weak_key_before_creating_anything(tmp_path):
    db = tmp_path / "demo.db"
    refused("demo", "--db", str(db), "--port", str(free_port()), "--secret-key", "demo")
    assert not db.exists()


# Options that are not limits; every other `serve` option is one and is listed under "Security and limits".
NOT_LIMITS = (
    "--db", "--host", "--port", "--public-url", "--workers", "--access-log", "--secret-key", "--tls-cert", "--tls-key",
    "--metrics-loopback", "--read-db", "--db-file", "--secret-key-file", "--retention", "--retention-logs-only",
    "--keep-usage", "--oidc-issuer", "--oidc-audience", "--oidc-claim-tag", "--create", "--event-link-ttl",
    "--event-retention", "--hook-retry-base", "--hook-retry-for", "--hook-timeout", "--regression-percent",
    "--regression-seconds", "--regression-baseline",
)


def test_readme_documents_every_serve_limit_and_its_default():
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("## Security and limits", 1)[1].split("\n## ", 1)[0]
    for option in serve.params:
        name = option.opts[0]
        if name in NOT_LIMITS:
            continue
        assert f"`{name}`" in section, name
        envvar = option.envvar
        assert envvar and f"`{envvar}`" in section, name
        default = option.default
        shown = f"{default:g}" if isinstance(default, float) else str(default)
        assert shown in section, (name, shown)
