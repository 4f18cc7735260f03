"""The options of `serve` and `demo`: each default is the `Settings` default, written as a person writes it."""

from __future__ import annotations

import os

import pytest

from buildreport.cli.serve import serve
from buildreport.cli.serve_options import Span, event_options
from buildreport.config import Settings

# Its default is the machine's CPU count (at most 4), not the single process `Settings` assumes.
NOT_FROM_SETTINGS = {"workers"}


def test_serve_option_defaults_are_the_settings_defaults() -> None:
    defaults = Settings()
    for option in event_options():
        param = option(lambda: None).__click_params__[0]
        assert param.type_cast_value(None, param.default) == getattr(defaults, param.name), param.name


def test_every_serve_option_of_a_setting_defaults_to_that_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in os.environ if name.startswith("BUILDREPORT_")]:
        monkeypatch.delenv(name)
    given = serve.make_context("serve", []).params
    defaults = Settings()
    compared = [name for name in given if name in Settings.__struct_fields__ and name not in NOT_FROM_SETTINGS]
    for name in compared:
        assert given[name] == getattr(defaults, name), name
    assert len(compared) >= 30


@pytest.mark.parametrize(
    ("text", "seconds"), [("0.25", 0.25), ("90s", 90), ("1.5m", 90), ("24h", 86400), ("30d", 2592000)]
)
def test_durations_take_fractions_and_units(text: str, seconds: float) -> None:
    assert Span().convert(text, None, None) == seconds
