"""What the pod workers need to know about the node they run pods for, and the command's pod
options they are made from."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

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


@dataclass(frozen=True)
class PodSettings:
    """The command's pod options, the same for every node of a process."""

    pause_image: str = "registry.k8s.io/pause:3.10"
    allow_privileged: bool = False
    # Pod worker threads at most. Not one a pod as the kubelet's goroutines: every sandbox of a
    # burst then starts at once and Docker sets their networks up one at a time, so each pod
    # starts later (compare's active-deadline pod, 52 pods at once, started after its 5 s).
    workers: int = 8
    dns: NodeDNS = field(default_factory=NodeDNS)  # resolvers and hosts files
    allowed_unsafe_sysctls: tuple[str, ...] = ()
    # Warm sandboxes kept ready (podworkers/pool.py): None sizes the pool to the node's recent
    # pod starts; a number fixes it (0, the default: none, since a pooled pod's first process
    # may still read the pool's hostname from the kernel: docs/sandbox-pool.md).
    sandbox_pool_size: int | None = 0
    pod_manifest_path: Path | None = None  # static pods' manifests (staticpods/); None: none
