"""What the kubelet API's listener keeps of each node and each client: a node's `Endpoint` (its
socket, TLS context, handler and counters) and a client's `Connection` (its state, deadline
and the bytes of its request so far), and how a connection ends without a reset.

The listener (`listener.py`) moves connections between these states; nothing here waits.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

from kubelet_sim.server import tokens
from kubelet_sim.server.exchange import Exchange
from kubelet_sim.server.metrics import Counters

HANDSHAKE, HEADERS, IDLE, BUSY = "handshake", "headers", "idle", "busy"
TIMEOUT_REASON = {HANDSHAKE: "handshake_timeout", HEADERS: "header_timeout", IDLE: "idle_timeout"}
RST_AVOIDANCE_DELAY = 0.5  # Go net/http's rstAvoidanceDelay
DRAIN_LIMIT = 256 << 10  # then a client that keeps sending gets its reset


class Connection:
    def __init__(self, sock: ssl.SSLSocket, endpoint: Endpoint, peer: str, deadline: float) -> None:
        self.sock = sock
        self.endpoint = endpoint
        self.peer = peer
        self.state = HANDSHAKE
        self.deadline = deadline
        self.buffer = bytearray()
        self.generation = 0  # a deadline in the heap counts only for the parking it was set for
        self.closed = False
        self.authenticated = False  # its last request with a credential held one (made room last)
        self.auth_failures = 0  # 401s and 429s answered on it


Stream = Callable[[], None]
# a request served, or authenticated and handed back as the rest to run on a thread of its own
Serve = Callable[[Exchange], Stream | None]


HELP = {
    "kubelet_sim_server_connections": ("gauge", "Connections open to the kubelet API."),
    "kubelet_sim_server_connections_refused_total": (
        "counter", "Connections refused or closed by a limit, by reason.",
    ),
    "kubelet_sim_server_streams": ("gauge", "Long-running requests being served."),
    "kubelet_sim_server_stream_refusals_total": (
        "counter", "Streams ended or refused by a limit or a framing error, by reason.",
    ),
    "kubelet_sim_server_connections_evicted_total": (
        "counter", "Waiting connections closed to make room at the connection cap, by whether"
        " one of their requests had authenticated (reason: unauthenticated or idle).",
    ),
    "kubelet_sim_server_authentication_failures_total": (
        "counter", "Requests answered 401 or 429: no credential, or none that held.",
    ),
    "kubelet_sim_server_certificate_checks_throttled_total": (
        "counter", "Requests answered 429: their address, or the process, spent its failed"
        " client certificate checks.",
    ),
    **tokens.HELP,
}  # fmt: skip


class Endpoint:
    """One node's listening socket and where its connections go: that node's TLS context,
    handler and log; its counters are that node's /metrics."""

    def __init__(
        self, sock: socket.socket, context: Callable[[], ssl.SSLContext], serve: Serve, log: Any
    ) -> None:
        self.sock, self.context, self.serve, self.log = sock, context, serve, log
        self.port = int(sock.getsockname()[1])
        self.counters = Counters()
        self.counters.help = HELP
        self.open_connections = 0  # under the listener's lock
        self.released = threading.Event()  # its socket is closed


def close_write_and_drain(sock: socket.socket) -> None:
    """Go's closeWriteAndWait: a close with the client's bytes unread sends a reset, which can
    reach the client before it reads the answer (or cut its send short); so end our side, and
    read what it still sends for up to RST_AVOIDANCE_DELAY first."""
    sock.shutdown(socket.SHUT_WR)  # an SSLSocket drops its TLS layer here: raw bytes follow
    deadline = time.monotonic() + RST_AVOIDANCE_DELAY
    drained = 0
    while (left := deadline - time.monotonic()) > 0 and drained < DRAIN_LIMIT:
        sock.settimeout(left)
        chunk = sock.recv(65536)
        if not chunk:
            return
        drained += len(chunk)
