"""The reference node: the upstream kubelet on containerd, beside the virtual nodes.

Runs on the real API pass only (`KUBELET_SIM_TEST_API=real`): the `reference_node` fixture
skips elsewhere, saying why.
"""

from __future__ import annotations

import contextlib
import ipaddress
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from kubelet_sim.controlplane import cni_chains, host
from kubelet_sim.controlplane import reference_node as reference
from kubelet_sim.controlplane.reference_node import ReferenceNode
from kubelet_sim.kube.rest import request_json
from kubelet_sim.runtime import local_images
from tests.cluster import ApiUnderTest, wait_for
from tests.manifests import pod_manifest
from tests.pods import BUSYBOX, SLEEP_FOREVER, get_pod

pytestmark = pytest.mark.docker

KUBELET_CONDITIONS = {"MemoryPressure", "DiskPressure", "PIDPressure", "Ready"}


def test_its_default_images_are_the_projects_local_ones() -> None:
    """controlplane/ may not import runtime/: the names are written twice, and must agree."""
    assert reference.PAUSE_IMAGE == local_images.PAUSE_IMAGE
    assert reference.BUSYBOX_IMAGE == local_images.BUSYBOX_IMAGE == BUSYBOX


# Where every kubelet of a host writes pod logs unless it sees a directory of its own there.
HOST_POD_LOGS = Path("/var/log/pods")


def _pod(cluster: ApiUnderTest, node: str, name: str, **container: Any) -> dict[str, Any]:
    c = {
        "name": "c",
        "image": BUSYBOX,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", f"echo hello; {SLEEP_FOREVER[2]}"],
        **container,
    }
    body = pod_manifest(name, [c], nodeName=node, terminationGracePeriodSeconds=5)
    return cluster.api.sanitize_for_serialization(  # type: ignore[no-any-return]
        cluster.core.create_namespaced_pod(cluster.namespace, body)
    )


def _running(cluster: ApiUnderTest, name: str) -> dict[str, Any] | None:
    pod = get_pod(cluster, name)
    status = (pod or {}).get("status") or {}
    statuses = status.get("containerStatuses") or []
    if status.get("phase") == "Running" and statuses and all(s.get("ready") for s in statuses):
        return pod
    return None


def _containers_of(node: ReferenceNode, uid: str) -> list[str]:
    return [c["id"] for c in node.containers() if c["labels"].get("io.kubernetes.pod.uid") == uid]


def test_the_node_is_ready_with_the_kubelets_conditions(
    reference_node: ReferenceNode, cluster: ApiUnderTest
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
    reference_node: ReferenceNode, cluster: ApiUnderTest
) -> None:
    """A comparison is with the kubelet of the server's version (v1.34.9's on a v1.34.9 server;
    the rig's v1.24 build stamps `v0.0.0-master` on both)."""
    node = cluster.core.read_node(reference_node.name)
    server = request_json(cluster.core.api_client, "GET", "/version", timeout=(5, 30))
    kubelet = node.status.node_info.kubelet_version
    assert kubelet.split("+")[0] == str(server["gitVersion"]).split("+")[0], (kubelet, server)


