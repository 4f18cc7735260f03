"""uvicorn's server (one process) and supervisor (`--workers N`), telling systemd when they are ready and stop."""

from __future__ import annotations

import socket

import uvicorn
from uvicorn.supervisors import Multiprocess

from buildreport.http.sdnotify import ServiceNotifier


class NotifyingServer(uvicorn.Server):
    """One serving process: ready once it listens, stopping as soon as it is asked to stop."""

    def __init__(self, config: uvicorn.Config, notifier: ServiceNotifier) -> None:
        super().__init__(config)
        self.notifier = notifier

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and not self.should_exit:
            bound = [s.getsockname()[1] for server in self.servers for s in server.sockets or ()]
            self.notifier.ready(bound[0] if bound else None)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.notifier.stopping()
        await super().shutdown(sockets)


class NotifyingSupervisor(Multiprocess):
    """Worker processes: ready once every one of them has finished starting and serves."""

    def __init__(self, config: uvicorn.Config, sock: socket.socket, notifier: ServiceNotifier) -> None:
        super().__init__(config, sockets=[sock])
        self.notifier = notifier
        self.port = sock.getsockname()[1]

    def init_processes(self) -> None:
        super().init_processes()
        # The supervisor's own thread asks the workers, so its pings and these never share a pipe at once.
        timeout = self.config.timeout_worker_healthcheck * 6
        if all(process.wait_until_ready(timeout, self.should_exit) for process in self.processes):
            self.notifier.ready(self.port)

    def terminate_all(self) -> None:
        self.notifier.stopping()
        super().terminate_all()
