"""exec and attach over a websocket (RFC 6455) with the channel protocols (apimachinery's
wsstream): what clients that speak websocket reach through an API server that proxies it as it
is (the Python client's `stream()`; any client of a server before v1.30's translation).

Each message starts with its channel: 0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize; the
base64 protocols write the channel as a digit and the data in base64, in text messages. Stdin
ends only with the connection. As the kubelet's websocket.go, v5.channel.k8s.io is not spoken
here (its close signal lives in the API server's translator): kubectl ≥ 1.30 offers only v5 over
websocket, is refused, and falls back to SPDY, as with any kubelet.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import socket
import ssl
import struct
import threading
from dataclasses import dataclass, field
from email.message import Message

from kubelet_sim.server.exchange import Exchange
from kubelet_sim.server.streaming.pump import ProtocolError, SocketPump, read_inbound
from kubelet_sim.server.streaming.upgrade import Refused

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
# the kubelet's remotecommand protocols over websocket; "" is channel.k8s.io
PROTOCOLS = ("v4.channel.k8s.io", "v4.base64.channel.k8s.io", "channel.k8s.io",
             "base64.channel.k8s.io", "")  # fmt: skip
CHANNELS = ("stdin", "stdout", "stderr", "error", "resize")
_TEXT, _BINARY, _CLOSE, _PING, _PONG = 1, 2, 8, 9, 10
_OPCODES = (0, _TEXT, _BINARY, _CLOSE, _PING, _PONG)
MAX_MESSAGE = 4 << 20  # a frame or a message (fragments together); past it the connection ends


def negotiate(headers: Message) -> str:
    """The first of the client's subprotocols that the server speaks (wsstream's handshake)."""
    if (headers.get("Sec-WebSocket-Version") or "").strip() != "13" or not headers.get(
        "Sec-WebSocket-Key"
    ):
        raise Refused(400, "Bad Request: not a websocket version 13 handshake")
    offered = [
        p.strip()
        for line in headers.get_all("Sec-WebSocket-Protocol") or ()
        for p in line.split(",")
        if p.strip()
    ] or [""]
    for protocol in offered:
        if protocol in PROTOCOLS:
            return protocol
    raise Refused(
        403,
        f"requested protocol(s) are not supported: [{' '.join(offered)}];"
        f" supports [{' '.join(p for p in PROTOCOLS if p)}]",
    )


def upgrade(handler: Exchange, protocol: str) -> Connection:
    key = str(handler.headers.get("Sec-WebSocket-Key")).strip()
    accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
    handler.send_response(101)
    handler.send_header("Upgrade", "websocket")
    handler.send_header("Connection", "Upgrade")
    handler.send_header("Sec-WebSocket-Accept", accept)
    if protocol:
        handler.send_header("Sec-WebSocket-Protocol", protocol)
    handler.end_headers()
    handler.wfile.flush()
    handler.close_connection = True
    sock: socket.socket = handler.request
    sock.setblocking(False)
    try:  # bytes the HTTP reader buffered past the request are frames
        already = handler.rfile.read1(1 << 20) or b""
    except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
        already = b""
    return Connection(sock, protocol, already)


@dataclass
class Channel:
    """One channel, read and written like a SPDY stream (remotecommand treats both alike)."""

    number: int
    conn: Connection
    _unread: bytearray = field(default_factory=bytearray)
    _remote_closed: bool = False

    def read(self, size: int = 65536) -> bytes:
        return read_inbound(self.conn, self, size)

    def write(self, data: bytes) -> None:
        self.conn.send_message(self.number, data)

    def close(self) -> None:
        """Nothing to send: a channel's end is the connection's (wsstream's Close)."""


class Connection(SocketPump):
    def __init__(self, sock: socket.socket, protocol: str, already_read: bytes = b"") -> None:
        super().__init__(sock, already_read)
        self.protocol = protocol
        self.text = "base64" in protocol
        self.channels = {n: Channel(n, self) for n in range(len(CHANNELS))}
        self._message = bytearray()
        self._fragmented = False  # a message's first frame came without FIN
        self._closed_sent = threading.Event()

    def send_message(self, channel: int, data: bytes) -> None:
        if self.text:
            self.send(_frame(_TEXT, str(channel).encode() + base64.b64encode(data)))
        else:
            self.send(_frame(_BINARY, bytes([channel]) + data))

    def close(self) -> None:
        """A close frame (1000, normal), everything flushed, then the socket closed."""
        self._closed_sent.set()
        self.finish(_frame(_CLOSE, struct.pack(">H", 1000)))

    def _unread(self) -> int:
        return max(len(c._unread) for c in self.channels.values())

    def _ended(self) -> None:
        for channel in self.channels.values():
            channel._remote_closed = True

    def _parse(self) -> None:
        while True:
            frame = _take_frame(self._inbox)
            if frame is None:
                return
            fin, opcode, payload = frame
            if opcode == _PING:
                with self.lock:
                    self._outbox += _frame(_PONG, payload)
            elif opcode == _CLOSE:
                if not self._closed_sent.is_set():
                    self._closed_sent.set()
                    self.finish(_frame(_CLOSE, payload[:2]))
                else:
                    self.finish()
            elif opcode in (0, _TEXT, _BINARY):
                if (opcode == 0) != self._fragmented:  # RFC 6455 5.4
                    raise ProtocolError("a websocket continuation out of place")
                self._fragmented = not fin
                if len(self._message) + len(payload) > MAX_MESSAGE:
                    raise ProtocolError("a message past the limit", "message_too_large")
                self._message += payload
                if fin:
                    message, self._message = bytes(self._message), bytearray()
                    self._deliver(message)

    def _deliver(self, message: bytes) -> None:
        if not message:
            return
        if self.text:
            number = message[0] - ord("0")
            try:
                data = base64.b64decode(message[1:]) if len(message) > 1 else b""
            except binascii.Error:
                raise ProtocolError("a text message that is not base64") from None
        else:
            number, data = message[0], message[1:]
        with self.lock:
            channel = self.channels.get(number)
            if channel is not None:
                channel._unread += data
            self.changed.notify_all()


def _frame(opcode: int, payload: bytes) -> bytes:
    """A server's frame: FIN, never masked."""
    size = len(payload)
    if size < 126:
        head = struct.pack(">BB", 0x80 | opcode, size)
    elif size < 1 << 16:
        head = struct.pack(">BBH", 0x80 | opcode, 126, size)
    else:
        head = struct.pack(">BBQ", 0x80 | opcode, 127, size)
    return head + payload


def _take_frame(buffer: bytearray) -> tuple[bool, int, bytes] | None:
    """(fin, opcode, unmasked payload) off the front of `buffer`, or None if not all there."""
    if len(buffer) < 2:
        return None
    first, second = buffer[0], buffer[1]
    size, at = second & 0x7F, 2
    if size == 126:
        if len(buffer) < 4:
            return None
        (size,), at = struct.unpack_from(">H", buffer, 2), 4
    elif size == 127:
        if len(buffer) < 10:
            return None
        (size,), at = struct.unpack_from(">Q", buffer, 2), 10
    if not second & 0x80:
        raise ProtocolError("a client's websocket frame must be masked")
    opcode = first & 0x0F
    if first & 0x70:  # RSV1-3: no extension is ever negotiated (RFC 6455 5.2)
        raise ProtocolError("a websocket frame with reserved bits set")
    if opcode not in _OPCODES:
        raise ProtocolError(f"a websocket frame of opcode {opcode}")
    if opcode >= _CLOSE and (size > 125 or not first & 0x80):  # control frames (5.5)
        raise ProtocolError("a websocket control frame fragmented or past 125 bytes")
    if size > MAX_MESSAGE:
        raise ProtocolError(f"a frame of {size} bytes", "frame_too_large")
    if len(buffer) < at + 4 + size:
        return None
    mask = bytes(buffer[at : at + 4])
    data = bytes(buffer[at + 4 : at + 4 + size])
    del buffer[: at + 4 + size]
    key = (mask * (size // 4 + 1))[:size]
    unmasked = (int.from_bytes(data, "big") ^ int.from_bytes(key, "big")).to_bytes(size, "big")
    return bool(first & 0x80), opcode, unmasked
