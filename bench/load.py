"""HTTP load: wrk with a generated Lua script, or an asyncio + httpx client when wrk is missing.

Both return the same figures: requests, requests/s, latency percentiles in milliseconds and error
counts. Every run is bounded in time (and the Python client in request count too).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

MAX_PYTHON_REQUESTS = 2_000_000  # the fallback client's bound on requests per run


# Seconds each endpoint is asked for, unrecorded, before its measured runs.
WARM_UP_SECONDS = 1

def wrk_path() -> str | None:
    return shutil.which("wrk")


def wrk_version(path: str) -> str:
    # `wrk -v` prints its banner and usage, then exits 1.
    out = subprocess.run([path, "-v"], capture_output=True, text=True, timeout=10)
    first = (out.stdout or out.stderr).splitlines()
    return first[0].strip() if first else "unknown"


def _lua_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def lua_script(paths: list[str], token: str | None, ports: list[int] | None = None) -> str:
    """A wrk script: the token header, paths in rotation (each thread from its own offset), JSON at the end.

    With several `ports` (servers on 127.0.0.1), thread n sends to ports[n % len(ports)]: wrk spreads its
    connections evenly over its threads, so over the servers too."""
    lines = []
    if token:
        lines.append(f'wrk.headers["Authorization"] = {_lua_string("Bearer " + token)}')
    several = ports is not None and len(ports) > 1
    if len(paths) > 1 or several:
        lines.append("local paths = {")
        lines.extend(f"  {_lua_string(p)}," for p in paths)
        lines.append("}")
        targets = ", ".join(f'wrk.lookup("127.0.0.1", "{port}")[1]' for port in ports) if several else ""
        lines.append(
            f"""local targets = {{{targets}}}
