"""The in-process floor: what each endpoint costs without HTTP, in one process on a uvloop event loop, set up as a
serving worker is (its collector and allocator settings, app.tune_process): untuned, a statistics answer of a year
took 125 ms where the server took 89 ms. The bench runs it as `python bench/floor.py`, a process of its own with
the endpoints as JSON on standard input, so its figures owe nothing to the bench's own heap.

For the JSON endpoints the floor is: parsing the query pairs into the typed query (as the handler
does), the `Reader` call, and encoding the response body bytes (a list arrives as one JSON array from
the store; `msgspec.json.encode` for the rest). Not included: routing, authentication, the ETag
digest, headers, uvicorn and the socket. For the signed page it is the page handler's own function
called with a stand-in request (link check, reads, log rendering in a thread, template), since its
work is mostly rendering; when that cannot be called, the reads alone, marked as such.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec

from buildreport import filters
from buildreport.config import Settings, load_secret_keys
from buildreport.http.answers import heavy_turns
from buildreport.http.app import tune_process
from buildreport.models import BuildURL, Health
from buildreport.signing import LinkClaims, LinkSigner
from buildreport.store import Reader, open_reader
from buildreport.times import US_PER_SECOND, from_us, now_us

_ENCODE = msgspec.json.encode
Step = Callable[[int], Awaitable[bytes]]


def _steps(reader: Reader, signer: LinkSigner, settings: Settings, account_id: int,
           endpoint: dict[str, Any], notes: list[str]) -> Step:
    kind = endpoint["kind"]
    pairs = endpoint.get("pairs", [])
    ids: list[int] = endpoint.get("ids", [])

    if kind == "list":
        async def step(i: int) -> bytes:
            query = filters.parse_list_query(pairs, now_us())
            page = await reader.list_builds(account_id, query)
            return page.body
    elif kind == "build":
        async def step(i: int) -> bytes:
            body = await reader.build(account_id, ids[i % len(ids)])
            assert body is not None
            return body
    elif kind == "url":
        async def step(i: int) -> bytes:
            build_id = ids[i % len(ids)]
            body = await reader.build(account_id, build_id)
            assert body is not None
            expires_us = -(-(now_us() + 3600 * US_PER_SECOND) // US_PER_SECOND) * US_PER_SECOND
            url = signer.link_url(settings.base_url, LinkClaims(account_id, build_id, expires_us))
            return _ENCODE(BuildURL(build_id=build_id, url=url, expires_at=from_us(expires_us)))
    elif kind == "summary":
        async def step(i: int) -> bytes:
            now = now_us()
            build_filter = filters.parse_summary_query(pairs, now)
            return _ENCODE(await reader.summary(account_id, build_filter, now))
    elif kind == "usage":
        async def step(i: int) -> bytes:
            query = filters.parse_usage_query(pairs, now_us())
            return _ENCODE(await reader.usage(account_id, query))
    elif kind == "stats":
        from buildreport.insights import stats

        async def step(i: int) -> bytes:
            query = filters.parse_stats_query(pairs, now_us())
            rows = await reader.stats_rows(account_id, query.filter, query.group_by)
            return _ENCODE(stats.build_stats(rows, query))
    elif kind == "breakdown":
        from buildreport.insights import stats

        async def step(i: int) -> bytes:
            query = filters.parse_breakdown_query(pairs, now_us())
            rows = await reader.usage_rows(account_id, query.usage, query.group_by)
            return _ENCODE(stats.usage_breakdown(rows, query.group_by))
    elif kind == "dashboard":
        step = _dashboard_step(reader, signer, settings, account_id, pairs)
    elif kind == "healthz":
        async def step(i: int) -> bytes:
            await reader.ping()
            return _ENCODE(Health(status="ok"))
    elif kind == "page":
        step = _page_step(reader, signer, settings, endpoint["tokens"], notes)
    else:
        raise ValueError(f"unknown endpoint kind {kind}")
    return step


def _page_step(reader: Reader, signer: LinkSigner, settings: Settings, tokens: list[str], notes: list[str]) -> Step:
    from buildreport.http import pages as web

    request = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(reader=reader, signer=signer,
                                                                        settings=settings)))
    handler = getattr(web.build_page, "fn", None)

    async def full(i: int) -> bytes:
        response = await handler(request, tokens[i % len(tokens)])  # type: ignore[misc]
        assert response.status_code == 200, response.status_code
        return response.content

    async def reads_only(i: int) -> bytes:
        claims = signer.verify(tokens[i % len(tokens)])
        assert claims is not None
        body = await reader.build(claims.account_id, claims.build_id)
        stored = await reader.log(claims.account_id, claims.build_id)
        return (body or b"") + (stored[1] if stored else b"")

    async def pick(i: int) -> bytes:
        nonlocal chosen
        if chosen is None:
            try:
                await full(i)
                chosen = full
            except Exception as exc:
                notes.append(f"signed page floor: the handler could not be called in-process ({exc!r}); "
                             "floor is the reads only")
                chosen = reads_only
        return await chosen(i)

    chosen: Step | None = None if handler is not None else reads_only
    if handler is None:
        notes.append("signed page floor: no handler function found; floor is the reads only")
    return pick


def _dashboard_step(reader: Reader, signer: LinkSigner, settings: Settings, account_id: int,
                    pairs: list[tuple[str, str]]) -> Step:
    """The dashboard page's handler, called in-process with a request that carries only what it reads."""
    from urllib.parse import urlencode

    from buildreport.http import dashboard
    from buildreport.signing import DashboardClaims, DashboardSigner

    dashboard_signer = DashboardSigner(load_secret_keys(settings))
    token = dashboard_signer.link_url("", DashboardClaims(account_id, now_us() + 86_400 * US_PER_SECOND))[3:]
    state = SimpleNamespace(reader=reader, signer=signer, dashboard_signer=dashboard_signer, settings=settings,
                            heavy=heavy_turns())
    request = SimpleNamespace(app=SimpleNamespace(state=state), scope={"query_string": urlencode(pairs).encode()})
    handler = dashboard.dashboard_page.fn

    async def step(i: int) -> bytes:
        response = await handler(request, token)
        assert response.status_code == 200, response.status_code
        return response.content

    return step


