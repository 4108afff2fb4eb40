"""A local cluster: our control plane, the pods' way to its API server, and the credentials
its nodes join with. The demo (demo/session.py) and the pytest plugin's Cluster
(testing/cluster.py) both start one, then run their nodes as one NodeSet on it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from kubelet_sim.assembly.nodeset import NodeSetSettings
from kubelet_sim.controlplane.binaries import Binaries
from kubelet_sim.controlplane.cluster import API_SERVICE_IP, ControlPlane
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.client import KubeConnection, connect
from kubelet_sim.kube.rest import exists, request_json
from kubelet_sim.localcluster.pod_endpoint import make_pod_endpoint
from kubelet_sim.runtime.engine import DockerEngine

NODE_IP = "127.0.0.1"  # one machine: the API server reaches its kubelets on loopback
READY_TIMEOUT = 60.0


class LocalClusterError(RuntimeError):
    """The cluster did not come up as asked; the message says why."""


@dataclasses.dataclass(eq=False)
class LocalCluster:
    """Made, then `start`ed, then `stop`ped. `on_step(what, seconds)` hears each step of the
    control plane's start; `pause_image` runs the pods' API endpoint (a sandbox of it)."""

    binaries: Binaries
    workdir: Path
    engine: DockerEngine
    _: dataclasses.KW_ONLY
    pause_image: str
    owner_labels: dict[str, str]
    node_monitor_grace_period: float | None = None
    default_toleration_seconds: int | None = None
    on_step: Callable[[str, float], None] | None = None

    def __post_init__(self) -> None:
        self.plane: ControlPlane | None = None
        self._admin: KubeConnection | None = None
        # Why pods cannot reach the API server ("" when they can: in-cluster config works).
        self.pod_endpoint_missing = ""
        self.pod_endpoint_ip: str | None = None

    def start(self, timeout: float = 60.0, *, meanwhile: Callable[[], None] | None = None) -> None:
        """The pods' endpoint, then the control plane (`meanwhile` runs once the API server
        serves, while the controllers start)."""
        endpoint, self.pod_endpoint_missing = make_pod_endpoint(
            self.engine, self.pause_image, dict(self.owner_labels)
        )
        self.pod_endpoint_ip = endpoint.ip if endpoint is not None else None
        self.plane = ControlPlane(
            self.binaries,
            self.workdir,
            verify_kubelets=True,
            node_monitor_grace_period=self.node_monitor_grace_period,
            default_toleration_seconds=self.default_toleration_seconds,
            pod_endpoint=endpoint,
            on_step=self.on_step,
        )
        self.plane.start(timeout, meanwhile=meanwhile)

    @property
    def pods_reach(self) -> str:
        """How pods reach the API server, or why they cannot, in a line."""
        if self.pod_endpoint_ip is None:
            return f"pods cannot reach the API server: {self.pod_endpoint_missing}"
        where = f"kubernetes.default ({API_SERVICE_IP}) at {self.pod_endpoint_ip}"
        return f"pods reach the API server as {where}"

    @property
    def admin(self) -> KubeConnection:
        """The admin's connection (once the API server serves)."""
        if self._admin is None:
            self._admin = connect(str(self._plane().admin_kubeconfig))
        return self._admin

    def join(self, nodes: NodeSetSettings) -> NodeSetSettings:
        """`nodes` as kubelets of this cluster after TLS bootstrap: each with its own
        credentials (`system:node:<name>`) and a serving certificate, trusting the cluster's
        client CA, on the cluster's sandbox image; with the service proxy, the nodes' group
        gets kube-proxy's role."""
        if nodes.service_proxy:
            grant_node_proxier(self.admin)
        return with_node_credentials(self._plane(), nodes, self.pause_image)

    def stop(self, *, remove: bool) -> None:
        if self.plane is not None:
            self.plane.stop(remove=remove)

    def _plane(self) -> ControlPlane:
        if self.plane is None:
            raise LocalClusterError("the control plane is not started")
        return self.plane


def grant_node_proxier(admin: KubeConnection) -> None:
    """The nodes' service proxies read EndpointSlices with kube-proxy's role, as kube-proxy
    itself does on a kubeadm cluster (there bound to its own ServiceAccount)."""
    request_json(
        admin.api,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        node_proxier_binding(),
    )


def node_proxier_binding() -> Json:
    """The ClusterRoleBinding `grant_node_proxier` creates."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "kubelet-sim:node-proxier"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "system:node-proxier",
        },
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}
        ],
    }


def with_node_credentials(
    plane: ControlPlane, nodes: NodeSetSettings, pause_image: str
) -> NodeSetSettings:
    """`nodes` as kubelets of `plane` after TLS bootstrap (LocalCluster.join, without the
    role binding)."""
    identities = []
    for node in nodes.nodes:
        creds = plane.node_credentials(node.settings.node_name, ips=(NODE_IP,))
        identities.append(
            dataclasses.replace(
                node,
                kubeconfig=str(creds.kubeconfig),
                serving_cert=(creds.serving.cert, creds.serving.key),
            )
        )
    assert nodes.server is not None
    return dataclasses.replace(
        nodes,
        nodes=tuple(identities),
        pods=dataclasses.replace(nodes.pods, pause_image=pause_image),
        server=dataclasses.replace(nodes.server, client_ca_file=str(plane.client_ca[0])),
    )


def node_ready(node: Json) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def wait_nodes_ready(
    admin: KubeConnection,
    names: Iterable[str],
    stop: threading.Event,
    *,
    on_ready: Callable[[str], None] | None = None,
    timeout: float = READY_TIMEOUT,
) -> None:
    """Until every node of `names` is Ready (`on_ready` hears each), `stop` is set, or
    LocalClusterError at the deadline."""
    waiting = set(names)
    deadline = time.monotonic() + timeout
    while waiting and not stop.is_set():
        if time.monotonic() > deadline:
            raise LocalClusterError(f"nodes not Ready after {timeout:.0f} s: {sorted(waiting)}")
        for node in request_json(admin.api, "GET", "/api/v1/nodes").get("items") or []:
            name = node["metadata"]["name"]
            if name in waiting and node_ready(node):
                waiting.discard(name)
                if on_ready is not None:
                    on_ready(name)
        stop.wait(0.2)


def wait_default_account(
    admin: KubeConnection, namespace: str, stop: threading.Event, timeout: float = READY_TIMEOUT
) -> bool:
    """Pods are refused until the namespace's `default` ServiceAccount exists: True once it
    does, False at the deadline or on `stop`."""
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
    deadline = time.monotonic() + timeout
    while not stop.is_set() and time.monotonic() < deadline:
        if exists(admin.api, path):
            return True
        stop.wait(0.2)
    return False
