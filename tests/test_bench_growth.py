# ruff: noqa: RUF001  (the report uses the multiplication sign and en dash on purpose)
"""The benchmark's growth report: kept results of several sizes, the table, growth.svg and the 10M targets."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import growth
import growth_chart
import run

SVG = "{http://www.w3.org/2000/svg}"


def endpoint(label: str, kind: str, p50: float, p99: float, rps: float = 1000.0, items: int | None = None,
             errors: int = 0) -> dict[str, Any]:
    probe = {"items": items} if items is not None else {}
    return {"label": label, "kind": kind, "probe": probe, "c1": {"p50_ms": p50, "p99_ms": p99},
            "c32": {"rps": rps, "non_2xx_3xx": errors}}


def result(engine: str, builds: int, scale: float, stats: bool = True) -> dict[str, Any]:
    """A kept result whose latencies grow with `scale`; `stats` False leaves that endpoint unmeasured."""
    eps = {
        "builds_365d": endpoint("/builds 365 days (limit 500)", "list", 1.0 * scale, 3.0 * scale, items=500),
        "build_by_id": endpoint("/builds/{id}", "build", 0.4, 0.9, rps=7000.0),
        "usage_month": endpoint("/usage one month", "usage", 2.0, 5.0),
        "usage_year": endpoint("/usage one year", "usage", 12.0 * scale, 30.0 * scale),
    }
    if stats:
        eps["stats_day_365d"] = endpoint("/builds/stats group_by=day, 365 days", "stats", 20.0 * scale, 60.0 * scale)
    return {
        "engine": engine, "builds": builds, "generated_at": "2026-01-01T00:00:00Z",
        "http": {"endpoints": eps, "export": {"builds_per_s": 150_000.0, "server_cpu_s": 1.0, "disk_read_mib": 0},
                 "memory": {"sampled": {"peak_rss_anon_kib": 300 * 1024, "samples": 10}}},
        "floor": {"endpoints": {"usage_year": {"p50_ms": 11.0 * scale}}},
        "import": {"without_logs": {"wall_s": 2.0 + builds / 50_000, "fixed_s": 2.0}},
        "ingestion": {"1x1": {"processes": 1, "workers": 1, "runs": {
            "4": {"builds_per_s": 12_000.0, "batch_p50_ms": 30.0, "reads": {"p99_ms": 25.0}}}}},
    }


@pytest.fixture
def results() -> growth.Results:
    """SQLite at three sizes, the middle one without its statistics; PostgreSQL at two."""
    return {
        ("sqlite", 3_000): result("sqlite", 3_000, 1.0),
        ("sqlite", 30_000): result("sqlite", 30_000, 2.0, stats=False),
        ("sqlite", 300_000): result("sqlite", 300_000, 4.0),
        ("postgresql", 3_000): result("postgresql", 3_000, 1.5),
        ("postgresql", 30_000): result("postgresql", 30_000, 3.0),
    }


def svg_root(results: growth.Results) -> ET.Element:
    text = growth_chart.chart(results)
    assert text is not None
    return ET.fromstring(text)


def test_growth_table_has_a_column_per_size_and_a_row_per_endpoint_and_engine(results: growth.Results) -> None:
    lines = growth.growth_table(results)
    assert lines[0] == ("| endpoint | engine | 3k p50 / p99 ms | 30k p50 / p99 ms | 300k p50 / p99 ms | "
                        "p50 smallest → largest |")
    rows = [line for line in lines[2:] if line]
    assert len(rows) == 5 * 2
    assert "| /usage one year | SQLite | 12.00 / 30.00 | 24.00 / 60.00 | 48.00 / 120 | 4.00× over 100× the builds |" \
        in lines


def test_growth_table_shows_a_dash_where_a_size_was_not_measured(results: growth.Results) -> None:
    lines = growth.growth_table(results)
    assert ("| /builds/stats group_by=day, 365 days | SQLite | 20.00 / 60.00 | – | 80.00 / 240 | "
            "4.00× over 100× the builds |") in lines
    assert "| /usage one year | PostgreSQL | 18.00 / 45.00 | 36.00 / 90.00 | – | 2.00× over 10× the builds |" in lines


def test_chart_parses_as_svg_with_one_path_per_series(results: growth.Results) -> None:
    paths = svg_root(results).findall(f".//{SVG}path[@class='series']")
    series = {(p.get("data-endpoint"), p.get("data-engine"), p.get("data-figure")) for p in paths}
    assert len(paths) == len(series) == 5 * 2 * 2
    dashed = {p.get("data-figure") for p in paths if p.get("stroke-dasharray")}
    assert dashed == {"p99"}


def test_chart_series_skip_a_missing_size(results: growth.Results) -> None:
    root = svg_root(results)

    def points(endpoint: str, engine: str) -> int:
        path = root.find(f".//{SVG}path[@data-endpoint='{endpoint}'][@data-engine='{engine}'][@data-figure='p50']")
        assert path is not None
        return path.get("d", "").count("M") + path.get("d", "").count("L")

    assert points("stats_day_365d", "sqlite") == 2
    assert points("usage_year", "sqlite") == 3
    assert points("usage_year", "postgresql") == 2


def test_chart_has_axis_labels_size_ticks_and_a_legend(results: growth.Results) -> None:
    root = svg_root(results)
    texts = ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]
    labels = [t for t in root.iter(f"{SVG}text") if t.get("class") == "axis-label"]
    assert {"".join(t.itertext()) for t in labels} == {"builds (log scale)", "ms (log scale)"}
    assert len(labels) == 2 * 5
    assert {"3k", "30k", "300k", "SQLite", "PostgreSQL", "p50", "p99", "/usage one year"} <= set(texts)


def test_chart_of_no_results_is_none() -> None:
    assert growth_chart.chart({}) is None


def test_targets_10m_are_judged_on_each_engines_largest_size(results: growth.Results) -> None:
    judged = growth.all_targets_10m(results)
    assert {engine: j["builds"] for engine, j in judged.items()} == {"sqlite": 300_000, "postgresql": 30_000}
    sqlite = {r["target"]: r for r in judged["sqlite"]["rows"]}
    assert sqlite["/builds/stats group_by=day, 365 days, p50"]["measured"] == "80.00 ms"
    assert sqlite["/builds/stats group_by=day, 365 days, p50"]["status"] == "PASS"
    usage = sqlite["/usage, one month and one year, p50"]
    assert (usage["measured"], usage["status"]) == ("48.00 ms", "MISS")
    assert usage["note"].startswith(
        "slowest: /usage one year; floor 44.00 ms in process (92% of the HTTP p50): the query")
    assert sqlite["/builds/summary 365 days, one tag pair, p50"]["status"] == "not measured"
    assert sqlite["/builds/{id}, 32 clients, one process"]["status"] == "PASS"
    assert sqlite["peak memory of a worker (RssAnon, sampled)"]["status"] == "MISS"
    assert sqlite["/builds/{id} p99 during ingestion"]["status"] == "MISS"
    # 2 s that do not grow, and 6 s for 300,000 builds: 200 s at ten million.
    assert sqlite["import 10M builds without logs"]["measured"] == "202 s"
    assert "`migrate` 10M builds from SQLite" not in sqlite
    pg = {r["target"]: r for r in judged["postgresql"]["rows"]}
    assert pg["`migrate` 10M builds from SQLite"]["status"] == "not measured"


def test_report_section_names_the_size_the_targets_come_from(results: growth.Results) -> None:
    text = "\n".join(growth.section(results, "growth.svg"))
    assert "### SQLite: from 300,000 builds, the largest size measured" in text
    assert "### PostgreSQL: from 30,000 builds, the largest size measured" in text
    assert "![p50 and p99 against the number of builds](growth.svg)" in text


def test_results_of_runs_at_different_times_combine(tmp_path: Path, results: growth.Results) -> None:
    sqlite = results[("sqlite", 3_000)]
    out = {**sqlite, "settings": {"builds": 3_000}, "postgresql": {
        "http": results[("postgresql", 3_000)]["http"], "migrate": {"wall_s": 1.5}}}
    del out["engine"], out["builds"]
    assert [p.name for p in growth.save_results(out, tmp_path)] == ["sqlite-3000.json", "postgresql-3000.json"]
    later = {**results[("sqlite", 30_000)], "settings": {"builds": 30_000}}
    growth.save_results(later, tmp_path)
    kept = growth.load_results(tmp_path)
    assert sorted(kept) == [("postgresql", 3_000), ("sqlite", 3_000), ("sqlite", 30_000)]
    assert kept[("postgresql", 3_000)]["migrate"] == {"wall_s": 1.5}
    assert "postgresql" not in kept[("sqlite", 3_000)]


def test_a_file_that_is_not_a_result_is_named(tmp_path: Path) -> None:
    (tmp_path / "sqlite-100.json").write_text(json.dumps({"engine": "sqlite"}))
    with pytest.raises(ValueError, match=r"sqlite-100\.json: not a benchmark result"):
        growth.load_results(tmp_path)


def test_bench_builds_takes_several_sizes_smallest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_BUILDS", "30000, 3_000,30000")
    assert run.env_sizes("BENCH_BUILDS", 1_000_000, 100, 50_000_000) == [3_000, 30_000]
    monkeypatch.setenv("BENCH_BUILDS", "3000,lots")
    with pytest.raises(SystemExit, match="'lots' is not a number of builds"):
        run.env_sizes("BENCH_BUILDS", 1_000_000, 100, 50_000_000)
    monkeypatch.setenv("BENCH_BUILDS", "60000000")
    with pytest.raises(SystemExit, match="must be from 100 to 50000000"):
        run.env_sizes("BENCH_BUILDS", 1_000_000, 100, 50_000_000)


def test_an_error_answer_or_an_endpoint_not_loaded_at_32_connections_misses(results: growth.Results) -> None:
    name = "no error answers at 32 connections, any endpoint"
    clean = growth.no_errors_row(results[("sqlite", 3_000)])
    assert (clean["target"], clean["measured"], clean["status"]) == (name, "0 in 5 endpoints", "PASS")
    errors = results[("sqlite", 30_000)]
    errors["http"]["endpoints"]["usage_year"]["c32"]["non_2xx_3xx"] = 3
    assert growth.no_errors_row(errors)["status"] == "MISS"
    unloaded = results[("postgresql", 3_000)]
    del unloaded["http"]["endpoints"]["usage_month"]["c32"]
    row = growth.no_errors_row(unloaded)
    assert (row["status"], row["note"]) == ("MISS", "not loaded at 32 connections: /usage one month")


def test_the_memory_target_names_the_requests_that_raised_the_peak(results: growth.Results) -> None:
    """Memory a worker keeps after a request shows in every later phase: the note names both the phase the peak
    was reached in and the one that raised it most over its own start."""
    kept = results[("sqlite", 300_000)]
    tag = "/builds/stats group_by=tag:project, 30 days"
    kept["http"]["memory"]["sampled"]["phases"] = {
        tag: {"start_rss_anon_kib": 60 * 1024, "peak_rss_anon_kib": 280 * 1024},
        "export": {"start_rss_anon_kib": 280 * 1024, "peak_rss_anon_kib": 300 * 1024},
    }
    rows = {r["target"]: r for r in growth.all_targets_10m(results)["sqlite"]["rows"]}
    note = rows["peak memory of a worker (RssAnon, sampled)"]["note"]
    assert note == f"peak reached during export (300.0 MiB); the largest rise during {tag} (+220.0 MiB, from 60.0 MiB)"
    unphased = {r["target"]: r for r in growth.all_targets_10m(results)["postgresql"]["rows"]}
    assert unphased["peak memory of a worker (RssAnon, sampled)"]["note"] == ""
