"""A SPDY client for the kubelet API, as an API server's proxy hands a client's streams on:
the upgrade request, then streams opened by the client (kubelet_sim's own SPDY, client side)."""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from dataclasses import dataclass
from email.message import Message
from pathlib import Path

from kubelet_sim.server.streaming.spdy import Connection, Headers


@dataclass
class Upgraded:
    status: int
    headers: Message
    body: bytes
    conn: Connection | None


def connect(
    port: int, path: str, tls: Path, protocols: list[str], *, websocket: bool = False
) -> Upgraded:
    """POST path with an upgrade to SPDY/3.1 (or websocket); a refusal comes back with its body."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.load_cert_chain(tls / "admin.crt", tls / "admin.key")
    sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30))
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: Upgrade"]
    if websocket:
        lines += ["Upgrade: websocket", "Sec-WebSocket-Version: 13",
                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                  "Sec-WebSocket-Protocol: " + ", ".join(protocols)]  # fmt: skip
    else:
        lines += ["Upgrade: SPDY/3.1"] + [f"X-Stream-Protocol-Version: {p}" for p in protocols]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    response = http.client.HTTPResponse(sock)
    response.begin()
    if response.status != 101:
        body = response.read()
        sock.close()
        return Upgraded(response.status, response.msg, body, None)
    sock.setblocking(False)
    try:  # bytes the HTTP reader buffered past the answer belong to SPDY
        already = response.fp.read1(1 << 16) or b""
    except (ssl.SSLWantReadError, BlockingIOError):
        already = b""
    conn = Connection(sock, server=False, already_read=already)
    threading.Thread(target=conn.run, name="spdy-client", daemon=True).start()
    return Upgraded(101, response.msg, b"", conn)


def stream_headers(kind: str, **extra: str) -> Headers:
    return {"streamType": [kind], **{k: [v] for k, v in extra.items()}}


def read_all(stream: object) -> bytes:
    out = bytearray()
    while chunk := stream.read():  # type: ignore[attr-defined]
        out += chunk
    return bytes(out)
