# ruff: noqa: RUF001  (the report uses the multiplication sign and en dash on purpose)
"""Each size's figures kept in results/, the growth table, and the ten-million-build targets.

A run keeps one file per engine and size (results/<engine>-<builds>.json), so runs at different sizes, made at
different times, add up to one growth table and chart; a later run of the same engine and size replaces its file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from report import ENGINE_KEYS, dig, engine_view, memory_phases, ms, rps

TEN_MILLION = 10_000_000
ENGINE_NAMES = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}
# What a size's result keeps besides its engine's own figures (ENGINE_KEYS).
SHARED_KEYS = ("generated_at", "settings", "machine", "data", "client", "failures")
Results = dict[tuple[str, int], dict[str, Any]]


def engine_result(out: dict[str, Any], engine: str) -> dict[str, Any] | None:
    """One engine's figures of a run, as kept in results/; None when its requests were not measured."""
    view = engine_view(out, engine)
    if not dig(view, "http", "endpoints"):
        return None
    kept = {k: view[k] for k in SHARED_KEYS + ENGINE_KEYS if k in view}
    if engine == "postgresql" and dig(out, "postgresql", "migrate"):
        kept["migrate"] = out["postgresql"]["migrate"]
    return {"engine": engine, "builds": dig(out, "settings", "builds"), **kept}


def save_results(out: dict[str, Any], folder: Path) -> list[Path]:
    """Write each measured engine's figures of this run to folder/<engine>-<builds>.json."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for engine in ENGINE_NAMES:
        result = engine_result(out, engine)
        if result is None:
            continue
        path = folder / f"{engine}-{result['builds']}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result, indent=1, default=str) + "\n")
        tmp.replace(path)  # a reader never sees half a file
        written.append(path)
    return written


def load_results(folder: Path) -> Results:
    """Every kept result in folder, by (engine, builds)."""
    results: Results = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            result = json.loads(path.read_text())
            key = (str(result["engine"]), int(result["builds"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not a benchmark result ({exc})") from exc
        results[key] = result
    return results


def sizes(results: Results) -> list[int]:
    return sorted({builds for _, builds in results})


def size_name(builds: int) -> str:
    """3000 → 3k, 1000000 → 1M, 2500000 → 2.5M: the chart's and table's short names of a size."""
    for unit, suffix in ((1_000_000, "M"), (1_000, "k")):
        if builds >= unit:
            return f"{builds / unit:g}{suffix}"
    return str(builds)


def series(results: Results) -> dict[tuple[str, str], dict[str, Any]]:
    """For every endpoint and engine: its label and, by size, (p50, p99) in ms at one connection.

    Endpoints come in the order the runs measured them; a size an endpoint was not measured at is absent."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for (engine, builds), result in sorted(results.items(), key=lambda item: item[0][1]):
        for key, entry in (dig(result, "http", "endpoints") or {}).items():
            p50, p99 = dig(entry, "c1", "p50_ms"), dig(entry, "c1", "p99_ms")
            if p50 is None or p99 is None or p50 <= 0 or p99 <= 0:
                continue
            line = found.setdefault((key, engine), {"label": entry.get("label") or key, "points": {}})
            line["points"][builds] = (p50, p99)
    order = list(dict.fromkeys(key for key, _ in found))
    return {(key, engine): found[(key, engine)] for key in order for engine in ENGINE_NAMES
            if (key, engine) in found}


def growth_table(results: Results) -> list[str]:
    """p50 / p99 (ms, one connection) of every endpoint and engine at every size measured."""
    measured = sizes(results)
    rows = []
    for (_, engine), line in series(results).items():
        points = line["points"]
        cells = [f"{ms(points[n][0])} / {ms(points[n][1])}" if n in points else "–" for n in measured]
        have = sorted(points)
        grown = (f"{points[have[-1]][0] / points[have[0]][0]:.2f}× over {have[-1] / have[0]:,.0f}× the builds"
                 if len(have) > 1 else "–")
        rows.append([line["label"], ENGINE_NAMES[engine], *cells, grown])
    return table(["endpoint", "engine", *(f"{size_name(n)} p50 / p99 ms" for n in measured),
                  "p50 smallest → largest"], rows)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return [*lines, ""]


# --- the ten-million-build targets ------------------------------------------------------------------


def target(name: str, threshold: str, value: float | None, shown: str, ok: bool, note: str = "") -> dict[str, Any]:
    status = "not measured" if value is None else "PASS" if ok else "MISS"
    return {"target": name, "threshold": threshold, "value": value,
            "measured": shown if value is not None else "–", "status": status, "note": note}


