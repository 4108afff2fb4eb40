"""exec and attach sessions over Docker's hijacked connections, and connections to a pod's
ports from inside its network namespace (what a CRI streaming server does for the kubelet)."""

from __future__ import annotations

import contextlib
import errno
import os
import queue
import socket
import struct
import threading
import time
from typing import Any

from kubelet_sim.linux import namespaces

_EXIT_CODE_WAIT = 5.0  # seconds for Docker to record an exec's exit once its output ended


class DockerSession:
    """One exec or attach: Docker's multiplexed stream (8-byte frame headers) unless tty."""

    def __init__(self, api: Any, sock: Any, *, tty: bool, exec_id: str = "", container: str = ""):
        self._api, self._socket, self.tty = api, sock, tty
        self._raw: socket.socket = getattr(sock, "_sock", sock)
        self._exec_id, self._container = exec_id, container
        self._buffer = bytearray()
        self._lock = threading.Lock()

    def read(self) -> tuple[int, bytes]:
        """(1 stdout | 2 stderr, bytes); (0, b"") once the process closed its output."""
        while True:
            if self.tty:
                chunk = self._recv()
                return (1, chunk) if chunk else (0, b"")
            if len(self._buffer) >= 8:
                kind, size = struct.unpack_from(">BxxxI", self._buffer)
                if len(self._buffer) >= 8 + size:
                    data = bytes(self._buffer[8 : 8 + size])
                    del self._buffer[: 8 + size]
                    if data:
                        return (2 if kind == 2 else 1), data
                    continue
            chunk = self._recv()
            if not chunk:
                return 0, b""
            self._buffer += chunk

    def _recv(self) -> bytes:
        try:
            return self._raw.recv(65536)
        except OSError:
            return b""

    def write(self, data: bytes) -> None:
        with self._lock:
            self._raw.sendall(data)

    def close_stdin(self) -> None:
        with self._lock, contextlib.suppress(OSError):
            self._raw.shutdown(socket.SHUT_WR)

    def resize(self, width: int, height: int) -> None:
        try:
            if self._exec_id:
                self._api.exec_resize(self._exec_id, height=height, width=width)
            else:
                self._api.resize(self._container, height=height, width=width)
        except Exception:  # a resize is advice: a finished process cannot take it
            pass

    def wait(self) -> int | None:
        """An exec's exit code (None for attach, or if Docker never recorded one)."""
        if not self._exec_id:
            return None
        deadline = time.monotonic() + _EXIT_CODE_WAIT
        while True:
            state = self._api.exec_inspect(self._exec_id)
            if not state.get("Running") or time.monotonic() > deadline:
                code = state.get("ExitCode")
                return int(code) if code is not None and not state.get("Running") else None
            time.sleep(0.02)  # the output ended: the exit is a moment away

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._socket.close()


def exec_session(
    api: Any, container_id: str, command: list[str], stdin: bool, tty: bool
) -> DockerSession:
    exec_id = api.exec_create(
        container_id, command, stdin=stdin, stdout=True, stderr=True, tty=tty
    )["Id"]
    sock = api.exec_start(exec_id, socket=True, tty=tty)
    return DockerSession(api, sock, tty=tty, exec_id=exec_id)


def attach_session(api: Any, container_id: str, stdin: bool) -> AttachSession:
    config = api.inspect_container(container_id).get("Config") or {}
    return AttachSession(
        api,
        container_id,
        tty=bool(config.get("Tty")),
        stdin=stdin and bool(config.get("OpenStdin")),
    )


class AttachSession:
    """Attach to a container's main process. Its output comes from the container's log, followed
    from the moment of the attach: Docker's attach subscribes to the output only after it has
    answered, so a process that answers its first input at once would be lost to a client
    (kubectl debug -i). Its stdin goes in over Docker's attach, which has no such race."""

    def __init__(self, api: Any, container_id: str, *, tty: bool, stdin: bool) -> None:
        self._api, self._container, self.tty = api, container_id, tty
        self._since = time.time()
        self._queue: queue.Queue[tuple[int, bytes]] = queue.Queue(maxsize=64)
        self._streams: list[Any] = []
        self._open = 2
        for fd in (1, 2):
            chunks = api.logs(
                container_id, stdout=fd == 1, stderr=fd == 2, stream=True, follow=True,
                since=self._since, tail="all",
            )  # fmt: skip
            self._streams.append(chunks)
            threading.Thread(target=self._pump, args=(fd, chunks), daemon=True).start()
        self._stdin: DockerSession | None = None
        if stdin:
            sock = api.attach_socket(container_id, params={"stdin": 1, "stream": 1})
            self._stdin = DockerSession(api, sock, tty=tty, container=container_id)

    def _pump(self, fd: int, chunks: Any) -> None:
        try:
            for chunk in chunks:
                if chunk:
                    self._queue.put((fd, bytes(chunk)))
        except Exception:  # the stream was closed under us, or Docker went away
            pass
        self._queue.put((0, b""))

    def read(self) -> tuple[int, bytes]:
        while self._open:
            fd, data = self._queue.get()
            if data:
                return fd, data
            self._open -= 1
        return 0, b""

    def write(self, data: bytes) -> None:
        if self._stdin is None:
            raise BrokenPipeError("the container's stdin is not open")
        self._stdin.write(data)

    def close_stdin(self) -> None:
        if self._stdin is not None:
            self._stdin.close_stdin()

    def resize(self, width: int, height: int) -> None:
        with contextlib.suppress(Exception):  # advice: a stopped container cannot take it
            self._api.resize(self._container, height=height, width=width)

    def wait(self) -> int | None:
        return None

    def close(self) -> None:
        for chunks in self._streams:
            with contextlib.suppress(Exception):
                chunks.close()
        if self._stdin is not None:
            self._stdin.close()


def connect_in_netns(pid: int, port: int, timeout: float) -> socket.socket:
    """A TCP connection to localhost:port inside the network namespace of process `pid`, as
    the kubelet's port-forward makes it (IPv4, then IPv6)."""
    return namespaces.inside(pid, "net", lambda: _dial_localhost(port, timeout))


def _dial_localhost(port: int, timeout: float) -> socket.socket:
    errors = []
    for family, host, name in (
        (socket.AF_INET, "127.0.0.1", "IPv4"),
        (socket.AF_INET6, "::1", "IPv6"),
    ):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect((host, port))
            sock.settimeout(None)
            return sock
        except OSError as exc:
            sock.close()
            errors.append(f"{name}: dial {host}:{port}: {os.strerror(exc.errno or errno.EIO)}")
    raise ConnectionRefusedError(
        errno.ECONNREFUSED,
        f"failed to connect to localhost:{port} inside the pod's network namespace, "
        + ", ".join(errors),
    )


def connect_to_ip(ip: str, port: int, timeout: float) -> socket.socket:
    """The fallback without the right to enter a namespace: the pod's IP from the host."""
    sock = socket.create_connection((ip, port), timeout=timeout)
    sock.settimeout(None)
    return sock
