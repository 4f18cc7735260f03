"""systemd's service notifications without a systemd library: `READY=1`, `WATCHDOG=1`, `STOPPING=1`, `STATUS=…`.

A unit with `Type=notify` waits for READY=1 before it counts the service as started (and starts what is ordered
after it); with `WatchdogSec=` it restarts the service when WATCHDOG=1 stops arriving. Each message is one
datagram to the AF_UNIX socket named in `NOTIFY_SOCKET` (a path, or an abstract name written with a leading `@`).
Outside systemd the variable is unset and every call does nothing.

`ServiceNotifier` is what `serve` uses: READY=1 once every worker serves, then WATCHDOG=1 every half of
`WATCHDOG_USEC` for as long as `/healthz`, asked over the listening socket, says the database answers.
"""

from __future__ import annotations

import http.client
import logging
import os
import socket
import ssl
import threading

log = logging.getLogger("buildreport")

HEALTH_PATH = "/healthz"
PROBE_AGENT = "buildreport-watchdog"
MAX_STATUS_CHARS = 200


def notify_address(environ: dict[str, str] | None = None) -> str | None:
    """The socket systemd listens on for this service, as socket.connect takes it (abstract names with a NUL)."""
    value = (os.environ if environ is None else environ).get("NOTIFY_SOCKET", "")
    if value.startswith("@"):
        return "\0" + value[1:]
    return value if value.startswith("/") else None


def notify(*lines: str, environ: dict[str, str] | None = None) -> bool:
    """Send one notification of `KEY=value` lines; False when there is no socket to send it to or it fails."""
    address = notify_address(environ)
    if address is None:
        return False
    message = "\n".join(lines).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message)
    except OSError as exc:  # systemd went away or the socket is not ours: the service goes on regardless
        log.warning("cannot notify systemd at %s: %s", address.replace("\0", "@"), exc.strerror or exc)
        return False
    return True


def watchdog_seconds(environ: dict[str, str] | None = None) -> float | None:
    """How often to send WATCHDOG=1 (half the time systemd waits), or None when no watchdog is set for us."""
    env = os.environ if environ is None else environ
    usec, pid = env.get("WATCHDOG_USEC", ""), env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if pid and pid != str(os.getpid()):  # set for another process: a child must not ping on its parent's behalf
        return None
    return int(usec) / 2_000_000


def status(text: str) -> str:
    """A STATUS= line: one line, short, whatever the text held."""
    return "STATUS=" + " ".join(text.split())[:MAX_STATUS_CHARS]


def probe_host(host: str) -> str:
    """Where to reach a server listening on `host`: the loopback address when it listens on every address."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def ask_health(host: str, port: int, *, tls: bool, prefix: str = "", timeout: float = 5.0) -> str | None:
    """None when `/healthz` answers 200, else why not (its body, or the connection's fault)."""
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False  # our own certificate, for our own address: only the answer matters
        context.verify_mode = ssl.CERT_NONE
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", prefix + HEALTH_PATH, headers={"User-Agent": PROBE_AGENT})
        response = conn.getresponse()
        body = response.read(1000).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as exc:
        return f"/healthz does not answer: {exc}"
    finally:
        conn.close()
    return None if response.status == 200 else f"/healthz answers {response.status}: {body}"


class ServiceNotifier:
    """Tells systemd when the server is ready, that it stays healthy, and when it stops.

    `ready()` is called once every worker serves; it sends READY=1 and, with a watchdog, starts a thread that
    asks `/healthz` and sends WATCHDOG=1 only while it answers 200. A server that hangs, or whose database
    stops answering, misses its pings and systemd restarts it. `stopping()` sends STOPPING=1 once."""

    def __init__(self, host: str, port: int, *, tls: bool, prefix: str = "", workers: int = 1) -> None:
        self.host, self.port, self.tls, self.prefix, self.workers = probe_host(host), port, tls, prefix, workers
        self.interval = watchdog_seconds()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return notify_address() is not None

    def ready(self, port: int | None = None) -> None:
        """READY=1; `port` is the one actually bound, when `--port 0` left the choice to the system."""
        if not self.active or self._thread is not None or self._stop.is_set():
            return
        self.port = port or self.port
        notify("READY=1", status(f"serving on port {self.port} with {self.workers} worker(s)"))
        if self.interval is not None:
            self._thread = threading.Thread(target=self._watch, args=(self.interval,), name="watchdog", daemon=True)
            self._thread.start()

    def _watch(self, interval: float) -> None:
        last: str | None = None
        while not self._stop.wait(interval):
            problem = ask_health(self.host, self.port, tls=self.tls, prefix=self.prefix, timeout=max(interval, 1))
            if self._stop.is_set():
                return
            if problem is None:
                notify("WATCHDOG=1", *([status("serving; the database answers")] if last is not None else []))
            else:  # no ping: systemd restarts a service that stays unhealthy past WatchdogSec
                log.error("watchdog: %s", problem)
                notify(status(f"unhealthy: {problem}"))
            last = problem

    def stopping(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        if self.active:
            notify("STOPPING=1", status("stopping"))
