"""Pod volumes on the node: the directories containers bind-mount (the kubelet's volume manager).

This layer owns file-system side effects under `<root>/pods/<uid>/volumes`; pod logic stays pure.
"""

from kubelet_sim.volumes.manager import VolumeManager
from kubelet_sim.volumes.mounts import mounts_for
from kubelet_sim.volumes.types import (
    MountError,
    ObjectLookup,
    TokenSource,
    VolumeError,
    VolumeSetup,
)

__all__ = [
    "MountError",
    "ObjectLookup",
    "TokenSource",
    "VolumeError",
    "VolumeManager",
    "VolumeSetup",
    "mounts_for",
]
