"""The benchmark's query plan checks (bench/plans.py): the EXPLAIN tests run on the database it measured."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import growth
import plans

from buildreport.store.sqlite.schema import open_database

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.test_query_plans" name="test_a[one build]" time="0.001"/>
<testcase classname="tests.test_query_plans" name="test_a[log]" time="0.001">
  <failure message="AssertionError: log: ['SCAN builds']">long text</failure></testcase>
<testcase classname="tests.test_query_plans" name="test_b[usage]" time="0.001">
  <error message="failed on setup with &quot;OperationalError&quot;">long text</error></testcase>
<testcase classname="tests.test_query_plans" name="test_pg[one build]" time="0.001">
  <skipped type="pytest.skip" message="the other engine">skipped</skipped></testcase>
</testsuite></testsuites>
"""


def test_a_report_counts_held_and_failed_checks_and_leaves_out_the_other_engines(tmp_path: Path) -> None:
    report = tmp_path / "plans.xml"
    report.write_text(JUNIT)
    assert plans.outcome(report) == {
        "checked": 3,
        "passed": 1,
        "failed": [
            {"check": "test_a[log]", "message": "AssertionError: log: ['SCAN builds']"},
            {"check": "test_b[usage]", "message": 'failed on setup with "OperationalError"'},
        ],
    }


def _database(path: Path) -> Path:
    open_database(path).close()
    return path


def test_the_checks_hold_on_a_sqlite_database_and_leave_it_as_it_was(tmp_path: Path) -> None:
    db = _database(tmp_path / "measured.db")
    before = db.read_bytes()
    checked = plans.check("sqlite", str(db), tmp_path)
    assert checked["failed"] == [] and checked["checked"] == checked["passed"] > 100, checked
    assert db.read_bytes() == before  # opened read-only


def test_a_missing_index_is_a_failed_check(tmp_path: Path) -> None:
    db = _database(tmp_path / "measured.db")
    conn = open_database(db)
    conn.execute("DROP INDEX builds_by_source")
    conn.commit()
    conn.close()
    checked = plans.check("sqlite", str(db), tmp_path)
    assert checked["passed"] > 0
    assert [f["check"] for f in checked["failed"]] == ["test_source_ids_are_looked_up_one_by_one"], checked
    row = growth.plans_row({"plans": {"all history": checked}})
    assert row["status"] == "MISS" and row["note"] == "1 failed: all history: test_source_ids_are_looked_up_one_by_one"


def test_a_database_that_cannot_be_opened_is_said_so(tmp_path: Path) -> None:
    checked = plans.check("sqlite", str(tmp_path / "missing.db"), tmp_path)
    assert checked["checked"] == len(checked["failed"]) > 0 and checked["passed"] == 0
    row = growth.plans_row({"plans": {"all history": checked}})
    assert row["status"] == "MISS"
    assert growth.plans_row({})["status"] == "not measured"


def test_the_checks_take_windows_of_the_last_days_on_a_measured_database(tmp_path: Path) -> None:
    db = _database(tmp_path / "measured.db")
    windows = plans.check_windows("sqlite", str(db), tmp_path)
    assert list(windows) == ["all history", "30 days"]
    assert all(c["failed"] == [] and c["checked"] > 100 for c in windows.values()), windows
    row = growth.plans_row({"plans": windows})
    assert row["status"] == "PASS" and row["value"] == sum(c["checked"] for c in windows.values())
