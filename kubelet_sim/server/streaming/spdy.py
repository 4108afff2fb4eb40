"""SPDY/3.1 as Kubernetes speaks it (moby/spdystream under apimachinery's httpstream/spdy).

Written here because no maintained Python library speaks SPDY any more. Only what Kubernetes
uses: streams opened by SYN_STREAM with headers, answered by SYN_REPLY, DATA with FIN for a
half-close, RST_STREAM, PING echoed, GOAWAY, and SETTINGS/WINDOW_UPDATE read and ignored
(spdystream does no flow control; TCP does it). Header blocks are zlib-compressed with the
SPDY/3 dictionary, one compression context per direction for the whole connection.

The socket's own thread (`pump.SocketPump.run`) reads frames and writes what others queued.
"""

from __future__ import annotations

import socket
import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from kubelet_sim.server.streaming.pump import ProtocolError, SocketPump, read_inbound

VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = (
    1, 2, 3, 4, 6, 7, 8, 9
)  # fmt: skip
FLAG_FIN = 0x01
RST_PROTOCOL_ERROR, RST_REFUSED_STREAM, RST_CANCEL = 1, 3, 5
MAX_DATA = 32 * 1024  # per DATA frame we send
MAX_FRAME = 1 << 20  # a frame the peer sends (kubectl's are 32 KiB); past it the connection ends
MAX_HEADER_BLOCK = 1 << 20  # a header block inflated (the kubelet's MaxHeaderBytes)
MAX_STREAMS = 1000  # open at once on one connection; past it RST_STREAM REFUSED_STREAM

_WORDS = (
    "options", "head", "post", "put", "delete", "trace", "accept", "accept-charset",
    "accept-encoding", "accept-language", "accept-ranges", "age", "allow", "authorization",
    "cache-control", "connection", "content-base", "content-encoding", "content-language",
    "content-length", "content-location", "content-md5", "content-range", "content-type", "date",
    "etag", "expect", "expires", "from", "host", "if-match", "if-modified-since", "if-none-match",
    "if-range", "if-unmodified-since", "last-modified", "location", "max-forwards", "pragma",
    "proxy-authenticate", "proxy-authorization", "range", "referer", "retry-after", "server", "te",
    "trailer", "transfer-encoding", "upgrade", "user-agent", "vary", "via", "warning",
    "www-authenticate", "method", "get", "status", "200 OK", "version", "HTTP/1.1", "url",
    "public", "set-cookie", "keep-alive", "origin"
)  # fmt: skip
_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request"
    "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented"
    "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, "
    "Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,application/xml,"
    "application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=gzip,deflate,sdch"
    "charset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
# The SPDY/3 header dictionary (draft 3, section 2.6.10.1): 1423 bytes, zlib id 0xe3c6a7c2.
DICTIONARY = b"".join(struct.pack(">I", len(w)) + w.encode() for w in _WORDS) + _TAIL.encode()

Headers = dict[str, list[str]]


def encode_headers(headers: Headers) -> bytes:
    """A name/value block before compression: names lowercased, several values NUL-joined."""
    out = [struct.pack(">I", len(headers))]
    for name, values in headers.items():
        key, value = name.lower().encode(), "\0".join(values).encode()
        out += [struct.pack(">I", len(key)), key, struct.pack(">I", len(value)), value]
    return b"".join(out)


def decode_headers(block: bytes) -> Headers:
    def field(at: int) -> tuple[str, int]:
        (size,) = struct.unpack_from(">I", block, at)
        if at + 4 + size > len(block):
            raise ProtocolError("header block: a field runs past the end")
        return block[at + 4 : at + 4 + size].decode(), at + 4 + size

    try:
        (count,), at = struct.unpack_from(">I", block), 4
        headers: Headers = {}
        for _ in range(count):
            name, at = field(at)
            value, at = field(at)
            headers.setdefault(name.lower(), []).extend(value.split("\0"))
        return headers
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"bad header block: {exc}") from exc


