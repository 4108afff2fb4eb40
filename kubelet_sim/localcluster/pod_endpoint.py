"""The API server's address on the pods' network, for the demo's and the tests' clusters: a
sandbox-image container on that network whose namespace the control plane's relay listens in.

Pods then use in-cluster config as on kind: the `kubernetes` Service (10.96.0.1:443, through
each node's service proxy) leads there, its certificate names it, and nothing outside the pods'
network reaches it (no listening on the host's own addresses).
"""

from __future__ import annotations

import os
import secrets

from kubelet_sim import cri
from kubelet_sim.controlplane.cluster import PodEndpoint
from kubelet_sim.runtime.engine import DockerEngine


def make_pod_endpoint(
    engine: DockerEngine, sandbox_image: str, labels: dict[str, str]
) -> tuple[PodEndpoint | None, str]:
    """(the endpoint, "") or (None, why pods cannot reach the API server here)."""
    if os.geteuid() != 0:
        return None, "not root: the relay must enter a container's network namespace"
    name = f"kubelet-sim-apiserver-{secrets.token_hex(4)}"
    try:
        ip, netns = engine.run_anchor(name, sandbox_image, labels)
    except cri.ContainerStartError as exc:
        return None, str(exc)
    return PodEndpoint(ip, netns), ""
