# ruff: noqa: RUF001  (the report uses the multiplication sign and en dash on purpose)
"""The targets, and bench/report.md from the figures that bench/report.json holds.

The targets are SQLite's; PostgreSQL's figures (under "postgresql" in report.json, in the same shape) are
shown beside them and reported, never judged.
"""

from __future__ import annotations

import statistics
from typing import Any

from load import WARM_UP_SECONDS

MILLION = 1_000_000
TARGETS = {
    "builds_rps_c32": 600.0,
    "builds_p50_ms_c1": 2.0,
    "build_rps_c32": 6000.0,
    "summary_365d_p50_ms": 20.0,
    "usage_month_p50_ms": 10.0,
    "usage_year_p50_ms": 20.0,
    "summary_tag_365d_p50_ms": 20.0,
    "summary_tag_30d_p50_ms": 5.0,
    "summary_client_p50_ms": 1.0,
    "import_1m_nolog_s": 30.0,
    # The database of 1M builds without logs before tag totals and day figures: 1.49 GiB; they may add 15%.
    "db_size_base_bytes": 1.49 * 2**30,
    "db_size_growth": 0.15,
    "ingest_builds_per_s": 10_000.0,
    "ingest_read_p99_ms": 20.0,
    # Every request goes once through the router and its middleware (token check, metrics, error handling);
    # no second path answers before routing, at the price of the router's own work on each request.
    "bare_build_rps": 0.6,
    "overhead_over_bare_p50": 1.5,
    "peak_anon_mib": 200.0,
    "datasette_list": 10.0,
    "datasette_lookup": 5.0,
    "http_over_floor": 1.5,
    "workers_gain": 1.10,
    "stats_day_30d_p50_ms": 50.0,
    "stats_day_365d_p50_ms": 500.0,
    "stats_tag_30d_p50_ms": 50.0,
    "breakdown_day_year_p50_ms": 20.0,
    "dashboard_30d_p50_ms": 150.0,
    "export_builds_per_s": 100_000.0,
}


def dig(data: Any, *keys: Any) -> Any:
    for key in keys:
        if not isinstance(data, dict) or data.get(key) is None:
            return None
        data = data[key]
    return data


def ms(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:,.0f}"