def control_frame(kind: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">HHI", 0x8000 | VERSION, kind, (flags << 24) | len(payload)) + payload


def data_frame(stream_id: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">II", stream_id & 0x7FFFFFFF, (flags << 24) | len(payload)) + payload


@dataclass
class Stream:
    """One SPDY stream: bytes in (read), bytes out (write), each side closed on its own."""

    id: int
    headers: Headers
    conn: Connection
    _unread: bytearray = field(default_factory=bytearray)
    _remote_closed: bool = False  # the peer sent FIN or RST: read() ends once drained
    _local_closed: bool = False
    _replied: threading.Event = field(default_factory=threading.Event)
    reset: bool = False

    def header(self, name: str) -> str:
        values = self.headers.get(name.lower())
        return values[0] if values else ""

    def read(self, size: int = 65536) -> bytes:
        return read_inbound(self.conn, self, size)

    def write(self, data: bytes) -> None:
        if self._local_closed or self.reset:
            raise BrokenPipeError(f"stream {self.id} is closed")
        for at in range(0, len(data), MAX_DATA):
            self.conn.send(data_frame(self.id, 0, data[at : at + MAX_DATA]))

    def close(self) -> None:
        """Half-close: FIN on our side (the peer reads EOF), once."""
        if not self._local_closed and not self.reset:
            self._local_closed = True
            self.conn.send(data_frame(self.id, FLAG_FIN, b""), wait=False)

    def cancel(self) -> None:
        if not self.reset:
            self.reset = True
            self.conn.send(control_frame(RST_STREAM, 0, struct.pack(">II", self.id, RST_CANCEL)))


