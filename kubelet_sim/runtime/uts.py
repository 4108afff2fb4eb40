"""Setting the hostname in a running container's UTS namespace (a claimed pool sandbox's, and
its containers'), as root, with setns(2) on the calling thread and back."""

from __future__ import annotations

import ctypes
import os

_CLONE_NEWUTS = 0x04000000


def _setns(libc: ctypes.CDLL, fd: int) -> None:
    if libc.setns(fd, _CLONE_NEWUTS) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def set_hostname(pid: int, hostname: str) -> None:
    """sethostname(2) in the UTS namespace of process `pid`. Only this thread enters it (a
    UTS namespace is per thread) and it returns to its own before this returns: a thread
    that could not go back raises, and no other thread ever left the host's."""
    libc = ctypes.CDLL(None, use_errno=True)
    name = hostname.encode()
    target = os.open(f"/proc/{pid}/ns/uts", os.O_RDONLY)
    try:
        own = os.open("/proc/thread-self/ns/uts", os.O_RDONLY)
        try:
            _setns(libc, target)
            try:
                if libc.sethostname(name, len(name)) != 0:
                    code = ctypes.get_errno()
                    raise OSError(code, os.strerror(code))
            finally:
                _setns(libc, own)
        finally:
            os.close(own)
    finally:
        os.close(target)
