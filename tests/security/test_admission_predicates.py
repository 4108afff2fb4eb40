"""Pods the v1.34 kubelet refuses before anything runs, as the API shows them: a pod for another
OS (the upstream e2e spec "PodOSRejection ... should reject pod when the node OS doesn't match
pod's OS"), a pod whose host port another pod holds, and pods bound by hand to a node they do not
match or whose NoExecute taint they do not tolerate."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from kubelet_sim.node.settings import VIRTUAL_NODE_TAINT
from tests.agent_fixture import RunningAgent, start_agent
from tests.cluster import ApiUnderTest, kubelet_generation, server_has_field
from tests.docker_env import DockerEnv
from tests.pods import container, make_pod, pod_containers, running_ready, status_of, wait_status

pytestmark = pytest.mark.docker


def _failed(status: dict[str, object]) -> bool:
    return status.get("phase") == "Failed"


# The kubelet's rejection messages (after "Pod was rejected: "), by the reason it writes.
REJECTIONS = {
    "PodOSNotSupported": "Failed to admit pod as the OS field doesn't match node OS",
    "NodePorts": (
        "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
    ),
    "NodeAffinity": (
        "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
    ),
    "TaintToleration": (
        "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"
    ),
    "PodOSSelectorNodeLabelDoesNotMatch": (
        "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
    ),
}


def _wait_rejected(
    cluster: ApiUnderTest, name: str, timeout: float, reason: str
) -> dict[str, object]:
    """The pod's status once Failed, rejected for `reason` with the kubelet's message for it."""
    status = wait_status(cluster, name, _failed, timeout, "Failed")
    assert (status["reason"], status["message"]) == (
        reason,
        f"Pod was rejected: {REJECTIONS[reason]}",
    )
    return status


def _rejected_as_the_kubelet_writes_it(cluster: ApiUnderTest, status: dict[str, object]) -> None:
    """rejectPod's status and only it: no conditions of the kubelet's (PodScheduled neither),
    no container statuses, no IPs; qosClass kept from v1.32, observedGeneration where counted."""
    fields = {"phase", "reason", "message", "startTime"}
    if kubelet_generation(cluster).minor >= 32:
        fields.add("qosClass")
    if server_has_field(cluster.api, "io.k8s.api.core.v1.PodStatus", "observedGeneration"):
        fields.add("observedGeneration")
    assert set(status) == fields


def test_a_windows_pod_is_failed_while_another_pod_runs(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    if not server_has_field(cluster.api, "io.k8s.api.core.v1.PodSpec", "os"):
        pytest.skip("the API server's PodSpec has no `os` (added in v1.23, behind a gate)")
    make_pod(cluster, "linux-pod")
    wait_status(cluster, "linux-pod", running_ready, 30, "Running")
    windows = make_pod(cluster, "windows-pod", os={"name": "windows"})
    if "os" not in windows["spec"]:
        pytest.skip(
            "the API server dropped spec.os: its IdentifyPodOS gate is off (alpha in v1.23,"
            " still alpha in this rig's v1.24 build), and so is its kubelet's OS check"
        )
    status = _wait_rejected(cluster, "windows-pod", 20, "PodOSNotSupported")
    _rejected_as_the_kubelet_writes_it(cluster, status)
    assert pod_containers(docker_env, windows["metadata"]["uid"]) == []
    assert running_ready(status_of(cluster, "linux-pod"))


def _free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("0.0.0.0", 0))  # Docker publishes host ports on every address
        return int(sock.getsockname()[1])


def test_a_host_port_held_by_a_running_pod_refuses_the_next(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    # A port free now: the fake and the real pass run this test at once, and a fixed port held
    # by the other's "holder" left this one's holder unable to start (a CI failure).
    port = {"containerPort": 8080, "hostPort": _free_tcp_port()}
    make_pod(cluster, "holder", container(ports=[port]))
    wait_status(cluster, "holder", running_ready, 30, "Running")
    second = make_pod(cluster, "second", container(ports=[port]))
    _wait_rejected(cluster, "second", 20, "NodePorts")
    assert pod_containers(docker_env, second["metadata"]["uid"]) == []
    assert running_ready(status_of(cluster, "holder"))


def test_a_pod_bound_to_a_node_it_does_not_match_is_failed(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    """Bound by hand past the scheduler, with a nodeSelector the node lacks."""
    make_pod(cluster, "elsewhere", nodeSelector={"disktype": "ssd"})
    status = _wait_rejected(cluster, "elsewhere", 30, "NodeAffinity")
    _rejected_as_the_kubelet_writes_it(cluster, status)


def test_a_pod_that_does_not_tolerate_a_no_execute_taint_is_failed(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    """Bound by hand to a node registered with a NoExecute taint; a pod that tolerates it runs."""
    if not cluster.is_fake:
        pytest.skip(
            "a real control plane's taint eviction controller deletes a pod bound to a NoExecute"
            " taint it does not tolerate, racing the node's rejection: only the fake, which runs"
            " no controllers, shows the node's alone"
        )
    taints = [dict(VIRTUAL_NODE_TAINT), {"key": "dedicated", "value": "db", "effect": "NoExecute"}]
    running = start_agent(
        cluster, docker_env, tmp_path / "root", node={"register_with_taints": taints}
    )
    try:
        make_pod(cluster, "untolerated")
        tolerant = [{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}]
        make_pod(cluster, "tolerant", tolerations=tolerant)
        status = _wait_rejected(cluster, "untolerated", 30, "TaintToleration")
        _rejected_as_the_kubelet_writes_it(cluster, status)
        wait_status(cluster, "tolerant", running_ready, 30, "Running")
    finally:
        running.stop()


def test_a_scheduled_pod_that_is_rejected_loses_its_pod_scheduled_condition(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    """The scheduler places it (it reads no pod labels); the node refuses a pod labelled for
    another OS, and its status, merged as the kubelet's status manager merges, drops the
    scheduler's PodScheduled, as the rig's upstream kubelet did (November 2026)."""
    cluster.require_scheduler()
    make_pod(
        cluster,
        "labelled-windows",
        labels={"kubernetes.io/os": "windows"},
        nodeName=None,
        nodeSelector={"kubernetes.io/hostname": cluster.node_name},
        tolerations=[{"operator": "Exists"}],
    )
    status = _wait_rejected(cluster, "labelled-windows", 30, "PodOSSelectorNodeLabelDoesNotMatch")
    _rejected_as_the_kubelet_writes_it(cluster, status)