def bound_note(result: dict[str, Any], key: str) -> str:
    """What bounds an endpoint's p50: the query run in process (the floor) or the HTTP path around it."""
    http = dig(result, "http", "endpoints", key, "c1", "p50_ms")
    floor = dig(result, "floor", "endpoints", key, "p50_ms")
    if not http or floor is None:
        return ""
    share = floor / http
    return (f"floor {ms(floor)} ms in process ({share:.0%} of the HTTP p50): "
            + ("the query and its encoding bound it" if share >= 0.5 else "the HTTP path bounds it"))


def latency(result: dict[str, Any], name: str, keys: tuple[str, ...], limit: float) -> dict[str, Any]:
    """The slowest p50 at one connection of the endpoints `keys` against `limit` ms."""
    eps = dig(result, "http", "endpoints") or {}
    measured = [(dig(eps, k, "c1", "p50_ms"), k) for k in keys if dig(eps, k, "c1", "p50_ms") is not None]
    if not measured:
        return target(name, f"≤ {limit:g} ms", None, "", False)
    value, key = max(measured)
    note = bound_note(result, key)
    if len(keys) > 1:
        note = f"slowest: {dig(eps, key, 'label')}" + (f"; {note}" if note else "")
    return target(name, f"≤ {limit:g} ms", value, f"{ms(value)} ms", value <= limit, note)


def list_windows(result: dict[str, Any]) -> tuple[str, ...]:
    """The /builds windows that answered a whole page of 500 builds at this size."""
    eps = dig(result, "http", "endpoints") or {}
    return tuple(k for k, e in eps.items() if e.get("kind") == "list" and dig(e, "probe", "items") == 500)


def scaled_seconds(name: str, limit_s: float, wall: float | None, fixed: float, builds: int) -> dict[str, Any]:
    """A whole-data-set time at ten million builds: what does not grow (`fixed`) once, the rest in proportion."""
    if wall is None:
        return target(name, f"≤ {limit_s / 60:g} min", None, "", False)
    value = fixed + (wall - fixed) * TEN_MILLION / builds
    note = "" if builds == TEN_MILLION else f"scaled from {builds:,} builds in {wall:,.1f} s wall" + (
        "; rough below 100,000 builds" if builds < 100_000 else "")
    return target(name, f"≤ {limit_s / 60:g} min", value, f"{value:,.0f} s", value <= limit_s, note)


def ingestion_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """POST /builds with four senders, the best server setting, and the reads' p99 during that run."""
    best: tuple[float, str, dict[str, Any]] | None = None
    for setting in (result.get("ingestion") or {}).values():
        run = dig(setting, "runs", "4")
        if run is not None and (best is None or run["builds_per_s"] > best[0]):
            workers = setting.get("workers", 1)
            name = f"{setting.get('processes', 1)} × {workers} worker{'s' if workers > 1 else ''}"
            best = (run["builds_per_s"], name, run)
    if best is None:
        return [target("ingestion, 4 senders", "≥ 10,000 builds/s", None, "", False),
                target("/builds/{id} p99 during ingestion", "≤ 20 ms", None, "", False)]
    value, setting, run = best
    p99 = dig(run, "reads", "p99_ms")
    return [target("ingestion, 4 senders", "≥ 10,000 builds/s", value, f"{rps(value)} builds/s", value >= 10_000,
                   f"best setting: {setting}; batch p50 {ms(run.get('batch_p50_ms'))} ms"),
            target("/builds/{id} p99 during ingestion", "≤ 20 ms", p99, f"{ms(p99)} ms",
                   p99 is not None and p99 <= 20, setting)]


def no_errors_row(result: dict[str, Any]) -> dict[str, Any]:
    """No error answer at 32 connections of any endpoint; the endpoints not loaded so are named."""
    eps = dig(result, "http", "endpoints") or {}
    loaded = {k: e["c32"] for k, e in eps.items() if e.get("c32")}
    if not loaded:
        return target("no error answers at 32 connections, any endpoint", "0", None, "", False)
    errors = sum(int(c.get("non_2xx_3xx") or 0) for c in loaded.values())
    missing = [eps[k].get("label") or k for k in eps if k not in loaded]
    note = f"not loaded at 32 connections: {', '.join(missing)}" if missing else ""
    return target("no error answers at 32 connections, any endpoint", "0 non-2xx/3xx", errors,
                  f"{errors:,} in {len(loaded)} endpoints", errors == 0 and not missing, note)


