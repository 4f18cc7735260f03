"""Records trimmed to the write format's ranges, read from models.BuildRecord."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

import msgspec
import pytest

from buildreport.record import fit as fit_module
from buildreport.record.fit import fit


class Limited(msgspec.Struct):
    status_message: Annotated[str, msgspec.Meta(max_length=10)] | None
    log: Annotated[str, msgspec.Meta(max_length=5)] | None
    tags: Annotated[
        dict[Annotated[str, msgspec.Meta(max_length=3)], Annotated[str, msgspec.Meta(max_length=4)]],
        msgspec.Meta(max_length=2),
    ]
    outputs: Annotated[list[int], msgspec.Meta(max_length=1)]


@pytest.fixture
def limited(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    fit_module._fields.cache_clear()
    monkeypatch.setattr(fit_module, "BuildRecord", Limited)
    yield
    fit_module._fields.cache_clear()


def test_fit_trims_each_field_to_its_range(limited: None) -> None:
    record: dict[str, Any] = {
        "status_message": "builder failed with exit code 1",
        "log": "line 1\nline 2\n",
        "tags": {"a": "short", "b": "ok", "long-key": "x", "c": "y"},
        "outputs": [1, 2],
    }
    fitted = fit(record)
    assert fitted["status_message"] == "builder f…"
    assert fitted["log"] == "ne 2\n"
    assert fitted["tags"] == {"a": "sho…", "b": "ok"}
    assert fitted["outputs"] == [1]
    msgspec.convert(fitted, Limited)


def test_fit_leaves_a_record_within_range_as_it_is(limited: None) -> None:
    record = {"status_message": None, "log": None, "tags": {"a": "b"}, "outputs": []}
    assert fit(dict(record)) == record
