"""The query plans of the measured database: tests/test_query_plans.py run on it, at the bench's size.

The test suite shows on small databases that every query that serves a request is backed by an index. Here the
same checks read the database the bench just imported (or migrated), so PostgreSQL plans them with the statistics
of millions of builds, as the server's requests are planned.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TESTS = "tests/test_query_plans.py"
# The variable that names the measured database to the tests, by engine.
ENV = {"sqlite": "BUILDREPORT_PLANS_SQLITE", "postgresql": "BUILDREPORT_PLANS_POSTGRESQL"}
DAYS_ENV = "BUILDREPORT_PLANS_DAYS"  # the checks' windows: the last so many days rather than all of history
# The windows checked: all of history (most of the table, which PostgreSQL's planner reads whole) and a month.
WINDOWS: dict[str, int | None] = {"all history": None, "30 days": 30}


def command(report: Path) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", TESTS]


def check(engine: str, db: str, folder: Path, days: int | None = None, timeout: float = 1800) -> dict[str, Any]:
    """Run the plan checks on `db` (a SQLite file or a postgresql:// URL), their windows all of history or the
    last `days`: how many held, and each that failed."""
    report = folder / f"plans-{engine}.xml"
    report.unlink(missing_ok=True)
    env = {name: value for name, value in os.environ.items() if name not in (*ENV.values(), DAYS_ENV)}
    env[ENV[engine]] = db
    if days is not None:
        env[DAYS_ENV] = str(days)
    began = time.perf_counter()
    done = subprocess.run(command(report), cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    seconds = round(time.perf_counter() - began, 1)
    if not report.exists():
        return {"error": (done.stdout + done.stderr).strip()[-500:] or f"pytest exited with {done.returncode}",
                "seconds": seconds}
    return {**outcome(report), "seconds": seconds}


def outcome(report: Path) -> dict[str, Any]:
    """The checks of a JUnit XML report: those of the other engine are skipped and not counted."""
    passed, failed = 0, []
    for case in ET.parse(report).getroot().iter("testcase"):
        if case.find("skipped") is not None:
            continue
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is None:
            passed += 1
        else:
            message = (problem.get("message") or problem.text or "").strip().splitlines()
            failed.append({"check": case.get("name", "?"), "message": (message[0] if message else "")[:300]})
    return {"checked": passed + len(failed), "passed": passed, "failed": failed}


def check_windows(engine: str, db: str, folder: Path) -> dict[str, dict[str, Any]]:
    """The checks on `db` once for each of WINDOWS."""
    return {name: check(engine, db, folder, days) for name, days in WINDOWS.items()}
