"""A TCP relay to the API server: for pods, from the pods' network; for a test, one that it
may cut between a node and the API server.

TLS passes through untouched (the server's certificate names each address a client dials).
Each node of a `Cluster` reaches the API server through a relay of its own (its kubeconfig
names the relay's port). A cut closes every connection at once and refuses new ones
(accepted, then closed) until it is lifted: to the node, the API server is gone; to the API
server, the node is. The pods' relay listens inside a container's network namespace on the
pods' Docker network (`listen_in_netns`), so nothing but that network reaches it.

Every container on the pods' network may connect, in the process that hosts every node, and
each connection costs two threads and two descriptors: a relay holds at most `Bounds` of them
(docs/security.md, "The pods' API relay"). Past the cap a new connection is accepted and
closed at once; one silent for `Bounds.idle` seconds is closed; an accept that fails (no
descriptor left: EMFILE) is retried after a backoff, so the relay outlives the shortage.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from kubelet_sim.linux.namespaces import Namespace
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.backoff import Backoff

_CHUNK = 1 << 16
_TICK = 0.5  # seconds: how often the accept loop looks for idle connections and for close
_DIAL_TIMEOUT = 5.0  # seconds to reach the API server (on loopback: refused or at once)
_ACCEPT_BACKOFF = (0.1, 2.0)  # a failed accept's retry: first delay, cap (doubling, jittered)

log = get_logger(__name__)


@dataclass(frozen=True)
class Bounds:
    """What one relay holds at most: each connection is two threads and two descriptors."""

    connections: int  # at once; past it a new connection is accepted and closed at once
    per_peer: int  # at once from one source address, so one client cannot take them all
    idle: float  # seconds without a byte either way before a connection is closed


# The pods' relay: every pod of every node shares it. 256 connections are 512 descriptors and
# 512 threads at most; 32 from one pod leave room for 7 more pods that use as many. Ten
# minutes of silence outlast a watch (client-go and our informers end theirs after 5-10 min,
# client-go pings an idle HTTP/2 connection every 30 s), so a live client never meets it.
PODS_BOUNDS = Bounds(connections=256, per_peer=32, idle=600.0)
# A test cluster's node, alone behind its relay on loopback: its informers, a watch per
# referenced ConfigMap or Secret (up to 2 per pod, 110 pods) and its request pool.
NODE_BOUNDS = Bounds(connections=512, per_peer=512, idle=600.0)


def listen_in_netns(netns: Namespace, port: int) -> socket.socket:
    """A listening socket on every address of network namespace `netns` (PermissionError
    unless root)."""
    return netns.run(lambda: socket.create_server(("0.0.0.0", port)))


class _Connection:
    """One relayed connection: its sockets, its last byte's time, its threads still running."""

    def __init__(self, client: socket.socket, peer: str) -> None:
        self.client = client
        self.peer = peer
        self.upstream: socket.socket | None = None
        self.last = time.monotonic()
        self.threads = 1  # its first thread dials, then pumps client → upstream
        self.ended = False
        self._lock = threading.Lock()

    def attach(self, upstream: socket.socket) -> bool:
        """Take the dialled upstream; False (and it is closed) when the connection already
        ended (a cut or the idle reaper came first)."""
        with self._lock:
            if not self.ended:
                self.upstream = upstream
                return True
        _close(upstream)
        return False

    def end(self) -> None:
        """Close both sockets: each pump's recv returns, so its thread ends."""
        with self._lock:
            self.ended = True
            sockets = [self.client, self.upstream]
        for sock in sockets:
            if sock is not None:
                _close(sock)


