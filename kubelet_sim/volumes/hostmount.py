"""Mounts on the node as the kubelet makes them: tmpfs for secret volumes, binds for subPaths.

Needs CAP_SYS_ADMIN and the Docker engine's mount namespace (the engine bind-mounts what we mount);
without the capability the volume layer keeps volumes on disk and says so once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import cache
from pathlib import Path

MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_BIND = 0x1000
MNT_DETACH = 0x2


@cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(result: int, what: str, path: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what} {path}: {os.strerror(errno)}")


def mount_tmpfs(path: Path, size_bytes: int) -> None:
    """`mount -t tmpfs -o size=N tmpfs path` (nosuid, nodev); the root is 1777 as the kubelet's."""
    options = f"size={size_bytes}".encode()
    flags = MS_NOSUID | MS_NODEV
    _check(
        _libc().mount(b"tmpfs", os.fsencode(path), b"tmpfs", flags, options),
        "mount tmpfs",
        str(path),
    )


def bind_mount_fd(fd: int, target: Path) -> None:
    """Bind-mount the object `fd` refers to (not whatever its path names by now) onto `target`."""
    source = f"/proc/self/fd/{fd}".encode()
    _check(_libc().mount(source, os.fsencode(target), None, MS_BIND, None), "bind", str(target))


def unmount(path: Path) -> None:
    """Lazy unmount (MNT_DETACH): containers that still hold the mount keep their copy."""
    _check(_libc().umount2(os.fsencode(path), MNT_DETACH), "unmount", str(path))


def mount_points_under(directory: Path) -> list[Path]:
    """Mount points at or below `directory` (from /proc/self/mountinfo), deepest first."""
    prefix = str(directory)
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        point = _unescape(fields[4])
        if point == prefix or point.startswith(prefix + "/"):
            found.append(Path(point))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (`\\040`)."""
    return field.encode().decode("unicode_escape").encode("latin-1").decode(errors="replace")
