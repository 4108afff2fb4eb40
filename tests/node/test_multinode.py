"""Several virtual nodes in one process: each its own Node, Lease, watches and containers."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from kubelet_sim import cri
from tests.agent_process import AgentProcess
from tests.cluster import ApiUnderTest, deadline_scale, wait_for
from tests.docker_env import DockerEnv
from tests.others import pods_of_others
from tests.pods import container, make_pod, running_ready, wait_status

pytestmark = pytest.mark.docker


def _ready(cluster: ApiUnderTest, name: str) -> bool:
    try:
        node = cluster.core.read_node(name)
    except ApiException:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


@contextlib.contextmanager
def _process(cluster: ApiUnderTest, *args: str) -> Iterator[AgentProcess]:
    """The agent with credentials for every node it runs (node credentials name one node)."""
    from kubelet_sim.runtime.local_images import PAUSE_IMAGE

    agent = AgentProcess(  # no warm sandbox pool: these tests count each node's containers
        [*args, "--kubeconfig", cluster.kubeconfig, "--log-format", "json",
         "--pod-infra-image", PAUSE_IMAGE, "--sandbox-pool-size", "0"],
    )  # fmt: skip
    try:
        yield agent
    finally:
        if agent.proc.poll() is None:
            assert agent.terminate() == 0, "\n".join(agent.lines[-10:])


@pytest.fixture
def node_names(cluster: ApiUnderTest, docker_env: DockerEnv) -> Iterator[list[str]]:
    """Names for extra nodes, cleaned up (Nodes and containers) after the test."""
    names: list[str] = []
    yield names
    for name in names:
        docker_env.remove_labelled(f"{cri.LABEL_NODE}={name}")
        with contextlib.suppress(ApiException):
            cluster.core.delete_node(name)


def test_two_nodes_run_their_own_pods_and_a_restart_adopts_both(
    cluster: ApiUnderTest, docker_env: DockerEnv, node_names: list[str]
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
    cluster: ApiUnderTest, docker_env: DockerEnv, node_names: list[str]
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


def _pinned(cluster: ApiUnderTest, node: str) -> ApiUnderTest:
    return dataclasses.replace(cluster, node_name=node)


def test_shared_watches_give_each_node_exactly_its_pods_and_survive_another_nodes_removal(
    cluster: ApiUnderTest, docker_env: DockerEnv, node_names: list[str]
) -> None:
    """Three nodes on admin credentials share one pod and one Node watch (kwok's way): each
    runs exactly the pods bound to it, a pod bound to a node of no one here runs nowhere, and
    a Node deleted under one of them is registered again while the others' pods run on."""
    prefix = f"{cluster.node_name}-s"
    node_names += [f"{prefix}{i}" for i in (1, 2, 3)]
    with _process(cluster, "--nodes", "3", "--node-name-prefix", prefix, "--port", "0") as agent:
        agent.wait_for_log(
            lambda r: r.get("event") == "nodes share their watches and timers" and r["nodes"] == 3,
            30,
            "the set sharing its watches",
        )
        for name in node_names:
            wait_for(lambda n=name: _ready(cluster, n), 60, f"Node {name} Ready")
        for i, name in enumerate(node_names[:2]):
            make_pod(_pinned(cluster, name), f"pod-{i}", container())
        stranger = make_pod(_pinned(cluster, f"{prefix}-elsewhere"), "elsewhere", container())
        for i in range(2):
            wait_status(cluster, f"pod-{i}", running_ready, 30, "Running and Ready")
        uids = [cluster.core.read_namespaced_pod(f"pod-{i}", cluster.namespace).metadata.uid
                for i in range(2)]  # fmt: skip
        before = {n: {c.id for c in docker_env.containers_of_node(n)} for n in node_names}
        for name, uid in zip(node_names[:2], uids, strict=True):
            labels = {c.labels[cri.LABEL_POD_UID] for c in docker_env.containers_of_node(name)}
            assert labels == {uid}, f"{name} runs exactly its own pod"
        assert before[node_names[2]] == set(), "the third node was given no pod"

        old_uid = cluster.core.read_node(node_names[2]).metadata.uid
        cluster.core.delete_node(node_names[2])

        def registered_again() -> bool:
            try:
                node = cluster.core.read_node(node_names[2])
            except ApiException:
                return False
            return node.metadata.uid != old_uid and _ready(cluster, node_names[2])

        wait_for(registered_again, 60, "the deleted Node registered again and Ready")
        for i in range(2):
            status = wait_status(cluster, f"pod-{i}", running_ready, 30, "still Running and Ready")
            assert [s["restartCount"] for s in status["containerStatuses"]] == [0]
        after = {n: {c.id for c in docker_env.containers_of_node(n)} for n in node_names[:2]}
        assert after == {n: before[n] for n in node_names[:2]}, "the other nodes' pods untouched"
        pod = cluster.core.read_namespaced_pod("elsewhere", cluster.namespace)
        assert pod.status.phase == "Pending"
        stranger_uid = stranger["metadata"]["uid"]
        label = f"{cri.LABEL_POD_UID}={stranger_uid}"
        assert docker_env.client.containers.list(all=True, filters={"label": label}) == []


def test_several_nodes_on_credentials_that_may_not_watch_every_pod_fail_in_one_line(
    cluster: ApiUnderTest, docker_env: DockerEnv, node_names: list[str], tmp_path: Path
) -> None:
    """The nodes of a process share one pod and one Node watch: credentials that may not list
    them (here a ServiceAccount bound to nothing) end the command with one line saying so,
    instead of nodes that never see their pods. (Node credentials may on v1.24, whose Node
    authorizer does not read field selectors yet; from v1.31 they may not.)"""
    if cluster.fake is not None:
        pytest.skip("the fake API server authorizes node users only: no RBAC for accounts")
    from kubelet_sim.runtime.local_images import PAUSE_IMAGE

    account = f"rightless-{cluster.node_name}"
    cluster.core.create_namespaced_service_account(
        cluster.namespace, {"metadata": {"name": account}}
    )
    token = cluster.core.create_namespaced_service_account_token(
        account, cluster.namespace, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    kubeconfig = tmp_path / "rightless.kubeconfig"
    kubeconfig.write_text(json.dumps(config))
    prefix = f"{cluster.node_name}-c"
    node_names += [f"{prefix}1", f"{prefix}2"]
    agent = AgentProcess(
        ["--nodes", "2", "--node-name-prefix", prefix, "--port", "0", "--kubeconfig",
         str(kubeconfig), "--pod-infra-image", PAUSE_IMAGE],
    )  # fmt: skip
    try:
        code = agent.proc.wait(60 * deadline_scale())
    except subprocess.TimeoutExpired:
        agent.terminate()
        pytest.fail("still running after 60 s:\n" + "\n".join(agent.lines[-15:]))
    agent._reader.join(5)
    errors = [line for line in agent.lines if line.startswith("kubelet-sim: error:")]
    assert code == 1
    assert len(errors) == 1, agent.lines[-5:]
    assert "may not list pods on every node (403)" in errors[0]
    assert f"{prefix}1…{prefix}2" in errors[0]


HUNDREDS = 200  # CI's stand-in for the bench's 1,000 (bench/: `--nodes 10,100,1000`)


def test_two_hundred_nodes_in_one_process_stay_ready_and_renew_every_lease(
    cluster: ApiUnderTest, docker_env: DockerEnv, node_names: list[str]
) -> None:
    """Every node Ready and every Lease renewed again and again, on shared watches and timers
    (no thread per node at rest: the process holds fewer threads than nodes)."""
    prefix = f"{cluster.node_name}-h"
    node_names += [f"{prefix}{i}" for i in range(1, HUNDREDS + 1)]
    wanted = set(node_names)

    def ready() -> set[str]:
        return {
            n.metadata.name
            for n in cluster.core.list_node().items
            if n.metadata.name in wanted
            and any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
        }

    def renewals() -> dict[str, object]:
        items = cluster.coordination.list_namespaced_lease("kube-node-lease").items
        return {i.metadata.name: i.spec.renew_time for i in items if i.metadata.name in wanted}

    with (
        pods_of_others(cluster, wanted) as others,
        _process(
            cluster, "--nodes", str(HUNDREDS), "--node-name-prefix", prefix, "--port", "0"
        ) as agent,
    ):
        wait_for(lambda: ready() == wanted, 180, f"all {HUNDREDS} Nodes Ready")
        wait_for(lambda: set(renewals()) == wanted, 60, "a Lease for every node")
        for round_ in ("once", "twice"):
            first = renewals()
            wait_for(
                lambda f=first: all(t != f[n] for n, t in renewals().items()),  # type: ignore[misc]
                45,
                f"every Lease renewed again ({round_})",
            )
        assert ready() == wanted
        threads = len(list(Path(f"/proc/{agent.proc.pid}/task").iterdir()))
        with others.excuse("nodes at rest are nodes without pods"):
            assert threads < HUNDREDS, f"{threads} threads for {HUNDREDS} nodes"
