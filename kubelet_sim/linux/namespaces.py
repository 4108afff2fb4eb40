"""Doing one thing inside another process's Linux namespace (setns(2), as root).

A namespace is per thread: the work runs on a thread of its own that enters the namespace and
ends right after, so no other thread ever leaves the host's. A socket made in a network
namespace stays there when its thread ends: a connection dialled or a port bound inside a
pod's (or any container's) namespace is used from the host's threads as any other socket.

A pid names a process only while it runs: entering "the namespace of pid N" some time after N
was read may enter another process's (the host's, if the pid was reused), or fail. What is
entered later is opened at once (`Namespace.of`) and entered by that handle, which holds the
very namespace whatever becomes of the process.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import Literal, TypeVar

T = TypeVar("T")
Kind = Literal["net", "uts"]
_FLAGS: dict[str, int] = {"net": 0x40000000, "uts": 0x04000000}  # CLONE_NEWNET, CLONE_NEWUTS


class Namespace:
    """An open namespace (a descriptor of /proc/<pid>/ns/<kind>): entered by the handle, never
    by the pid again. `close()` when done; it keeps the namespace alive until then."""

    def __init__(self, fd: int, kind: Kind) -> None:
        self._fd = fd
        self.kind: Kind = kind
        self._lock = threading.Lock()

    @classmethod
    def of(cls, pid: int, kind: Kind) -> Namespace:
        """The `kind` namespace process `pid` is in now (FileNotFoundError: no such process)."""
        return cls(os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC), kind)

    def run(self, work: Callable[[], T]) -> T:
        """`work()` run in this namespace; its result, or its exception (PermissionError when
        this process may not enter: not root; ValueError once closed)."""
        result: list[T] = []
        failure: list[BaseException] = []

        def entered() -> None:
            try:
                self._enter()
                result.append(work())
            except BaseException as exc:  # handed to the caller's thread
                failure.append(exc)

        thread = threading.Thread(target=entered, name=f"setns-{self.kind}", daemon=True)
        thread.start()
        thread.join()
        if failure:
            raise failure[0]
        return result[0]

    def close(self) -> None:
        """Let the namespace go (it ends with its last process and handle); idempotent."""
        with self._lock:
            fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> Namespace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _enter(self) -> None:
        """setns on the calling thread (held under the lock: `close` cannot swap the fd)."""
        with self._lock:
            if self._fd < 0:
                raise ValueError(f"{self.kind} namespace already closed")
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.setns(self._fd, _FLAGS[self.kind]) != 0:
                code = ctypes.get_errno()
                raise OSError(code, os.strerror(code))


def inside(pid: int, kind: Kind, work: Callable[[], T]) -> T:
    """`work()` run in the `kind` namespace of process `pid`, opened now; its result, or its
    exception (PermissionError when this process may not enter: not root)."""
    with Namespace.of(pid, kind) as namespace:
        return namespace.run(work)
