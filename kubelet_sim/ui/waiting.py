"""Where the web view's new connections wait for their first bytes: one selector thread for all
of them, not a thread each (http.server's ThreadingMixIn starts one per connection, and an idle
client would hold it for as long as it likes).

A connection leaves the room when it has something to read (then it gets a worker) or after
`idle` seconds of silence (closed). At `cap` waiting connections the oldest is closed to make
room: a client that opens many and sends nothing only pushes out its own oldest.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

Ready = Callable[[socket.socket, Any], None]


class WaitingRoom:
    def __init__(self, ready: Ready, *, idle: float, cap: int) -> None:
        self._ready = ready
        self._idle = idle
        self._cap = cap
        self._selector = selectors.DefaultSelector()
        self._waiting: dict[socket.socket, tuple[float, Any]] = {}  # in arrival order
        self._lock = threading.Lock()
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        self._stopped = threading.Event()
        self.closed_idle = 0  # counted for tests and the log
        self.closed_at_cap = 0
        self._thread = threading.Thread(target=self._run, name="ui waiting room", daemon=True)
        self._thread.start()

    def __len__(self) -> int:
        with self._lock:
            return len(self._waiting)

    def admit(self, sock: socket.socket, address: Any) -> None:
        with self._lock:
            if self._stopped.is_set():
                _close(sock)
                return
            while len(self._waiting) >= self._cap:
                oldest = next(iter(self._waiting))
                self._drop(oldest)
                self.closed_at_cap += 1
            self._waiting[sock] = (time.monotonic(), address)
            self._selector.register(sock, selectors.EVENT_READ)
        self._wake()

    def close(self) -> None:
        self._stopped.set()
        self._wake()
        self._thread.join(5)
        with self._lock:
            for sock in list(self._waiting):
                self._drop(sock)
        self._selector.close()
        _close(self._wake_read)
        _close(self._wake_write)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_write.send(b"\0")

    def _drop(self, sock: socket.socket) -> None:
        """Under the lock: out of the room, closed."""
        self._waiting.pop(sock, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(sock)
        _close(sock)

    def _run(self) -> None:
        while not self._stopped.is_set():
            with self._lock:
                oldest = min((t for t, _ in self._waiting.values()), default=None)
            wait = 0.5 if oldest is None else max(0.0, oldest + self._idle - time.monotonic())
            ready = []
            for key, _mask in self._selector.select(timeout=min(wait, 0.5)):
                if key.fileobj is self._wake_read:
                    with contextlib.suppress(OSError):
                        self._wake_read.recv(4096)
                    continue
                with self._lock:
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    entry = self._waiting.pop(sock, None)
                    with contextlib.suppress(KeyError, ValueError):
                        self._selector.unregister(sock)
                if entry is not None:
                    ready.append((sock, entry[1]))
            for sock, address in ready:
                self._ready(sock, address)
            self._expire()

    def _expire(self) -> None:
        deadline = time.monotonic() - self._idle
        with self._lock:
            for sock in [s for s, (t, _) in self._waiting.items() if t <= deadline]:
                self._drop(sock)
                self.closed_idle += 1


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()
