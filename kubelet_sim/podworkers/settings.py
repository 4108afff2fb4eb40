"""What the pod workers need to know about the node they run pods for."""

from __future__ import annotations

from dataclasses import dataclass

from kubelet_sim.pod.admission import Allocatable


@dataclass(frozen=True)
class SyncSettings:
    node_name: str
    node_ip: str
    pause_image: str
    allow_privileged: bool
    allocatable: Allocatable
