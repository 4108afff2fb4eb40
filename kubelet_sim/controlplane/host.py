"""What the reference node reads and changes on the host: cgroup hierarchies, routes and free
subnets, iptables chains, mounts, capabilities, free ports; each through /proc or a command.

Kept apart from reference_node.py, which decides what to make and undo with them.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import json
import secrets
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


class HostCommandError(RuntimeError):
    """A command that had to succeed failed; the message has its words and its stderr."""


# Where pod bridges go: one /24 of this range per node, one not routed here already.
POD_RANGE = ipaddress.IPv4Network("10.201.0.0/16")


def cgroup_mounts() -> list[tuple[Path, str]]:
    """(mount point, fstype) of each cgroup hierarchy mounted on this host."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fstype = right.split()[0] if right else ""
        if fstype in ("cgroup", "cgroup2"):
            found.append((Path(unescape(left.split()[4])), fstype))
    return found


def unescape(text: str) -> str:
    return text.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n")


def cgroup_problem() -> str | None:
    mounts = cgroup_mounts()
    v1 = [p for p, t in mounts if t == "cgroup"]
    if v1:
        names = {n for p in v1 for n in p.name.split(",")}
        lacking = {"cpu", "cpuacct", "memory", "pids", "cpuset"} - names
        if lacking:
            return f"cgroup v1 without the {', '.join(sorted(lacking))} hierarchy"
        return None
    if not any(p == CGROUP_ROOT for p, t in mounts if t == "cgroup2"):
        return f"no cgroup hierarchy mounted at {CGROUP_ROOT}"
    controllers = (CGROUP_ROOT / "cgroup.subtree_control").read_text().split()
    lacking = {"cpu", "memory", "pids"} - set(controllers)
    if lacking:
        return f"cgroup v2 root delegates no {', '.join(sorted(lacking))} controller"
    return None


def quiet(args: list[str], timeout: float = 30.0) -> str:
    """A cleanup command's output; its failure (or a hang past `timeout`) is not ours to stop."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    except (subprocess.TimeoutExpired, OSError):
        return ""
    return done.stdout if done.returncode == 0 else ""


def has_capability(bit: int) -> bool:
    """Whether this process holds the capability (an effective set from /proc/self/status)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> bit & 1)
    return False


def run(args: list[str]) -> str:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise HostCommandError(f"{' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def free_port(address: str) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def routed() -> list[ipaddress.IPv4Network]:
    taken = []
    for route in json.loads(run(["ip", "-j", "-4", "route", "show", "table", "all"]) or "[]"):
        dst = route.get("dst", "")
        if dst and dst != "default":
            with contextlib.suppress(ValueError):
                taken.append(ipaddress.ip_network(dst, strict=False))
    return [n for n in taken if isinstance(n, ipaddress.IPv4Network)]


def free_subnet() -> ipaddress.IPv4Network | None:
    """A /24 of POD_RANGE no route here covers (Docker's bridges, another reference node)."""
    taken = routed()
    candidates = list(POD_RANGE.subnets(new_prefix=24))
    start = secrets.randbelow(len(candidates))
    for subnet in candidates[start:] + candidates[:start]:
        if not any(subnet.overlaps(t) for t in taken):
            return subnet
    return None


def iptables(table: str, *args: str) -> str:
    return quiet(["iptables", "-w", "5", "-t", table, *args])


def only_in(rule: str, subnet: ipaddress.IPv4Network) -> bool:
    """Whether a rule names addresses (-s/-d) and every one is in `subnet`."""
    named = False
    for flag, value in itertools.pairwise(rule.split()):
        if flag in ("-s", "-d", "--source", "--destination"):
            try:
                if not ipaddress.ip_network(value, strict=False).subnet_of(subnet):  # type: ignore[arg-type]
                    return False
            except (ValueError, TypeError):
                return False
            named = True
    return named


def mount_points_under(directories: Sequence[Path]) -> list[Path]:
    """Mount points under any of `directories`, deepest first."""
    roots = [str(d.resolve()) for d in directories]
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = unescape(line.split()[4])
        if any(point == r or point.startswith(r + "/") for r in roots):
            points.append(Path(point))
    return sorted(set(points), key=lambda p: len(p.parts), reverse=True)
