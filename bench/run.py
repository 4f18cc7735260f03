"""`make bench`: generate, import, serve and load buildreport; write bench/report.md and bench/report.json.

Environment:
    BENCH_BUILDS   builds to generate (default 1000000)
    BENCH_SECONDS  seconds of each load run (default 10, 1 to 120)
    BENCH_FRESH=1  regenerate and reimport even when bench/data/ holds today's data
    BENCH_CLIENT   "wrk" (default when installed) or "python" (the httpx fallback)
    BENCH_ENGINE   "both" (default), "sqlite" or "postgresql": which engines serve the measured requests
    BENCH_REPORT_DIR  where report.md and report.json go (default bench/)

On PostgreSQL the server's --db is a throwaway cluster (postgres.py) holding a copy of the SQLite database made
by `buildreport migrate`; without PostgreSQL's server binaries that engine is skipped, except under CI=true or
BENCH_ENGINE=postgresql, where that is a failure.

Exits non-zero when a measurement failed (a command failed, a server did not start, an endpoint
answered an error); a missed target is reported, not a failure.
"""

from __future__ import annotations

import http.client
import json
import os
import platform
import random
import re
import shlex
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager
from copy import deepcopy
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
DATA = BENCH / "data"
RUN_DIR = DATA / "run"
sys.path.insert(0, str(BENCH))

import ingest  # noqa: E402
import load  # noqa: E402
import postgres  # noqa: E402
import report  # noqa: E402
from server import AnonSampler, Server, get  # noqa: E402

from buildreport.store.sqlite.schema import remove_files  # noqa: E402

SEED = 1
DAYS = 365
ACCOUNTS = "acme,globex"
ACCOUNT = "acme"
LOG_SHARE = 0.05
ROTATE_IDS = 1000
PAGE_LINKS = 100
LOADS = ((1, 1), (32, 2))  # (connections, wrk threads)
# /builds/{id} and the bare app are loaded in turns this many times each, side by side (see paired_with_bare).
PAIRED_ROUNDS = 3
FLOOR_PROCESSES = 3  # an endpoint's floor is measured in this many fresh processes, one after another
MILLION = 1_000_000
ENGINES = {"both": ("sqlite", "postgresql"), "sqlite": ("sqlite",), "postgresql": ("postgresql",)}


@dataclass
class Engine:
    """Where one engine's requests are served from, and where its figures go."""

    name: str  # "sqlite" or "postgresql"
    db: str  # --db: the SQLite file or the postgresql:// URL
    out: dict[str, Any]
    # A scratch copy of the database for the writes of the ingestion phase: a context giving its --db.
    scratch: Callable[[], AbstractContextManager[Path | str]]

    def file(self, name: str) -> Path:
        """A file of this engine's run in bench/data/run/ (SQLite's keep the names they always had)."""
        return RUN_DIR / (name if self.name == "sqlite" else f"pg-{name}")


def env_int(name: str, default: int, low: int, high: int) -> int:
    text = os.environ.get(name, "").strip().replace("_", "").replace(",", "")
    if not text:
        return default
    value = int(text)
    if not low <= value <= high:
        raise SystemExit(f"{name}={value}: must be from {low} to {high}")
    return value


def rel(command: str | list[str]) -> str:
    """A command as the report shows it: quoted for a shell, paths relative to the repository."""
    text = command if isinstance(command, str) else shlex.join(command)
    return text.replace(str(ROOT) + "/", "")


