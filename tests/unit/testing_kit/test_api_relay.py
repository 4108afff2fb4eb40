"""The API relay's bounds (issue 41, deliverable 6), on loopback with an echo server standing for
the API server: past its cap a connection is refused while the held ones are served, idle ones
are closed, a slot freed serves a new client, and an accept that fails (EMFILE, injected or for
real under a lowered RLIMIT_NOFILE) is retried after a backoff instead of ending the relay."""

from __future__ import annotations

import errno
import os
import select
import socket
import socketserver
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kubelet_sim.controlplane.relay import ApiRelay, Bounds
from tests.cluster import wait_for


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


class _EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True


@pytest.fixture
def echo() -> Iterator[int]:
    """The port of an echo server on loopback (the relay's target)."""
    server = _EchoServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


_DIALLED: list[socket.socket] = []


@pytest.fixture(autouse=True)
def _close_dialled() -> Iterator[None]:
    yield
    while _DIALLED:
        _DIALLED.pop().close()


def _dial(port: int, source: str = "127.0.0.1") -> socket.socket:
    """A client of the relay on `port` (closed after the test)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    _DIALLED.append(sock)
    return sock


def _served(sock: socket.socket, timeout: float = 5.0) -> bool:
    """Whether a byte sent through the relay comes back from the echo server."""
    sock.settimeout(timeout)
    try:
        sock.sendall(b"x")
        return sock.recv(1) == b"x"
    except OSError:
        return False


def _closed_by_relay(sock: socket.socket) -> bool:
    """Whether the relay closed this connection (end of stream or a reset, not silence)."""
    sock.settimeout(0.05)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


@pytest.fixture
def relays() -> Iterator[list[ApiRelay]]:
    made: list[ApiRelay] = []
    yield made
    for relay in made:
        relay.close()


def test_past_the_cap_a_connection_is_refused_and_one_is_served_once_idle_ones_end(
    echo: int, relays: list[ApiRelay]
) -> None:
    relay = ApiRelay("127.0.0.1", echo, bounds=Bounds(connections=3, per_peer=3, idle=1.0))
    relays.append(relay)
    held = [_dial(relay.port) for _ in range(3)]
    assert all(_served(sock) for sock in held)
    extra = _dial(relay.port)
    wait_for(lambda: _closed_by_relay(extra), 5, "the connection past the cap closed")
    assert all(not _closed_by_relay(sock) for sock in held), "the held ones still open"
    # Silent for the idle second, the held ones are closed and their slots come free.
    for sock in held:
        wait_for(lambda sock=sock: _closed_by_relay(sock), 10, "an idle connection closed")
    wait_for(lambda: relay.connections == 0, 5, "the idle connections' slots freed")
    fresh = _dial(relay.port)
    assert _served(fresh), "a new connection is served after the idle ones ended"


def test_one_source_address_cannot_take_every_slot(echo: int, relays: list[ApiRelay]) -> None:
    relay = ApiRelay("127.0.0.1", echo, bounds=Bounds(connections=4, per_peer=2, idle=60.0))
    relays.append(relay)
    first, second = _dial(relay.port), _dial(relay.port)
    assert all(_served(sock) for sock in (first, second))
    third = _dial(relay.port)
    wait_for(lambda: _closed_by_relay(third), 5, "a third connection from one peer closed")
    other = _dial(relay.port, source="127.0.0.2")
    assert _served(other), "another peer is served while the first is at its cap"
    first.close()  # a closed connection frees its slot at once, without waiting to be idle
    wait_for(lambda: relay.connections == 2, 5, "the closed connection's slot freed")
    again = _dial(relay.port)
    assert _served(again)


class _FailingAccept(socket.socket):
    """A listening socket whose first accepts fail as with no descriptor left."""

    def __init__(self, failures: int) -> None:
        super().__init__(socket.AF_INET, socket.SOCK_STREAM)
        self.failures = failures
        self.failed_at: list[float] = []

    def accept(self) -> tuple[socket.socket, Any]:
        if len(self.failed_at) < self.failures:
            self.failed_at.append(time.monotonic())
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return super().accept()


def test_a_failing_accept_is_retried_after_a_backoff(echo: int, relays: list[ApiRelay]) -> None:
    listening = _FailingAccept(failures=3)
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    relay = ApiRelay("127.0.0.1", echo, listening)
    relays.append(relay)
    client = _dial(relay.port)
    assert _served(client, timeout=10), "the relay serves again after its accepts failed"
    gaps = [b - a for a, b in zip(listening.failed_at, listening.failed_at[1:], strict=False)]
    assert len(gaps) == 2
    assert min(gaps) >= 0.1, f"retried after a backoff, not at once: {gaps}"


# The relay in a process of its own whose descriptors run out: RLIMIT_NOFILE lowered to what
# it holds plus 4, the descriptors of two relayed connections (client and upstream each).
_CRAMPED = textwrap.dedent(
    """
    import os, resource, sys
    from kubelet_sim.controlplane.relay import ApiRelay, Bounds
    relay = ApiRelay("127.0.0.1", int(sys.argv[1]), bounds=Bounds(100, 100, 600.0))
    held = len(os.listdir("/proc/self/fd")) - 1  # less the listing's own descriptor
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (held + 4, hard))
    print(relay.port, flush=True)
    sys.stdin.read()
    """
)


def _line_with(proc: subprocess.Popen[str], words: str, seconds: float) -> str:
    """The first line of `proc`'s output holding `words`, read until a deadline."""
    assert proc.stdout is not None
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if select.select([proc.stdout], [], [], left)[0]:
            line = proc.stdout.readline()
            if not line:
                break
            if words in line:
                return line
    pytest.fail(f"no line with {words!r} within {seconds} s")


def test_a_relay_out_of_descriptors_serves_again_once_some_are_freed(echo: int) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _CRAMPED, str(echo)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    ) as proc:
        try:
            assert proc.stdout is not None
            port = int(proc.stdout.readline())
            first, second = _dial(port), _dial(port)
            assert all(_served(sock) for sock in (first, second))
            waiting = _dial(port)  # queued by the kernel: the relay has no descriptor for it
            _line_with(proc, "Too many open files", 10)
            first.close()
            assert _served(waiting, timeout=10), "accepted once a connection freed descriptors"
            assert proc.poll() is None
        finally:
            proc.kill()