async def _measure(step: Step, iterations: int, warmup: int, budget_s: float) -> dict[str, Any]:
    deadline = time.perf_counter() + budget_s
    size = 0
    for i in range(warmup):
        size = len(await step(i))
        if time.perf_counter() > deadline:
            break
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    for i in range(iterations):
        started = time.perf_counter()
        await step(i)
        samples.append(time.perf_counter() - started)
        if time.perf_counter() > deadline:
            break
    return {**figures([t * 1000 for t in samples]), "body_bytes": size}


def figures(samples_ms: list[float]) -> dict[str, Any]:
    """Quartiles, p90 and minimum of one endpoint's times, with the times themselves (for pooling)."""
    ordered = sorted(samples_ms)
    quartiles = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else ordered * 3
    return {
        "iterations": len(ordered),
        "p25_ms": round(quartiles[0], 4),
        "p50_ms": round(statistics.median(ordered), 4),
        "p75_ms": round(quartiles[2], 4),
        "p90_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))], 4),
        "min_ms": round(ordered[0], 4),
        "samples_ms": [round(t, 5) for t in ordered],
    }


def pooled(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One endpoint's floor over several processes: the figures of all their times together, and each process's
    p50, whose spread is the process-to-process part of the floor's uncertainty (a statistics answer's p50 moved
    by 0.17 ms, 3%, from one process to the next)."""
    merged = figures([t for result in results for t in result["samples_ms"]])
    del merged["samples_ms"]
    notes = sorted({note for result in results for note in result.get("notes", [])})
    return {**merged, "process_p50_ms": [result["p50_ms"] for result in results],
            "body_bytes": results[-1]["body_bytes"], **({"notes": notes} if notes else {})}


async def _run(db: Path | str, account_id: int, endpoints: list[dict[str, Any]], iterations: int, warmup: int,
               budget_s: float) -> dict[str, Any]:
    settings = Settings(db=str(db))
    signer = LinkSigner(load_secret_keys(settings))
    reader = await open_reader(db)
    results: dict[str, Any] = {}
    try:
        for endpoint in endpoints:
            notes: list[str] = []
            try:
                step = _steps(reader, signer, settings, account_id, endpoint, notes)
                result = await _measure(step, iterations, warmup, budget_s)
            except Exception as exc:
                result = {"error": repr(exc)}
            if notes:
                result["notes"] = notes
            results[endpoint["key"]] = result
    finally:
        await reader.close()
    return results


def measure(db: Path | str, account_id: int, endpoints: list[dict[str, Any]], *, iterations: int = 200,
            warmup: int = 20, budget_s: float = 10.0) -> dict[str, Any]:
    """p50 per endpoint over at most `iterations` runs or `budget_s` seconds, after `warmup` runs."""
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
        loop_kind = f"uvloop {uvloop.__version__}"
    except ImportError:
        loop_factory = None
        loop_kind = "asyncio (uvloop missing)"
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        results = runner.run(_run(db, account_id, endpoints, iterations, warmup, budget_s))
    return {"loop": loop_kind, "iterations_max": iterations, "warmup": warmup, "budget_s": budget_s,
            "endpoints": results}


def main() -> None:
    """`python bench/floor.py` with {"db", "account_id", "endpoints", "iterations", "warmup", "budget_s"} as JSON on
    standard input: measure's result as JSON on standard output."""
    given = json.load(sys.stdin)
    tune_process()  # this process then runs the endpoints as a serving worker would
    for endpoint in given["endpoints"]:
        endpoint["pairs"] = [tuple(pair) for pair in endpoint.get("pairs", [])]
    result = measure(given["db"], given["account_id"], given["endpoints"], iterations=given["iterations"],
                     warmup=given["warmup"], budget_s=given["budget_s"])
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
