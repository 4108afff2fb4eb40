"""Doing one thing inside another process's Linux namespace (setns(2), as root).

A namespace is per thread: the work runs on a thread of its own that enters the namespace and
ends right after, so no other thread ever leaves the host's. A socket made in a network
namespace stays there when its thread ends: a connection dialled or a port bound inside a
pod's (or any container's) namespace is used from the host's threads as any other socket.
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


def inside(pid: int, kind: Kind, work: Callable[[], T]) -> T:
    """`work()` run in the `kind` namespace of process `pid`; its result, or its exception
    (PermissionError when this process may not enter: not root)."""
    result: list[T] = []
    failure: list[BaseException] = []

    def entered() -> None:
        try:
            fd = os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY)
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                if libc.setns(fd, _FLAGS[kind]) != 0:
                    code = ctypes.get_errno()
                    raise OSError(code, os.strerror(code))
            finally:
                os.close(fd)
            result.append(work())
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=entered, name=f"setns-{kind}", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]
