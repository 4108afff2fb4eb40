"""The kubelet whose status rules apply is the API server's version's (pod/generation.py): on
a v1.24 server our pods read as a v1.24 kubelet's do, on a current one as today's."""

from __future__ import annotations

from kubelet_sim.pod.generation import CURRENT, KubeletGeneration, generation_of
from kubelet_sim.pod.spec import PodView
from kubelet_sim.pod.status import default_unknown_states
from tests.unit.harness import Node, container, pod_body

V124 = KubeletGeneration(24)


def test_the_generation_comes_from_the_version_or_the_schema() -> None:
    assert generation_of("v1.24.3").minor == 24
    assert generation_of("v1.30.0+k3s1").minor == 30
    assert generation_of("v1.37.0-fake").minor == 37
    # a build that stamped no version is placed by the status fields its schema knows
    assert generation_of("v0.0.0-master", {"io.k8s.api.core.v1.PodStatus.phase"}).minor == 26
    hostips = {"io.k8s.api.core.v1.PodStatus.hostIPs"}
    assert generation_of("v0.0.0-master", hostips).minor == 28
    assert generation_of(None, set()) == CURRENT  # nothing known: today's rules
    assert not V124.ready_to_start_condition
    assert not V124.terminal_phase
    assert not V124.sidecars
    assert CURRENT.ready_to_start_condition
    assert CURRENT.terminal_phase
    assert CURRENT.sidecars


def _on(node: Node, minor: int) -> None:
    node.syncer.generation = lambda: KubeletGeneration(minor)


def test_a_v1_24_kubelet_writes_no_ready_to_start_condition(node: Node) -> None:
    _on(node, 24)
    uid = node.add(pod_body())
    node.sync_until_ready(uid)
    kinds = [c["type"] for c in node.last_status(uid)["conditions"]]
    assert "PodReadyToStartContainers" not in kinds
    _on(node, 29)
    node.sync(uid)
    kinds = [c["type"] for c in node.last_status(uid)["conditions"]]
    assert "PodReadyToStartContainers" in kinds


def test_a_deleted_pod_keeps_its_phase_before_v1_27(node: Node) -> None:
    """Before v1.27 a deleted pod's last status is Running with its containers terminated,
    readiness from the containers; from v1.27 it ends Succeeded or Failed."""
    for minor, phase in ((24, "Running"), (27, "Failed")):
        _on(node, minor)
        uid = node.add(pod_body(name=f"p{minor}"))
        node.sync_until_ready(uid)
        node.delete(uid, grace=30)
        node.sync_until_deleted(uid)
        status = node.last_status(uid)
        assert status["phase"] == phase, minor
        assert "terminated" in node.container_status(uid, "app")["state"]
        ready = {c["type"]: c for c in status["conditions"]}["Ready"]
        assert ready["reason"] == ("ContainersNotReady" if minor == 24 else "PodFailed")
        node.deleted.clear()


def test_init_containers_have_no_started_field_before_v1_28(node: Node) -> None:
    _on(node, 24)
    uid = node.add(pod_body(initContainers=[container("init")]))
    node.sync(uid)
    assert "started" not in node.container_status(uid, "init")
    assert node.container_status(uid, "app")["started"] is False


def test_terminate_pod_defaults_every_container_without_an_end_before_v1_27(node: Node) -> None:
    uid = node.add(pod_body(initContainers=[container("init")]))
    waiting = {"waiting": {"reason": "PodInitializing"}}
    ended = {"terminated": {"exitCode": 1, "reason": "Error"}}
    for generation, app_state in ((V124, "terminated"), (CURRENT, "waiting")):
        status = {
            "initContainerStatuses": [{"name": "init", "state": dict(ended)}],
            "containerStatuses": [{"name": "app", "state": dict(waiting)}],
        }
        default_unknown_states(PodView.from_api(node.pods[uid]), status, generation)
        assert app_state in status["containerStatuses"][0]["state"], generation