def anonymous_kib(memory: dict[str, Any]) -> int:
    """The server processes' own memory (RssAnon): the database's pages that SQLite maps in are the kernel's
    page cache, which VmRSS counts too, and they come and go with the file, not with the export."""
    total = 0
    for process in memory["processes"]:
        try:
            for line in Path(f"/proc/{process['pid']}/status").read_text().splitlines():
                if line.startswith("RssAnon:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def cli() -> list[str]:
    script = Path(sys.executable).parent / "buildreport"
    return [str(script)] if script.exists() else [sys.executable, "-m", "buildreport"]


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def file_sizes(db: Path) -> dict[str, int]:
    sizes = {}
    for suffix in ("", "-wal", "-shm"):
        path = Path(str(db) + suffix)
        sizes["db" + suffix.replace("-", "_")] = path.stat().st_size if path.exists() else 0
    sizes["db_plus_wal"] = sizes["db"] + sizes["db_wal"]
    return sizes


class Bench:
    def __init__(self) -> None:
        self.builds = env_int("BENCH_BUILDS", MILLION, 100, 50_000_000)
        self.seconds = env_int("BENCH_SECONDS", 10, 1, 120)
        self.fresh = os.environ.get("BENCH_FRESH", "") not in ("", "0")
        engine = os.environ.get("BENCH_ENGINE", "").strip().lower() or "both"
        if engine not in ENGINES:
            raise SystemExit(f"BENCH_ENGINE={engine}: must be one of {', '.join(ENGINES)}")
        self.engine = engine
        self.quick = self.seconds < 3
        self.cli = cli()
        self.failures: list[str] = []
        self.notes: list[str] = []
        self.commands: list[str] = []
        self.phases: dict[str, float] = {}
        self.started = datetime.now(UTC)
        self.out: dict[str, Any] = {
            "generated_at": iso(self.started),
            "settings": {"builds": self.builds, "seconds": self.seconds, "days": DAYS, "accounts": ACCOUNTS,
                         "seed": SEED, "log_share": LOG_SHARE, "account_measured": ACCOUNT,
                         "engines": list(ENGINES[engine])},
        }

    # --- helpers ------------------------------------------------------------------------------

    def fail(self, what: str) -> None:
        print(f"bench: FAILED: {what}", file=sys.stderr)
        self.failures.append(what)

    def say(self, text: str) -> None:
        print(f"bench: {text}", file=sys.stderr, flush=True)

    def run(self, command: list[str], timeout: float, record: bool = True) -> subprocess.CompletedProcess[str]:
        if record:
            self.commands.append(rel(command))
        out = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        if out.returncode != 0:
            raise RuntimeError(f"{rel(command)} exited {out.returncode}: {out.stderr.strip()[-1500:]}")
        return out

    def phase(self, name: str, started: float) -> None:
        self.phases[name] = round(time.perf_counter() - started, 1)

    # --- machine ------------------------------------------------------------------------------

    def machine(self) -> None:
        cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace") if Path("/proc/cpuinfo").exists() else ""
        model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines()
                      if line.startswith("model name")), platform.processor() or "unknown")
        meminfo = Path("/proc/meminfo").read_text() if Path("/proc/meminfo").exists() else ""
        mem_kib = next((int(line.split()[1]) for line in meminfo.splitlines() if line.startswith("MemTotal")), 0)
        packages = {}
        for name in ("litestar", "uvicorn", "msgspec", "aiosqlite", "uvloop", "httptools", "httpx"):
            try:
                packages[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                packages[name] = None
        wrk = load.wrk_path()
        git = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=ROOT)
        self.out["machine"] = {
            "cpus": os.cpu_count(),
            "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "cpu_model": model,
            "memory_gib": round(mem_kib / 2**20, 1),
            "kernel": platform.release(),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "wrk": load.wrk_version(wrk) if wrk else None,
            "packages": packages,
            "git": git.stdout.strip() if git.returncode == 0 else None,
            "loadavg_start": os.getloadavg(),
        }

    # --- data ---------------------------------------------------------------------------------

    def data(self) -> None:
        started = time.perf_counter()
        DATA.mkdir(parents=True, exist_ok=True)
        today = self.started.date()
        day = f"{today:%Y%m%d}"
        # The newest builds precede the next UTC midnight, so "the last 24 hours" always holds a day of builds.
        self.end = today + timedelta(days=1)
        self.stem = f"builds-{self.builds}-{day}"
        for old in DATA.glob("builds-*"):
            if f"-{day}" not in old.name or (self.fresh and old.name.startswith(self.stem)):
                self.say(f"removing {old.name} (another day's data, or BENCH_FRESH)")
                old.unlink() if old.is_file() else shutil.rmtree(old)
        for tmp in DATA.glob(f"{self.stem}*.tmp*"):
            tmp.unlink()
        self.logs_file = DATA / f"{self.stem}.jsonl.gz"
        self.nolog_file = DATA / f"{self.stem}-nolog.jsonl.gz"
        self.db = DATA / f"{self.stem}.db"
        self.meta = DATA / f"{self.stem}.json"
        generated = {}
        for path, share in ((self.logs_file, LOG_SHARE), (self.nolog_file, 0.0)):
            generated[path.name] = self.generate(path, share)
        self.out["data"] = {"end": self.end.isoformat(), "files": generated}
        self.phase("generate", started)

    def generate(self, path: Path, log_share: float) -> dict[str, Any]:
        tmp = path.with_name(path.name.replace(".jsonl.gz", ".tmp.jsonl.gz"))
        command = [*self.cli, "sample", "-o", str(tmp), "--builds", str(self.builds), "--days", str(DAYS),
                   "--accounts", ACCOUNTS, "--seed", str(SEED), "--end", self.end.isoformat(),
                   "--log-share", str(log_share)]
        self.commands.append(rel(command).replace(".tmp.jsonl.gz", ".jsonl.gz"))
        if path.exists():
            return {"cached": True, "bytes": path.stat().st_size, "log_share": log_share}
        self.say(f"generating {path.name}")
        started = time.perf_counter()
        self.run(command, timeout=7200, record=False)
        tmp.rename(path)
        return {"cached": False, "bytes": path.stat().st_size, "log_share": log_share,
                "seconds": round(time.perf_counter() - started, 2)}

    def import_fixed_cost(self) -> float:
        """Wall seconds of importing an empty file into a new database: process start, schema, commit.

        The median of three; it is what does not grow with the number of builds."""
        empty = DATA / f"{self.stem}-empty.tmp.jsonl"
        db = DATA / f"{self.stem}-empty.tmp.db"
        empty.write_bytes(b"")
        times = []
        try:
            for _ in range(3):
                remove_files(db)
                started = time.perf_counter()
                self.run([*self.cli, "import", "--db", str(db), str(empty)], timeout=120, record=not times)
                times.append(time.perf_counter() - started)
        finally:
            remove_files(db)
            empty.unlink(missing_ok=True)
        return sorted(times)[1]

    def import_one(self, db: Path, source: Path, fixed: float) -> dict[str, Any]:
        remove_files(db)
        return {**self.timed_import(str(db), source, fixed), "sizes": file_sizes(db)}

    def timed_import(self, db: str, source: Path, fixed: float) -> dict[str, Any]:
        """`buildreport import --db DB SOURCE` into an empty database: wall clock, and net of `fixed`."""
        command = [*self.cli, "import", "--db", db, str(source)]
        started = time.perf_counter()
        out = self.run(command, timeout=7200)
        wall = time.perf_counter() - started
        match = re.search(r"imported (\d+) builds .* in ([0-9.]+)s", out.stderr)
        if match is None or int(match.group(1)) != self.builds:
            raise RuntimeError(f"unexpected import output: {out.stderr.strip()[-500:]}")
        own = float(match.group(2))
        net = max(wall - fixed, 1e-3)
        return {"builds": self.builds, "wall_s": round(wall, 3), "import_s": own, "fixed_s": round(fixed, 3),
                "net_s": round(net, 3), "builds_per_s_wall": round(self.builds / wall),
                "builds_per_s_net": round(self.builds / net), "source_bytes": source.stat().st_size,
                "measured_at": iso(datetime.now(UTC))}

    def package_tree(self) -> str | None:
        """Git's hash of the package's files as committed: imports measured on other code are not reused."""
        tree = subprocess.run(["git", "rev-parse", "HEAD:buildreport"], capture_output=True, text=True, cwd=ROOT)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "buildreport"], capture_output=True, text=True,
                               cwd=ROOT)
        if tree.returncode != 0 or dirty.stdout.strip():
            return None
        return tree.stdout.strip()

    def cached_imports(self, tree: str | None) -> dict[str, Any] | None:
        """Today's import figures and database, when they were measured on the same package files."""
        if tree is None or not (self.meta.exists() and self.db.exists()):
            return None
        figures = json.loads(self.meta.read_text())
        if any(entry.get("package_tree") != tree for entry in figures.values()):
            self.say("today's cached import was measured on other code; importing again")
            return None
        return figures

    def imports(self) -> None:
        started = time.perf_counter()
        tree = self.package_tree()
        figures = self.cached_imports(tree)
        if figures is not None:
            for entry in figures.values():
                entry["cached"] = True
            self.commands.append(rel([*self.cli, "import", "--db", str(self.db), str(self.logs_file)]))
            self.commands.append(rel([*self.cli, "import", "--db", str(DATA / (self.stem + "-nolog.tmp.db")),
                                      str(self.nolog_file)]))
            self.say("using today's cached database and import figures")
        else:
            self.meta.unlink(missing_ok=True)
            fixed = self.import_fixed_cost()
            self.say(f"importing {self.logs_file.name}")
            with_logs = self.import_one(self.db, self.logs_file, fixed)
            nolog_db = DATA / f"{self.stem}-nolog.tmp.db"
            self.say(f"importing {self.nolog_file.name}")
            try:
                without_logs = self.import_one(nolog_db, self.nolog_file, fixed)
            finally:
                remove_files(nolog_db)
            figures = {"with_logs": with_logs, "without_logs": without_logs}
            for entry in figures.values():
                entry["package_tree"] = tree
            self.meta.write_text(json.dumps(figures, indent=2))
            for entry in figures.values():
                entry["cached"] = False
        self.out["import"] = figures
        self.phase("import", started)

    # --- what to ask for ------------------------------------------------------------------------

    def facts(self) -> None:
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            row = conn.execute("SELECT account_id FROM accounts WHERE name = ?", (ACCOUNT,)).fetchone()
            if row is None:
                raise RuntimeError(f"no account {ACCOUNT} in {self.db}")
            self.account_id = row[0]
            counts = dict(conn.execute(
                "SELECT a.name, count(*) FROM builds b JOIN accounts a USING (account_id) GROUP BY a.name"))
            ids = [r[0] for r in conn.execute("SELECT build_id FROM builds WHERE account_id = ?", (self.account_id,))]
            log_ids = [r[0] for r in conn.execute(
                "SELECT l.build_id FROM build_logs l JOIN builds b USING (build_id) WHERE b.account_id = ?",
                (self.account_id,))]
            # The real client's summary: its repository, run id and attempt, from the account's newest build.
            client = conn.execute(
                "SELECT key, value FROM build_tags WHERE build_id = (SELECT t.build_id FROM build_tags t"
                " WHERE t.account_id = ? AND t.key = 'GITHUB_RUN_ID' ORDER BY t.create_us DESC LIMIT 1)"
                " AND key LIKE 'GITHUB_%' ORDER BY key DESC", (self.account_id,)).fetchall()
            # A page of the account's newest 500 builds as the list answers it: their JSON, commas and brackets.
            (self.page_bytes,) = conn.execute(
                "SELECT coalesce(sum(length(body)), 0) + max(count(*) - 1, 0) + 2 FROM (SELECT body FROM builds"
                " WHERE account_id = ? ORDER BY create_us DESC, build_id DESC LIMIT 500)", (self.account_id,),
            ).fetchone()
            tag_sizes = self.tag_totals_size(conn)
            projects = conn.execute(
                "SELECT value, count(*) FROM build_tags WHERE account_id = ? AND key = 'project' "
                "GROUP BY value ORDER BY count(*) DESC", (self.account_id,)).fetchall()
        finally:
            conn.close()
        rng = random.Random(SEED)
        self.ids = rng.sample(ids, min(ROTATE_IDS, len(ids)))
        self.log_ids = rng.sample(log_ids, min(PAGE_LINKS, len(log_ids))) if log_ids else self.ids[:PAGE_LINKS]
        values = [v for v, _ in projects]
        self.project = "web" if "web" in values else (values[0] if values else "web")
        if self.project != "web":
            self.notes.append(f"account {ACCOUNT} has no project:web builds; project:{self.project} is used instead")
        self.client_tags = [f"{k}:{v}" for k, v in client]
        self.out["data"].update({
            "client_tags": self.client_tags, "tag_totals": tag_sizes,
            "builds_per_account": counts, "project_tags": dict(projects), "project_tag_used": self.project,
            "rotated_ids": len(self.ids), "page_links": len(self.log_ids), "page_builds_with_logs": bool(log_ids),
            "list_page_bytes": self.page_bytes,
        })

    @staticmethod
    def tag_totals_size(conn: sqlite3.Connection) -> dict[str, Any]:
        """What is kept per tag pair: rows, promoted pairs, and bytes when SQLite has the dbstat table."""
        sizes: dict[str, Any] = {
            "pairs": conn.execute("SELECT count(*) FROM (SELECT DISTINCT account_id, key, value FROM build_tags)")
            .fetchone()[0],
            "tag_rows": conn.execute("SELECT count(*) FROM build_tags").fetchone()[0],
        }
        try:
            sizes["promoted_pairs"] = conn.execute("SELECT count(*) FROM tag_pairs").fetchone()[0]
            sizes["rows"] = conn.execute("SELECT count(*) FROM tag_daily_totals").fetchone()[0]
            sizes["promoted_by_key"] = dict(conn.execute("SELECT key, count(*) FROM tag_pairs GROUP BY key"))
        except sqlite3.Error as exc:
            sizes["error"] = str(exc)
            return sizes
        try:
            sizes["bytes"] = conn.execute(
                "SELECT sum(pgsize) FROM dbstat WHERE name IN ('tag_pairs', 'tag_daily_totals')").fetchone()[0]
        except sqlite3.Error:
            page = conn.execute("PRAGMA page_size").fetchone()[0]
            sizes["bytes_note"] = f"no dbstat in this SQLite; page size {page}"
        return sizes

    def endpoints(self) -> list[dict[str, Any]]:
        now = self.started
        first_this = now.date().replace(day=1)
        first_last = (first_this - timedelta(days=1)).replace(day=1)
        first_year_ago = first_this.replace(year=first_this.year - 1)
        tag = ("tags", f"project:{self.project}")

        def query(path: str, pairs: list[tuple[str, str]]) -> str:
            return f"{path}?{urlencode(pairs, safe=':')}" if pairs else path

        eps: list[dict[str, Any]] = [
            {"key": "builds_default", "label": "/builds (default window, limit 500)", "kind": "list", "pairs": []},
            {"key": "builds_365d", "label": "/builds 365 days (limit 500)", "kind": "list",
             "pairs": [("create_time_from", iso(now - timedelta(days=365)))]},
            {"key": "builds_tag_30d", "label": f"/builds project:{self.project}, 30 days", "kind": "list",
             "pairs": [tag, ("create_time_from", iso(now - timedelta(days=30)))]},
            {"key": "build_by_id", "label": "/builds/{id}", "kind": "build", "ids": self.ids},
        ]
        for days in (1, 30, 365):
            since = ("create_time_from", iso(now - timedelta(days=days)))
            eps.append({"key": f"summary_{days}d", "label": f"/builds/summary {days} day{'s' * (days > 1)}",
                        "kind": "summary", "pairs": [since]})
            eps.append({"key": f"summary_{days}d_tag",
                        "label": f"/builds/summary {days} day{'s' * (days > 1)}, project:{self.project}",
                        "kind": "summary", "pairs": [since, tag]})
        since_30d = ("create_time_from", iso(now - timedelta(days=30)))
        eps.append({"key": "summary_30d_status", "label": "/builds/summary 30 days, status built", "kind": "summary",
                    "pairs": [since_30d, ("status", "built")]})
        if self.client_tags:
            eps.append({"key": "summary_client", "label": "/builds/summary, the client's 3 tag pairs, default window",
                        "kind": "summary", "pairs": [("tags", ",".join(self.client_tags))]})
        eps += [
            {"key": "build_url", "label": "/builds/{id}/url", "kind": "url", "ids": self.ids},
            {"key": "usage_month", "label": "/usage one month", "kind": "usage",
             "pairs": [("from", first_last.isoformat()), ("to", first_this.isoformat())]},
            {"key": "usage_year", "label": "/usage one year", "kind": "usage",
             "pairs": [("from", first_year_ago.isoformat()), ("to", first_this.isoformat())]},
            {"key": "page", "label": "/b/{signed link} (build page)", "kind": "page"},
            {"key": "healthz", "label": "/healthz", "kind": "healthz"},
        ]
        for days in (30, 365):
            eps.append({"key": f"stats_day_{days}d", "label": f"/builds/stats group_by=day, {days} days",
                        "kind": "stats",
                        "pairs": [("group_by", "day"), ("create_time_from", iso(now - timedelta(days=days)))]})
        eps += [
            {"key": "stats_tag_30d", "label": "/builds/stats group_by=tag:project, 30 days", "kind": "stats",
             "pairs": [("group_by", "tag:project"), ("create_time_from", iso(now - timedelta(days=30)))]},
            {"key": "breakdown_day_year", "label": "/usage/breakdown group_by=day, one year", "kind": "breakdown",
             "pairs": [("group_by", "day"), ("from", first_year_ago.isoformat()), ("to", first_this.isoformat())]},
            {"key": "dashboard_30d", "label": "/d/{signed link}?window=30d (dashboard)", "kind": "dashboard",
             "pairs": [("window", "30d")]},
        ]
        paths = {"list": "/builds", "summary": "/builds/summary", "usage": "/usage", "stats": "/builds/stats",
                 "breakdown": "/usage/breakdown"}
        for ep in eps:
            if ep["kind"] in ("build", "url"):
                suffix = "/url" if ep["kind"] == "url" else ""
                ep["paths"] = [f"/builds/{i}{suffix}" for i in ep["ids"]]
            elif ep["kind"] == "healthz":
                ep["paths"] = ["/healthz"]
            elif ep["kind"] in paths:
                ep["paths"] = [query(paths[ep["kind"]], ep["pairs"])]
        return eps

    def token(self) -> None:
        out = self.run([*self.cli, "token", "create", "--db", str(self.db), "--account", ACCOUNT,
                        "--expires-in", "1d", "--label", "make bench"], timeout=60)
        self.token_secret = out.stdout.strip()
        if not self.token_secret or "\n" in self.token_secret:
            raise RuntimeError("token create did not print one secret")

    # --- HTTP ---------------------------------------------------------------------------------

    def probe(self, server: Server, ep: dict[str, Any]) -> dict[str, Any]:
        """One request with a plain client: the answer must be a 200 of the right shape."""
        path = ep["paths"][0]
        status, headers, body = get(server.port, path, None if ep["kind"] == "healthz" else self.token_secret)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {body[:300]!r}")
        info: dict[str, Any] = {"path": path, "status": status, "body_bytes": len(body),
                                "content_type": headers.get("content-type")}
        if ep["kind"] in ("page", "dashboard"):
            if "text/html" not in (headers.get("content-type") or ""):
                raise RuntimeError(f"GET {path}: not HTML")
            return info
        value = json.loads(body)
        if ep["kind"] == "list":
            if not isinstance(value, list):
                raise RuntimeError(f"GET {path}: not a list")
            info["items"] = len(value)
            info["more"] = "link" in headers
        elif ep["kind"] == "build" and value.get("build_id") != ep["ids"][0]:
            raise RuntimeError(f"GET {path}: another build")
        elif ep["kind"] == "summary":
            info["build_count"] = value["build_count"]
        elif ep["kind"] == "usage":
            info["billable_build_count"] = value["billable_build_count"]
        elif ep["kind"] in ("stats", "breakdown"):
            if not isinstance(value, list):
                raise RuntimeError(f"GET {path}: not a list")
            info["groups"] = len(value)
        elif ep["kind"] == "url" and "/b/" not in value.get("url", ""):
            raise RuntimeError(f"GET {path}: no link")
        return info

    def signed_links(self, server: Server, page: dict[str, Any]) -> None:
        paths = []
        for build_id in self.log_ids:
            status, _, body = get(server.port, f"/builds/{build_id}/url?ttl_seconds=3600", self.token_secret)
            if status != 200:
                raise RuntimeError(f"GET /builds/{build_id}/url: {status} {body[:300]!r}")
            paths.append(urlsplit(json.loads(body)["url"]).path)
        page["paths"] = paths
        page["tokens"] = [p.rsplit("/", 1)[1] for p in paths]

    def dashboard_link(self, server: Server, dashboard: dict[str, Any]) -> None:
        status, _, body = get(server.port, "/dashboard/url?ttl_seconds=86400", self.token_secret)
        if status != 200:
            raise RuntimeError(f"GET /dashboard/url: {status} {body[:300]!r}")
        path = urlsplit(json.loads(body)["url"]).path
        dashboard["paths"] = [f"{path}?{urlencode(dashboard['pairs'])}"]

    def export(self, server: Server) -> dict[str, Any]:
        """Stream a year of the account's builds as JSON Lines; builds a second, and the server's memory."""
        before = server.memory()
        path = "/builds/export?" + urlencode({"format": "ndjson", "create_time_from": iso(self.started
                                                                                          - timedelta(days=366))})
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
        read_before, cpu_before = server.read_bytes(), server.cpu_seconds()
        started = time.perf_counter()
        lines = size = 0
        try:
            conn.request("GET", path, headers={"Authorization": f"Bearer {self.token_secret}"})
            response = conn.getresponse()
            if response.status != 200:
                raise RuntimeError(f"GET {path}: {response.status} {response.read()[:300]!r}")
            while chunk := response.read(1 << 20):
                lines += chunk.count(b"\n")
                size += len(chunk)
        finally:
            conn.close()
        seconds = time.perf_counter() - started
        after = server.memory()
        # What bounds an export: the server's CPU time, or its reads from storage (the kernel drops file pages
        # left unread for a while, so the builds' JSON is usually read from the disk here).
        disk = server.read_bytes() - read_before
        result = {"path": path, "builds": lines, "bytes": size, "seconds": round(seconds, 3),
                  "builds_per_s": round(lines / seconds, 1) if seconds else None,
                  "rss_before_kib": anonymous_kib(before), "rss_after_kib": anonymous_kib(after),
                  "server_cpu_s": round(server.cpu_seconds() - cpu_before, 2), "disk_read_mib": round(disk / 2**20, 1)}
        self.say(f"export: {lines:,} builds in {seconds:.2f}s ({result['builds_per_s']:,.0f} builds/s), "
                 f"server RssAnon {result['rss_before_kib'] / 1024:,.0f} → {result['rss_after_kib'] / 1024:,.0f} MiB, "
                 f"server CPU {result['server_cpu_s']:.2f} s, {result['disk_read_mib']:,.0f} MiB read from disk")
        return result

    def load(self, server: Server | list[Server], ep: dict[str, Any], connections: int, threads: int,
             engine: Engine, alone: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """One load run; over several servers, wrk's threads (the fallback's connections) are spread evenly."""
        servers = server if isinstance(server, list) else [server]
        workers = servers[0].command[servers[0].command.index("--workers") + 1]
        name = (f"{'pg-' if engine.name == 'postgresql' else ''}{ep['key']}-w{workers}-c{connections}"
                + (f"-p{len(servers)}" if len(servers) > 1 else ""))
        token = None if ep["kind"] == "healthz" else self.token_secret
        bases = [s.base for s in servers]
        try:
            if self.client == "wrk":
                result = load.run_wrk(self.wrk, RUN_DIR, name, bases, ep["paths"], token, connections,
                                      threads, self.seconds)
                result["command"] = rel(result["command"])
            else:
                result = load.run_python(bases, ep["paths"], token, connections, self.seconds)
        except Exception as exc:
            self.fail(f"{name}: {exc}")
            return None
        if load.too_slow_to_measure(result, alone, connections):
            # Not an error: every answer was still on its way when the run ended.
            result["too_slow"] = True
            self.notes.append(f"{name}: no answer within the {self.seconds} s run; one request alone takes "
                              f"{alone['p50_ms']:,.0f} ms (p50), so {connections} at once outlast the run")  # type: ignore[index]
        elif found := load.problems(result):
            self.fail(f"{name}: " + ", ".join(found))
        for one in servers:
            if one.process is not None and one.process.poll() is not None:
                self.fail(f"{name}: the server exited ({one.process.returncode}) during the load:\n"
                          + one.log_tail())
        self.say(f"{name}: {result['rps']:,.0f} req/s, p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms")
        return result

    def warm_up(self, server: Server, ep: dict[str, Any]) -> None:
        """Ask for the endpoint for load.WARM_UP_SECONDS at one connection, not recorded: the measured runs then start
        with SQLite's pages, the token cache and the allocator holding what the endpoint uses, as the floor's
        warm-up runs do; the first endpoint measured no longer pays for the server's start."""
        token = None if ep["kind"] == "healthz" else self.token_secret
        try:
            if self.client == "wrk":
                load.run_wrk(self.wrk, RUN_DIR, f"warm-{ep['key']}", [server.base], ep["paths"], token, 1, 1,
                             load.WARM_UP_SECONDS)
            else:
                load.run_python([server.base], ep["paths"], token, 1, load.WARM_UP_SECONDS)
        except Exception as exc:
            self.fail(f"warm-up of {ep['key']}: {exc}")
        self.settle(server)

    def settle(self, server: Server, quiet_ms: float = 50.0, limit_s: float = 120.0) -> None:
        """Wait until the server has worked off the requests a load run left queued (wrk stops at its deadline
        with up to 32 slow requests in flight, and a server works on between them, so a quick /healthz alone
        does not say they are done): its processes use under a tenth of a core for half a second, and
        /healthz, which reads the database too, answers within `quiet_ms`. The next measurement then starts
        on an idle server."""
        deadline = time.perf_counter() + limit_s
        while time.perf_counter() < deadline:
            before = server.cpu_seconds()
            time.sleep(0.5)
            if server.cpu_seconds() - before > 0.05:
                continue
            started = time.perf_counter()
            try:
                status, _, _ = get(server.port, "/healthz", timeout=limit_s)
            except OSError:
                return
            if status == 200 and (time.perf_counter() - started) * 1000 < quiet_ms:
                return
        self.notes.append(f"the server was still busy {limit_s:.0f} s after a load run")

    def pick_client(self) -> None:
        wanted = os.environ.get("BENCH_CLIENT", "").strip().lower()
        self.wrk = load.wrk_path()
        if wanted == "python" or self.wrk is None:
            self.client = "python"
            if self.wrk is None:
                self.notes.append("wrk is not installed (`apt-get install -y wrk` as root): the figures come from "
                                  "the slower asyncio + httpx fallback client, which shares the CPU with the server")
            else:
                self.notes.append("BENCH_CLIENT=python: the asyncio + httpx fallback client was used, not wrk")
        else:
            self.client = "wrk"
        self.out["client"] = self.client

    def serve_one_worker(self, eps: list[dict[str, Any]], engine: Engine) -> None:
        started = time.perf_counter()
        results: dict[str, Any] = {}
        server = Server(self.cli, engine.db, 1, engine.file("server-1.log"))
        self.commands.append(rel(server.command))
        try:
            server.start()
            sampler = AnonSampler(server.process.pid)  # type: ignore[union-attr]
            self.say(f"{engine.name}: server (1 worker) up on {server.base} in {server.startup_s:.2f}s")
            page = next(ep for ep in eps if ep["kind"] == "page")
            self.signed_links(server, page)
            self.dashboard_link(server, next(ep for ep in eps if ep["kind"] == "dashboard"))
            for ep in eps:
                entry: dict[str, Any] = {"label": ep["label"], "kind": ep["kind"]}
                results[ep["key"]] = entry
                try:
                    entry["probe"] = self.probe(server, ep)
                except Exception as exc:
                    self.fail(f"{engine.name}: probe {ep['key']}: {exc}")
                    continue
                self.warm_up(server, ep)
                self.floor_of(engine, ep)
                for connections, threads in LOADS:
                    entry[f"c{connections}"] = self.load(server, ep, connections, threads, engine,
                                                         alone=entry.get("c1"))
                    self.settle(server)
                if ep["key"] == "build_by_id":
                    entry["paired_bare"] = self.paired_with_bare(server, ep, engine)
            try:
                exported = self.export(server)
            except Exception as exc:
                self.fail(f"{engine.name}: export: {exc}")
                exported = None
            memory = server.memory()
            memory["sampled"] = sampler.stop()
        finally:
            server.stop()
        engine.out["http"] = {"server": server.info(), "endpoints": results, "memory": memory, "export": exported}
        if not server.clean_exit():
            self.notes.append(f"{engine.name}: the 1-worker server exited with {server.exit_code} after SIGTERM")
        self.phase(self.phase_name("http_1_worker", engine), started)

    @staticmethod
    def phase_name(name: str, engine: Engine) -> str:
        return name if engine.name == "sqlite" else f"postgresql_{name}"

    def serve_two_workers(self, eps: list[dict[str, Any]], engine: Engine) -> None:
        started = time.perf_counter()
        server = Server(self.cli, engine.db, 2, engine.file("server-2.log"))
        self.commands.append(rel(server.command))
        results: dict[str, Any] = {}
        try:
            server.start()
            self.say(f"{engine.name}: server (2 workers) up on {server.base} in {server.startup_s:.2f}s")
            for ep in eps:
                if ep["key"] in ("builds_default", "build_by_id"):
                    results[ep["key"]] = self.load(server, ep, 32, 2, engine)
            memory = server.memory()
        finally:
            server.stop()
        engine.out["workers2"] = {"server": server.info(), "endpoints": results, "memory": memory}
        if not server.clean_exit():
            self.notes.append(f"{engine.name}: the 2-worker server exited with {server.exit_code} after SIGTERM")
        self.phase(self.phase_name("http_2_workers", engine), started)

    def serve_two_processes(self, eps: list[dict[str, Any]], engine: Engine) -> None:
        """Two `buildreport serve --workers 1` on ports of their own, one database; wrk's two threads (16
        connections each) load one server each."""
        started = time.perf_counter()
        servers = [Server(self.cli, engine.db, 1, engine.file(f"server-p{n}.log")) for n in (1, 2)]
        results: dict[str, Any] = {}
        try:
            for server in servers:
                self.commands.append(rel(server.command))
                server.start()
            self.say(f"{engine.name}: two servers up on {servers[0].base} and {servers[1].base}")
            for ep in eps:
                if ep["key"] in ("builds_default", "build_by_id"):
                    results[ep["key"]] = self.load(servers, ep, 32, 2, engine)
        finally:
            for server in servers:
                server.stop()
        engine.out["processes2"] = {"servers": [s.info() for s in servers], "endpoints": results}
        self.phase(self.phase_name("http_2_processes", engine), started)

    # --- a bare Litestar app, the yardstick of HTTP overhead ---------------------------------------

    def bare(self) -> None:
        started = time.perf_counter()
        server = Server(self.cli, self.db, 1, RUN_DIR / "bare.log")
        server.command = [sys.executable, str(BENCH / "bare.py"), str(server.port), str(self.page_bytes)]
        self.commands.append(rel(server.command))
        result: dict[str, Any] = {}
        try:
            server.start()
            ep = {"key": "bare", "kind": "bare", "paths": ["/build"]}
            for connections, threads in LOADS:
                result[f"c{connections}"] = self.load_plain(server.base, ep, connections, threads)
            # The same app sending a constant body as large as a page of 500 builds: what those bytes cost alone.
            page = {"key": "bare-page", "kind": "bare", "paths": ["/page"]}
            result["page"] = {"body_bytes": self.page_bytes, "c1": self.load_plain(server.base, page, 1, 1)}
        except Exception as exc:
            self.fail(f"bare Litestar app: {exc}")
        finally:
            server.stop()
        self.out["bare"] = result
        self.phase("bare", started)

    def paired_with_bare(self, server: Server, ep: dict[str, Any], engine: Engine) -> dict[str, Any] | None:
        """The bare app and `ep` at 32 connections in turns, PAIRED_ROUNDS times each, both servers up: each
        ratio compares two runs seconds apart, on the same state of this shared machine, which a ratio of runs
        minutes apart does not. The median of the ratios is the figure."""
        bare = Server(self.cli, self.db, 1, RUN_DIR / "bare-paired.log")
        bare.command = [sys.executable, str(BENCH / "bare.py"), str(bare.port)]
        bare_ep = {"key": "bare-paired", "kind": "bare", "paths": ["/build"]}
        rounds = []
        try:
            bare.start()
            for _ in range(PAIRED_ROUNDS):
                theirs = self.load_plain(bare.base, bare_ep, 32, 2)
                ours = self.load(server, ep, 32, 2, engine)
                self.settle(server)
                if theirs is None or ours is None or not theirs["rps"]:
                    return None
                rounds.append({"bare_rps": theirs["rps"], "rps": ours["rps"], "ratio": ours["rps"] / theirs["rps"]})
        except Exception as exc:
            self.fail(f"{engine.name}: paired with the bare app: {exc}")
            return None
        finally:
            bare.stop()
        return {"rounds": rounds, "ratio": statistics.median(r["ratio"] for r in rounds)}

    # --- Datasette, side by side ---------------------------------------------------------------

    def datasette(self, eps: list[dict[str, Any]]) -> None:
        """The same builds served by Datasette, measured as buildreport was; ratios against buildreport's run."""
        import datasette

        started = time.perf_counter()
        result: dict[str, Any] = {"version": datasette.VERSION}
        self.out["datasette"] = result
        since_us = int((self.started - timedelta(days=30)).timestamp() * 1_000_000)
        try:
            command = datasette.install(DATA)
            db, seconds = datasette.database(self.db, DATA / f"{self.stem}-datasette")
            result.update({"db_bytes": db.stat().st_size, "copy_s": round(seconds, 1),
                           "indexes": list(datasette.INDEXES)})
            asked = datasette.paths(self.account_id, self.ids, since_us)
            with datasette.Datasette(command, db, RUN_DIR / "datasette.log") as server:
                self.commands.append(rel(server.command))
                listed = server.get(asked["list"][0])
                row = server.get(asked["lookup"][0])
                counted = server.get(asked["count"][0])
                result["probe"] = {"list_items": len(listed), "lookup_items": len(row),
                                   "count": counted.get("filtered_table_rows_count")}
                for key, path_list in asked.items():
                    entry = result[key] = {"paths": path_list[:2]}
                    # A count takes Datasette seconds: 32 at once would not finish within a load run.
                    for connections, threads in LOADS[:1] if key == "count" else LOADS:
                        ep = {"key": f"datasette_{key}", "kind": "datasette", "paths": path_list}
                        entry[f"c{connections}"] = self.load_plain(server.base, ep, connections, threads)
        except datasette.Skip as exc:
            result["skipped"] = str(exc)
            self.notes.append(f"Datasette was not measured: {exc}")
        self.phase("datasette", started)

    def load_plain(self, base: str, ep: dict[str, Any], connections: int, threads: int) -> dict[str, Any] | None:
        name = f"{ep['key']}-c{connections}"
        try:
            if self.client == "wrk":
                result = load.run_wrk(self.wrk, RUN_DIR, name, base, ep["paths"], None, connections, threads,
                                      self.seconds)
                result["command"] = rel(result["command"])
            else:
                result = load.run_python(base, ep["paths"], None, connections, self.seconds)
        except Exception as exc:
            self.fail(f"{name}: {exc}")
            return None
        if found := load.problems(result):
            self.fail(f"{name}: " + ", ".join(found))
        self.say(f"{name}: {result['rps']:,.0f} req/s, p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms")
        return result

    # --- ingestion over HTTP -------------------------------------------------------------------

    def ingestion(self, eps: list[dict[str, Any]], engine: Engine, processes: tuple[int, ...] = (1,)) -> None:
        """Ingestion with one server of 1 and of 2 workers, and with each count of `processes` above one (servers
        of one worker each, on one database); every setting writes into a fresh scratch copy."""
        started = time.perf_counter()
        reads = next(ep for ep in eps if ep["kind"] == "build")
        engine.out["ingestion"] = {}
        settings = [(1, 1), (2, 1)] + [(1, count) for count in processes if count > 1]
        for workers, count in settings:
            key = str(workers) if count == 1 else f"{count}p"
            what = f"{workers} worker(s)" if count == 1 else f"{count} processes"
            try:
                with engine.scratch() as scratch:
                    result = ingest.measure(self.cli, scratch, RUN_DIR, self.token_secret, reads["paths"],
                                            self.seconds, self.wrk if self.client == "wrk" else None, workers, count)
            except Exception as exc:
                self.fail(f"{engine.name}: ingestion, {what}: {exc}")
                continue
            engine.out["ingestion"][key] = result
            for senders, run in result["runs"].items():
                name = f"{engine.name}: ingestion, {what}, {senders} sender(s)"
                if run["errors"] or not run["builds"]:
                    self.fail(f"{name}: {run['errors']} errors; {run['first_error']}")
                if found := load.problems(run["reads"]):
                    self.fail(f"reads during {name}: " + ", ".join(found))
                self.say(f"{name}: {run['builds_per_s']:,.0f} builds/s; /builds/{{id}} during it:"
                         f" p50 {run['reads']['p50_ms']:.2f} ms, p99 {run['reads']['p99_ms']:.2f} ms")
        self.phase(self.phase_name("ingestion", engine), started)

    # --- floor, executable --------------------------------------------------------------------

    def floor_of(self, engine: Engine, ep: dict[str, Any]) -> None:
        """The in-process floor of one endpoint (bench/floor.py, in a process of its own), measured just before its
        HTTP runs, with the server idle: both then see the same page cache and machine, which drift over a run far
        more than either figure's own spread.
        The build page needs its signed links (made once the server is up); without them it has no floor."""
        import floor

        if ep["kind"] == "page" and not ep.get("tokens"):
            return
        out = engine.out.setdefault("floor", {"endpoints": {}})
        budget = float(max(3, min(self.seconds, 10)))
        share = budget / FLOOR_PROCESSES
        given = {"db": str(engine.db), "account_id": self.account_id, "endpoints": [ep],
                 "iterations": -(-200 // FLOOR_PROCESSES), "warmup": 20, "budget_s": share}
        runs = []
        try:
            for _ in range(FLOOR_PROCESSES):
                done = subprocess.run([sys.executable, str(BENCH / "floor.py")], input=json.dumps(given),
                                      capture_output=True, text=True, timeout=share * 3 + 120, cwd=ROOT)
                if done.returncode != 0:
                    raise RuntimeError(f"exited {done.returncode}: {done.stderr.strip()[-1500:]}")
                measured = json.loads(done.stdout)
                runs.append(measured.pop("endpoints")[ep["key"]])
        except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
            self.fail(f"{engine.name}: floor {ep['key']}: {exc}")
            return
        failed = next((run for run in runs if "error" in run), None)
        result = failed or floor.pooled(runs)
        out.update(measured, processes=FLOOR_PROCESSES)
        out["endpoints"][ep["key"]] = result
        if "error" in result:
            self.fail(f"{engine.name}: floor {ep['key']}: {result['error']}")
        self.notes.extend(f"{engine.name}: {note}" for note in result.get("notes", []))

    def executable(self) -> None:
        started = time.perf_counter()
        script = ROOT / "packaging" / "measure.py"
        exe = ROOT / "dist" / "buildreport"
        if not script.exists():
            self.out["executable"] = {"status": "packaging/measure.py not present"}
        elif not exe.exists():
            self.out["executable"] = {"status": "not built"}
        else:
            runs = 2 if self.quick else 5
            try:
                out = self.run([sys.executable, str(script), str(exe), "--runs", str(runs)], timeout=900)
                self.out["executable"] = {"status": "measured", **json.loads(out.stdout)}
            except Exception as exc:
                self.fail(f"packaging/measure.py: {exc}")
                self.out["executable"] = {"status": f"failed: {exc}"}
        self.phase("executable", started)

    # --- PostgreSQL ---------------------------------------------------------------------------

    def postgresql(self, eps: list[dict[str, Any]]) -> None:
        """The same measurements against a throwaway PostgreSQL cluster holding a `buildreport migrate` copy of
        the SQLite database, plus two server processes on that one database."""
        started = time.perf_counter()
        pg: dict[str, Any] = {}
        self.out["postgresql"] = pg
        try:
            cluster = postgres.start()
        except postgres.PostgresMissing as exc:
            why = f"PostgreSQL was not measured: {exc} (`apt-get install postgresql`, or `make deps` as root)"
            pg["skipped"] = str(exc)
            if os.environ.get("CI") == "true" or self.engine == "postgresql":
                self.fail(why)
            else:
                self.notes.append(why)
            return
        try:
            pg["server"] = {"version": postgres.version(cluster), "settings": postgres.SETTINGS,
                            "startup_s": round(time.perf_counter() - started, 2)}
            self.say(f"postgresql: cluster {pg['server']['version']} up on {cluster.url()}")
            name = cluster.create_database()
            url = cluster.url(name)
            pg["migrate"] = self.pg_migrate(cluster, name, url)
            self.phase("postgresql_migrate", started)
            began = time.perf_counter()
            pg["import"] = {"without_logs": self.pg_import(cluster)}
            self.phase("postgresql_import", began)
            engine = Engine("postgresql", url, pg, lambda: postgres.database_copy(cluster, name))
            eps = deepcopy(eps)  # signed links differ by server: the SQLite run's stay as they were
            self.serve_one_worker(eps, engine)
            self.serve_two_workers(eps, engine)
            self.serve_two_processes(eps, engine)
            self.ingestion(eps, engine, processes=(1, 2))
            pg["size_after_bytes"] = postgres.database_size(cluster, name)
        finally:
            cluster.stop()

    def pg_migrate(self, cluster: postgres.PgCluster, name: str, url: str) -> dict[str, Any]:
        """`buildreport migrate` of the bench database (with logs) into the empty database `name`; its time."""
        command = [*self.cli, "migrate", "--from", str(self.db), "--to", url]
        began = time.perf_counter()
        out = self.run(command, timeout=7200)
        wall = time.perf_counter() - began
        match = re.search(r"copied ([\d,]+) builds .* in ([0-9.]+)s", out.stderr)
        if match is None or int(match.group(1).replace(",", "")) != self.builds:
            raise RuntimeError(f"unexpected migrate output: {out.stderr.strip()[-500:]}")
        size = postgres.database_size(cluster, name)
        self.say(f"postgresql: migrate copied {self.builds:,} builds in {wall:.1f}s; database {size / 2**20:,.0f} MiB")
        return {"builds": self.builds, "wall_s": round(wall, 3), "migrate_s": float(match.group(2)),
                "builds_per_s_wall": round(self.builds / wall), "pg_database_size": size,
                "sqlite_bytes": file_sizes(self.db)["db_plus_wal"]}

    def pg_import(self, cluster: postgres.PgCluster) -> dict[str, Any]:
        """`buildreport import` of the file without logs into an empty PostgreSQL database, net of the cost of
        importing an empty file (median of three), as on SQLite; and the database's size."""
        empty = RUN_DIR / "pg-empty.jsonl"
        empty.write_bytes(b"")
        times = []
        for _ in range(3):
            with postgres.fresh_database(cluster) as (_, url):
                began = time.perf_counter()
                self.run([*self.cli, "import", "--db", url, str(empty)], timeout=120, record=not times)
                times.append(time.perf_counter() - began)
        with postgres.fresh_database(cluster) as (name, url):
            self.say(f"postgresql: importing {self.nolog_file.name}")
            result = self.timed_import(url, self.nolog_file, sorted(times)[1])
            result["pg_database_size"] = postgres.database_size(cluster, name)
        self.say(f"postgresql: import {result['wall_s']:.1f}s wall; database {result['pg_database_size'] / 2**20:,.0f}"
                 " MiB")
        return result

    # --- all ----------------------------------------------------------------------------------

    def main(self) -> int:
        started = time.perf_counter()
        if RUN_DIR.exists():
            shutil.rmtree(RUN_DIR)
        RUN_DIR.mkdir(parents=True)
        try:
            self.machine()
            self.pick_client()
            self.data()
            self.imports()
            self.facts()
            self.token()
            eps = self.endpoints()
            self.bare()
            if "sqlite" in ENGINES[self.engine]:
                sqlite = Engine("sqlite", str(self.db), self.out, lambda: ingest.sqlite_copy(self.db, RUN_DIR))
                self.serve_one_worker(eps, sqlite)
                self.serve_two_workers(eps, sqlite)
                self.datasette(eps)
                self.ingestion(eps, sqlite)
                self.executable()
            if "postgresql" in ENGINES[self.engine]:
                self.postgresql(eps)
        except Exception as exc:
            traceback.print_exc()
            self.fail(f"{type(exc).__name__}: {exc}")
        self.phases["total"] = round(time.perf_counter() - started, 1)
        self.out["machine"]["loadavg_end"] = os.getloadavg() if "machine" in self.out else None
        self.out.update({"phases_s": self.phases, "commands": self.commands, "notes": self.notes,
                         "failures": self.failures})
        self.out["targets"] = report.targets(self.out)
        if report.postgres_measured(self.out):
            self.out["targets_postgresql"] = report.targets_postgresql(self.out)
        # A quick check (CI) writes elsewhere, so it never replaces the committed report of a full run.
        out_dir = Path(os.environ.get("BENCH_REPORT_DIR") or BENCH)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "report.json").write_text(json.dumps(self.out, indent=2, default=str) + "\n")
        (out_dir / "report.md").write_text(report.markdown(self.out))
        self.say(f"wrote {out_dir}/report.md and report.json in {self.phases['total']:.0f}s")
        pg_rows = {row["target"]: row for row in self.out.get("targets_postgresql", [])}
        for row in self.out["targets"]:
            beside = f"; PostgreSQL: {pg_rows[row['target']]['measured']}" if row["target"] in pg_rows else ""
            self.say(f"  {row['status']:<4} {row['target']}: {row['measured']}{beside}")
        if self.failures:
            self.say(f"{len(self.failures)} measurement(s) failed:")
            for failure in self.failures:
                print(f"  - {failure.splitlines()[0]}", file=sys.stderr)
            return 1
        return 0


if __name__ == "__main__":
    sys.exit(Bench().main())
