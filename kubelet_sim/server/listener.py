"""The kubelet API's connections: one selector thread waits for every client, a bounded pool
of threads does the work, for every node of the process.

Each node binds its own socket (`bind`: node i keeps its port, so the port a Node advertises
reaches exactly that node) with its own TLS context, handler and counters (an `Endpoint`); one
`Listener` serves them all, so a thousand virtual nodes cost one selector thread and one pool,
and share `limits` (connections, workers and streams are caps for the process). A connection
belongs to the endpoint whose socket accepted it. `close(endpoint)` ends one node's serving
(its socket and its waiting connections); `stop` ends the thread and the pool.

Waiting costs no thread. A connection is a socket in the selector, with a deadline, while it
is in its TLS handshake (`handshake_timeout` from accept), while its request's headers arrive
(`header_timeout` from the handshake or the request's first byte, at most `max_header_bytes`)
and between keep-alive requests (`idle_timeout`). When it becomes readable a worker takes one
non-blocking step (a handshake step, the bytes that are there) and hands it back, so a client
that sends slowly or not at all holds a file descriptor and a few kilobytes until its deadline,
never a thread. Only a whole request reaches a worker's handler (`workers` at once); the
handler authenticates it there, and only then may hand back the rest of a long-running one
(exec, attach, port-forward, a followed log), which moves to a thread of its own (`max_streams`
at once, else 503) and frees the worker: a client without credentials never gets a thread.

At `max_connections` open connections (the process's, for every node) a new one is let in and
the connection that has waited longest for its client is closed to make room, one that never
authenticated before one that did (`make_room`); only when every connection has a request in
hand (served, or a stream) is the new one reset (counted, one log line per burst). Why that
rule: a waiting connection costs a descriptor and nothing more until it keeps out a client with
a request to make. A legitimate client sends its request right after its handshake and is
served in milliseconds, so it waits least; a flood of connections that never authenticate
(or authenticated once and idle) evicts its own oldest members first, and an attacker must
keep opening connections, each with a TLS handshake, to keep a place. A connection whose
requests fail authentication `max_auth_failures` times is closed after that answer (its
`Connection: close` says so), and one that failed counts as never authenticated. The listen
backlog is the kernel's maximum, as Go's listener takes it. Why not asyncio:
everything behind a request blocks (docker-py, the TokenReview/SubjectAccessReview client, the
stream pumps), so an event loop would hand each request to threads anyway; this keeps the
threads and makes waiting free. bench/kubelet_api.py measures both models.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import selectors
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubelet_sim.server.budgets import FailureBudget
from kubelet_sim.server.connections import (
    BUSY,
    HANDSHAKE,
    HEADERS,
    IDLE,
    TIMEOUT_REASON,
    Connection,
    Endpoint,
    Serve,
    Stream,
    close_write_and_drain,
)
from kubelet_sim.server.exchange import BadRequest, Exchange, refusal
from kubelet_sim.server.pool import WorkerPool
from kubelet_sim.server.settings import ConnectionLimits
from kubelet_sim.server.tokens import TokenGuard

if TYPE_CHECKING:
    from kubelet_sim.loops.supervise import Supervisor

REFUSAL_LOG_INTERVAL = 10.0


def kernel_backlog() -> int:
    """net.core.somaxconn (Go's maxListenerBacklog), else the C library's SOMAXCONN."""
    try:
        return max(int(Path("/proc/sys/net/core/somaxconn").read_text().split()[0]), 1)
    except (OSError, ValueError, IndexError):
        return socket.SOMAXCONN


class Listener:
    """One selector thread and one worker pool for every node's socket in the process (a
    thousand virtual nodes cost no thread each); `limits` are shared by all of them."""

    def __init__(self, limits: ConnectionLimits, log: Any, *, tokens: TokenGuard) -> None:
        """`tokens`: the process's bearer tokens' cache and budgets, for every node here."""
        self.limits, self.log = limits, log
        self._pool = WorkerPool(limits.workers, "kubelet-api")
        self.tokens = tokens
        self.certificates = FailureBudget()  # client certificates' failed checks, likewise
        self._streams = threading.BoundedSemaphore(limits.max_streams)
        self._lock = threading.Lock()
        self._open = 0
        self._handback: list[tuple[Connection, int]] = []
        self._endpoints: set[Endpoint] = set()  # served: the selector thread follows this set
        self._running = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_w.setblocking(False)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seq = itertools.count()
        self._refused_since_log = 0
        self._refusal_logged = 0.0

    def bind(
        self,
        address: str,
        port: int,
        context: Callable[[], ssl.SSLContext],
        serve: Serve,
        log: Any,
    ) -> Endpoint:
        """A node's socket, bound and listening now (its port is known), served from `open`.
        Raises OSError (the port is taken)."""
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        sock = socket.create_server(
            (address, port), family=family, backlog=self.limits.backlog or kernel_backlog()
        )
        sock.setblocking(False)
        return Endpoint(sock, context, serve, log)

    def start(self, supervisor: Supervisor) -> None:
        """The selector thread, under `supervisor` (once: later calls do nothing)."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = supervisor.thread("kubelet-server", self.run, self._stop)
        self._thread.start()

    def open(self, endpoint: Endpoint) -> None:
        """Accept on the endpoint's socket from now on."""
        with self._lock:
            self._endpoints.add(endpoint)
        self._wake()

    def close(self, endpoint: Endpoint, timeout: float = 10.0) -> None:
        """Stop accepting on this endpoint: its socket and its waiting connections are closed
        (requests being served finish); the other endpoints go on."""
        with self._lock:
            self._endpoints.discard(endpoint)
            running = self._running
        if running:
            self._wake()
            if endpoint.released.wait(timeout):
                return
        self._release(endpoint)  # no selector thread (or a stuck one): close it here

    def stop(self) -> None:
        """The selector thread and the pool end; every socket still open is closed."""
        self._stop.set()
        self._wake()
        self._pool.shutdown()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(10)
        with self._lock:
            left, self._endpoints = self._endpoints, set()
        for endpoint in left:
            self._release(endpoint)
        if thread is None or not thread.is_alive():
            self._wake_r.close()
            self._wake_w.close()

    @property
    def open_connections(self) -> int:
        with self._lock:
            return self._open

    # -- the selector thread ---------------------------------------------------------------

    def run(self) -> None:
        """Until stop(): accept, wait on every parked connection, expire deadlines."""
        selecting = _Selecting(self)
        try:
            selecting.follow_endpoints()
            while not self._stop.is_set():
                for key, _mask in selecting.selector.select(selecting.timeout()):
                    selecting.ready(key.data)
                selecting.expire()
        finally:
            selecting.end()

    def _accept(self, endpoint: Endpoint, selecting: _Selecting) -> None:
        """Accept what waits on the endpoint's socket, each connection parked at once (so the
        next one can make room from it)."""
        for _ in range(1024):  # then the parked connections get their turn
            try:
                sock, address = endpoint.sock.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:  # out of file descriptors: the kernel keeps them queued
                self._refused(endpoint, "accept failed", str(exc))
                break
            peer = f"{address[0]}:{address[1]}"
            if not self._admit(endpoint) and not (selecting.make_room() and self._admit(endpoint)):
                # a reset, not a silent close: the client's next read fails at once
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
                endpoint.counters.add(
                    "kubelet_sim_server_connections_refused_total", reason="max_connections"
                )
                self._refused(
                    endpoint, "too many connections", f"{self.limits.max_connections} busy"
                )
                continue
            endpoint.counters.add("kubelet_sim_server_connections")
            try:
                context = endpoint.context()  # made at the node's first connection
            except OSError as exc:  # the files went bad since the start's check
                context = None
                endpoint.log.error("cannot use the serving certificate", error=_one_line(exc))
            try:
                if context is None:
                    raise ConnectionAbortedError("no serving certificate")
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                tls = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            except OSError as exc:  # reset before we got to it
                endpoint.log.debug("connection ended", client=peer, error=str(exc))
                sock.close()
                with self._lock:
                    self._open -= 1
                    endpoint.open_connections -= 1
                endpoint.counters.add("kubelet_sim_server_connections", -1)
                continue
            deadline = time.monotonic() + self.limits.handshake_timeout
            selecting.park(Connection(tls, endpoint, peer, deadline), selectors.EVENT_READ)

    def _admit(self, endpoint: Endpoint) -> bool:
        """One more open connection, if under the cap."""
        with self._lock:
            if self._open >= self.limits.max_connections:
                return False
            self._open += 1
            endpoint.open_connections += 1
            return True

    def _refused(self, endpoint: Endpoint, what: str, detail: str) -> None:
        """One line per burst of refusals, not one per connection."""
        now = time.monotonic()
        with self._lock:
            self._refused_since_log += 1
            if now - self._refusal_logged < REFUSAL_LOG_INTERVAL:
                return
            count, self._refused_since_log, self._refusal_logged = self._refused_since_log, 0, now
        endpoint.log.warning("connections refused", reason=what, detail=detail, count=count)

    # -- from any thread -------------------------------------------------------------------

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _park(self, conn: Connection, events: int = selectors.EVENT_READ) -> None:
        with self._lock:
            self._handback.append((conn, events))
        self._wake()

    def _close(self, conn: Connection) -> None:
        with self._lock:
            if conn.closed:
                return
            conn.closed = True
            self._open -= 1
            conn.endpoint.open_connections -= 1
        conn.endpoint.counters.add("kubelet_sim_server_connections", -1)
        with contextlib.suppress(OSError):
            conn.sock.close()

    @staticmethod
    def _release(endpoint: Endpoint) -> None:
        with contextlib.suppress(OSError):
            endpoint.sock.close()
        endpoint.released.set()

    # -- a worker: one non-blocking step, or a whole request -------------------------------

    def _step(self, conn: Connection) -> None:
        try:
            if conn.state == HANDSHAKE and not self._handshake(conn):
                return
            while True:
                request = self._read_head(conn)
                if request is None:
                    return
                head, rest = request
                try:
                    exchange = Exchange.parse(conn.sock, head, rest)
                except BadRequest as bad:
                    self._refuse(conn, bad.status, bad.text, "bad_request")
                    return
                conn.state = BUSY
                conn.sock.settimeout(self.limits.write_timeout)
                exchange.last_failure_allowed = (
                    conn.auth_failures + 1 >= self.limits.max_auth_failures
                )
                stream = conn.endpoint.serve(exchange)
                if stream is not None:
                    self._start_stream(conn, stream)
                    return
                if exchange.authenticated:
                    conn.authenticated = True
                elif exchange.authenticated is False:
                    conn.authenticated = False
                    conn.auth_failures += 1
                    if exchange.last_failure_allowed:
                        conn.endpoint.counters.add(
                            "kubelet_sim_server_connections_refused_total",
                            reason="authentication_failures",
                        )
                        self._close(conn)
                        return
                if exchange.close_connection or conn.closed:
                    self._close(conn)
                    return
                conn.sock.setblocking(False)
                conn.buffer = bytearray(exchange.rfile.read())  # a pipelined next request
                conn.state = IDLE
                conn.deadline = time.monotonic() + self.limits.idle_timeout
                if not conn.buffer:
                    self._park(conn)
                    return
        except OSError as exc:  # the client left mid-request, or a write timed out
            conn.endpoint.log.debug("connection ended", client=conn.peer, error=str(exc))
            self._close(conn)
        except Exception:
            conn.endpoint.log.exception("connection failed", client=conn.peer)
            self._close(conn)

    def _handshake(self, conn: Connection) -> bool:
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._park(conn)
            return False
        except ssl.SSLWantWriteError:
            self._park(conn, selectors.EVENT_WRITE)
            return False
        except OSError as exc:  # Go's "http: TLS handshake error from …"
            conn.endpoint.log.info("TLS handshake error", client=conn.peer, error=_one_line(exc))
            conn.endpoint.counters.add(
                "kubelet_sim_server_connections_refused_total", reason="handshake"
            )
            self._close(conn)
            return False
        conn.state = HEADERS
        conn.deadline = time.monotonic() + self.limits.header_timeout
        return True

    def _read_head(self, conn: Connection) -> tuple[bytes, bytes] | None:
        """The request line and headers, and what followed; None once parked or closed."""
        searched = 0
        while True:
            end = conn.buffer.find(b"\r\n\r\n", max(0, searched - 3))
            if end > self.limits.max_header_bytes or (
                end < 0 and len(conn.buffer) > self.limits.max_header_bytes
            ):
                self._refuse(conn, 431, "Request Header Fields Too Large", "header_too_large")
                return None
            if end >= 0:
                head, rest = bytes(conn.buffer[:end]), bytes(conn.buffer[end + 4 :])
                conn.buffer.clear()
                return head.lstrip(b"\r\n"), rest
            searched = len(conn.buffer)
            try:
                chunk = conn.sock.recv(65536)
            except (ssl.SSLWantReadError, BlockingIOError):
                self._park(conn)
                return None
            except ssl.SSLWantWriteError:
                self._park(conn, selectors.EVENT_WRITE)
                return None
            if not chunk:  # the client hung up
                self._close(conn)
                return None
            if conn.state == IDLE:  # a keep-alive connection's next request begins
                conn.state = HEADERS
                conn.deadline = time.monotonic() + self.limits.header_timeout
            conn.buffer += chunk

    def _refuse(self, conn: Connection, status: int, text: str, reason: str) -> None:
        conn.endpoint.counters.add("kubelet_sim_server_connections_refused_total", reason=reason)
        conn.endpoint.log.info("bad request", client=conn.peer, status=status, reason=text)
        conn.sock.settimeout(1.0)
        with contextlib.suppress(OSError):
            conn.sock.sendall(refusal(status, text))
            close_write_and_drain(conn.sock)
        self._close(conn)

    def _start_stream(self, conn: Connection, rest: Stream) -> None:
        if not self._streams.acquire(blocking=False):
            self._refused(conn.endpoint, "too many streams", f"{self.limits.max_streams} running")
            self._refuse(conn, 503, "Service Unavailable", "max_streams")
            return
        conn.endpoint.counters.add("kubelet_sim_server_streams")

        def stream() -> None:
            try:
                rest()
            except OSError:
                pass
            except Exception:
                conn.endpoint.log.exception("stream failed", client=conn.peer)
            finally:
                self._close(conn)
                conn.endpoint.counters.add("kubelet_sim_server_streams", -1)
                self._streams.release()

        threading.Thread(target=stream, name="kubelet-api-stream", daemon=True).start()