class ApiRelay:
    """Connections accepted on `listening` (default: a new port on loopback) go to host:port,
    at most `bounds` of them."""

    def __init__(
        self,
        host: str,
        port: int,
        listening: socket.socket | None = None,
        bounds: Bounds = NODE_BOUNDS,
    ) -> None:
        self._target = (host, port)
        self.bounds = bounds
        self._server = listening or socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(_TICK)
        self.port: int = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[_Connection] = set()  # until their last thread ends
        self._peers: Counter[str] = Counter()
        self._full = False  # refusing for the cap: logged once per spell
        self._cut_until = 0.0  # monotonic; math.inf: severed until `restore`
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="api relay", daemon=True)
        self._thread.start()

    @property
    def cut_now(self) -> bool:
        return time.monotonic() < self._cut_until

    @property
    def connections(self) -> int:
        """Connections held now (a thread of theirs still runs)."""
        with self._lock:
            return len(self._open)

    def cut(self, seconds: float) -> None:
        """Drop every connection now and refuse new ones for `seconds` (inf: until restore)."""
        with self._lock:
            self._cut_until = time.monotonic() + seconds
            held = list(self._open)
        for conn in held:
            conn.end()

    def restore(self) -> None:
        self._cut_until = 0.0

    def close(self) -> None:
        self._closed.set()
        self.cut(float("inf"))
        self._thread.join(2)
        self._server.close()

    def _accept(self) -> None:
        """Until closed: take connections, end idle ones, and outlive a failing accept."""
        backoff = Backoff(*_ACCEPT_BACKOFF)
        while not self._closed.is_set():
            self._end_idle()
            try:
                client, address = self._server.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if self._closed.is_set():
                    return
                delay = backoff.next_delay()
                log.warning("api relay: accept failed, retrying", error=str(exc), after=delay)
                self._closed.wait(delay)
                continue
            backoff.reset()
            self._admit(client, str(address[0]))

    def _end_idle(self) -> None:
        deadline = time.monotonic() - self.bounds.idle
        with self._lock:
            idle = [conn for conn in self._open if conn.last < deadline and not conn.ended]
        for conn in idle:
            conn.end()

    def _admit(self, client: socket.socket, peer: str) -> None:
        """Serve `client` on a thread of its own, or close it at once: cut, or at a cap."""
        conn = _Connection(client, peer)
        with self._lock:
            full = self._at_cap(peer)
            admitted = not full and not self.cut_now
            if admitted:
                self._open.add(conn)
                self._peers[peer] += 1
            warn, self._full = full and not self._full, full
        if warn:
            log.warning("api relay: at its cap, refusing connections", peer=peer, cap=self.bounds)
        if not admitted:
            _close(client)
            return
        if not self._start(self._serve, conn):
            self._thread_ended(conn)

    def _at_cap(self, peer: str) -> bool:
        """Under the lock."""
        bounds = self.bounds
        return len(self._open) >= bounds.connections or self._peers[peer] >= bounds.per_peer

    def _serve(self, conn: _Connection) -> None:
        """Dial the API server, then pump both ways (the other way on a second thread)."""
        try:
            upstream = socket.create_connection(self._target, timeout=_DIAL_TIMEOUT)
        except OSError:
            self._thread_ended(conn)
            return
        upstream.settimeout(None)
        conn.client.settimeout(None)
        if not conn.attach(upstream):
            self._thread_ended(conn)
            return
        with self._lock:
            conn.threads += 1
        if not self._start(self._pump, conn, upstream, conn.client):
            self._thread_ended(conn)
        self._pump(conn, conn.client, upstream)

    def _start(self, target: Callable[..., None], *args: object) -> bool:
        """A connection's thread started; False when none can be (the process is out of
        them)."""
        try:
            threading.Thread(target=target, args=args, name="api relay pump", daemon=True).start()
        except RuntimeError:
            return False
        return True

    def _pump(self, conn: _Connection, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(_CHUNK):
                conn.last = time.monotonic()
                dst.sendall(data)
                conn.last = time.monotonic()
        except OSError:
            pass
        finally:
            self._thread_ended(conn)

    def _thread_ended(self, conn: _Connection) -> None:
        """One of `conn`'s threads is done: the connection ends, and with its last thread it
        leaves the count (its threads, not only its sockets, are what the cap bounds)."""
        conn.end()
        with self._lock:
            conn.threads -= 1
            if conn.threads > 0 or conn not in self._open:
                return
            self._open.discard(conn)
            self._peers[conn.peer] -= 1
            if self._peers[conn.peer] <= 0:
                del self._peers[conn.peer]


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
