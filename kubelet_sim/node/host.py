"""Facts about the machine the node runs on, read from /proc, /sys and /etc without any network.

The node IP is the address of the default-route interface (what the kubelet falls back to when
the hostname does not resolve); it is read from /proc/net/route and an ioctl, never by sending
a packet. `resolve_name` is the one lookup: what the node's name resolves to on this host.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import platform
import socket
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path

from kubelet_sim.logs import get_logger

# uname machine names to the GOARCH names Kubernetes uses (kubernetes.io/arch).
GO_ARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv7l": "arm",
    "armv6l": "arm",
    "i386": "386",
    "i686": "386",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}
SIOCGIFADDR = 0x8915
STORAGE_PATHS = ("/var/lib/docker", "/")
CAP_SYS_ADMIN = 21
# A name lookup that takes longer counts as no answer: the node does not wait on a slow DNS.
RESOLVE_TIMEOUT = 2.0


@dataclass(frozen=True)
class HostFacts:
    """What the kubelet reads from cAdvisor and the OS, as the Node reports it."""

    hostname: str
    cpus: int
    memory_ki: int
    ephemeral_storage_ki: int
    kernel_version: str
    os_image: str
    architecture: str
    node_ip: str | None
    machine_id: str = ""
    system_uuid: str = ""
    boot_id: str = ""
    # Huge page sizes as resource names ("hugepages-2Mi") and the bytes reserved for each.
    hugepages: dict[str, int] = field(default_factory=dict)
    apparmor: bool = False  # the kernel enforces AppArmor (runc's apparmor.IsEnabled)
    may_mount: bool = False  # this process may mount: tmpfs volumes, subPath binds (can_mount)


def detect_host() -> HostFacts:
    """Read the host once at start; none of these change while the agent runs."""
    uname = os.uname()
    return HostFacts(
        hostname=socket.gethostname().lower(),
        cpus=os.cpu_count() or 1,
        memory_ki=_mem_total_ki(),
        ephemeral_storage_ki=_storage_ki(),
        kernel_version=uname.release,
        os_image=os_image(),
        architecture=go_arch(platform.machine()),
        node_ip=default_route_ip(),
        machine_id=_read("/etc/machine-id"),
        system_uuid=system_uuid(),
        boot_id=_read("/proc/sys/kernel/random/boot_id"),
        hugepages=_hugepages(),
        apparmor=apparmor_enabled(),
        may_mount=can_mount(),
    )


def can_mount() -> bool:
    """Whether this process may mount (CAP_SYS_ADMIN in its effective set)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_SYS_ADMIN & 1)
    except (OSError, ValueError):
        pass
    return False


def system_uuid(root: str = "") -> str:
    """cAdvisor's GetSystemUUID (utils/sysfs): the DMI product UUID, then the device tree's
    ids, then /etc/machine-id (its s390x path, read on every architecture): where a VM has
    no DMI, the kubelet reports the machine ID as the system UUID."""
    for path in (
        "/sys/class/dmi/id/product_uuid",
        "/proc/device-tree/system-id",
        "/proc/device-tree/vm,uuid",
        "/etc/machine-id",
    ):
        if found := _read(root + path):
            return found
    return ""


def apparmor_enabled(sys_root: str = "/sys") -> bool:
    """runc's apparmor.IsEnabled: securityfs has apparmor and the module says Y."""
    if not os.path.exists(f"{sys_root}/kernel/security/apparmor"):
        return False
    return _read(f"{sys_root}/module/apparmor/parameters/enabled").startswith("Y")


def go_arch(machine: str) -> str:
    return GO_ARCH.get(machine.lower(), machine.lower())


def os_image(path: str = "/etc/os-release") -> str:
    """PRETTY_NAME from os-release, as nodeInfo.osImage; the kubelet falls back to "Linux"."""
    for line in _read(path).splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "PRETTY_NAME":
            return value.strip().strip("\"'") or "Linux"
    return "Linux"


