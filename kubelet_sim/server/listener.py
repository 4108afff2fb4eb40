"""The kubelet API's connections: one selector thread waits for every client, a bounded pool
of threads does the work.

Waiting costs no thread. A connection is a socket in the selector, with a deadline, while it
is in its TLS handshake (`handshake_timeout` from accept), while its request's headers arrive
(`header_timeout` from the handshake or the request's first byte, at most `max_header_bytes`)
and between keep-alive requests (`idle_timeout`). When it becomes readable a worker takes one
non-blocking step (a handshake step, the bytes that are there) and hands it back, so a client
that sends slowly or not at all holds a file descriptor and a few kilobytes until its deadline,
never a thread. Only a whole request reaches a worker's handler (`workers` at once); a
long-running one (exec, attach, port-forward, a followed log) is moved to a thread of its own
(`max_streams` at once, else 503) and frees the worker.

Past `max_connections` open connections a new one is reset at once (counted, one log line per
burst); the listen backlog is the kernel's maximum, as Go's listener takes it. Why not asyncio:
everything behind a request blocks (docker-py, the TokenReview/SubjectAccessReview client, the
stream pumps), so an event loop would hand each request to threads anyway; this keeps the
threads and makes waiting free. bench/kubelet_api.py measures both models.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import queue
import selectors
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubelet_sim.server.exchange import BadRequest, Exchange, refusal
from kubelet_sim.server.metrics import Family, Sample
from kubelet_sim.server.settings import ConnectionLimits

HANDSHAKE, HEADERS, IDLE, BUSY = "handshake", "headers", "idle", "busy"
_TIMEOUT_REASON = {HANDSHAKE: "handshake_timeout", HEADERS: "header_timeout", IDLE: "idle_timeout"}
REFUSAL_LOG_INTERVAL = 10.0


def kernel_backlog() -> int:
    """net.core.somaxconn (Go's maxListenerBacklog), else the C library's SOMAXCONN."""
    try:
        return max(int(Path("/proc/sys/net/core/somaxconn").read_text().split()[0]), 1)
    except (OSError, ValueError, IndexError):
        return socket.SOMAXCONN


class Counters:
    """The listener's counters and gauges, for /metrics."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self.help: dict[str, tuple[str, str]] = {}

    def add(self, name: str, amount: float = 1.0, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def get(self, name: str, **labels: str) -> float:
        with self._lock:
            return self._values.get((name, tuple(sorted(labels.items()))), 0.0)

    def families(self) -> list[Family]:
        with self._lock:
            values = dict(self._values)
        out: list[Family] = []
        for name, (kind, text) in sorted(self.help.items()):
            samples = [
                Sample(dict(labels), v) for (n, labels), v in sorted(values.items()) if n == name
            ]
            out.append(Family(name, kind, text, samples))
        return out


class Connection:
    def __init__(self, sock: ssl.SSLSocket, peer: str, deadline: float) -> None:
        self.sock = sock
        self.peer = peer
        self.state = HANDSHAKE
        self.deadline = deadline
        self.buffer = bytearray()
        self.generation = 0  # a deadline in the heap counts only for the parking it was set for
        self.closed = False


Serve = Callable[[Exchange], None]
WORKER_IDLE = 30.0  # a worker with nothing to do this long ends: after a burst, back to none


class _Pool:
    """At most `size` threads, made when work waits and none is free, gone when idle."""

    def __init__(self, size: int, name: str) -> None:
        self._size, self._name = size, name
        self._work: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = self._idle = self._pending = 0
        self._stopped = False

    def submit(self, work: Callable[[], None]) -> None:
        with self._lock:
            if self._stopped:
                raise RuntimeError("the pool is stopped")
            self._pending += 1
            self._work.put(work)  # under the lock: a worker timing out sees it pending
            spawn = self._pending > self._idle and self._threads < self._size
            if spawn:
                self._threads += 1
        if spawn:
            threading.Thread(target=self._worker, name=self._name, daemon=True).start()

    def _worker(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            try:
                work = self._work.get(timeout=WORKER_IDLE)
            except queue.Empty:
                with self._lock:
                    self._idle -= 1
                    if self._pending == 0:
                        self._threads -= 1
                        return
                continue
            with self._lock:
                self._idle -= 1
                if work is not None:
                    self._pending -= 1
                else:
                    self._threads -= 1
            if work is None:
                return
            work()

    def shutdown(self) -> None:
        with self._lock:
            self._stopped = True
            for _ in range(self._threads):
                self._work.put(None)


class Listener:
    def __init__(
        self,
        address: str,
        port: int,
        limits: ConnectionLimits,
        context: ssl.SSLContext,
        serve: Serve,
        is_stream: Callable[[Exchange], bool],
        log: Any,
    ) -> None:
        self.limits, self.context, self.serve, self.is_stream, self.log = (
            limits, context, serve, is_stream, log
        )  # fmt: skip
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.sock = socket.create_server(
            (address, port), family=family, backlog=limits.backlog or kernel_backlog()
        )
        self.sock.setblocking(False)
        self.port = int(self.sock.getsockname()[1])
        self.counters = Counters()
        self.counters.help = {
            "kubelet_sim_server_connections": ("gauge", "Connections open to the kubelet API."),
            "kubelet_sim_server_connections_refused_total": (
                "counter", "Connections refused or closed by a limit, by reason.",
            ),
            "kubelet_sim_server_streams": ("gauge", "Long-running requests being served."),
            "kubelet_sim_server_stream_refusals_total": (
                "counter", "Streams ended or refused by a limit or a framing error, by reason.",
            ),
        }  # fmt: skip
        self._pool = _Pool(limits.workers, "kubelet-api")
        self._streams = threading.BoundedSemaphore(limits.max_streams)
        self._lock = threading.Lock()
        self._open = 0
        self._handback: list[tuple[Connection, int]] = []
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_w.setblocking(False)
        self._stop = threading.Event()
        self._seq = itertools.count()
        self._refused_since_log = 0
        self._refusal_logged = 0.0

    # -- the selector thread ---------------------------------------------------------------

    def run(self) -> None:
        """Until stop(): accept, wait on every parked connection, expire deadlines."""
        selector = selectors.DefaultSelector()
        heap: list[tuple[float, int, int, Connection]] = []
        parked: dict[int, Connection] = {}
        selector.register(self.sock, selectors.EVENT_READ, None)
        selector.register(self._wake_r, selectors.EVENT_READ, "wake")

        def park(conn: Connection, events: int) -> None:
            conn.generation += 1
            try:
                selector.register(conn.sock, events, conn)
            except (OSError, ValueError):  # closed under us: nothing to wait for
                self._close(conn)
                return
            parked[id(conn)] = conn
            heapq.heappush(heap, (conn.deadline, next(self._seq), conn.generation, conn))

        try:
            while not self._stop.is_set():
                timeout = max(0.0, heap[0][0] - time.monotonic()) if heap else None
                for key, _mask in selector.select(timeout):
                    if key.data is None:
                        for conn in self._accept():
                            park(conn, selectors.EVENT_READ)
                    elif key.data == "wake":
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(65536)
                        with self._lock:
                            back, self._handback = self._handback, []
                        for conn, events in back:
                            park(conn, events)
                    else:
                        conn = key.data
                        selector.unregister(conn.sock)
                        del parked[id(conn)]
                        conn.generation += 1
                        try:
                            self._pool.submit(functools.partial(self._step, conn))
                        except RuntimeError:  # stopping: the pool takes no more work
                            self._close(conn)
                now = time.monotonic()
                while heap and heap[0][0] <= now:
                    _deadline, _seq, generation, conn = heapq.heappop(heap)
                    if generation != conn.generation or id(conn) not in parked:
                        continue
                    selector.unregister(conn.sock)
                    del parked[id(conn)]
                    self.counters.add(
                        "kubelet_sim_server_connections_refused_total",
                        reason=_TIMEOUT_REASON[conn.state],
                    )
                    self.log.debug("connection timed out", client=conn.peer, state=conn.state)
                    self._close(conn)
        finally:
            for conn in parked.values():
                self._close(conn)
            selector.close()

    def _accept(self) -> list[Connection]:
        accepted: list[Connection] = []
        for _ in range(1024):  # then the parked connections get their turn
            try:
                sock, address = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:  # out of file descriptors: the kernel keeps them queued
                self._refused("accept failed", str(exc))
                break
            peer = f"{address[0]}:{address[1]}"
            with self._lock:
                full = self._open >= self.limits.max_connections
                if not full:
                    self._open += 1
            if full:
                # a reset, not a silent close: the client's next read fails at once
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
                self.counters.add(
                    "kubelet_sim_server_connections_refused_total", reason="max_connections"
                )
                self._refused("too many connections", f"{self.limits.max_connections} open")
                continue
            self.counters.add("kubelet_sim_server_connections")
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                tls = self.context.wrap_socket(
                    sock, server_side=True, do_handshake_on_connect=False
                )
            except OSError as exc:  # reset before we got to it
                self.log.debug("connection ended", client=peer, error=str(exc))
                sock.close()
                with self._lock:
                    self._open -= 1
                self.counters.add("kubelet_sim_server_connections", -1)
                continue
            accepted.append(Connection(tls, peer, time.monotonic() + self.limits.handshake_timeout))
        return accepted

    def _refused(self, what: str, detail: str) -> None:
        """One line per burst of refusals, not one per connection."""
        now = time.monotonic()
        with self._lock:
            self._refused_since_log += 1
            if now - self._refusal_logged < REFUSAL_LOG_INTERVAL:
                return
            count, self._refused_since_log, self._refusal_logged = self._refused_since_log, 0, now
        self.log.warning("connections refused", reason=what, detail=detail, count=count)

    # -- from any thread -------------------------------------------------------------------

    def _park(self, conn: Connection, events: int = selectors.EVENT_READ) -> None:
        with self._lock:
            self._handback.append((conn, events))
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _close(self, conn: Connection) -> None:
        with self._lock:
            if conn.closed:
                return
            conn.closed = True
            self._open -= 1
        self.counters.add("kubelet_sim_server_connections", -1)
        with contextlib.suppress(OSError):
            conn.sock.close()

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._pool.shutdown()

    def close(self) -> None:
        """After run() returned (or never ran): the listening socket goes."""
        self.sock.close()

    @property
    def open_connections(self) -> int:
        with self._lock:
            return self._open

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
                if self.is_stream(exchange):
                    self._start_stream(conn, exchange)
                    return
                self.serve(exchange)
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
            self.log.debug("connection ended", client=conn.peer, error=str(exc))
            self._close(conn)
        except Exception:
            self.log.exception("connection failed", client=conn.peer)
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
            self.log.info("TLS handshake error", client=conn.peer, error=_one_line(exc))
            self.counters.add("kubelet_sim_server_connections_refused_total", reason="handshake")
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
        self.counters.add("kubelet_sim_server_connections_refused_total", reason=reason)
        self.log.info("bad request", client=conn.peer, status=status, reason=text)
        conn.sock.settimeout(1.0)
        with contextlib.suppress(OSError):
            conn.sock.sendall(refusal(status, text))
        self._close(conn)

    def _start_stream(self, conn: Connection, exchange: Exchange) -> None:
        if not self._streams.acquire(blocking=False):
            self._refused("too many streams", f"{self.limits.max_streams} running")
            self._refuse(conn, 503, "Service Unavailable", "max_streams")
            return
        self.counters.add("kubelet_sim_server_streams")

        def stream() -> None:
            try:
                self.serve(exchange)
            except OSError:
                pass
            except Exception:
                self.log.exception("stream failed", client=conn.peer)
            finally:
                self._close(conn)
                self.counters.add("kubelet_sim_server_streams", -1)
                self._streams.release()

        threading.Thread(target=stream, name="kubelet-api-stream", daemon=True).start()


def _one_line(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__).replace("\n", " ")
