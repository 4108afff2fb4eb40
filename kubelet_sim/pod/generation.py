"""Which kubelet's status rules the node follows: the one of its API server's minor version.

A kubelet is never newer than its API server (the version skew policy), so on a v1.24 server
a user diffing our pods against a real node's compares with a v1.24 kubelet, and the rules
that changed since must be that kubelet's. Each rule says the version that brought it.
"""

from __future__ import annotations

from dataclasses import dataclass

LATEST = 99  # a server whose version says nothing: today's rules


@dataclass(frozen=True)
class KubeletGeneration:
    minor: int = LATEST

    @property
    def ready_to_start_condition(self) -> bool:
        """The PodReadyToStartContainers condition (beta and on by default in v1.29)."""
        return self.minor >= 29

    @property
    def terminal_phase(self) -> bool:
        """v1.27: a pod the node finished (deleted, or killed for good) ends Succeeded or
        Failed, Ready and ContainersReady say PodFailed for a Failed pod, and TerminatePod
        defaults only the containers that could have run. Before, a deleted pod kept its
        phase (Running), readiness came from the containers alone, and TerminatePod gave
        every container without an end ContainerStatusUnknown."""
        return self.minor >= 27

    @property
    def kube_proxy_version(self) -> bool:
        """Until v1.30 the kubelet wrote its own version as nodeInfo.kubeProxyVersion; since
        v1.31 (DisableNodeKubeProxyVersion) it leaves it empty (the rig's v1.24 kubelet writes
        it, its v1.34 one does not)."""
        return self.minor <= 30

    @property
    def sidecars(self) -> bool:
        """v1.28 (sidecar containers): `started` on init container statuses, and a pod whose
        regular containers have run is Initialized whatever its init containers say."""
        return self.minor >= 28

    @property
    def in_place_resize(self) -> bool:
        """InPlacePodVerticalScaling, beta and on by default in v1.33: the `resize` subresource
        changes a running pod's resources, and the kubelet decides and applies it
        (pod/resize.py). Before, the API server keeps resources immutable."""
        return self.minor >= 33


CURRENT = KubeletGeneration()


def generation_of(git_version: str | None, knows: set[str] | None = None) -> KubeletGeneration:
    """From the server's /version gitVersion ("v1.24.3"); a build that stamped none
    ("v0.0.0-master") is placed by the status fields its schema knows (`knows`:
    "Definition.property" names), newest first."""
    minor = _minor(git_version)
    if minor is not None:
        return KubeletGeneration(minor)
    if not knows:  # nothing read: assume a current server, as the schema's pruning does
        return CURRENT
    for marker, since in (
        ("io.k8s.api.core.v1.ContainerStatus.volumeMounts", 30),
        ("io.k8s.api.core.v1.PodStatus.hostIPs", 28),
        ("io.k8s.api.core.v1.ContainerStatus.allocatedResources", 27),
    ):
        if marker in knows:
            return KubeletGeneration(since)
    return KubeletGeneration(26)


def _minor(git_version: str | None) -> int | None:
    text = (git_version or "").lstrip("v").split("-")[0].split("+")[0]
    parts = text.split(".")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    major, minor = int(parts[0]), int(parts[1])
    return minor if major == 1 else None
