"""The process's plain-HTTP `/healthz`, as the kubelet's `--healthz-port` (10248 on 127.0.0.1 by
default there; off by default here, since many kubelet-sim processes share one host in tests).

It is what a liveness probe reads when kubelet-sim runs as a workload (deploy/workload/): no
TLS and no credentials, so an `httpGet` probe needs nothing. 200 `ok` while every supervised
loop of the process and of its nodes runs; 500 with the first failure otherwise. One request
at a time on one supervised thread: a probe's answer is immediate.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from kubelet_sim.loops.supervise import Supervisor

Check = Callable[[], tuple[bool, str]]


class HealthzServer:
    """`start` binds and serves on the supervisor's thread until `stop`; port 0 picks one."""

    def __init__(self, address: str, port: int, check: Check, supervisor: Supervisor) -> None:
        self._check = check
        self._supervisor = supervisor
        self._stop = threading.Event()
        handler = _handler(check)
        self._server = HTTPServer((address, port), handler)
        self._server.timeout = 0.5  # how soon `stop` is seen between requests
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> HealthzServer:
        self._thread = self._supervisor.thread("healthz", self._serve, self._stop)
        self._thread.start()
        return self

    def _serve(self) -> None:
        while not self._stop.is_set():
            self._server.handle_request()

    def stop(self) -> None:
        """Returns once the thread ended and the port is free."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self._server.server_close()


def _handler(check: Check) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds
            pass

        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/healthz":
                self._reply(404, "404 page not found\n")
                return
            healthy, why = check()
            self._reply(200, "ok") if healthy else self._reply(500, f"healthz check failed: {why}")

        def _reply(self, status: int, text: str) -> None:
            body = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler
