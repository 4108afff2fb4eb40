"""The reference node: the upstream kubelet on containerd, beside the virtual nodes.

Runs on the real API pass only (`KUBELET_SIM_TEST_API=real`): the `reference_node` fixture
skips elsewhere, saying why.
"""

from __future__ import annotations

import ipaddress
import tempfile
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from kubelet_sim.controlplane import reference_node as reference
from kubelet_sim.controlplane.reference_node import ReferenceNode
from kubelet_sim.kube.rest import request_json
from kubelet_sim.runtime import local_images
from tests.cluster import Cluster, wait_for
from tests.pods import BUSYBOX, SLEEP_FOREVER, get_pod

pytestmark = pytest.mark.docker

KUBELET_CONDITIONS = {"MemoryPressure", "DiskPressure", "PIDPressure", "Ready"}


def test_its_default_images_are_the_projects_local_ones() -> None:
    """controlplane/ may not import runtime/: the names are written twice, and must agree."""
    assert reference.PAUSE_IMAGE == local_images.PAUSE_IMAGE
    assert reference.BUSYBOX_IMAGE == local_images.BUSYBOX_IMAGE == BUSYBOX


def _pod(cluster: Cluster, node: str, name: str) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "c",
                    "image": BUSYBOX,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", f"echo hello; {SLEEP_FOREVER[2]}"],
                }
            ],
        },
    }
    return cluster.api.sanitize_for_serialization(  # type: ignore[no-any-return]
        cluster.core.create_namespaced_pod(cluster.namespace, body)
    )


def _running(cluster: Cluster, name: str) -> dict[str, Any] | None:
    pod = get_pod(cluster, name)
    status = (pod or {}).get("status") or {}
    statuses = status.get("containerStatuses") or []
    if status.get("phase") == "Running" and statuses and all(s.get("ready") for s in statuses):
        return pod
    return None


def _containers_of(node: ReferenceNode, uid: str) -> list[str]:
    return [c["id"] for c in node.containers() if c["labels"].get("io.kubernetes.pod.uid") == uid]


def test_the_node_is_ready_with_the_kubelets_conditions(
    reference_node: ReferenceNode, cluster: Cluster
) -> None:
    node = cluster.core.read_node(reference_node.name)
    conditions = {c.type: c.status for c in node.status.conditions}
    assert set(conditions) >= KUBELET_CONDITIONS, conditions
    assert conditions["Ready"] == "True"
    assert {conditions[c] for c in KUBELET_CONDITIONS - {"Ready"}} == {"False"}
    addresses = {(a.type, a.address) for a in node.status.addresses}
    assert ("InternalIP", reference_node.node_ip) in addresses
    assert node.status.daemon_endpoints.kubelet_endpoint.port == reference_node.port
    assert node.status.node_info.container_runtime_version.startswith("containerd://")


def test_the_kubelet_is_of_the_api_servers_version(
    reference_node: ReferenceNode, cluster: Cluster
) -> None:
    """A comparison is with the kubelet of the server's version (v1.34.9's on a v1.34.9 server;
    the rig's v1.24 build stamps `v0.0.0-master` on both)."""
    node = cluster.core.read_node(reference_node.name)
    server = request_json(cluster.core.api_client, "GET", "/version", timeout=(5, 30))
    kubelet = node.status.node_info.kubelet_version
    assert kubelet.split("+")[0] == str(server["gitVersion"]).split("+")[0], (kubelet, server)


def test_a_pinned_pod_runs_shows_its_log_and_goes_at_deletion(
    reference_node: ReferenceNode, cluster: Cluster
) -> None:
    created = _pod(cluster, reference_node.name, "ref-pod")
    uid = created["metadata"]["uid"]
    pod = wait_for(lambda: _running(cluster, "ref-pod"), 60, "the pod Running and ready")
    assert reference_node.subnet is not None
    assert ipaddress.ip_address(pod["status"]["podIP"]) in reference_node.subnet
    assert pod["status"]["hostIP"] == reference_node.node_ip
    assert _containers_of(reference_node, uid), "no containerd container for the pod"

    # The API server dials the kubelet (InternalIP) and the kubelet authorizes it (webhook).
    log = wait_for(
        lambda: cluster.core.read_namespaced_pod_log("ref-pod", cluster.namespace),
        20,
        "the container's log through the API server",
    )
    assert "hello" in log

    cluster.core.delete_namespaced_pod("ref-pod", cluster.namespace)
    wait_for(lambda: get_pod(cluster, "ref-pod") is None, 30, "the kubelet's final delete")
    # The kubelet removes a deleted pod's containers; its sandbox goes with the next GC.
    wait_for(
        lambda: all(
            c["labels"].get("io.cri-containerd.kind") == "sandbox"
            for c in reference_node.containers()
            if c["labels"].get("io.kubernetes.pod.uid") == uid
        ),
        30,
        "the pod's containers gone from containerd",
    )


def test_stop_leaves_nothing_behind_even_with_a_pod_running(
    reference_node: ReferenceNode, cluster: Cluster
) -> None:
    """A node of the test's own (the session's lives on), stopped with a pod still running:
    its tmpfs token volume, sandbox, netns, bridge, cgroups and processes all go."""
    node = ReferenceNode(
        reference_node.control_plane,
        f"{cluster.node_name}-ref",
        Path(tempfile.mkdtemp(prefix="ksref-")),
        taints=("kubelet-sim.io/reference=true:NoSchedule",),
        kubelet=reference_node.kubelet,
    )
    try:
        node.start(timeout=60)
        _pod(cluster, node.name, "left-running")
        wait_for(lambda: _running(cluster, "left-running"), 60, "the pod Running and ready")
        assert node.leftovers(), "a running node shows nothing: the check cannot fail"
    finally:
        node.stop()
        try:
            cluster.core.delete_node(node.name)
        except ApiException as exc:
            if exc.status != 404:
                raise
    assert node.leftovers() == []
