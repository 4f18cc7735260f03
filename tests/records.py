"""Import records for tests: valid by default, with any field overridden."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

NOW = datetime.now(UTC).replace(microsecond=0)


def record(build_id: int, **fields: Any) -> dict[str, Any]:
    """A valid import record: a built build an hour old in account `acme`, unless told otherwise."""
    create = fields.pop("create_time", NOW - timedelta(hours=1))
    if isinstance(create, datetime):
        create = create.isoformat()
    status = fields.get("build_status", "built")
    base: dict[str, Any] = {
        "account": "acme",
        "build_id": build_id,
        "create_time": create,
        "start_time": create,
        "queue_time_seconds": 0.5,
        "duration_seconds": None if status in ("pending", "running") else 60.0,
        "build_status": status,
        "cpu_count": 4,
        "allocated_megabytes": 8192,
        "cpu_seconds": 120,
        "derivation_path": f"/nix/store/{'a' * 32}-hello-2.12.1.drv",
        "outputs": [],
        "system": "x86_64-linux",
        "tags": {},
    }
    base.update(fields)
    return base


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# Scripts that take a database back to before a step of the schema, and undo every later step that could not run
# twice (for tests that bring an older database up to date).
# A database before tag rows carried their build's stop time (the schema's latest step).
WITHOUT_TAG_STOPS = """
DROP INDEX build_tags_by_stop;
ALTER TABLE build_tags DROP COLUMN stop_us;
"""
# A database before builds carried their system as a column.
WITHOUT_SYSTEM_COLUMN = WITHOUT_TAG_STOPS + """
ALTER TABLE builds DROP COLUMN system;
"""
# A database before each day's figures were kept in parts: both tables keyed without a part number.
WITHOUT_FIGURE_PARTS = WITHOUT_TAG_STOPS + """
CREATE TABLE whole_days AS SELECT account_id, day_us, status, figures FROM day_figures;
DROP TABLE day_figures;
CREATE TABLE day_figures (account_id INTEGER NOT NULL, day_us INTEGER NOT NULL, status TEXT NOT NULL,
    figures BLOB NOT NULL, PRIMARY KEY (account_id, day_us, status));
INSERT INTO day_figures SELECT * FROM whole_days;
DROP TABLE whole_days;
CREATE TABLE whole_days AS SELECT account_id, key, value, day_us, status, figures FROM tag_day_figures;
DROP TABLE tag_day_figures;
CREATE TABLE tag_day_figures (account_id INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
    day_us INTEGER NOT NULL, status TEXT NOT NULL, figures BLOB NOT NULL,
    PRIMARY KEY (account_id, key, value, day_us, status));
INSERT INTO tag_day_figures SELECT * FROM whole_days;
DROP TABLE whole_days;
"""
# A database before days kept their summaries over every status (schema version 7), and so before the steps
# after it (events and webhooks).
WITHOUT_DAY_SUMMARIES = WITHOUT_SYSTEM_COLUMN + """
DROP TABLE deliveries;
DROP TABLE hooks;
DROP TABLE events;
DROP TABLE event_series;
DROP TABLE IF EXISTS day_summaries;
"""
# A database before build_tags carried its builds' figures and days their kept figures (schema version 6).
WITHOUT_TAG_FIGURES = WITHOUT_DAY_SUMMARIES + """
DROP TABLE day_figures;
ALTER TABLE build_tags DROP COLUMN status;
ALTER TABLE build_tags DROP COLUMN cpu_seconds;
ALTER TABLE build_tags DROP COLUMN duration_text;
ALTER TABLE build_tags DROP COLUMN queue_text;
"""
# A database before builds carried the numbers' text (schema version 5).
WITHOUT_STATS_COLUMNS = WITHOUT_TAG_FIGURES + """
DROP INDEX builds_for_stats;
DROP INDEX builds_by_time;
DROP INDEX builds_by_derivation;
ALTER TABLE builds DROP COLUMN duration_text;
ALTER TABLE builds DROP COLUMN queue_text;
CREATE INDEX builds_by_time ON builds (account_id, create_us, build_id);
CREATE INDEX builds_by_derivation ON builds (account_id, derivation_path, create_us, build_id);
"""


def version_before(marker: object) -> int:
    """The schema version just before a SQLite migration step: the step itself, a function step of that name, or
    the script that holds `marker`. Steps are positional, and steps appended later must not move what a test
    takes back."""
    from buildreport.store.sqlite.schema import MIGRATIONS

    for version, step in enumerate(MIGRATIONS):
        if step is marker:
            return version
        if isinstance(marker, str) and ((marker in step) if isinstance(step, str) else step.__name__ == marker):
            return version
    raise LookupError(marker)
