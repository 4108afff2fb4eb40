"""What a privileged container gets on this host: containerd's privileged, spelled for Docker.

Docker's `Privileged: true` asks runc for every capability Docker knows; where the engine itself
runs with a smaller bounding set (this project's machines lack CAP_SYS_RESOURCE) runc refuses
to start it (`unable to apply caps: operation not permitted`), and Docker ignores CapDrop next
to Privileged. containerd's CRI (`oci.WithPrivileged`: `WithAllCurrentCapabilities`, no masked
or read-only paths, writable sysfs; `WithHostDevices`, `WithAllDevicesAllowed`; no seccomp or
AppArmor profile) gives such a container the capabilities the runtime holds. Where the engine
lacks a capability its kernel has, `parts` spells that out without the flag; elsewhere
privileged stays Docker's own flag, as before.
"""

from __future__ import annotations

import os
import re
import socket
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Linux capability numbers (include/uapi/linux/capability.h), bit i = CAPABILITIES[i].
CAPABILITIES = (
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
)

# Docker's refusal of a capability it has no name for (e.g. 20.10 and CAP_PERFMON).
UNKNOWN_CAPABILITY = re.compile(r'unknown capability: "(?:CAP_)?([A-Z_]+)"')

# containerd's HostDevices skips these directories of /dev (and any `console`).
_SKIPPED_DIRS = {"pts", "shm", "fd", "mqueue", ".lxc", ".lxd-mounts", ".udev"}


@dataclass(frozen=True)
class PrivilegedParts:
    """Privileged without Docker's flag: the engine's capabilities and the host's devices."""

    capabilities: tuple[str, ...]  # CAP_X names, as Docker's CapAdd takes them
    devices: tuple[str, ...]  # host device paths, each at the same path in the container

    def host_config(self) -> dict[str, Any]:
        """The HostConfig fields that replace `Privileged: true`."""
        return {
            "Privileged": False,
            "CapAdd": list(self.capabilities),
            "Devices": [
                {"PathOnHost": d, "PathInContainer": d, "CgroupPermissions": "rwm"}
                for d in self.devices
            ],
            "DeviceCgroupRules": ["a *:* rwm"],  # WithAllDevicesAllowed
            "MaskedPaths": [],
            "ReadonlyPaths": [],
            # Writable sysfs (WithWriteableSysfs): Docker mounts /sys read-only without the
            # flag; the host's sysfs, without the mounts below it, so that /sys/fs/cgroup stays
            # the container's own.
            "Mounts": [
                {
                    "Type": "bind",
                    "Source": "/sys",
                    "Target": "/sys",
                    "ReadOnly": False,
                    "BindOptions": {"NonRecursive": True},
                }
            ],
        }


def capability_names(mask: int, unknown: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The CAP_X names of the bits set in `mask`, but for those Docker does not know."""
    return tuple(
        f"CAP_{name}"
        for bit, name in enumerate(CAPABILITIES)
        if mask >> bit & 1 and name not in unknown
    )


def cap_bounding_set(status_text: str) -> int | None:
    """CapBnd of a /proc/<pid>/status text."""
    for line in status_text.splitlines():
        key, _, value = line.partition(":")
        if key == "CapBnd":
            return int(value.strip(), 16)
    return None


def kernel_capabilities(proc: Path = Path("/proc")) -> int:
    """Every capability this kernel has (bits 0..cap_last_cap)."""
    try:
        last = int((proc / "sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        last = len(CAPABILITIES) - 1
    return (1 << (last + 1)) - 1


def engine_pid(socket_path: str) -> int | None:
    """The pid of the process serving a unix socket (the Docker engine), or None."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(socket_path)
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid = int(struct.unpack("3i", creds)[0])
    return pid or None


def engine_bounding_set(socket_path: str, proc: Path = Path("/proc")) -> int | None:
    """The engine's capability bounding set, read from its /proc status (the engine runs on
    this host: kubelet-sim's volumes are bind-mounted from its disk), or None."""
    pid = engine_pid(socket_path)
    if pid is None:
        return None
    try:
        return cap_bounding_set((proc / str(pid) / "status").read_text())
    except OSError:
        return None


def host_devices(dev: Path = Path("/dev")) -> tuple[str, ...]:
    """The host's device nodes, as containerd's HostDevices lists them: char and block devices
    under /dev (not through symlinks), but any `console` and the pts, shm, fd, mqueue, .lxc,
    .lxd-mounts and .udev directories."""
    found: list[str] = []
    for root, dirs, files in os.walk(dev):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
        for name in sorted(files):
            path = os.path.join(root, name)
            if name == "console":
                continue
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                found.append(path)
    return tuple(found)
