"""Setting the hostname in a running container's UTS namespace (a claimed pool sandbox's, and
its containers'), as root."""

from __future__ import annotations

import ctypes
import os

from kubelet_sim.linux import namespaces


def set_hostname(pid: int, hostname: str) -> None:
    """sethostname(2) in the UTS namespace of process `pid`."""
    name = hostname.encode()

    def rename() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.sethostname(name, len(name)) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))

    namespaces.inside(pid, "uts", rename)
