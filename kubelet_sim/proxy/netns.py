"""Programming one pod's network namespace: iptables rules and routes, nothing on the host.

Runs the host's own `iptables-restore` and `ip` inside the namespace through `nsenter` (util-
linux), the tools kube-proxy and kindnet drive: `iptables-restore --noflush` replaces only
the chains we name, atomically per table, beside Docker's embedded-DNS rules in the same
namespace; our routes carry their own `proto` number, so they are found again (and never
doubled) after a restart. The rules go away with the namespace, that is with the pod.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kubelet_sim.proxy.rules import PREFIX, SERVICES_CHAIN, Route, RuleSet

ROUTE_PROTO = "250"  # rt_protos: 250 is free; `ip route show proto 250` lists only ours
TIMEOUT = 10.0
Runner = Callable[[Sequence[str], str | None], subprocess.CompletedProcess[str]]


class NetnsError(RuntimeError):
    """A command in the namespace failed; the message has its stderr."""


def run_command(argv: Sequence[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), input=stdin, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def unavailable() -> str | None:
    """Why pods' namespaces cannot be programmed here, or None when they can."""
    if os.geteuid() != 0:
        return "not root (entering a pod's network namespace needs CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    missing = [t for t in ("nsenter", "iptables-restore", "iptables", "ip") if not shutil.which(t)]
    if missing:
        return f"{', '.join(missing)} not found (util-linux, iptables, iproute2)"
    return None


def is_host_namespace(pid: int) -> bool:
    """Whether `pid` shares our network namespace (a hostNetwork pod): never programmed."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return True  # gone or unreadable: do not touch


@dataclass
class Namespace:
    """One pod's namespace, entered through a process in it; remembers what it programmed."""

    pid: int
    run: Runner = run_command
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    programmed: str | None = None  # the last rules text applied, to skip no-op updates
    nat_chains: set[str] = field(default_factory=set)
    filter_chains: set[str] = field(default_factory=set)
    adopted: bool = False

    def _enter(self, *argv: str, stdin: str | None = None) -> str:
        done = self.run(["nsenter", f"--net=/proc/{self.pid}/ns/net", "--", *argv], stdin)
        if done.returncode != 0:
            raise NetnsError(f"{' '.join(argv[:3])}: {done.stderr.strip()[:300]}")
        return done.stdout

    def apply(self, rules: RuleSet, routes: list[Route]) -> bool:
        """Bring the namespace to `rules` and `routes`; False when nothing had to change."""
        if not self.adopted:
            self._adopt()
        text = rules.text(self.nat_chains, self.filter_chains)
        key = text + repr(routes)
        if key == self.programmed:
            return False
        self._enter("iptables-restore", "-w", "5", "--noflush", stdin=text)
        self.nat_chains, self.filter_chains = set(rules.nat_chains), set(rules.filter_chains)
        self._ensure_jump("nat")
        self._ensure_jump("filter")
        self._routes(routes)
        self.programmed = key
        return True

    def _adopt(self) -> None:
        """Chains a previous run of the agent left here, so they are replaced, not doubled."""
        for table, chains in (("nat", self.nat_chains), ("filter", self.filter_chains)):
            for line in self._enter("iptables", "-w", "5", "-t", table, "-S").splitlines():
                parts = line.split()
                if len(parts) >= 2 and parts[0] == "-N" and parts[1].startswith(f"{PREFIX}-"):
                    chains.add(parts[1])
        self.adopted = True

    def _ensure_jump(self, table: str) -> None:
        check = ("iptables", "-w", "5", "-t", table, "-C", "OUTPUT", "-j", SERVICES_CHAIN)
        done = self.run(["nsenter", f"--net=/proc/{self.pid}/ns/net", "--", *check], None)
        if done.returncode != 0:
            self._enter(
                "iptables", "-w", "5", "-t", table, "-I", "OUTPUT", "1", "-j", SERVICES_CHAIN
            )

    def _routes(self, routes: list[Route]) -> None:
        present = set()
        for line in self._enter("ip", "-4", "route", "show", "proto", ROUTE_PROTO).splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[1] == "via":
                present.add(Route(parts[0], parts[2]))
        wanted = {r.cidr for r in routes}
        for route in sorted(present, key=lambda r: r.cidr):
            if route.cidr not in wanted:
                self._enter("ip", "route", "del", route.cidr, "proto", ROUTE_PROTO)
        for route in sorted(set(routes) - present, key=lambda r: r.cidr):
            self._enter(
                "ip", "route", "replace", route.cidr, "via", route.via, "proto", ROUTE_PROTO
            )