def test_a_pinned_pod_runs_shows_its_log_and_goes_at_deletion(
    reference_node: ReferenceNode, cluster: ApiUnderTest
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


@contextlib.contextmanager
def _node_of_its_own(
    reference_node: ReferenceNode, cluster: ApiUnderTest
) -> Iterator[ReferenceNode]:
    """A Ready reference node of the test's own (the session's lives on), stopped and its Node
    deleted on leaving."""
    node = ReferenceNode(
        reference_node.control_plane,
        f"{cluster.node_name}-ref",
        Path(tempfile.mkdtemp(prefix="ksref-")),
        taints=("kubelet-sim.io/reference=true:NoSchedule",),
        kubelet=reference_node.kubelet,
    )
    try:
        yield node.start(timeout=60)
    finally:
        node.stop()
        try:
            cluster.core.delete_node(node.name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def test_stop_leaves_nothing_behind_even_with_a_pod_running(
    reference_node: ReferenceNode, cluster: ApiUnderTest
) -> None:
    """Stopped with a pod still running: its tmpfs token volume, sandbox, netns, bridge,
    cgroups and processes all go."""
    with _node_of_its_own(reference_node, cluster) as node:
        _pod(cluster, node.name, "left-running")
        wait_for(lambda: _running(cluster, "left-running"), 60, "the pod Running and ready")
        assert node.leftovers(), "a running node shows nothing: the check cannot fail"
    assert node.leftovers() == []


def _chain_rules(table: str, chain: str) -> list[str]:
    """The chain's rules as `iptables -S` shows them ([] when there is no such chain)."""
    return host.iptables(table, "-S", chain).splitlines()


def _sandbox_of(node: ReferenceNode, uid: str) -> str:
    return next(
        c["id"]
        for c in node.containers()
        if c["labels"].get("io.kubernetes.pod.uid") == uid
        and c["labels"].get("io.cri-containerd.kind") == "sandbox"
    )


def test_stop_removes_the_chains_naming_its_network_and_no_other(
    reference_node: ReferenceNode, cluster: ApiUnderTest
) -> None:
    """Another cluster's CNI chains, made while the node runs (named as the plugins name a
    container's: portmap's DNAT chain, bridge's masquerade chain), keep their rules through its
    run and stop; the node's own (portmap's for its hostPort pod, a masquerade chain named for
    its sandbox) go. The other party's chains are referenced by no rule: they match nothing."""
    other = ("other-net", uuid.uuid4().hex * 2)
    theirs = {
        ("nat", cni_chains.chain_name(*other, "DN-")): [
            "-p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.88.0.5:80"
        ],
        ("nat", cni_chains.chain_name(*other)): [
            "-d 10.88.0.0/16 -j ACCEPT",
            "! -d 224.0.0.0/4 -j MASQUERADE",
        ],
    }
    try:
        with _node_of_its_own(reference_node, cluster) as node:
            for (table, chain), rules in theirs.items():
                host.run(["iptables", "-w", "5", "-t", table, "-N", chain])
                for rule in rules:
                    host.run(["iptables", "-w", "5", "-t", table, "-A", chain, *rule.split()])
            before = {key: _chain_rules(*key) for key in theirs}
            port = {"containerPort": 80, "hostPort": host.free_port("127.0.0.1")}
            created = _pod(cluster, node.name, "mapped", ports=[{**port, "hostIP": node.node_ip}])
            wait_for(lambda: _running(cluster, "mapped"), 60, "the pod Running and ready")
            sandbox = _sandbox_of(node, created["metadata"]["uid"])
            ours = [
                ("nat", cni_chains.chain_name(node.network_name, sandbox, "DN-")),
                ("nat", cni_chains.chain_name(node.network_name, sandbox)),
            ]
            assert _chain_rules(*ours[0]), "portmap made no chain for the pod's hostPort"
            host.run(["iptables", "-w", "5", "-t", "nat", "-N", ours[1][1]])
        assert [key for key in ours if _chain_rules(*key)] == []
        assert {key: _chain_rules(*key) for key in theirs} == before
    finally:
        for table, chain in theirs:
            host.quiet(["iptables", "-w", "5", "-t", table, "-F", chain])
            host.quiet(["iptables", "-w", "5", "-t", table, "-X", chain])


def test_its_kubelet_collects_only_its_own_pod_logs(
    reference_node: ReferenceNode, cluster: ApiUnderTest
) -> None:
    """Another kubelet's pod log directory under /var/log/pods outlives the node's kubelet (whose
    container GC, every minute, removes the log directories of pods it does not have: a
    decoy it sees proves that GC ran) and its stop; the node's own pods' logs go at stop."""
    theirs = HOST_POD_LOGS / f"other-ns_other-pod_{uuid.uuid4()}"
    (theirs / "c").mkdir(parents=True)
    (theirs / "c" / "0.log").write_text("theirs\n")
    try:
        with _node_of_its_own(reference_node, cluster) as node:
            uid = _pod(cluster, node.name, "logged")["metadata"]["uid"]
            wait_for(lambda: _running(cluster, "logged"), 60, "the pod Running and ready")
            seen = Path(f"/proc/{dict(node.processes)['kubelet']}/root") / "var/log/pods"
            ours = seen / f"{cluster.namespace}_logged_{uid}"
            assert ours.is_dir(), sorted(p.name for p in seen.iterdir())
            decoy = seen / f"gone-ns_gone_{uuid.uuid4()}"
            decoy.mkdir()
            wait_for(lambda: not decoy.exists(), 150, "the kubelet's GC of the decoy's logs")
            assert (theirs / "c" / "0.log").read_text() == "theirs\n"
        assert (theirs / "c" / "0.log").read_text() == "theirs\n"
        assert not list(HOST_POD_LOGS.glob(f"*_{uid}"))
        assert not node.workdir.exists()
    finally:
        shutil.rmtree(theirs, ignore_errors=True)