def targets_10m(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The ten-million-build targets, judged on one engine's result (latencies as measured at its size)."""
    eps = dig(result, "http", "endpoints") or {}
    windows = list_windows(result)
    rows = [latency(result, "/builds 500 builds, any window, 1 client, p50", windows, 2.0)]
    if not windows:
        rows[0]["note"] = "no window answered 500 builds at this size"
    value = dig(eps, "build_by_id", "c32", "rps")
    rows.append(target("/builds/{id}, 32 clients, one process", "≥ 6,000 req/s", value, f"{rps(value)} req/s",
                       value is not None and value >= 6000))
    for name, keys, limit in (
        ("/builds/summary 365 days, one tag pair, p50", ("summary_365d_tag",), 20.0),
        ("/builds/summary, the client's three tag pairs, p50", ("summary_client",), 1.0),
        ("/builds/stats group_by=day, 365 days, p50", ("stats_day_365d",), 100.0),
        ("/builds/stats group_by=tag, 30 days, p50", ("stats_tag_30d",), 50.0),
        ("dashboard, 30 days, p50", ("dashboard_30d",), 150.0),
        ("/usage, one month and one year, p50", ("usage_month", "usage_year"), 10.0),
    ):
        rows.append(latency(result, name, keys, limit))
    exported = dig(result, "http", "export") or {}
    value = exported.get("builds_per_s")
    note = (f"server CPU {exported.get('server_cpu_s')} s, {exported.get('disk_read_mib')} MiB read from disk"
            if value is not None else "")
    rows.append(target("export as JSON Lines", "≥ 100,000 builds/s", value, f"{rps(value)} builds/s",
                       value is not None and value >= 100_000, note))
    rows += ingestion_rows(result)
    builds = int(result["builds"])
    if result["engine"] == "sqlite":
        imported = dig(result, "import", "without_logs") or {}
        rows.append(scaled_seconds("import 10M builds without logs", 300.0, imported.get("wall_s"),
                                   imported.get("fixed_s") or 0.0, builds))
    else:
        rows.append(scaled_seconds("`migrate` 10M builds from SQLite", 600.0, dig(result, "migrate", "wall_s"),
                                   0.0, builds))
    rows.append(no_errors_row(result))
    rows.append(plans_row(result))
    anon = dig(result, "http", "memory", "sampled", "peak_rss_anon_kib")
    value = anon / 1024 if anon else None
    rows.append(target("peak memory of a worker (RssAnon, sampled)", "≤ 250 MiB", value,
                       f"{value:,.1f} MiB" if value else "", value is not None and value <= 250,
                       memory_phases(dig(result, "http", "memory", "sampled") or {})))
    return rows


def plans_row(result: dict[str, Any]) -> dict[str, Any]:
    """Whether every EXPLAIN check of tests/test_query_plans.py held on the measured database, for each window
    checked (plans.py)."""
    windows = result.get("plans") or {}
    errors = [f"{window}: {c['error'][-200:]}" for window, c in windows.items() if "error" in c]
    value = None if errors or not windows else sum(c["checked"] for c in windows.values())
    passed = sum(c.get("passed", 0) for c in windows.values())
    failed = [f"{window}: {f['check']}" for window, c in windows.items() for f in c.get("failed", ())]
    note = "; ".join(errors)
    if failed and not errors:
        note = f"{len(failed)} failed: " + ", ".join(failed[:4]) + (", …" if len(failed) > 4 else "")
    return target("every query that serves a request backed by an index, EXPLAIN at this size", "all checks hold",
                  value, f"{passed:,} of {value or 0:,} hold", bool(value) and not failed, note)


def all_targets_10m(results: Results) -> dict[str, dict[str, Any]]:
    """Per engine: the largest size measured, and the targets judged on it."""
    judged = {}
    for engine in ENGINE_NAMES:
        measured = [builds for name, builds in results if name == engine]
        if measured:
            largest = max(measured)
            judged[engine] = {"builds": largest, "rows": targets_10m(results[(engine, largest)])}
    return judged


def section(results: Results, chart: str | None) -> list[str]:
    """The report's growth table, chart and ten-million-build targets."""
    lines = ["## Growth with the number of builds", ""]
    if not results:
        return [*lines, "No results kept yet.", ""]
    lines += ["Each engine and size as last measured (results/<engine>-<builds>.json): "
              + ", ".join(f"{ENGINE_NAMES[e]} {size_name(n)} ({dig(r, 'generated_at') or '?'}"
                          + (", with failed measurements" if r.get("failures") else "") + ")"
                          for (e, n), r in sorted(results.items())) + ".", ""]
    if chart:
        lines += [f"![p50 and p99 against the number of builds]({chart})", ""]
    lines += growth_table(results)
    lines += ["## Targets at 10M builds", ""]
    for engine, judged in all_targets_10m(results).items():
        builds = judged["builds"]
        lines += [f"### {ENGINE_NAMES[engine]}: from {builds:,} builds, the largest size measured", ""]
        if builds != TEN_MILLION:
            lines += [f"Latencies and rates are those measured at {builds:,} builds, not extrapolated; whole-data "
                      "times are scaled to 10M.", ""]
        lines += table(["target", "threshold", "measured", "", "note"],
                       [[r["target"], r["threshold"], r["measured"], f"**{r['status']}**", r["note"]]
                        for r in judged["rows"]])
    return lines
