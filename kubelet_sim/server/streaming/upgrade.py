"""The HTTP side of a stream: protocol negotiation and the 101 answer (apimachinery's
httpstream.Handshake and spdy.ResponseUpgrader), then the socket handed to SPDY."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable, Sequence
from email.message import Message

from kubelet_sim.server.exchange import Exchange
from kubelet_sim.server.streaming.spdy import Connection, Stream

SPDY_31 = "SPDY/3.1"
PROTOCOL_HEADER = "X-Stream-Protocol-Version"
ACCEPTED_HEADER = "X-Accepted-Stream-Protocol-Versions"


class Refused(Exception):
    """The request cannot be upgraded: (HTTP status, text), answered before any upgrade."""

    def __init__(self, status: int, text: str, headers: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(text)
        self.status, self.text, self.headers = status, text, tuple(headers)


def is_websocket(headers: Message) -> bool:
    return "websocket" in (headers.get("Upgrade") or "").lower()


def negotiate(headers: Message, server: Sequence[str]) -> str:
    """The first protocol in the client's order that the server speaks (Handshake)."""
    connection = (headers.get("Connection") or "").lower()
    upgrade = (headers.get("Upgrade") or "").lower()
    if "upgrade" not in connection or SPDY_31.lower() not in upgrade:
        raise Refused(400, "unable to upgrade: missing upgrade headers in request")
    offered = [v.strip() for v in headers.get_all(PROTOCOL_HEADER) or [] if v.strip()]
    if not offered:
        raise Refused(400, f"unable to upgrade: {PROTOCOL_HEADER} is required")
    for protocol in offered:
        if protocol in server:
            return protocol
    raise Refused(
        403,
        f"unable to upgrade: unable to negotiate protocol: client supports {_go_list(offered)},"
        f" server accepts {_go_list(server)}",
        [(ACCEPTED_HEADER, p) for p in server],
    )


def _go_list(items: Sequence[str]) -> str:
    return "[" + " ".join(items) + "]"


def upgrade(handler: Exchange, protocol: str, on_stream: Callable[[Stream], bool]) -> Connection:
    """Answer 101 and take the socket: from here on the request is a SPDY connection."""
    handler.send_response(101)
    handler.send_header("Connection", "Upgrade")
    handler.send_header("Upgrade", SPDY_31)
    handler.send_header(PROTOCOL_HEADER, protocol)
    handler.end_headers()
    handler.wfile.flush()
    handler.close_connection = True
    sock: socket.socket = handler.request
    sock.setblocking(False)
    try:  # bytes the HTTP reader buffered past the request belong to SPDY
        already = handler.rfile.read1(1 << 20) or b""
    except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
        already = b""
    return Connection(sock, server=True, on_stream=on_stream, already_read=already)


__all__ = ["Connection", "Refused", "Stream", "is_websocket", "negotiate", "upgrade"]