def rps(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def page_cache_line(passes: list[dict[str, Any]]) -> list[str]:
    """A line on the reads that put the database into the page cache before each phase (page_cache.py)."""
    if not passes:
        return []
    total = sum(p["bytes"] for p in passes)
    seconds = sum(p["seconds"] for p in passes)
    return [f"Before each measured phase the database's files were read once, so that the page cache held them as "
            f"a serving machine's holds its working set: {len(passes)} passes, {total / 2**30:,.1f} GiB in "
            f"{seconds:,.0f} s (slowest {max(passes, key=lambda p: p['seconds'])['before']}, "
            f"{max(p['seconds'] for p in passes)} s).", ""]


def mib(value: int | None) -> str:
    return "–" if value is None else f"{value / 2**20:,.1f} MiB"


def memory_phases(sampled: dict[str, Any]) -> str:
    """Which requests the sampled peak of RssAnon came with: the phase it was reached in, and the phase that
    raised it most over its own start (memory a process keeps after a request shows in every later phase)."""
    phases = sampled.get("phases") or {}
    if not phases:
        return ""
    mib = 1024
    peak_name, peak = max(phases.items(), key=lambda item: item[1]["peak_rss_anon_kib"])
    rise_name, rise = max(phases.items(), key=lambda item: item[1]["peak_rss_anon_kib"] - item[1]["start_rss_anon_kib"])
    grown = (rise["peak_rss_anon_kib"] - rise["start_rss_anon_kib"]) / mib
    return (f"peak reached during {peak_name} ({peak['peak_rss_anon_kib'] / mib:,.1f} MiB); the largest rise during"
            f" {rise_name} (+{grown:,.1f} MiB, from {rise['start_rss_anon_kib'] / mib:,.1f} MiB)")


def _row(target: str, threshold: str, value: float | None, shown: str, ok: bool | None, note: str = "",
         sqlite_only: bool = False, unresolved: bool = False) -> dict:
    """One target's row; `unresolved` when the figure's uncertainty spans the threshold, so the run cannot say."""
    status = ("n/a" if value is None or ok is None else "UNRESOLVED" if unresolved else "PASS" if ok else "MISS")
    return {"target": target, "threshold": threshold, "value": value, "measured": shown if value is not None
            else "not measured", "status": status, "note": note, "sqlite_only": sqlite_only}


def median_error_ms(figures: dict[str, Any] | None) -> float | None:
    """The standard error of a p50 from its quartiles and sample count: 1.2533 sd / sqrt(n), the sd taken as IQR / 1.349
    (as for a normal spread)."""
    if not figures:
        return None
    q1, q3 = figures.get("p25_ms"), figures.get("p75_ms")
    count = figures.get("requests", figures.get("iterations"))
    if q1 is None or q3 is None or not count:
        return None
    return 1.2533 * (q3 - q1) / 1.349 / count**0.5


def overhead_margin_ms(http: dict[str, Any] | None, floor: dict[str, Any] | None) -> float | None:
    """Half the 95% interval of an overhead (HTTP p50 - floor p50): each median's own error, and the spread of
    the floor's p50 from one process to the next, which the server, one process, carries whole and the floor,
    pooled over k processes, a k-th of."""
    one, two = median_error_ms(http), median_error_ms(floor)
    if one is None or two is None:
        return None
    p50s = (floor or {}).get("process_p50_ms") or []
    between = statistics.stdev(p50s) ** 2 * (1 + 1 / len(p50s)) if len(p50s) > 1 else 0.0
    return 1.96 * (one**2 + two**2 + between) ** 0.5


# What each engine's figures are kept under: SQLite's at the top of report.json, PostgreSQL's in "postgresql".
ENGINE_KEYS = ("http", "workers2", "processes2", "ingestion", "floor", "import", "plans")
SQLITE_ONLY_KEYS = ("datasette", "executable")


def engine_view(out: dict[str, Any], engine: str) -> dict[str, Any]:
    """The figures as `targets` and the tables read them, for one engine: PostgreSQL's in place of SQLite's,
    and nothing of what exists on SQLite alone."""
    if engine == "sqlite":
        return out
    pg = out.get("postgresql") or {}
    view = {k: v for k, v in out.items() if k not in ENGINE_KEYS + SQLITE_ONLY_KEYS}
    view.update({k: pg[k] for k in ENGINE_KEYS if k in pg})
    return view


def postgres_measured(out: dict[str, Any]) -> bool:
    return bool(dig(out, "postgresql", "http"))


def targets_postgresql(out: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of `targets` on PostgreSQL: reported beside SQLite's, not judged."""
    rows = targets(engine_view(out, "postgresql"))
    for row in rows:
        if row["sqlite_only"]:
            row.update(measured="SQLite only", status="n/a", note="")
        else:
            row["status"] = "reported" if row["value"] is not None else "n/a"
    return rows


def targets(out: dict[str, Any]) -> list[dict[str, Any]]:
    eps = dig(out, "http", "endpoints") or {}
    rows = []

    # The default window answers 500 builds from about 1M builds on; below that the 365-day window stands in
    # (the same query plan: the newest builds of the account by time, 501 rows read).
    key, few = "builds_default", ""
    items = dig(eps, "builds_default", "probe", "items")
    if items is not None and items < 500:
        stand_in = dig(eps, "builds_365d", "probe", "items")
        few = f"the default window answers only {items} builds at this data size"
        if stand_in is not None:
            key = "builds_365d"
            few += f"; figure from `/builds?create_time_from=<365 days ago>`, which answers {stand_in}"
    elif items is not None:
        few = f"{items} builds per answer"
    value = dig(eps, key, "c32", "rps")
    rows.append(_row("/builds 500 builds, 32 clients, one process", f"≥ {TARGETS['builds_rps_c32']:,.0f} req/s",
                     value, f"{rps(value)} req/s", value is not None and value >= TARGETS["builds_rps_c32"], few))
    for window, window_key, note in (("default window", key, few), ("365 days", "builds_365d", "")):
        value = dig(eps, window_key, "c1", "p50_ms")
        rows.append(_row(f"/builds 500 builds, {window}, 1 client, p50", f"≤ {TARGETS['builds_p50_ms_c1']:g} ms",
                         value, f"{ms(value)} ms", value is not None and value <= TARGETS["builds_p50_ms_c1"], note))
    value = dig(eps, "build_by_id", "c32", "rps")
    rows.append(_row("/builds/{id}, 32 clients, one process", f"≥ {TARGETS['build_rps_c32']:,.0f} req/s", value,
                     f"{rps(value)} req/s", value is not None and value >= TARGETS["build_rps_c32"]))
    for key, label, limit in (("summary_365d", "/builds/summary 365 days, no tag, p50", "summary_365d_p50_ms"),
                              ("usage_month", "/usage one month, p50", "usage_month_p50_ms"),
                              ("usage_year", "/usage one year, p50", "usage_year_p50_ms")):
        value = dig(eps, key, "c1", "p50_ms")
        rows.append(_row(label + " (1 client)", f"≤ {TARGETS[limit]:g} ms", value, f"{ms(value)} ms",
                         value is not None and value <= TARGETS[limit]))

    for key, label, limit in (
        ("summary_365d_tag", "/builds/summary 365 days, one tag pair, p50", "summary_tag_365d_p50_ms"),
        ("summary_30d_tag", "/builds/summary 30 days, one tag pair, p50", "summary_tag_30d_p50_ms"),
        ("summary_client", "/builds/summary, the client's three tag pairs, default window, p50",
         "summary_client_p50_ms"),
    ):
        value = dig(eps, key, "c1", "p50_ms")
        rows.append(_row(label + " (1 client)", f"≤ {TARGETS[limit]:g} ms", value, f"{ms(value)} ms",
                         value is not None and value <= TARGETS[limit], dig(eps, key, "label") or ""))
    for key, label in (("stats_day_30d", "/builds/stats group_by=day, 30 days, p50"),
                       ("stats_day_365d", "/builds/stats group_by=day, 365 days, p50"),
                       ("stats_tag_30d", "/builds/stats group_by=tag:project, 30 days, p50"),
                       ("breakdown_day_year", "/usage/breakdown group_by=day, one year, p50"),
                       ("dashboard_30d", "dashboard page, 30 days, p50")):
        limit = f"{key}_p50_ms"
        value = dig(eps, key, "c1", "p50_ms")
        rows.append(_row(label + " (1 client)", f"≤ {TARGETS[limit]:g} ms", value, f"{ms(value)} ms",
                         value is not None and value <= TARGETS[limit]))
    exported = dig(out, "http", "export") or {}
    value = exported.get("builds_per_s")
    note = ""
    if value is not None:
        grown = (exported["rss_after_kib"] - exported["rss_before_kib"]) / 1024
        note = (f"{exported['builds']:,} builds in {exported['seconds']:.2f} s; the server's own memory (RssAnon) "
                f"grew {grown:,.1f} MiB")
        if "disk_read_mib" in exported:
            note += (f"; server CPU {exported['server_cpu_s']:.2f} s, {exported['disk_read_mib']:,.0f} MiB read "
                     "from disk")
    rows.append(_row("export a year of one account as JSON Lines", f"≥ {TARGETS['export_builds_per_s']:,.0f} builds/s",
                     value, f"{rps(value)} builds/s", value is not None and value >= TARGETS["export_builds_per_s"],
                     note))

    builds = dig(out, "settings", "builds")
    entry = dig(out, "import", "without_logs") or {}
    wall, fixed, net = entry.get("wall_s"), entry.get("fixed_s"), entry.get("net_s")
    value, note = None, ""
    if wall is not None and builds == MILLION:
        value = wall
    elif wall is not None and builds < MILLION:
        # What does not grow with the builds (start-up, schema) once, the rest in proportion.
        value = fixed + net * MILLION / builds
        note = (f"scaled: {builds:,} builds took {wall:.2f} s wall, of which {fixed:.2f} s is the cost of "
                f"importing an empty file; 1M ≈ {fixed:.2f} + {net:.2f} × {MILLION / builds:,.1f}"
                + ("; rough below 100,000 builds" if builds < 100_000 else ""))
    elif wall is not None:
        value = wall * MILLION / builds
        note = f"scaled: {builds:,} builds took {wall:.2f} s wall"
    rows.append(_row("import 1M builds without logs, wall clock" + (" (scaled)" if note else ""),
                     f"≤ {TARGETS['import_1m_nolog_s']:g} s", value, f"{value:.1f} s" if value is not None else "",
                     value is not None and value <= TARGETS["import_1m_nolog_s"], note))

    rows += _size_row(out, builds)
    rows += _ingestion_rows(out)

    for key, label, limit in (("list", "newest 500 builds of an account", "datasette_list"),
                              ("lookup", "one build by id", "datasette_lookup")):
        ratio, shown, note = datasette_ratio(out, key, "c32", "rps")
        if dig(out, "datasette", "skipped"):
            note = "skipped: " + out["datasette"]["skipped"]
        rows.append(_row(f"buildreport / Datasette, {label}, req/s at 32 connections",
                         f"≥ {TARGETS[limit]:g}×", ratio, shown, ratio is not None and ratio >= TARGETS[limit], note,
                         sqlite_only=True))

    sampled = dig(out, "http", "memory", "sampled") or {}
    anon = sampled["peak_rss_anon_kib"] / 1024 if sampled.get("samples") else None
    mapped = f"; mapped file pages peaked at {sampled.get('peak_rss_file_kib', 0) / 1024:,.1f} MiB" if anon else ""
    phases = memory_phases(sampled)
    rows.append(_row("peak RssAnon of one worker over the HTTP run (sampled every 0.2 s)",
                     f"≤ {TARGETS['peak_anon_mib']:g} MiB", anon, f"{anon:,.1f} MiB" if anon is not None else "",
                     anon is not None and anon <= TARGETS["peak_anon_mib"], f"{sampled.get('samples', 0)} samples"
                     + mapped + (f"; {phases}" if phases else "")))
    bare_rps, build_rps = dig(out, "bare", "c32", "rps"), dig(eps, "build_by_id", "c32", "rps")
    ratio = build_rps / bare_rps if bare_rps and build_rps is not None else None
    text = f"{ratio:.2f}× ({rps(build_rps)} / {rps(bare_rps)} req/s)" if ratio is not None else ""
    paired = dig(eps, "build_by_id", "paired_bare")
    if paired:
        # Runs seconds apart in turns; the separate runs above are minutes apart.
        turns = ", ".join(f"{r['rps']:,.0f} / {r['bare_rps']:,.0f}" for r in paired["rounds"])
        text = f"{paired['ratio']:.2f}×, median of {len(paired['rounds'])} runs in turns ({turns} req/s); " + (
            f"apart: {text}" if text else "")
        ratio = paired["ratio"]
    rows.append(_row("/builds/{id} req/s over a bare Litestar app's (constant 800-byte JSON), 32 connections",
                     f"≥ {TARGETS['bare_build_rps']:g}×", ratio, text,
                     ratio is not None and ratio >= TARGETS["bare_build_rps"]))
    floors = dig(out, "floor", "endpoints") or {}
    bare_p50 = dig(out, "bare", "c1", "p50_ms")
    page_bytes, page_p50 = dig(out, "bare", "page", "body_bytes"), dig(out, "bare", "page", "c1", "p50_ms")
    limit = TARGETS["overhead_over_bare_p50"]
    for key, entry in eps.items():
        http_p50, floor_p50 = dig(entry, "c1", "p50_ms"), dig(floors, key, "p50_ms")
        over = http_p50 - floor_p50 if http_p50 is not None and floor_p50 is not None else None
        ratio = over / bare_p50 if over is not None and bare_p50 else None
        margin = overhead_margin_ms(entry.get("c1"), floors.get(key))
        spread = margin / bare_p50 if margin is not None and bare_p50 else None
        notes = []
        if entry.get("kind") == "list" and page_p50 is not None and bare_p50:
            notes.append(f"the bare app sending a constant {page_bytes:,} B body, a page's size: p50 "
                         f"{ms(page_p50)} ms, {page_p50 / bare_p50:.2f}× its 800-byte p50")
        unresolved = ratio is not None and spread is not None and ratio - spread <= limit < ratio + spread
        if unresolved:
            notes.append(f"95% interval {ratio - spread:.2f}× to {ratio + spread:.2f}× spans the threshold: one "
                         "run cannot tell this overhead from it")
        shown = ""
        if ratio is not None:
            shown = f"{ratio:.2f}×" + (f" ± {spread:.2f}×" if spread is not None else "") + (
                f" ({ms(over)}" + (f" ± {ms(margin)}" if margin is not None else "") + f" / {ms(bare_p50)} ms)")
        rows.append(_row(f"HTTP overhead (p50 − floor) / bare app p50: {entry['label']}", f"≤ {limit:g}×", ratio,
                         shown, ratio is not None and ratio <= limit, "; ".join(notes), unresolved=unresolved))
    for key, entry in eps.items():
        http_p50 = dig(entry, "c1", "p50_ms")
        floor_p50 = dig(floors, key, "p50_ms")
        ratio = http_p50 / floor_p50 if http_p50 is not None and floor_p50 else None
        rows.append(_row(f"HTTP p50 / floor: {entry['label']}", f"≤ {TARGETS['http_over_floor']:g}×", ratio,
                         f"{ratio:.2f}× ({ms(http_p50)} / {ms(floor_p50)} ms)" if ratio is not None else "",
                         ratio is not None and ratio <= TARGETS["http_over_floor"]))

    for key, label in (("builds_default", "/builds"), ("build_by_id", "/builds/{id}")):
        one = dig(eps, key, "c32", "rps")
        two = dig(out, "workers2", "endpoints", key, "rps")
        ratio = two / one if one and two is not None else None
        rows.append(_row(f"throughput grows with workers: {label}, 32 clients",
                         f"2 workers ≥ {TARGETS['workers_gain']:.2f}× 1 worker", ratio,
                         f"{ratio:.2f}× ({rps(one)} → {rps(two)} req/s)" if ratio is not None else "",
                         ratio is not None and ratio >= TARGETS["workers_gain"]))
    return rows


# What buildreport answers for each Datasette question.
DATASETTE_PAIRS = {"list": "builds_365d", "lookup": "build_by_id", "count": "summary_30d_status"}


def _size_row(out: dict[str, Any], builds: int | None) -> list[dict[str, Any]]:
    """The database of the import without logs against the size before the structures tag reports need."""
    size = dig(out, "import", "without_logs", "sizes", "db_plus_wal")
    if size is None or not builds:
        return []
    scaled = size * MILLION / builds
    limit = TARGETS["db_size_base_bytes"] * (1 + TARGETS["db_size_growth"])
    growth = scaled / TARGETS["db_size_base_bytes"] - 1
    note = f"{growth:+.1%} over 1.49 GiB" + ("" if builds == MILLION else f"; scaled from {builds:,} builds")
    return [_row("database size, 1M builds without logs", f"≤ {mib(int(limit))} (1.49 GiB + 15%)", scaled,
                 mib(int(scaled)), scaled <= limit, note, sqlite_only=True)]


def _ingestion_rows(out: dict[str, Any]) -> list[dict[str, Any]]:
    """POST /builds with four senders while reads are served: the best server setting measured, judged on
    both its builds/s and the p99 of the reads during that same run."""
    best: tuple[float, str, dict[str, Any]] | None = None
    for setting in (out.get("ingestion") or {}).values():
        run = dig(setting, "runs", "4")
        if run is None:
            continue
        processes, workers = setting.get("processes", 1), setting.get("workers", 1)
        name = f"{processes} × {workers} worker{'s' if workers > 1 else ''}"
        if best is None or run["builds_per_s"] > best[0]:
            best = (run["builds_per_s"], name, run)
    if best is None:
        return []
    value, name, run = best
    p99 = dig(run, "reads", "p99_ms")
    return [
        _row("POST /builds, batches of 500, 4 senders, while reads are served",
             f"≥ {TARGETS['ingest_builds_per_s']:,.0f} builds/s", value, f"{rps(value)} builds/s",
             value >= TARGETS["ingest_builds_per_s"], f"best setting: {name}; see Ingestion"),
        _row("/builds/{id} p99 during that ingestion", f"≤ {TARGETS['ingest_read_p99_ms']:g} ms", p99,
             f"{ms(p99)} ms", p99 is not None and p99 <= TARGETS["ingest_read_p99_ms"], f"{name}, 4 senders"),
    ]


def datasette_ratio(out: dict[str, Any], key: str, load: str, figure: str) -> tuple[float | None, str, str]:
    """buildreport over Datasette (req/s), or Datasette over buildreport (latency): above 1 buildreport leads."""
    ours = dig(out, "http", "endpoints", DATASETTE_PAIRS[key], load, figure)
    theirs = dig(out, "datasette", key, load, figure)
    if not ours or not theirs:
        return None, "", ""
    ratio = ours / theirs if figure == "rps" else theirs / ours
    shown = f"{ratio:.2f}× ({rps(ours)} vs {rps(theirs)} req/s)" if figure == "rps" else (
        f"{ratio:.2f}× ({ms(ours)} vs {ms(theirs)} ms)")
    return ratio, shown, f"buildreport: `{dig(out, 'http', 'endpoints', DATASETTE_PAIRS[key], 'label')}`"


def _datasette_section(out: dict[str, Any]) -> list[str]:
    d = out.get("datasette")
    if not d:
        return []
    lines = ["## Side by side: Datasette", ""]
    if d.get("skipped"):
        return [*lines, f"Skipped: {d['skipped']}", ""]
    lines += [f"Datasette {d['version']} (from PyPI, in `bench/data/datasette-venv`), `datasette serve -i` "
              f"(immutable), one process, on a copy of the builds table with the same columns "
              f"({mib(d.get('db_bytes'))}, copied in {d.get('copy_s')} s or cached) and these indexes: "
              + "; ".join(f"`{i}`" for i in d.get("indexes", [])) + ". Both servers were measured in this run "
              "with the same client; ratios above 1 mean buildreport is faster.", ""]
    rows = []
    labels = {"list": "newest 500 builds of an account", "lookup": "one build by id",
              "count": "builds with status built, 30 days (count / summary)"}
    for key, label in labels.items():
        entry = d.get(key) or {}
        ours = DATASETTE_PAIRS[key]
        p50 = datasette_ratio(out, key, "c1", "p50_ms")[1]
        c32 = datasette_ratio(out, key, "c32", "rps")[1]
        rows.append([label, f"`{(entry.get('paths') or [''])[0]}`", ms(dig(entry, "c1", "p50_ms")),
                     rps(dig(entry, "c32", "rps")), ms(dig(out, "http", "endpoints", ours, "c1", "p50_ms")),
                     rps(dig(out, "http", "endpoints", ours, "c32", "rps")), p50, c32])
    lines += _table(["question", "Datasette path", "Datasette p50 ms (1 conn)", "Datasette req/s (32 conn)",
                     "buildreport p50 ms", "buildreport req/s", "p50 ratio", "req/s ratio"], rows)
    probe = d.get("probe") or {}
    lines += [f"Datasette answered {probe.get('list_items')} builds to the listing and counted "
              f"{probe.get('count')} builds; buildreport's counterparts: `/builds` 365 days (500 builds), "
              "`/builds/{id}`, `/builds/summary?status=built` over 30 days (a whole summary, not only a count). "
              "Datasette's count is measured with one connection only: each takes it seconds.", ""]
    return lines


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return [*lines, ""]


def markdown(out: dict[str, Any], growth: list[str] | None = None) -> str:
    """The report of one run; `growth` (the sizes measured so far, and the 10M targets) follows its targets."""
    s = out.get("settings", {})
    m = out.get("machine", {})
    lines = [
        "# buildreport benchmark",
        "",
        "<!-- GENERATED FILE: written by `make bench` (bench/run.py). Do not edit; run `make bench` again. -->",
        f"_Generated by `make bench` (bench/run.py) on {out.get('generated_at')}; do not edit by hand._",
        "",
        f"`BENCH_BUILDS={s.get('builds')}` builds over {s.get('days')} days for `{s.get('accounts')}` (seed "
        f"{s.get('seed')}, logs on {s.get('log_share', 0):.0%}, data ending {dig(out, 'data', 'end')}), "
        f"`BENCH_SECONDS={s.get('seconds')}` per load run, load client: **{out.get('client')}**, "
        f"account measured: `{s.get('account_measured')}`.",
        "",
    ]
    if out.get("failures"):
        lines += ["## FAILED measurements", ""] + [f"- {f.splitlines()[0]}" for f in out["failures"]] + [""]

    lines += ["## Targets", ""]
    if postgres_measured(out):
        pg_rows = {r["target"]: r for r in out.get("targets_postgresql") or []}
        lines += ["The targets are SQLite's; PostgreSQL's figures of the same rows stand beside them, reported "
                  "and not judged (see [PostgreSQL](#postgresql)).", ""]
        lines += _table(["target", "threshold", "SQLite", "", "PostgreSQL", "note (SQLite)"],
                        [[r["target"], r["threshold"], r["measured"], f"**{r['status']}**",
                          dig(pg_rows, r["target"], "measured") or "–", r["note"]]
                         for r in out.get("targets", [])])
    else:
        lines += _table(["target", "threshold", "measured", "", "note"],
                        [[r["target"], r["threshold"], r["measured"], f"**{r['status']}**", r["note"]]
                         for r in out.get("targets", [])])
        if dig(out, "postgresql", "skipped"):
            lines += [f"PostgreSQL was not measured: {out['postgresql']['skipped']}.", ""]
    if out.get("notes"):
        lines += ["Notes:", ""] + [f"- {n}" for n in out["notes"]] + [""]
    lines += growth or []

    lines += ["## Machine", ""]
    pk = m.get("packages", {})
    lines += _table(["", ""], [
        ["CPU", f"{m.get('cpu_model')}; {m.get('cpus')} cores ({m.get('cpus_usable')} usable)"],
        ["memory", f"{m.get('memory_gib')} GiB"],
        ["kernel", m.get("kernel")],
        ["Python / SQLite", f"{m.get('python')} / {m.get('sqlite')}"],
        ["wrk", m.get("wrk") or "not installed"],
        ["packages", ", ".join(f"{k} {v}" for k, v in pk.items() if v)],
        ["code", f"git {m.get('git')}"],
        ["load average (1, 5, 15 min)", f"start {_load(m.get('loadavg_start'))}; end {_load(m.get('loadavg_end'))}"],
        ["idle memory", f"paged out by the host ({m['reclaimer']})" if m.get("reclaimer") else "kept"],
    ])
    lines += page_cache_line(out.get("page_cache") or [])

    start, end, cpus = m.get("loadavg_start"), m.get("loadavg_end"), m.get("cpus") or 1
    if start and end and max(start[0], end[0]) > 0.5 * cpus:
        lines += [f"**The machine was busy**: a load average of {start[0]:.2f} at the start and {end[0]:.2f} at "
                  f"the end on {cpus} cores means other work shared the CPU; expect figures to vary between runs.",
                  ""]

    lines += ["## Data and import", ""]
    files = dig(out, "data", "files") or {}
    per_account = dig(out, "data", "builds_per_account") or {}
    tags = dig(out, "data", "project_tags") or {}
    lines += ["Builds per account: " + ", ".join(f"{k} {v:,}" for k, v in per_account.items())
              + f"; `project` tags of `{s.get('account_measured')}`: "
              + ", ".join(f"{k} {v:,}" for k, v in tags.items()) + ". Files: "
              + "; ".join(f"`{name}` {mib(f.get('bytes'))}" + (" (cached)" if f.get("cached")
                          else f" (generated in {f.get('seconds')} s)") for name, f in files.items()) + ".", ""]
    kept = dig(out, "data", "tag_totals") or {}
    if "rows" in kept:
        size = f"{mib(kept['bytes'])}" if kept.get("bytes") is not None else kept.get("bytes_note", "")
        lines += [f"Kept per tag pair: {kept['promoted_pairs']:,} of {kept['pairs']:,} distinct pairs "
                  f"({kept['tag_rows']:,} tag rows) have hourly and daily totals, "
                  + ", ".join(f"{k} {v:,}" for k, v in (kept.get("promoted_by_key") or {}).items())
                  + (f"; {kept['hourly_rows']:,} rows of tag_hourly_totals" if "hourly_rows" in kept else "")
                  + f"; {kept['rows']:,} rows of tag_daily_totals"
                  + (f"; {kept['figure_rows']:,} rows of tag_day_figures" if "figure_rows" in kept else "")
                  + f"; {size} in all. A pair gets totals once 500 "
                  "builds of an account carry it, so at most one pair per 500 tag rows does, with at most one row "
                  "per (hour or day, status) and never more rows than builds.", ""]
    client = dig(out, "data", "client_tags")
    if client:
        lines += ["The client's summary asks for `" + ",".join(client) + "`.", ""]
    rows = []
    for key, label in (("with_logs", f"with logs ({s.get('log_share', 0):.0%})"), ("without_logs", "without logs")):
        entry = dig(out, "import", key)
        if entry:
            sizes = entry["sizes"]
            rows.append([label, f"{entry['builds']:,}", f"{entry['wall_s']:.2f}", f"{entry['import_s']:.1f}",
                         f"{entry['fixed_s']:.2f}", rps(entry["builds_per_s_wall"]), rps(entry["builds_per_s_net"]),
                         mib(sizes["db"]), mib(sizes["db_wal"]), mib(sizes["db_plus_wal"]),
                         f"{entry['measured_at']}" + (" (cached)" if entry.get("cached") else "")])
    lines += _table(["import", "builds", "wall s", "reported s", "empty-file s", "builds/s (wall)",
                     "builds/s (net)", "db", "wal", "db + wal", "measured"], rows)
    lines += ["`wall s`: the whole `buildreport import` process; `reported s`: the time it prints (rounded to "
              "0.1 s); `empty-file s`: the wall time of importing an empty file into a new database (start-up, "
              "schema), and `net` is wall minus that. The database of the import with logs is the one served "
              "below; the one without logs is deleted after measuring.", ""]

    lines += _plans_lines(out)
    lines += _datasette_section(out)

    lines += ["## HTTP, one worker (`--workers 1 --rate-limit 0 --link-rate-limit 0 --no-access-log`)", ""]
    lines += _http_table(out)
    eps = dig(out, "http", "endpoints") or {}
    pg = engine_view(out, "postgresql") if postgres_measured(out) else {}

    lines += ["## Workers: throughput at 32 connections", ""]
    rows = []
    for key in ("builds_default", "build_by_id"):
        one = dig(eps, key, "c32", "rps")
        two = dig(out, "workers2", "endpoints", key, "rps")
        label = dig(eps, key, "label") or dig(pg, "http", "endpoints", key, "label") or key
        row = [label, rps(one), rps(two), f"{two / one:.2f}×" if one and two is not None else "–",
               ms(dig(out, "workers2", "endpoints", key, "p50_ms")),
               ms(dig(out, "workers2", "endpoints", key, "p99_ms"))]
        if pg:
            pg_one = dig(pg, "http", "endpoints", key, "c32", "rps")
            pg_two, pg_procs = (dig(pg, part, "endpoints", key, "rps") for part in ("workers2", "processes2"))
            row += [rps(pg_one), rps(pg_two), rps(pg_procs),
                    f"{pg_procs / pg_one:.2f}×" if pg_one and pg_procs is not None else "–",
                    ms(dig(pg, "processes2", "endpoints", key, "p50_ms")),
                    ms(dig(pg, "processes2", "endpoints", key, "p99_ms"))]
        rows.append(row)
    header = ["endpoint", "1 worker req/s", "2 workers req/s", "gain", "2 workers p50 ms", "2 workers p99 ms"]
    if pg:
        header = [header[0]] + [f"SQLite {h}" for h in header[1:]] + [
            "PostgreSQL 1 worker req/s", "PostgreSQL 2 workers req/s", "PostgreSQL 2 processes req/s",
            "2 processes gain", "2 processes p50 ms", "2 processes p99 ms"]
    lines += _table(header, rows)
    lines += [f"The load client runs on the same {m.get('cpus')} cores as the server."
              + (" `2 processes`: two `buildreport serve --workers 1` on ports of their own and the one PostgreSQL "
                 "database; wrk's two threads load one server each (16 connections each)." if pg else ""), ""]

    lines += _ingestion(out, pg)
    if pg:
        lines += _postgresql_section(out, pg)

    lines += ["## Memory (VmHWM: peak resident set, after the load runs)", ""]
    rows = []
    servers = [(out, "http", "1 worker"), (out, "workers2", "2 workers")]
    if pg:
        servers += [(pg, "http", "PostgreSQL, 1 worker"), (pg, "workers2", "PostgreSQL, 2 workers")]
    for view, key, label in servers:
        memory = dig(view, key, "memory") or {}
        for p in memory.get("processes", []):
            rows.append([label, p.get("role", ""), p["pid"], mib(p["vm_hwm_kib"] * 1024),
                         mib(p["vm_rss_kib"] * 1024)])
        if memory.get("processes"):
            rows.append([f"**{label}, all processes**", "", "", f"**{mib(memory['vm_hwm_total_kib'] * 1024)}**",
                         ""])
    lines += _table(["server", "process", "pid", "VmHWM", "VmRSS"], rows)
    lines += ["With `--workers 1` uvicorn serves in the `serve` process itself; with 2 it starts a worker "
              "process each (multiprocessing spawn) and a resource tracker."
              + (" On PostgreSQL the database server's own processes are not counted." if pg else ""), ""]

    lines += ["## In-process floor" + (" (SQLite)" if pg else ""), ""]
    fl = out.get("floor") or {}
    if not fl:
        lines += ["Not measured.", ""]
    lines += [f"Measured just before the endpoint's HTTP runs, with the server idle, in {fl.get('processes', 1)} "
              "fresh processes one after another (`bench/floor.py`), each set up as a serving worker is (its "
              f"collector and allocator, `app.tune_process`). Event loop: {fl.get('loop')}; per process "
              f"{fl.get('warmup')} warm-up runs, then at most {fl.get('iterations_max')} runs or "
              f"{fl.get('budget_s') or 0:.3g} s; p50 of all their runs together. For the JSON endpoints: "
              "parsing the query pairs (`filters.parse_*`), the `Reader` call and encoding the body bytes, as "
              "the handler does, without routing, authentication, ETag, headers, uvicorn or the socket. For the "
              "build page: the page handler's function called with a stand-in request (link check, two reads, "
              "the log rendered in a thread, the template).",
              "",
              "Each HTTP overhead row (HTTP p50 − floor p50) carries a 95% interval: the standard error of each "
              "p50 from its quartiles and count, and the spread of the floor's p50 from one process to the next. "
              "A row whose interval spans the threshold is **UNRESOLVED**: one run cannot tell its overhead "
              "from the threshold.", ""]
    rows = [[dig(eps, k, "label") or k, f.get("iterations", "–"), ms(f.get("p50_ms")),
             " / ".join(ms(p) for p in f.get("process_p50_ms", [])), ms(f.get("p90_ms")), ms(f.get("min_ms")),
             f"{f.get('body_bytes', 0):,}" if "body_bytes" in f else f.get("error", "")]
            for k, f in (fl.get("endpoints") or {}).items()]
    lines += _table(["endpoint", "runs", "p50 ms", "p50 of each process", "p90 ms", "min ms", "body bytes"], rows)

    lines += ["## Executable (packaging/measure.py)", ""]
    exe = out.get("executable") or {}
    if exe.get("status") == "measured":
        startup = exe.get("startup", {})
        lines += _table(["", ""], [
            ["file", f"`dist/buildreport` ({exe.get('version')})"],
            ["size", f"{exe.get('size_mb')} MB ({exe.get('size_mib')} MiB)"],
            *[[f"start-up to /healthz, {k}", f"median {v.get('median_s')} s (min {v.get('min_s')}, max "
               f"{v.get('max_s')}, {exe.get('runs')} runs); stop {v.get('stop_median_s')} s"]
              for k, v in startup.items()],
            ["`--version`", f"median {exe.get('version_median_s')} s"],
            ["measure.py targets", ", ".join(f"{k}: {v}" for k, v in (exe.get("targets") or {}).items())],
        ])
    else:
        lines += [f"{exe.get('status', 'not measured')}.", ""]

    lines += ["## Time taken", ""]
    lines += _table(["phase", "seconds"], [[k, f"{v:.1f}"] for k, v in (out.get("phases_s") or {}).items()])

    lines += ["## Commands", "", "```sh"] + (out.get("commands") or []) + ["```", ""]
    loads = []
    for view in (out, pg) if pg else (out,):
        for e in (dig(view, "http", "endpoints") or {}).values():
            for c in ("c1", "c32"):
                if dig(e, c, "command"):
                    loads.append(e[c]["command"])
        for part in ("workers2", "processes2"):
            for e in (dig(view, part, "endpoints") or {}).values():
                if e and e.get("command"):
                    loads.append(e["command"])
    if loads:
        lines += ["<details><summary>load runs</summary>", "", "```sh", *loads, "```", "", "</details>", ""]
        lines += ["Each `.lua` script sets the `Authorization` header, rotates the paths where there are several "
                  "and prints wrk's summary as JSON; they are written to bench/data/run/.", ""]
    return "\n".join(lines)


def _plans_lines(out: dict[str, Any]) -> list[str]:
    """The EXPLAIN checks of tests/test_query_plans.py, run on each engine's measured database (plans.py)."""
    said = []
    for engine, windows in (("SQLite", out.get("plans")), ("PostgreSQL", dig(out, "postgresql", "plans"))):
        for window, checked in (windows or {}).items():
            if "error" in checked:
                said.append(f"{engine}, {window}: not checked ({checked['error'].splitlines()[-1]})")
                continue
            failed = ", ".join(f"`{f['check'].partition('[')[2].rstrip(']') or f['check']}`"
                               for f in checked["failed"])
            said.append(f"{engine}, windows of {window}: {checked['passed']} of {checked['checked']} hold"
                        + (f" (a table read whole: {failed})" if failed else ""))
    if not said:
        return []
    return [f"Query plans on the measured database at {dig(out, 'settings', 'builds'):,} builds (`bench/plans.py`: "
            "the checks of `tests/test_query_plans.py`, PostgreSQL planning from the data's own statistics with "
            "table scans not priced out, the windows once all of history and once the last 30 days). A window that "
            "holds most of the table is read whole where PostgreSQL's planner finds that cheaper than an index:",
            "", *[f"- {line}" for line in said], ""]


def _http_table(out: dict[str, Any]) -> list[str]:
    """Every endpoint at 1 and 32 connections, with its in-process floor, of one engine's figures."""
    lines: list[str] = []
    if not dig(out, "http", "endpoints"):
        return ["Not measured (`BENCH_ENGINE` left this engine out, or its server did not start).", ""]
    eps = dig(out, "http", "endpoints") or {}
    floors = dig(out, "floor", "endpoints") or {}
    rows = []
    for key, e in eps.items():
        probe = e.get("probe") or {}
        answer = f"{probe.get('body_bytes', 0):,} B" if probe else "–"
        if "items" in probe:
            answer += f", {probe['items']} builds"
        if "build_count" in probe:
            answer += f", {probe['build_count']:,} builds"
        if "billable_build_count" in probe:
            answer += f", {probe['billable_build_count']:,} builds"
        c1, c32, fl = e.get("c1") or {}, e.get("c32") or {}, floors.get(key) or {}
        ratio = c1.get("p50_ms") / fl["p50_ms"] if c1.get("p50_ms") and fl.get("p50_ms") else None
        rows.append([e["label"], answer, rps(c1.get("rps")), ms(c1.get("p50_ms")), ms(c1.get("p99_ms")),
                     rps(c32.get("rps")), ms(c32.get("p50_ms")), ms(c32.get("p99_ms")), ms(fl.get("p50_ms")),
                     f"{ratio:.2f}×" if ratio else "–"])
    lines += _table(["endpoint", "answer", "1 conn req/s", "p50 ms", "p99 ms", "32 conn req/s", "p50 ms",
                     "p99 ms", "floor p50 ms", "HTTP/floor"], rows)
    lines += ["1 connection: `wrk -t1 -c1`; 32 connections: `wrk -t2 -c32`; latencies as wrk measures them "
              f"(request written to response read). Each endpoint is first asked for {WARM_UP_SECONDS} s at one "
              "connection, not recorded, as the floor's warm-up runs are. `/builds/{id}` and `/builds/{id}/url` "
              "rotate over "
              f"{dig(out, 'data', 'rotated_ids')} real ids of the account, the build page over "
              f"{dig(out, 'data', 'page_links')} signed links (ttl 3600 s) of builds "
              + ("with a log" if dig(out, 'data', 'page_builds_with_logs') else "(none has a log)")
              + ". Every answer was checked: a non-2xx/3xx or socket error fails the run.", ""]
    server = dig(out, "http", "server") or {}
    code = server.get("exit_code")
    lines += [f"Server start to first /healthz 200: {server.get('startup_s')} s; stop after SIGTERM: "
              f"{server.get('stop_s')} s (exit code {code}"
              + (", the SIGTERM uvicorn re-raises after a clean shutdown" if code == -15 else "") + ").", ""]

    return lines


def _ingestion(out: dict[str, Any], pg: dict[str, Any]) -> list[str]:
    """Builds/s through POST /builds and the latency of reads served meanwhile, on each engine measured."""
    engines = [(name, view.get("ingestion") or {}) for name, view in (("SQLite", out), ("PostgreSQL", pg)) if view]
    engines = [(name, runs) for name, runs in engines if runs]
    lines = ["## Ingestion over HTTP (`POST /builds`)", ""]
    if not engines:
        return [*lines, "Not measured.", ""]
    rows = []
    for engine, by_servers in engines:
        for ing in by_servers.values():
            processes, workers = ing.get("processes", 1), ing.get("workers", 1)
            servers = f"{processes} × {workers} worker{'s' if workers > 1 else ''}"
            alone = ing.get("reads_alone") or {}
            rows.append([engine, servers, "reads alone", "–", "–", "–", "–", ms(alone.get("p50_ms")),
                         ms(alone.get("p99_ms"))])
            for run in (ing.get("runs") or {}).values():
                reads = run.get("reads") or {}
                rows.append([engine, servers, f"{run['senders']} sender{'s' if run['senders'] > 1 else ''}",
                             f"{run['builds']:,}", rps(run.get("builds_per_s")), ms(run.get("batch_p50_ms")),
                             ms(run.get("batch_p99_ms")), ms(reads.get("p50_ms")), ms(reads.get("p99_ms"))])
    lines += _table(["engine", "servers × workers", "while", "builds written", "builds/s", "batch p50 ms",
                     "batch p99 ms", "/builds/{id} p50 ms", "/builds/{id} p99 ms"], rows)
    first = next(iter(engines[0][1].values()))
    lines += [f"Batches of {first.get('batch')} new builds (two outputs, three tags, no log), gzip JSON Lines as "
              "`buildreport push` sends them, each sender one keep-alive connection in a thread of the benchmark, its "
              "batches made before the run starts (the benchmark shares the server's cores); "
              f"{first.get('seconds')} s a run, into a fresh copy of the database for each setting (on disk before "
              "the server starts). Each run's builds were created within an hour of their own, the runs one after "
              "the other, and the senders' builds of a run interleave a millisecond apart, as concurrent runners' "
              "do. Each server's workers write through its one writer process. One "
              "client reads `/builds/{id}` (rotating ids) throughout; `reads alone` is the same reads with no writes. "
              "With two servers (separate `buildreport serve` processes on one PostgreSQL database) the senders take "
              "turns over them and the reads go to the first.", ""]
    return lines


def _postgresql_section(out: dict[str, Any], pg: dict[str, Any]) -> list[str]:
    """The cluster, the copy, the sizes, and every endpoint of both engines side by side."""
    info = dig(out, "postgresql", "server") or {}
    lines = ["## PostgreSQL", ""]
    lines += [f"PostgreSQL {info.get('version')}: a throwaway cluster started by the bench (tests/pgcluster.py: "
              "`initdb` in a temporary folder, 127.0.0.1, a free port, stopped by its pid afterwards) with "
              + ", ".join(f"`{k}={v}`" for k, v in (info.get("settings") or {}).items())
              + " (durable, and like SQLite's `synchronous=NORMAL`: commits reach the WAL at once and the disk "
              "within moments); everything else is PostgreSQL's default. Its data is a copy of the SQLite database "
              "above, made with `buildreport migrate`. The SQLite targets do not apply here: these figures are "
              "reported, not judged.", ""]
    migrate = dig(out, "postgresql", "migrate") or {}
    imported = dig(pg, "import", "without_logs") or {}
    rows = []
    if migrate:
        rows.append(["`buildreport migrate` of the database with logs (SQLite → PostgreSQL, checked)",
                     f"{migrate['builds']:,}", f"{migrate['wall_s']:.2f}", rps(migrate.get("builds_per_s_wall")),
                     f"{mib(migrate.get('pg_database_size'))} (SQLite: {mib(migrate.get('sqlite_bytes'))})"])
    if imported:
        sqlite_size = dig(out, "import", "without_logs", "sizes", "db_plus_wal")
        rows.append(["`buildreport import` of the file without logs into an empty database", f"{imported['builds']:,}",
                     f"{imported['wall_s']:.2f} (empty file: {imported['fixed_s']:.2f})",
                     rps(imported.get("builds_per_s_wall")),
                     f"{mib(imported.get('pg_database_size'))} (SQLite: {mib(sqlite_size)})"])
    lines += _table(["copy", "builds", "wall s", "builds/s", "pg_database_size"], rows)
    after = dig(out, "postgresql", "size_after_bytes")
    if after:
        lines += [f"`pg_database_size` is every table, index and TOAST file of the database; after the HTTP runs "
                  f"(which add no builds: ingestion writes into copies) it was {mib(after)}.", ""]

    lines += ["### Every endpoint on both engines", ""]
    eps, pg_eps = dig(out, "http", "endpoints") or {}, dig(pg, "http", "endpoints") or {}
    floors, pg_floors = dig(out, "floor", "endpoints") or {}, dig(pg, "floor", "endpoints") or {}
    rows = []
    for key, e in pg_eps.items():
        figures = []
        for c, figure in (("c1", "p50_ms"), ("c32", "rps")):
            ours, theirs = dig(eps, key, c, figure), dig(e, c, figure)
            shown = ms if figure == "p50_ms" else rps
            figures += [shown(ours), shown(theirs)]
        figures += [ms(dig(floors, key, "p50_ms")), ms(dig(pg_floors, key, "p50_ms"))]
        rows.append([e["label"], *figures])
    lines += _table(["endpoint", "SQLite p50 ms (1 conn)", "PostgreSQL p50 ms (1 conn)", "SQLite req/s (32 conn)",
                     "PostgreSQL req/s (32 conn)", "SQLite floor p50 ms", "PostgreSQL floor p50 ms"], rows)
    lines += ["### HTTP on PostgreSQL, one worker", ""]
    lines += _http_table(pg)
    return lines


def _load(values: Any) -> str:
    return " ".join(f"{v:.2f}" for v in values) if values else "–"
