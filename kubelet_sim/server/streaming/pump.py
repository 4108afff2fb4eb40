"""One thread owns a connection's socket: it reads and parses what arrives, and writes what
other threads queued (a TLS socket is never read and written by two threads at once).

Writers block while too much is queued, and the socket is not read while a reader of ours holds
too much unread: a slow peer or a slow container costs memory up to a bound, never more.
SPDY (`spdy.py`) and websocket (`websocket.py`) connections are its two framings.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Protocol

QUEUED_LIMIT = 1 << 20  # bytes queued for the socket before writers wait
UNREAD_LIMIT = 4 << 20  # bytes one reader may hold unread before the socket is not read


class ProtocolError(Exception):
    """The peer broke the framing or a limit: the connection ends, counted under `reason`."""

    def __init__(self, message: str, reason: str = "protocol_error") -> None:
        super().__init__(message)
        self.reason = reason


class Inbound(Protocol):
    """A stream or channel: bytes that arrived for it, and whether the peer closed its side."""

    _unread: bytearray
    _remote_closed: bool


def read_inbound(conn: SocketPump, inbound: Inbound, size: int) -> bytes:
    """Up to `size` bytes; b"" once the peer closed its side and all was read. Reading wakes
    the socket's thread, which may have stopped reading while this one held too much."""
    with conn.lock:
        while not inbound._unread and not inbound._remote_closed:
            conn.changed.wait()
        chunk = bytes(inbound._unread[:size])
        del inbound._unread[:size]
        conn.changed.notify_all()
    if chunk:
        conn.wake()
    return chunk


class SocketPump:
    def __init__(self, sock: socket.socket, already_read: bytes = b"") -> None:
        self.sock = sock
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.closed = threading.Event()
        self._inbox = bytearray(already_read)
        self._outbox = bytearray()
        self._wake_r, self._wake_w = socket.socketpair()  # closed objects fail, never reuse an fd
        self._wake_w.setblocking(False)
        self._closing = False
        # no byte either way for this long ends the connection (the kubelet's
        # --streaming-connection-idle-timeout); None: never
        self.idle_timeout: float | None = None
        self.on_refusal: Callable[[str], None] = lambda reason: None  # a limit or framing broken

    # -- what a framing provides -------------------------------------------------------------

    def _parse(self) -> None:
        """Take whole frames off `_inbox` (called on the socket's thread)."""
        raise NotImplementedError

    def _unread(self) -> int:
        """The most bytes one reader holds unread (called with the lock held)."""
        return 0

    def _ended(self) -> None:
        """The connection is over: wake every reader (called with the lock held)."""

    # -- for other threads -----------------------------------------------------------------

    def send(self, frame: bytes, *, wait: bool = True) -> None:
        with self.lock:
            while wait and len(self._outbox) > QUEUED_LIMIT and not self.closed.is_set():
                self.changed.wait()
            if self.closed.is_set():
                raise BrokenPipeError("the connection is closed")
            self._outbox += frame
        self.wake()

    def finish(self, last: bytes = b"") -> None:
        """Queue `last`, flush everything, then close the socket (on the socket's thread)."""
        with self.lock:
            if not self._closing and not self.closed.is_set():
                self._outbox += last
            self._closing = True
        self.wake()

    def close(self) -> None:
        """End the connection in the framing's way (a goodbye frame), after what is queued."""
        self.finish()

    def wake(self) -> None:
        with contextlib.suppress(OSError):  # closed already, or full: a wake is pending
            self._wake_w.send(b"x")

    # -- the socket's thread ---------------------------------------------------------------

    def run(self) -> None:
        """Move bytes until the peer hangs up, close() has flushed or the connection was idle
        for `idle_timeout`; then end every stream."""
        self.sock.setblocking(False)
        selector = selectors.DefaultSelector()
        last = time.monotonic()
        try:
            self._parse()
            while True:
                with self.lock:
                    if self._closing and not self._outbox:
                        return
                    paused = self._unread() > UNREAD_LIMIT
                    events = 0 if paused else selectors.EVENT_READ
                    if self._outbox:
                        events |= selectors.EVENT_WRITE
                self._register(selector, events)
                pending = isinstance(self.sock, ssl.SSLSocket) and self.sock.pending() > 0
                wait = None
                if self.idle_timeout is not None:
                    wait = last + self.idle_timeout - time.monotonic()
                    if wait <= 0:
                        self.on_refusal("stream_idle_timeout")
                        return  # idle: the streams end as if the peer had hung up
                ready = selector.select(0 if pending and not paused else wait)
                if any(key.fileobj is self.sock for key, _mask in ready) or pending:
                    last = time.monotonic()
                if pending and not paused:
                    ready.append((selector.get_key(self.sock), selectors.EVENT_READ))
                for key, mask in ready:
                    if key.fileobj == self._wake_r:
                        self._wake_r.recv(4096)
                        continue
                    if mask & selectors.EVENT_WRITE and not self._flush():
                        return
                    if mask & selectors.EVENT_READ and not paused:
                        if not self._receive():
                            return
                        self._parse()
        except OSError:
            return
        except ProtocolError as exc:
            self.on_refusal(exc.reason)
            return
        finally:
            selector.close()
            self._shut()

    def _register(self, selector: selectors.BaseSelector, events: int) -> None:
        if not selector.get_map():
            selector.register(self._wake_r, selectors.EVENT_READ)
            if events:
                selector.register(self.sock, events)
            return
        if events:
            try:
                selector.modify(self.sock, events)
            except KeyError:
                selector.register(self.sock, events)
        else:
            with contextlib.suppress(KeyError):
                selector.unregister(self.sock)

    def _receive(self) -> bool:
        """False once the peer hung up."""
        while True:
            try:
                chunk = self.sock.recv(65536)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                return True
            if not chunk:
                return False
            self._inbox += chunk
            if not isinstance(self.sock, ssl.SSLSocket) or not self.sock.pending():
                return True

    def _flush(self) -> bool:
        with self.lock:
            out = bytes(self._outbox[:65536])
        try:
            sent = self.sock.send(out)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
            return True
        with self.lock:
            del self._outbox[:sent]
            self.changed.notify_all()
        return True

    def _shut(self) -> None:
        with self.lock:
            self.closed.set()
            self._ended()
            self.changed.notify_all()
        self.sock.close()
        self._wake_r.close()
        self._wake_w.close()
