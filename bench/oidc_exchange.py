"""The cost of an OIDC token exchange: p50 of `GET /auth/oidc-token-exchange` against a real `buildreport serve`
(one worker), with the issuer's keys not yet read (cold: each of COLD issuers is asked once) and already kept
(warm: WARM requests to one issuer). The issuers run on 127.0.0.1 (the test suite's tests/oidc_issuer.py), so a
cold exchange includes reading the discovery document and the key set over loopback, not over the internet.

    python bench/oidc_exchange.py [SQLITE_OR_POSTGRESQL_URL]

Prints one line per case; bounded: COLD + WARM requests, each with a 30 s time-out.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from oidc_issuer import Issuer  # noqa: E402  (the test suite's issuer)
from server import free_port  # noqa: E402

COLD = 20
WARM = 300


def _token(db: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "buildreport", "token", "create", "--db", db, "--account", "acme",
         "--scope", "build:read", "--scope", "build:write"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def _wait(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit("the server did not start")
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit("the server did not answer within 60 s")


def _p50(client: httpx.Client, url: str, token: str, id_tokens: list[str]) -> tuple[float, float]:
    """(p50, p90) in milliseconds of one exchange per ID token."""
    times = []
    for id_token in id_tokens:
        started = time.perf_counter()
        answer = client.get(url, headers={"Authorization": f"Bearer {token}", "NIXBUILDNET-OIDC-ID-TOKEN": id_token})
        times.append((time.perf_counter() - started) * 1000)
        if answer.status_code != 200:
            raise SystemExit(f"exchange failed: {answer.status_code} {answer.text}")
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.9)]


def main() -> None:
    issuers = [Issuer() for _ in range(COLD + 1)]
    for issuer in issuers:
        issuer.add_key("k1", "RS256")
        issuer.start()
    with tempfile.TemporaryDirectory() as folder:
        db = sys.argv[1] if len(sys.argv) > 1 else str(Path(folder) / "bench.db")
        token = _token(db)
        port = free_port()
        args = [sys.executable, "-m", "buildreport", "serve", "--db", db, "--port", str(port), "--workers", "1",
                "--no-access-log", "--rate-limit", "0"]  # fmt: skip
        for issuer in issuers:
            args += ["--oidc-issuer", issuer.url]
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            base = f"http://127.0.0.1:{port}"
            _wait(base, process)
            url = base + "/auth/oidc-token-exchange"
            with httpx.Client(timeout=30) as client:
                cold = _p50(client, url, token, [issuer.token("k1") for issuer in issuers[1:]])
                warm_issuer = issuers[0]
                _p50(client, url, token, [warm_issuer.token("k1")])  # reads its keys once
                warm = _p50(client, url, token, [warm_issuer.token("k1") for _ in range(WARM)])
        finally:
            process.terminate()
            process.wait(15)
            for issuer in issuers:
                issuer.stop()
    print(f"exchange, cold key cache ({COLD} issuers, once each): p50 {cold[0]:.1f} ms, p90 {cold[1]:.1f} ms")
    print(f"exchange, warm key cache ({WARM} requests): p50 {warm[0]:.1f} ms, p90 {warm[1]:.1f} ms")


if __name__ == "__main__":
    main()
