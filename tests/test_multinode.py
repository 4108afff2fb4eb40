"""Several virtual nodes in one process: each its own Node, Lease, watches and containers."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import pytest
from kubernetes.client.exceptions import ApiException

from kubelet_sim import cri
from tests.agent_process import AgentProcess
from tests.cluster import Cluster, wait_for
from tests.docker_env import DockerEnv
from tests.pods import container, make_pod, running_ready, wait_status

pytestmark = pytest.mark.docker


def _ready(cluster: Cluster, name: str) -> bool:
    try:
        node = cluster.core.read_node(name)
    except ApiException:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


@contextlib.contextmanager
def _process(cluster: Cluster, *args: str) -> Iterator[AgentProcess]:
    """The agent with credentials for every node it runs (node credentials name one node)."""
    from kubelet_sim.runtime.local_images import PAUSE_IMAGE

    agent = AgentProcess(
        [*args, "--kubeconfig", cluster.kubeconfig, "--log-format", "json",
         "--pod-infra-image", PAUSE_IMAGE],
    )  # fmt: skip
    try:
        yield agent
    finally:
        if agent.proc.poll() is None:
            assert agent.terminate() == 0, "\n".join(agent.lines[-10:])


@pytest.fixture
def node_names(cluster: Cluster, docker_env: DockerEnv) -> Iterator[list[str]]:
    """Names for extra nodes, cleaned up (Nodes and containers) after the test."""
    names: list[str] = []
    yield names
    for name in names:
        docker_env.remove_labelled(f"{cri.LABEL_NODE}={name}")
        with contextlib.suppress(ApiException):
            cluster.core.delete_node(name)


def test_two_nodes_run_their_own_pods_and_a_restart_adopts_both(
    cluster: Cluster, docker_env: DockerEnv, node_names: list[str]
) -> None:
    node_names += [f"{cluster.node_name}-a", f"{cluster.node_name}-b"]
    args = [arg for name in node_names for arg in ("--node-name", name)]
    with _process(cluster, *args):
        for name in node_names:
            wait_for(lambda n=name: _ready(cluster, n), 30, f"Node {name} Ready")
        for i, name in enumerate(node_names):
            pinned = dataclasses.replace(cluster, node_name=name)
            make_pod(pinned, f"pod-{i}", container())
        for i in range(len(node_names)):
            wait_status(cluster, f"pod-{i}", running_ready, 30, "Running and Ready")
        before = {name: {c.id for c in docker_env.containers_of_node(name)} for name in node_names}
    for i, name in enumerate(node_names):
        assert len(before[name]) == 2, f"{name}: the sandbox and the container of pod-{i} only"
        pod = cluster.core.read_namespaced_pod(f"pod-{i}", cluster.namespace)
        assert pod.spec.node_name == name
        uid = pod.metadata.uid
        assert {c.labels[cri.LABEL_POD_UID] for c in docker_env.containers_of_node(name)} == {uid}
    with _process(cluster, *args) as again:
        again.wait_for_log(lambda r: r.get("event") == "running", 30, "the agents running")
        for name in node_names:
            wait_for(lambda n=name: _ready(cluster, n), 30, f"Node {name} Ready again")
        for i in range(len(node_names)):
            wait_status(cluster, f"pod-{i}", running_ready, 30, "still Running and Ready")
        after = {name: {c.id for c in docker_env.containers_of_node(name)} for name in node_names}
    assert after == before, "the restarted process adopted every node's containers"


def test_ten_nodes_in_one_process(
    cluster: Cluster, docker_env: DockerEnv, node_names: list[str]
) -> None:
    prefix = f"{cluster.node_name}-n"
    node_names += [f"{prefix}{i}" for i in range(1, 11)]
    with _process(cluster, "--nodes", "10", "--node-name-prefix", prefix):
        for name in node_names:
            wait_for(lambda n=name: _ready(cluster, n), 60, f"Node {name} Ready")
        last = dataclasses.replace(cluster, node_name=node_names[-1])
        make_pod(last, "on-the-tenth", container())
        wait_status(cluster, "on-the-tenth", running_ready, 30, "Running and Ready")

        def leases() -> set[str]:
            items = cluster.coordination.list_namespaced_lease("kube-node-lease").items
            return {lease.metadata.name for lease in items}

        # A Lease waits for its owner reference (the Node read back), as the kubelet's: a read
        # that failed on a busy machine is tried again at the next renewal, 10 s on.
        wait_for(lambda: set(node_names) <= leases(), 30, "a Lease for every node")
    assert [len(docker_env.containers_of_node(n)) for n in node_names] == [0] * 9 + [2]
