"""docs/ARCHITECTURE.md stays true: every file and folder it names exists, it names every sub-package, and what
its checklists promise holds (a field of a build reaches every answer, every endpoint is documented as the
checklist says, every event type is made somewhere)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import msgspec
from conftest import Env, auth

from buildreport import sample
from buildreport.events import derive
from buildreport.events.models import EventType
from buildreport.models import Build

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ARCHITECTURE.md"
PACKAGE = ROOT / "buildreport"
# A file or folder named in backquotes: `buildreport/…`, `http/app.py`, `tests/test_kept.py`.
NAMED = re.compile(r"`((?:[\w.-]+/)*[\w.-]+\.py|(?:[\w.-]+/)+)`")


def text() -> str:
    return DOC.read_text()


def named_paths() -> list[str]:
    return sorted(set(NAMED.findall(text())))


def exists(name: str) -> bool:
    """A path from the repository's root, from the package, or from one of its sub-packages."""
    bases = [ROOT, PACKAGE, *(p.parent for p in PACKAGE.glob("*/__init__.py"))]
    return any((base / name).exists() for base in bases)


def test_the_page_names_files_and_the_pattern_finds_them() -> None:
    assert "http/app.py" in named_paths()
    assert "buildreport/store/" in named_paths()


def test_every_file_and_folder_the_page_names_exists() -> None:
    assert [name for name in named_paths() if not exists(name)] == []


def test_the_page_says_where_every_sub_package_lives() -> None:
    subs = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert [sub for sub in subs if f"`buildreport/{sub}/`" not in text()] == []


def test_the_page_has_each_checklist() -> None:
    for heading in ("## A read request", "## A write", "## How to add a filter", "## How to add a field",
                    "## How to add an endpoint", "## How to add an event"):
        assert heading in text()


def test_a_new_field_of_a_build_reaches_the_answer_the_openapi_document_and_the_export(tmp_path: Path) -> None:
    """`to_build` fills every field of Build from what was written: a field added to the struct and not filled
    is missing from the answer; the OpenAPI document and the export follow from the struct itself."""
    env = Env(tmp_path)
    end = datetime.now(UTC)
    records = [msgspec.to_builtins(r) for r in sample.generate(builds=40, days=2, accounts=["acme"], seed=3, end=end)]
    env.load(records)
    secret = env.token(account="acme")
    with env.client() as client:
        listed = client.get("/builds", params={"create_time_from": "2000-01-01", "limit": 1}, headers=auth(secret))
        build_id = listed.json()[0]["build_id"]
        one = client.get(f"/builds/{build_id}", headers=auth(secret)).json()
        schema = client.get("/docs/openapi.json").json()["components"]["schemas"]["Build"]
        exported = client.get("/builds/export", params={"format": "csv", "create_time_from": "2000-01-01"},
                              headers=auth(secret))
    fields = set(Build.__struct_fields__)
    assert set(one) == fields
    assert set(schema["properties"]) == fields
    assert set(exported.text.splitlines()[0].split(",")) == fields


def test_every_endpoint_has_an_operation_id_a_summary_and_its_problem_answers(tmp_path: Path) -> None:
    with Env(tmp_path).client() as client:
        document = client.get("/docs/openapi.json").json()
    missing = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            where = f"{method.upper()} {path}"
            if not operation.get("operationId") or not operation.get("summary"):
                missing.append(f"{where}: operationId or summary")
            if operation.get("security") and not {"401", "429"} <= set(operation["responses"]):
                missing.append(f"{where}: 401 and 429 answers")
    assert missing == []


def test_every_event_type_is_made_by_derive() -> None:
    """An event type added to the models without a rule in derive.py would never be sent."""
    source = Path(derive.__file__).read_text()
    assert [kind.name for kind in EventType if f"EventType.{kind.name}" not in source] == []