def default_route_ip(route_table: str = "/proc/net/route") -> str | None:
    """IPv4 address of the interface holding the default route, or None when there is none."""
    for interface in _default_route_interfaces(route_table):
        address = interface_ipv4(interface)
        if address and not ipaddress.ip_address(address).is_loopback:
            return address
    get_logger(__name__).warning("no default route with an IPv4 address; pass --node-ip")
    return None


def resolve_name(name: str, timeout: float = RESOLVE_TIMEOUT) -> tuple[str, ...]:
    """The addresses `name` resolves to on this host (getaddrinfo: /etc/hosts, then DNS with
    the search list), in the resolver's order; () when it does not resolve within `timeout`.

    A lookup cannot be cancelled: one that outlives the timeout finishes on its own daemon
    thread, and its answer is dropped.
    """
    found: list[str] = []
    done = threading.Event()

    def look_up() -> None:
        try:
            answers = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
            found.extend(dict.fromkeys(str(answer[4][0]) for answer in answers))
        except (OSError, UnicodeError):
            pass  # no such name (or no resolver): nothing resolves
        finally:
            done.set()

    threading.Thread(target=look_up, name=f"resolve {name}", daemon=True).start()
    if not done.wait(timeout):
        get_logger(__name__).warning(
            "no answer resolving the node name; taking it as unresolvable",
            name=name,
            timeout_seconds=timeout,
        )
        return ()
    return tuple(found)


def interface_ipv4(interface: str) -> str | None:
    """SIOCGIFADDR on a datagram socket that is never connected nor used to send."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            request = struct.pack("256s", interface.encode()[:15])
            answer = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, request)
        except OSError:
            return None
    return socket.inet_ntoa(answer[20:24])


def _default_route_interfaces(route_table: str) -> list[str]:
    routes: list[tuple[int, str]] = []
    for line in _read(route_table).splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[1] == "00000000" and fields[7] == "00000000":
            routes.append((int(fields[6]), fields[0]))  # (metric, interface)
    return [name for _, name in sorted(routes)]


def _mem_total_ki() -> int:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1])
    return 0


def _storage_ki() -> int:
    """Size of the filesystem holding Docker's data (the kubelet's nodefs), in KiB."""
    for path in STORAGE_PATHS:
        try:
            stat = os.statvfs(path)
        except OSError:
            continue
        return stat.f_blocks * stat.f_frsize // 1024
    return 0


def _hugepages(root: str = "/sys/kernel/mm/hugepages") -> dict[str, int]:
    pages: dict[str, int] = {}
    base = Path(root)
    if not base.is_dir():
        return pages
    for entry in sorted(base.glob("hugepages-*kB")):
        size_kb = int(entry.name.removeprefix("hugepages-").removesuffix("kB"))
        count = _read(str(entry / "nr_hugepages"))
        pages[f"hugepages-{_binary_size(size_kb)}"] = size_kb * 1024 * int(count or 0)
    return pages


def _binary_size(kib: int) -> str:
    for unit, factor in (("Gi", 1024 * 1024), ("Mi", 1024)):
        if kib % factor == 0:
            return f"{kib // factor}{unit}"
    return f"{kib}Ki"


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def host_usage() -> tuple[float, int]:
    """The host's cumulative CPU core-seconds (every state but idle and iowait, /proc/stat) and
    its memory working set (MemTotal - MemAvailable): the node's line of /metrics/resource."""
    cpu = 0.0
    for line in _read("/proc/stat").splitlines():
        if line.startswith("cpu "):
            ticks = [int(v) for v in line.split()[1:]]
            busy = sum(ticks[:8]) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)
            cpu = busy / os.sysconf("SC_CLK_TCK")
            break
    meminfo = {
        line.split(":")[0]: int(line.split()[1])
        for line in _read("/proc/meminfo").splitlines()
        if line.split()[1:2] and line.split()[1].isdigit()
    }
    working = meminfo.get("MemTotal", 0) - meminfo.get("MemAvailable", 0)
    return cpu, max(working, 0) * 1024
