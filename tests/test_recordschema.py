"""The documented record of POST /builds accepts exactly what the service accepts, rule across fields included."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import jsonschema_rs
import msgspec
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_transaction import write_record

from buildreport.http.ingestion import check_write_record, decode_record, record_conflict
from buildreport.imports.files import check_time
from buildreport.models import BuildRecord, BuildStatus
from buildreport.recordschema import record_schemas


def _validator(max_records: int = 5000) -> Any:
    body, components = record_schemas(max_records)
    return jsonschema_rs.validator_for({**body, "components": {"schemas": components}}, validate_formats=True)


VALIDATOR = _validator()


def documented(records: list[dict[str, Any]]) -> bool:
    return VALIDATOR.is_valid(records)


def served(record: dict[str, Any]) -> bool:
    """What POST /builds does with one record: True when it is not a 400."""
    try:
        decoded = decode_record(json.dumps(record).encode())
    except msgspec.ValidationError:
        return False
    return check_write_record(decoded) is None


offsets = st.integers(-(23 * 60 + 59), 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))
written_times = st.builds(
    lambda moment, zone: moment.replace(tzinfo=zone).isoformat().replace("+00:00", "Z"),
    st.datetimes(min_value=datetime(1960, 1, 1), max_value=datetime(9999, 12, 31)),
    offsets,
)


@given(written_times)
@example("1970-01-01T00:00:00Z")
@example("1970-01-01T00:00:00-00:30")
@example("1970-01-01T00:30:00+00:30")
@example("1969-12-31T23:59:59.999999Z")
@example("9899-12-31T23:59:59.999999-23:59")
@example("9900-01-01T00:00:00+23:59")
@settings(max_examples=300, deadline=None)
def test_a_time_is_documented_valid_exactly_when_it_is_taken(text):
    record = write_record("t:1", create_time=text, start_time=text)
    taken = check_time(msgspec.json.decode(json.dumps(text).encode(), type=datetime)) is None
    assert documented([record]) == taken == served(record), text


statuses = st.sampled_from([None, *(s.value for s in BuildStatus)])


@given(
    build_status=statuses,
    alias=statuses,
    duration=st.sampled_from([None, "missing", 0.0, 12.5]),
    build_id=st.sampled_from([None, 7]),
    source_id=st.sampled_from([None, "s:1"]),
    integral=st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_rules_across_fields_are_in_the_document(build_status, alias, duration, build_id, source_id, integral):
    record = write_record(source_id, build_id=build_id or 0)
    for name, value in (("build_status", build_status), ("status", alias)):
        if value is None:
            record.pop(name, None)
        else:
            record[name] = value
    if duration == "missing":
        record.pop("duration_seconds", None)
    else:
        record["duration_seconds"] = duration
    if integral:
        record["cpu_seconds"] = 30.0  # JSON Schema's integer: a whole number however it is written
    assert documented([record]) == served(record), record


def test_ids_that_contradict_each_other_are_documented_valid_and_a_conflict():
    for record in (
        write_record("r:1", restart_of_source_id="r:1"),
        write_record(build_id=5, restart_of_build_id=4, restarted_as_build_id=4),
    ):
        assert documented([record]) and served(record)
        assert record_conflict(msgspec.convert(record, BuildRecord)) is not None


def test_the_number_of_records_is_bounded_as_configured():
    validator = _validator(max_records=2)
    one = write_record("n:1")
    assert not validator.is_valid([])
    assert validator.is_valid([one, one])
    assert not validator.is_valid([one, one, one])


def test_times_before_the_epoch_are_never_taken():
    moment = datetime(1970, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=1)))
    assert moment.astimezone(UTC).year == 1969 and check_time(moment) is not None