class _Selecting:
    """The selector thread's state for one run of its loop: what it waits on, and until when."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self.selector = selectors.DefaultSelector()
        self.heap: list[tuple[float, int, int, Connection]] = []
        self.parked: dict[int, Connection] = {}
        # parked, oldest first: [never authenticated, authenticated] (what makes room first)
        self.waiting: tuple[dict[int, Connection], dict[int, Connection]] = ({}, {})
        self.served: set[Endpoint] = set()
        self.selector.register(listener._wake_r, selectors.EVENT_READ, "wake")

    def timeout(self) -> float | None:
        return max(0.0, self.heap[0][0] - time.monotonic()) if self.heap else None

    def ready(self, data: Any) -> None:
        listener = self.listener
        if isinstance(data, Endpoint):
            if data in self.served:
                listener._accept(data, self)
        elif data == "wake":
            with contextlib.suppress(OSError):
                listener._wake_r.recv(65536)
            self.follow_endpoints()
            with listener._lock:
                back, listener._handback = listener._handback, []
            for conn, events in back:
                self.park(conn, events)
        elif id(data) in self.parked:
            self.unpark(data)
            try:
                listener._pool.submit(functools.partial(listener._step, data))
            except RuntimeError:  # stopping: the pool takes no more work
                listener._close(data)

    def park(self, conn: Connection, events: int) -> None:
        conn.generation += 1
        if conn.endpoint not in self.served:  # its node stopped serving meanwhile
            self.listener._close(conn)
            return
        try:
            self.selector.register(conn.sock, events, conn)
        except (OSError, ValueError):  # closed under us: nothing to wait for
            self.listener._close(conn)
            return
        self.parked[id(conn)] = conn
        self.waiting[conn.authenticated][id(conn)] = conn
        heapq.heappush(self.heap, (conn.deadline, next(self.listener._seq), conn.generation, conn))

    def unpark(self, conn: Connection) -> None:
        self.selector.unregister(conn.sock)
        del self.parked[id(conn)]
        del self.waiting[conn.authenticated][id(conn)]
        conn.generation += 1

    def make_room(self) -> bool:
        """Close the connection that has waited longest, one never authenticated first; False
        if none waits (every open connection has a request in hand)."""
        for group, reason in zip(self.waiting, ("unauthenticated", "idle"), strict=True):
            if group:
                conn = next(iter(group.values()))
                self.unpark(conn)
                conn.endpoint.counters.add(
                    "kubelet_sim_server_connections_evicted_total", reason=reason
                )
                conn.endpoint.log.debug("connection closed to make room", client=conn.peer)
                self.listener._close(conn)
                return True
        return False

    def follow_endpoints(self) -> None:
        """Accept on the endpoints opened since, let go of those closed (and their waiting
        connections)."""
        listener = self.listener
        with listener._lock:
            wanted = set(listener._endpoints)
            listener._running = True
        for endpoint in wanted - self.served:
            self.selector.register(endpoint.sock, selectors.EVENT_READ, endpoint)
            self.served.add(endpoint)
        for endpoint in self.served - wanted:
            self.selector.unregister(endpoint.sock)
            self.served.discard(endpoint)
            for conn in [c for c in self.parked.values() if c.endpoint is endpoint]:
                self.unpark(conn)
                listener._close(conn)
            listener._release(endpoint)

    def expire(self) -> None:
        now = time.monotonic()
        while self.heap and self.heap[0][0] <= now:
            _deadline, _seq, generation, conn = heapq.heappop(self.heap)
            if generation != conn.generation or id(conn) not in self.parked:
                continue
            self.unpark(conn)
            conn.endpoint.counters.add(
                "kubelet_sim_server_connections_refused_total", reason=TIMEOUT_REASON[conn.state]
            )
            conn.endpoint.log.debug("connection timed out", client=conn.peer, state=conn.state)
            self.listener._close(conn)

    def end(self) -> None:
        listener = self.listener
        with listener._lock:
            listener._running = False
            gone = self.served - listener._endpoints
        for conn in self.parked.values():
            listener._close(conn)
        for endpoint in gone:  # closed as the loop ended; the others wait for its restart
            listener._release(endpoint)
        self.selector.close()


def _one_line(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__).replace("\n", " ")
