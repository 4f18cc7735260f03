"""The record of `POST /builds` as the OpenAPI document states it: exact, cross-field rules included.

The record's schema comes from msgspec itself (the generator of the rest of the document drops a
`minimum` of 0 and the bounds of tag names), and the rules across fields that imports.files.check_record
enforces are added where JSON Schema can say them: one of `build_status`/`status`, both equal when both
are sent, `duration_seconds` null exactly while a build is pending or running, a `build_id` or a
`source_id`, and times whose written date lies from 1970-01-01 to 9899-12-31. Rules that compare two
ids (a build restarted as itself) cannot be said in JSON Schema: they are 409 answers, documented.
"""

from __future__ import annotations

from typing import Any

import msgspec

from buildreport.models import UNFINISHED, BuildRecord, BuildStatus

JSON = dict[str, Any]
REF = "#/components/schemas/{name}"
LATEST_YEAR = 9899  # with ten years of duration at most, start plus duration stays before 9999-12-31

_YEAR = "(19[7-9][0-9]|[2-8][0-9]{3}|9[0-8][0-9]{2})"
_YEAR_NOT_1970 = "(19[7-9][1-9]|19[89]0|[2-8][0-9]{3}|9[0-8][0-9]{2})"
_DATE = f"({_YEAR}-(0[2-9]|1[0-2])-[0-3][0-9]|{_YEAR}-01-(0[2-9]|[12][0-9]|3[01])|{_YEAR_NOT_1970}-01-01)"
_TIME = "T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?"
_OFFSET = "([01][0-9]|2[0-3]):[0-5][0-9]"
# On 1970-01-01 an offset east of UTC would put the time before the epoch.
TIME_PATTERN = f"^{_DATE}{_TIME}(Z|[+-]{_OFFSET})$|^1970-01-01{_TIME}(Z|[+-]00:00|-{_OFFSET})$"
TIME_DESCRIPTION = (
    "RFC 3339 time with an offset (`T` and `Z` in capitals), written from 1970-01-01 to 9899-12-31 and, on "
    "1970-01-01, not east of UTC; returned in UTC."
)


def _status_rules() -> list[JSON]:
    """`status` is an alias: when both are sent they are equal (one rule per value, JSON Schema has no `==`)."""
    rules: list[JSON] = [{"anyOf": [{"required": ["build_status"]}, {"required": ["status"]}]}]
    for value in BuildStatus:
        rules.append({
            "if": {"required": ["build_status"], "properties": {"build_status": {"const": value.value}}},
            "then": {"properties": {"status": {"const": value.value}}},
        })
    unfinished = sorted(s.value for s in UNFINISHED)
    rules.append({
        "if": {"anyOf": [
            {"required": ["build_status"], "properties": {"build_status": {"enum": unfinished}}},
            {"required": ["status"], "properties": {"status": {"enum": unfinished}}},
        ]},
        "then": {"properties": {"duration_seconds": {"type": "null"}}},
        "else": {"required": ["duration_seconds"], "properties": {"duration_seconds": {"type": "number"}}},
    })
    return rules


def record_schemas(max_records: int) -> tuple[JSON, JSON]:
    """(the body's array schema, the components it refers to) for `POST /builds`."""
    _, components = msgspec.json.schema_components([BuildRecord], ref_template=REF)
    record = components["BuildRecord"]
    record.pop("title", None)
    for schema in components.values():
        schema.pop("title", None)
    record["description"] = (
        "One build as a runner sends it: a build_id, or the sender's own source_id, or both. A finished build "
        "has a duration_seconds; a pending or running one has none."
    )
    for name in ("create_time", "start_time"):
        record["properties"][name] = {
            "type": "string", "format": "date-time", "pattern": TIME_PATTERN, "description": TIME_DESCRIPTION,
        }
    for name in ("build_status", "status"):
        record["properties"][name] = {"$ref": REF.format(name="BuildStatus")}
    record["properties"]["status"]["description"] = "Alias of `build_status`: send either, or both with one value."
    record["allOf"] = [
        {"anyOf": [
            {"required": ["build_id"], "properties": {"build_id": {"type": "integer"}}},
            {"required": ["source_id"], "properties": {"source_id": {"type": "string"}}},
        ]},
        *_status_rules(),
    ]
    components["BuildStatus"].update(type="string", enum=[s.value for s in BuildStatus])  # in the declared order
    body = {
        "type": "array",
        "items": {"$ref": REF.format(name="BuildRecord")},
        "minItems": 1,
        "maxItems": max_records,
    }
    return body, components


def finish_write_operation(doc: JSON, max_records: int) -> None:
    """Put the exact record schema and the 409 answer into the document's `POST /builds`."""
    operation = doc["paths"].get("/builds", {}).get("post")
    if operation is None:
        return
    body, components = record_schemas(max_records)
    doc["components"]["schemas"].update(components)
    content = operation["requestBody"]["content"]
    content["application/json"]["schema"] = body
    content["application/x-ndjson"]["schema"] = {"$ref": REF.format(name="BuildRecord")}
    operation["description"] += (
        f" At most {max_records} records a request. A record that contradicts stored builds or itself (a "
        "build_id of another account, an unknown restart_of_source_id, a restart link other than the stored "
        "one, a build restarted as itself or as the build it restarts) is a 409 with `invalid_records`; nothing "
        "was written."
    )
