"""A counting proxy in front of the Docker socket, so Docker calls are counted from outside.

The agent runs in another process, so its runtime `stats` are out of reach; pointing its
DOCKER_HOST at this socket counts every engine call it makes (method + path, ids folded) with
no change to the agent. Bytes pass through untouched; only request heads are parsed.
"""

from __future__ import annotations

import contextlib
import re
import socket
import socketserver
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

DOCKER_SOCKET = "/var/run/docker.sock"
_VERSION = re.compile(r"^/v[0-9.]+")
_CHUNK = 65536


@dataclass(frozen=True)
class DockerCall:
    time: float
    method: str
    route: str  # e.g. "POST /containers/{id}/start"


def route_of(method: str, target: str) -> str:
    """Fold ids and image names out of a Docker API path, so calls group by kind."""
    path = _VERSION.sub("", target.split("?", 1)[0])
    parts = path.strip("/").split("/")
    if (
        parts[0] in ("containers", "exec")
        and len(parts) >= 2
        and parts[1] not in ("json", "create")
    ):
        parts = [parts[0], "{id}", *parts[2:]]
    elif parts[0] == "images" and len(parts) >= 3 and parts[-1] in ("json", "history"):
        parts = [parts[0], "{name}", parts[-1]]
    return f"{method} /{'/'.join(parts)}"


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        client: socket.socket = self.request
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(self.server.upstream)
        except OSError:
            client.close()
            return
        back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
        back.start()
        try:
            self._forward_requests(client, upstream)
        finally:
            with contextlib.suppress(OSError):
                upstream.shutdown(socket.SHUT_WR)
            back.join()
            upstream.close()

    def _forward_requests(self, client: socket.socket, upstream: socket.socket) -> None:
        """Parse each request head (and skip its Content-Length body); anything else that
        cannot be framed (chunked bodies, upgrades) is piped raw from then on."""
        buffer = b""
        while True:
            while b"\r\n\r\n" not in buffer:
                data = client.recv(_CHUNK)
                if not data:
                    if buffer:
                        upstream.sendall(buffer)
                    return
                buffer += data
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target = [*lines[0].split(" "), "", ""][:2]
            self.server.record(DockerCall(time.time(), method, route_of(method, target)))
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])
            }
            upstream.sendall(head + b"\r\n\r\n")
            if headers.get("transfer-encoding") or headers.get("upgrade"):
                upstream.sendall(buffer)
                _pipe(client, upstream)
                return
            length = int(headers.get("content-length") or 0)
            while len(buffer) < length:
                data = client.recv(_CHUNK)
                if not data:
                    break
                buffer += data
            upstream.sendall(buffer[:length])
            buffer = buffer[length:]


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(_CHUNK):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    request_queue_size = 512  # the default 5 makes a busy agent's connects fail with EAGAIN
    upstream = DOCKER_SOCKET
    owner: DockerProxy

    def record(self, call: DockerCall) -> None:
        self.owner.record(call)


class DockerProxy:
    """Listen on `path`, forward to the engine, keep every call; `calls(since)` reads them."""

    def __init__(self, path: Path, upstream: str = DOCKER_SOCKET) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._calls: list[DockerCall] = []
        path.unlink(missing_ok=True)
        self._server = _Server(str(path), _Handler)
        self._server.upstream = upstream
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    def start(self) -> DockerProxy:
        self._thread.start()
        return self

    def record(self, call: DockerCall) -> None:
        with self._lock:
            self._calls.append(call)

    def calls(self, since: float = 0.0, until: float | None = None) -> Counter[str]:
        """Calls by route made in [since, until)."""
        with self._lock:
            calls = list(self._calls)
        end = until if until is not None else float("inf")
        return Counter(c.route for c in calls if since <= c.time < end)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.path.unlink(missing_ok=True)
