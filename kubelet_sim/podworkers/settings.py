"""What the pod workers need to know about the node they run pods for."""

from __future__ import annotations

from dataclasses import dataclass, field

from kubelet_sim.pod.admission import Allocatable
from kubelet_sim.pod.dns import NodeDNS


@dataclass(frozen=True)
class SyncSettings:
    node_name: str
    node_ip: str
    pause_image: str
    allow_privileged: bool
    allocatable: Allocatable
    dns: NodeDNS = field(default_factory=NodeDNS)
    hosts_file: str = "/etc/hosts"  # what hostNetwork pods' /etc/hosts is made from
    allowed_unsafe_sysctls: tuple[str, ...] = ()  # --allowed-unsafe-sysctls
    apparmor: bool = False  # the host enforces AppArmor profiles