local n = #paths
local threads = 0
function setup(thread)
  thread:set("offset", threads * 7919)
  if #targets > 0 then
    thread.addr = targets[(threads % #targets) + 1]
  end
  threads = threads + 1
end
function init(args)
  i = offset or 0
end
function request()
  i = i + 1
  return wrk.format(nil, paths[(i % n) + 1])
end"""
        )
    lines.append(
        """function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_RESULT {"requests": %.0f, "duration_us": %.0f, "bytes": %.0f, "connect": %.0f, "read": %.0f, '
    .. '"write": %.0f, "status": %.0f, "timeout": %.0f, "p25_us": %.1f, "p50_us": %.1f, "p75_us": %.1f, '
    .. '"p90_us": %.1f, "p99_us": %.1f, "mean_us": %.1f, "max_us": %.1f}\\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(25), latency:percentile(50), latency:percentile(75), latency:percentile(90),
    latency:percentile(99), latency.mean, latency.max))
end"""
    )
    return "\n".join(lines) + "\n"


def wrk_command(wrk: str, script: Path, url: str, connections: int, threads: int, seconds: int) -> list[str]:
    timeout = max(30, 3 * seconds)
    return [wrk, f"-t{threads}", f"-c{connections}", f"-d{seconds}s", f"--timeout={timeout}s", "--latency",
            "-s", str(script), url]


def _figures(raw: dict[str, float]) -> dict[str, object]:
    seconds = raw["duration_us"] / 1e6
    errors = {k: int(raw[k]) for k in ("connect", "read", "write", "status", "timeout")}
    return {
        "requests": int(raw["requests"]),
        "seconds": round(seconds, 3),
        "rps": round(raw["requests"] / seconds, 1) if seconds else 0.0,
        "p25_ms": round(raw["p25_us"] / 1000, 3),
        "p50_ms": round(raw["p50_us"] / 1000, 3),
        "p75_ms": round(raw["p75_us"] / 1000, 3),
        "p90_ms": round(raw["p90_us"] / 1000, 3),
        "p99_ms": round(raw["p99_us"] / 1000, 3),
        "mean_ms": round(raw["mean_us"] / 1000, 3),
        "max_ms": round(raw["max_us"] / 1000, 3),
        "bytes": int(raw["bytes"]),
        "non_2xx_3xx": errors["status"],
        "socket_errors": {k: v for k, v in errors.items() if k != "status"},
    }


def run_wrk(wrk: str, workdir: Path, name: str, base: str | list[str], paths: list[str], token: str | None,
            connections: int, threads: int, seconds: int) -> dict[str, object]:
    """One wrk run; with several bases (servers on 127.0.0.1) each thread loads one of them."""
    bases = [base] if isinstance(base, str) else base
    if len(bases) > 1 and threads % len(bases):
        raise ValueError(f"{threads} threads cannot be spread evenly over {len(bases)} servers")
    script = workdir / f"{name}.lua"
    ports = [int(b.rsplit(":", 1)[1]) for b in bases]
    script.write_text(lua_script(paths, token, ports))
    command = wrk_command(wrk, script, bases[0] + paths[0], connections, threads, seconds)
    started = time.perf_counter()
    out = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)
    match = re.search(r"^BENCH_RESULT (\{.*\})$", out.stdout, re.MULTILINE)
    if out.returncode != 0 or match is None:
        raise RuntimeError(f"wrk exited {out.returncode}: {(out.stderr or out.stdout).strip()[-800:]}")
    result = _figures(json.loads(match.group(1)))
    result["client"] = "wrk"
    result["command"] = shlex.join(command)
    result["wall_s"] = round(time.perf_counter() - started, 2)
    return result


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    index = min(len(sorted_values) - 1, max(0, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


def run_python(base: str | list[str], paths: list[str], token: str | None, connections: int,
               seconds: int) -> dict[str, object]:
    """The fallback client: `connections` tasks, each a keep-alive connection; with several bases, one httpx
    client per base and the tasks spread evenly over them."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    latencies: list[float] = []
    errors = {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}
    received = 0

    async def worker(client: httpx.AsyncClient, offset: int, deadline: float) -> None:
        nonlocal received
        i = offset
        while time.perf_counter() < deadline and len(latencies) < MAX_PYTHON_REQUESTS:
            i += 1
            started = time.perf_counter()
            try:
                response = await client.get(paths[i % len(paths)], headers=headers)
            except httpx.TimeoutException:
                errors["timeout"] += 1
                continue
            except httpx.HTTPError:
                errors["read"] += 1
                continue
            latencies.append(time.perf_counter() - started)
            received += len(response.content)
            if response.status_code >= 400:
                errors["status"] += 1

    bases = [base] if isinstance(base, str) else base

    async def main() -> float:
        per_base = -(-connections // len(bases))
        limits = httpx.Limits(max_connections=per_base, max_keepalive_connections=per_base)
        clients = [httpx.AsyncClient(base_url=b, limits=limits, timeout=max(30, 3 * seconds)) for b in bases]
        try:
            started = time.perf_counter()
            deadline = started + seconds
            await asyncio.gather(*(worker(clients[n % len(clients)], n * 7919, deadline) for n in range(connections)))
            return time.perf_counter() - started
        finally:
            for client in clients:
                await client.aclose()

    try:
        import uvloop

        elapsed = uvloop.run(main())
    except ImportError:
        elapsed = asyncio.run(main())
    latencies.sort()
    raw = {
        "requests": len(latencies), "duration_us": elapsed * 1e6, "bytes": received, **errors,
        "p25_us": _percentile(latencies, 25) * 1e6, "p50_us": _percentile(latencies, 50) * 1e6,
        "p75_us": _percentile(latencies, 75) * 1e6, "p90_us": _percentile(latencies, 90) * 1e6,
        "p99_us": _percentile(latencies, 99) * 1e6,
        "mean_us": (sum(latencies) / len(latencies) * 1e6) if latencies else math.nan,
        "max_us": (latencies[-1] * 1e6) if latencies else math.nan,
    }
    result = _figures(raw)
    result["client"] = "python-httpx"
    result["command"] = f"python httpx client, {connections} connections, {seconds}s"
    result["wall_s"] = round(elapsed, 2)
    return result


def problems(result: dict[str, object]) -> list[str]:
    """What makes a load run a failed measurement: any error response, socket error or no request at all."""
    found = []
    if result["requests"] == 0:
        found.append("no request completed")
    if result["non_2xx_3xx"]:
        found.append(f"{result['non_2xx_3xx']} non-2xx/3xx responses")
    for kind, count in result["socket_errors"].items():  # type: ignore[union-attr]
        if count:
            found.append(f"{count} socket {kind} errors")
    return found


def too_slow_to_measure(result: dict[str, object], alone: dict[str, object] | None, connections: int) -> bool:
    """No answer at all and no error, from an endpoint that one client alone measured so slow that
    `connections` requests one after another outlast the run: the run was too short, nothing failed."""
    if alone is None or result["requests"] or not alone["requests"] or result["non_2xx_3xx"]:
        return False
    if any(result["socket_errors"].values()):  # type: ignore[union-attr]
        return False
    return float(alone["p50_ms"]) * connections / 1000 >= float(result["seconds"])  # type: ignore[arg-type]
