"""A webhook receiver on 127.0.0.1 for tests: it checks each request's Standard Webhooks signature and answers
as told (a status, or a delay past the sender's time-out)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Received:
    def __init__(self, headers: dict[str, str], body: bytes, verified: bool) -> None:
        self.headers = headers
        self.body = body
        self.verified = verified
        self.at = time.time()

    @property
    def json(self) -> Any:
        return json.loads(self.body)


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    given = [part.split(",", 1)[1] for part in headers["webhook-signature"].split() if part.startswith("v1,")]
    return any(hmac.compare_digest(expected, sig) for sig in given)


class Receiver:
    """`answer` gives each request's status (or a float: seconds to wait before answering 200)."""

    def __init__(self, secret: str = "", answer: Callable[[int], int | float] = lambda n: 200) -> None:
        self.secret = secret
        self.answer = answer
        self.received: list[Received] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver.lock:
                    number = len(receiver.received)
                    receiver.received.append(Received(headers, body, verify(receiver.secret, headers, body)))
                told = receiver.answer(number)
                if isinstance(told, float):
                    time.sleep(told)
                    told = 200
                self.send_response(told)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def wait_for(self, count: int, seconds: float = 30.0) -> list[Received]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.received) >= count:
                    return list(self.received)
            time.sleep(0.02)
        raise AssertionError(f"{len(self.received)} of {count} requests arrived within {seconds}s")