class Connection(SocketPump):
    """A SPDY connection over a connected socket; `run()` in one thread moves all bytes.

    `on_stream(stream)` is called on the socket's thread for each stream the peer opens: it
    returns True to accept (a SYN_REPLY goes out) or False to refuse (RST_STREAM); it must not
    block. `on_close()` is called once when the connection ends.
    """

    def __init__(
        self,
        sock: socket.socket,
        *,
        server: bool,
        on_stream: Callable[[Stream], bool] = lambda stream: False,
        already_read: bytes = b"",
    ) -> None:
        super().__init__(sock, already_read)
        self.on_stream = on_stream
        self.streams: dict[int, Stream] = {}
        self._next_id = 2 if server else 1
        self._deflate = zlib.compressobj(9, zdict=DICTIONARY)
        self._inflate = zlib.decompressobj(zdict=DICTIONARY)

    # -- for other threads -----------------------------------------------------------------

    def open_stream(self, headers: Headers, timeout: float = 30.0) -> Stream:
        """Client side: SYN_STREAM, then wait for the peer's SYN_REPLY."""
        with self.lock:  # compressed and queued in one step: the contexts stay in order
            if self.closed.is_set():
                raise BrokenPipeError("the connection is closed")
            stream = Stream(self._next_id, headers, self)
            self._next_id += 2
            self.streams[stream.id] = stream
            block = self._compress(encode_headers(headers))
            prefix = struct.pack(">IIBB", stream.id, 0, 0, 0)
            self._outbox += control_frame(SYN_STREAM, 0, prefix + block)
        self.wake()
        if not stream._replied.wait(timeout) or stream.reset:
            raise ConnectionError(f"stream {stream.id} was refused or not answered")
        return stream

    def close(self) -> None:
        """GOAWAY, everything queued flushed, then the socket closed (by the socket thread)."""
        with self.lock:
            last = max((i for i in self.streams if i % 2 != self._next_id % 2), default=0)
        self.finish(control_frame(GOAWAY, 0, struct.pack(">II", last, 0)))

    # -- the socket's thread ---------------------------------------------------------------

    def _parse(self) -> None:
        while len(self._inbox) >= 8:
            first, second = struct.unpack_from(">II", self._inbox)
            length = second & 0xFFFFFF
            if length > MAX_FRAME:
                raise ProtocolError(f"a frame of {length} bytes", "frame_too_large")
            if len(self._inbox) < 8 + length:
                return
            flags, payload = second >> 24, bytes(self._inbox[8 : 8 + length])
            del self._inbox[: 8 + length]
            if first & 0x80000000:
                if (first >> 16) & 0x7FFF != VERSION:
                    raise ProtocolError(f"SPDY version {(first >> 16) & 0x7FFF}")
                self._control(first & 0xFFFF, flags, payload)
            else:
                self._data(first & 0x7FFFFFFF, flags, payload)

    def _control(self, kind: int, flags: int, payload: bytes) -> None:
        if kind == SYN_STREAM:
            stream_id = struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF
            stream = Stream(stream_id, decode_headers(self._decompress(payload[10:])), self)
            with self.lock:
                crowded = len(self.streams) >= MAX_STREAMS
                if not crowded:
                    self.streams[stream_id] = stream
            if flags & FLAG_FIN:
                stream._remote_closed = True
            if crowded:
                self.on_refusal("too_many_streams")
            accepted = not crowded and self.on_stream(stream)
            with self.lock:
                if accepted:
                    block = self._compress(encode_headers({}))
                    self._outbox += control_frame(
                        SYN_REPLY, 0, struct.pack(">I", stream_id) + block
                    )
                else:
                    stream.reset = True
                    self._outbox += control_frame(
                        RST_STREAM, 0, struct.pack(">II", stream_id, RST_REFUSED_STREAM)
                    )
        elif kind == SYN_REPLY:
            stream_id = struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF
            self._decompress(payload[4:])  # keeps the inflate context in step
            with self.lock:
                found = self.streams.get(stream_id)
            if found is not None:
                found._replied.set()
        elif kind == HEADERS:
            self._decompress(payload[4:])
        elif kind == RST_STREAM:
            stream_id = struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF
            with self.lock:
                found = self.streams.get(stream_id)
                if found is not None:
                    found.reset = found._remote_closed = True
                    found._replied.set()
                    self.changed.notify_all()
        elif kind == PING:
            with self.lock:
                self._outbox += control_frame(PING, 0, payload[:4])  # echo: spdystream's pong
        elif kind == GOAWAY:
            with self.lock:
                self._closing = True
        # SETTINGS and WINDOW_UPDATE: no flow control here, as in spdystream

    def _data(self, stream_id: int, flags: int, payload: bytes) -> None:
        with self.lock:
            stream = self.streams.get(stream_id)
            if stream is None or stream._remote_closed:
                return  # data after FIN or for a stream we refused: dropped
            stream._unread += payload
            if flags & FLAG_FIN:
                stream._remote_closed = True
            self.changed.notify_all()

    def _compress(self, block: bytes) -> bytes:
        return self._deflate.compress(block) + self._deflate.flush(zlib.Z_SYNC_FLUSH)

    def _decompress(self, block: bytes) -> bytes:
        """Inflated, at most MAX_HEADER_BLOCK bytes: a block that inflates past it (a
        decompression bomb) ends the connection before it costs more memory than that."""
        try:
            out = self._inflate.decompress(block, MAX_HEADER_BLOCK)
        except zlib.error as exc:
            raise ProtocolError(f"header block: {exc}") from exc
        if self._inflate.unconsumed_tail:
            raise ProtocolError("a header block inflates too far", "header_block_too_large")
        return out

    def _unread(self) -> int:
        return max((len(s._unread) for s in self.streams.values()), default=0)

    def _ended(self) -> None:
        for stream in self.streams.values():
            stream._remote_closed = True
            stream._replied.set()

    def forget(self, *streams: Stream) -> None:
        """A finished session's streams leave the table (port-forward opens two a connection)."""
        with self.lock:
            for stream in streams:
                self.streams.pop(stream.id, None)
                stream._remote_closed = True  # a reader still waiting on it ends
            self.changed.notify_all()
