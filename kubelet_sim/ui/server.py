"""The web view's HTTP server: the standard library's http.server, server-sent events.

Bounded: a new connection waits for its first bytes in one selector thread (waiting.py), not
a thread of its own, for IDLE_SECONDS at most and MAX_WAITING at once (the oldest goes first);
only a connection with a request gets a worker, MAX_WORKERS at once (beyond: 503), and each
read or write may block HEADER_TIMEOUT seconds at most. A client that may not read the page
(bound to loopback, a client from elsewhere) is closed before any of that.

Read-only (GET and HEAD only). Bound to loopback by default, and then it answers only loopback
clients asking for a loopback Host (a page elsewhere cannot read it through DNS rebinding).
Bound anywhere else it wants a random token, printed with the URL: `?token=` once (it becomes a
same-site cookie) or `Authorization: Bearer`.

Routes: `/` and `/static/*` (the page, shipped in the package: no CDN, no build step);
`/events` (SSE: a snapshot, then nodes, pods, watch records, scheduler events as they change);
`/events/timeline?namespace=&name=` (SSE: the pod's handoff timeline each time it changes);
`/api/snapshot`, `/api/timeline?namespace=&name=` (the same as JSON, once); `/healthz`.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import queue
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.rest import ApiError
from kubelet_sim.logs import get_logger
from kubelet_sim.ui.page_state import Limits, UiState
from kubelet_sim.ui.waiting import WaitingRoom

DEFAULT_ADDRESS = "127.0.0.1"
DEFAULT_PORT = 8765
COOKIE = "kubelet_sim_ui"
KEEPALIVE_SECONDS = 15.0
IDLE_SECONDS = 10.0  # a connection that sends nothing this long is closed
MAX_WAITING = 128  # connections waiting for their first bytes
HEADER_TIMEOUT = 10.0  # a read or write of a worker's connection (slow headers, a stuck reader)
TIMELINE_STREAMS = 16  # timelines shown at once, over every tab (each reads the API and Docker)
SETTLED_TIMELINE_SECONDS = 10.0  # a finished timeline is read again on a change, or this often
# One still starting, more often: Docker's and the journal's steps come unannounced.
STARTING_TIMELINE_SECONDS = 0.5
STATIC = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none';"
    " base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

# Every browser's stream and timelines at once, and a few plain requests beside them.
MAX_WORKERS = Limits().subscribers + TIMELINE_STREAMS + 16
BUSY = b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

log = get_logger("kubelet_sim.ui")

Timeline = Callable[[str, str], Json]


class UiError(Exception):
    """The server cannot start (address in use, ...), in one line."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_name(header: str) -> str:
    """`127.0.0.1:8765` → `127.0.0.1`; `[::1]:8765` → `::1`."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


@dataclass(frozen=True)
class Access:
    """Who may read the page: loopback clients only (token None), or whoever shows the token."""

    token: str | None

    def refuse(self, client: str, headers: Any, query: dict[str, list[str]]) -> int | None:
        """None to serve the request, else the HTTP status that refuses it."""
        if self.token is None:
            if not is_loopback(client):
                return 403
            if not is_loopback(_host_name(str(headers.get("Host") or ""))):
                return 403  # DNS rebinding: a page of another origin reaching 127.0.0.1
            return None
        offered = [*query.get("token", [])]
        auth = str(headers.get("Authorization") or "")
        if auth.startswith("Bearer "):
            offered.append(auth[len("Bearer ") :])
        cookie = SimpleCookie(str(headers.get("Cookie") or ""))
        if COOKIE in cookie:
            offered.append(cookie[COOKIE].value)
        if any(hmac.compare_digest(o.encode(), self.token.encode()) for o in offered):
            return None
        return 401


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # the listen backlog (socketserver's 5 drops a burst's SYNs)
    ui: UiServer
    room: WaitingRoom
    workers: threading.BoundedSemaphore

    def process_request(self, request: Any, client_address: Any) -> None:
        """Not a thread per connection: the waiting room until it has a request."""
        if self.ui.access.token is None and not is_loopback(str(client_address[0])):
            self.shutdown_request(request)  # refused before any thread or parsing
            return
        self.room.admit(request, client_address)

    def _serve_ready(self, request: Any, client_address: Any) -> None:
        if not self.workers.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.setblocking(False)
                request.send(BUSY)
            self.shutdown_request(request)
            return

        def work() -> None:
            try:
                self.process_request_thread(request, client_address)
            finally:
                self.workers.release()

        threading.Thread(target=work, name="ui worker", daemon=True).start()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "kubelet-sim-ui"
    timeout = HEADER_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:
        # The path only: a query may hold the token.
        path = urlsplit(getattr(self, "path", "") or "").path
        log.debug("ui request", client=self.client_address[0], method=self.command, path=path)

    # -- the routes --------------------------------------------------------------------------

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_POST(self) -> None:
        self._refuse_write()

    do_PUT = do_PATCH = do_DELETE = do_POST

    def _refuse_write(self) -> None:
        allow = {"Allow": "GET, HEAD"}
        self._send_json({"error": "read-only"}, HTTPStatus.METHOD_NOT_ALLOWED, allow)

    def do_GET(self) -> None:
        ui = self.server.ui
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        refused = ui.access.refuse(self.client_address[0], self.headers, query)
        if refused is not None:
            self._send_json({"error": HTTPStatus(refused).phrase}, refused)
            return
        if "token" in query and ui.access.token is not None:
            # Once with the token in the URL: from now on a cookie, and a URL without it.
            self.send_response(HTTPStatus.SEE_OTHER)
            self.send_header(
                "Set-Cookie", f"{COOKIE}={ui.access.token}; HttpOnly; SameSite=Strict; Path=/"
            )
            self.send_header("Location", url.path or "/")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path = url.path
        try:
            if path in ("/", "/index.html"):
                self._send_static("index.html")
            elif path.startswith("/static/") and path[len("/static/") :] in STATIC:
                self._send_static(path[len("/static/") :])
            elif path == "/healthz":
                self._send_json({"ok": True})
            elif path == "/api/snapshot":
                self._send_json(ui.state.snapshot())
            elif path == "/api/timeline":
                self._send_json(ui.timeline(*self._pod(query)))
            elif path == "/events":
                self._events()
            elif path == "/events/timeline":
                self._timeline_events(*self._pod(query))
            else:
                self._send_json({"error": "not found"}, HTTPStatus.NOT_FOUND)
        except _BadRequest as exc:
            self._send_json({"error": str(exc)}, HTTPStatus.BAD_REQUEST)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the browser went away

    def _pod(self, query: dict[str, list[str]]) -> tuple[str, str]:
        namespace, name = query.get("namespace", [""])[0], query.get("name", [""])[0]
        if not namespace or not name or "/" in namespace + name:
            raise _BadRequest("give namespace and name")
        return namespace, name

    # -- answers -----------------------------------------------------------------------------

    def _headers(
        self, status: int, content_type: str, length: int | None, extra: dict[str, str] | None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if length is not None:
            self.send_header("Content-Length", str(length))
        for key, value in {**SECURITY_HEADERS, **(extra or {})}.items():
            self.send_header(key, value)
        self.end_headers()

    def _send_json(
        self, body: Any, status: int = HTTPStatus.OK, extra: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self._headers(status, "application/json", len(data), extra)
        if self.command != "HEAD":
            self.wfile.write(data)

    def _send_static(self, name: str) -> None:
        data = (resources.files("kubelet_sim.ui") / "static" / name).read_bytes()
        self._headers(HTTPStatus.OK, STATIC[name], len(data), None)
        if self.command != "HEAD":
            self.wfile.write(data)

    def _sse(self, name: str, data: Any) -> None:
        payload = json.dumps(data, separators=(",", ":"))
        self.wfile.write(f"event: {name}\ndata: {payload}\n\n".encode())
        self.wfile.flush()

    def _start_sse(self) -> None:
        self._headers(HTTPStatus.OK, "text/event-stream; charset=utf-8", None, None)
        self.wfile.write(b"retry: 1000\n\n")

    def _events(self) -> None:
        ui = self.server.ui
        subscribed = ui.state.subscribe()
        if subscribed is None:
            self._send_json({"error": "too many viewers"}, HTTPStatus.SERVICE_UNAVAILABLE)
            return
        sub, snapshot = subscribed
        try:
            self._start_sse()
            self._sse("snapshot", snapshot)
            idle = 0.0
            while not ui.stopping.is_set() and not sub.closed:
                try:
                    name, data = sub.queue.get(timeout=0.5)
                except queue.Empty:
                    idle += 0.5
                    if idle >= KEEPALIVE_SECONDS:
                        self.wfile.write(b": keepalive\n\n")
                        self.wfile.flush()
                        idle = 0.0
                    continue
                idle = 0.0
                self._sse(name, data)
        finally:
            ui.state.unsubscribe(sub)

    def _timeline_events(self, namespace: str, name: str) -> None:
        ui = self.server.ui
        if not ui.timeline_slots.acquire(blocking=False):
            self._send_json({"error": "too many timelines shown"}, HTTPStatus.SERVICE_UNAVAILABLE)
            return
        try:
            self._timeline_stream(namespace, name)
        finally:
            ui.timeline_slots.release()

    def _timeline_stream(self, namespace: str, name: str) -> None:
        ui = self.server.ui
        self._start_sse()
        last: Json | None = None
        version = -2
        while not ui.stopping.is_set():
            uid_version = ui.state.pod_version_of(namespace, name)
            try:
                current = ui.timeline(namespace, name)
            except Exception as exc:  # Docker or the API away: say so, try again
                current = {"pod": f"{namespace}/{name}", "error": str(exc)[:300], "steps": []}
            if current != last:
                self._sse("timeline", current)
                last = current
            else:
                self.wfile.write(b": same\n\n")
                self.wfile.flush()
            if current.get("gone"):
                break
            wait = SETTLED_TIMELINE_SECONDS if current.get("settled") else STARTING_TIMELINE_SECONDS
            uid, version = uid_version
            if uid:
                ui.state.wait_change(uid, version, wait)
            else:
                ui.stopping.wait(wait)


class _BadRequest(Exception):
    pass


class UiServer:
    """The server on its thread; `url` says where (with the token, if one is needed)."""

    def __init__(
        self,
        state: UiState,
        timeline: Timeline,
        *,
        address: str = DEFAULT_ADDRESS,
        port: int = DEFAULT_PORT,
        token: str | None = None,
    ) -> None:
        self.state = state
        self._timeline = timeline
        if not is_loopback(address) and token is None:
            token = secrets.token_urlsafe(24)
        self.access = Access(token)
        self.stopping = threading.Event()
        self.timeline_slots = threading.BoundedSemaphore(TIMELINE_STREAMS)
        try:
            self._server = _Server((address, port), _Handler)
        except OSError as exc:
            raise UiError(f"cannot serve the web view on {address}:{port}: {exc.strerror}") from exc
        self._server.ui = self
        self._server.room = WaitingRoom(
            self._server._serve_ready, idle=IDLE_SECONDS, cap=MAX_WAITING
        )
        self._server.workers = threading.BoundedSemaphore(MAX_WORKERS)
        self.address = address
        self.port = int(self._server.server_address[1])
        self._thread: threading.Thread | None = None

    def timeline(self, namespace: str, name: str) -> Json:
        try:
            return self._timeline(namespace, name)
        except ApiError as exc:
            return {"pod": f"{namespace}/{name}", "error": str(exc)[:300], "steps": []}

    @property
    def url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        if host in ("0.0.0.0", "[::]"):
            host = "127.0.0.1" if host == "0.0.0.0" else "[::1]"
        base = f"http://{host}:{self.port}/"
        return f"{base}?token={self.access.token}" if self.access.token else base

    def start(self) -> UiServer:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, name="ui server"
        )
        self._thread.daemon = True
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.state.wake()
        self._server.shutdown()
        self._server.room.close()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)


__all__ = ["DEFAULT_ADDRESS", "DEFAULT_PORT", "Access", "UiError", "UiServer", "is_loopback"]
