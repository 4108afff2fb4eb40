"""A TCP relay to the API server: for pods, from the pods' network; for a test, one that it
may cut between a node and the API server.

TLS passes through untouched (the server's certificate names each address a client dials).
Each node of a `Cluster` reaches the API server through a relay of its own (its kubeconfig
names the relay's port). A cut closes every connection at once and refuses new ones
(accepted, then closed) until it is lifted: to the node, the API server is gone; to the API
server, the node is. The pods' relay listens inside a container's network namespace on the
pods' Docker network (`listen_in_netns`), so nothing but that network reaches it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from kubelet_sim.linux import namespaces

_CHUNK = 1 << 16


def listen_in_netns(pid: int, port: int) -> socket.socket:
    """A listening socket on every address of process `pid`'s network namespace (PermissionError
    unless root)."""
    return namespaces.inside(pid, "net", lambda: socket.create_server(("0.0.0.0", port)))


class ApiRelay:
    """Connections accepted on `listening` (default: a new port on loopback) go to host:port."""

    def __init__(self, host: str, port: int, listening: socket.socket | None = None) -> None:
        self._target = (host, port)
        self._server = listening or socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.5)
        self.port: int = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._cut_until = 0.0  # monotonic; math.inf: severed until `restore`
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="api relay", daemon=True)
        self._thread.start()

    @property
    def cut_now(self) -> bool:
        return time.monotonic() < self._cut_until

    def cut(self, seconds: float) -> None:
        """Drop every connection now and refuse new ones for `seconds` (inf: until restore)."""
        with self._lock:
            self._cut_until = time.monotonic() + seconds
            sockets, self._open = set(self._open), set()
        for sock in sockets:
            _close(sock)

    def restore(self) -> None:
        self._cut_until = 0.0

    def close(self) -> None:
        self._closed.set()
        self.cut(float("inf"))
        self._thread.join(2)
        self._server.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self.cut_now:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=self._pump, args=(src, dst), name="api relay pump", daemon=True
                ).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(_CHUNK):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(src)
                self._open.discard(dst)
            _close(src)
            _close(dst)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
