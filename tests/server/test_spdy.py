"""SPDY/3.1 framing on its own, two ends over a socket pair (no Docker, no API server).

Interoperability with Go's spdystream is proven by kubectl in test_streaming.py; these check
the rules both ends rely on: headers survive the shared compression contexts, FIN is a
half-close, a refused stream is reset, a big transfer arrives whole, a ping is answered.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import zlib
from collections.abc import Iterator

import pytest

from kubelet_sim.server.streaming import pump, spdy
from tests.cluster import wait_for


def test_the_spdy3_dictionary() -> None:
    assert len(spdy.DICTIONARY) == 1423
    assert zlib.adler32(spdy.DICTIONARY) == 0xE3C6A7C2  # the id a peer's zlib stream names
    assert spdy.DICTIONARY.startswith(b"\x00\x00\x00\x07options\x00\x00\x00\x04head")
    assert spdy.DICTIONARY.endswith(b"charset=iso-8859-1,utf-,*,enq=0.")


def test_header_blocks_lowercase_names_and_keep_every_value() -> None:
    block = spdy.encode_headers({"StreamType": ["stdout"], "X-Many": ["a", "b"]})
    assert spdy.decode_headers(block) == {"streamtype": ["stdout"], "x-many": ["a", "b"]}
    with pytest.raises(spdy.ProtocolError):
        spdy.decode_headers(block[:-3])


class _Pair:
    def __init__(self, accept: bool = True) -> None:
        a, b = socket.socketpair()
        self.opened: list[spdy.Stream] = []

        def on_stream(stream: spdy.Stream) -> bool:
            self.opened.append(stream)
            return accept

        self.server = spdy.Connection(a, server=True, on_stream=on_stream)
        self.client = spdy.Connection(b, server=False)
        for conn in (self.server, self.client):
            threading.Thread(target=conn.run, daemon=True).start()

    def close(self) -> None:
        self.client.close()
        self.server.close()


@pytest.fixture
def pair() -> Iterator[_Pair]:
    made = _Pair()
    yield made
    made.close()


def _read_all(stream: spdy.Stream) -> bytes:
    out = bytearray()
    while chunk := stream.read():
        out += chunk
    return bytes(out)


def test_streams_carry_headers_and_bytes_each_way_with_half_close(pair: _Pair) -> None:
    first = pair.client.open_stream({"streamType": ["stdin"], "port": ["80"]})
    second = pair.client.open_stream({"streamType": ["stdout"]})  # same contexts, in order
    assert (first.id, second.id) == (1, 3), "a client's streams are odd"
    theirs = {s.header("streamType"): s for s in pair.opened}
    assert theirs["stdin"].header("port") == "80"
    first.write(b"to the node")
    first.close()
    assert _read_all(theirs["stdin"]) == b"to the node", "FIN ends the reader after the data"
    theirs["stdout"].write(b"back")
    theirs["stdout"].close()
    assert _read_all(second) == b"back"
    second.write(b"still open our way")  # their FIN closed only their side
    assert theirs["stdout"].read() == b"still open our way"


def test_a_big_transfer_arrives_whole(pair: _Pair) -> None:
    """More than the send queue and the unread bound: writers wait, the reader pauses."""
    stream = pair.client.open_stream({"streamType": ["data"]})
    (theirs,) = pair.opened
    payload = os.urandom(3 * pump.QUEUED_LIMIT + 12345)
    writer = threading.Thread(target=lambda: (stream.write(payload), stream.close()))
    writer.start()
    assert _read_all(theirs) == payload
    writer.join(10)


def test_a_refused_stream_is_reset() -> None:
    pair = _Pair(accept=False)
    try:
        with pytest.raises(ConnectionError):
            pair.client.open_stream({"streamType": ["nope"]}, timeout=10)
    finally:
        pair.close()


def test_a_ping_is_echoed_and_a_goaway_ends_the_connection() -> None:
    a, b = socket.socketpair()
    conn = spdy.Connection(a, server=True)
    threading.Thread(target=conn.run, daemon=True).start()
    b.sendall(spdy.control_frame(spdy.PING, 0, struct.pack(">I", 7)))
    b.settimeout(10)
    assert b.recv(64) == spdy.control_frame(spdy.PING, 0, struct.pack(">I", 7))
    b.sendall(spdy.control_frame(spdy.GOAWAY, 0, struct.pack(">II", 0, 0)))
    wait_for(conn.closed.is_set, 10, "the connection ends after the peer's GOAWAY")
    b.close()


def test_a_frame_of_another_version_ends_the_connection() -> None:
    a, b = socket.socketpair()
    conn = spdy.Connection(a, server=True)
    threading.Thread(target=conn.run, daemon=True).start()
    b.sendall(struct.pack(">HHI", 0x8000 | 2, spdy.PING, 4) + b"\0\0\0\1")
    wait_for(conn.closed.is_set, 10, "a SPDY/2 frame is refused")
    b.close()
