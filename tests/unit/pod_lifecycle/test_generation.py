"""The kubelet whose status rules apply is the API server's version's (pod/generation.py): on
a v1.24 server our pods read as a v1.24 kubelet's do, on a current one as today's."""

from __future__ import annotations

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.events import SPAM_BURST, EventRef, SpamFilter
from kubelet_sim.pod.generation import CURRENT, KubeletGeneration, generation_of
from kubelet_sim.pod.spec import PodView
from kubelet_sim.pod.status import default_unknown_states
from tests.fakeruntime.runtime import Behaviour
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


def _first_with_app_ended(history: list[Json]) -> Json:
    return next(s for s in history if "terminated" in s["containerStatuses"][0]["state"])


def test_a_terminal_phase_waits_for_the_pod_to_be_terminated_from_v1_27(node: Node) -> None:
    """Seen on the v1.34 kubelet (exit 1 under Never): the status that first tells the end
    keeps the API's phase beside `Ready: False/PodFailed` (mergePodStatus holds a terminal
    phase while the pod worker could have running containers); Failed comes with the
    terminated pod's status, its sandbox down. The v1.24 kubelet wrote Failed at once."""
    node.runtime.behave("app", Behaviour(exit_code=1))
    for minor in (24, 34):
        _on(node, minor)
        uid = node.add(pod_body(name=f"p{minor}", restartPolicy="Never"))

        def failed(u: str = uid) -> bool:
            return bool(node.last_status(u)["phase"] == "Failed")

        node.sync_until(uid, failed, "Failed")
        history = node.status.history(uid)
        told = _first_with_app_ended(history)
        ready = {c["type"]: c for c in told["conditions"]}["Ready"]
        if minor == 24:
            assert told["phase"] == "Failed"
            continue
        assert told["phase"] == "Pending"  # what the API had
        assert ready["reason"] == "PodFailed"
        assert not any(
            s["phase"] == "Failed"
            and {c["type"]: c["status"] for c in s["conditions"]}["PodReadyToStartContainers"]
            == "True"
            for s in history
        )  # Failed only once the sandbox is down


def test_a_deadline_is_told_once_the_pod_is_terminated_from_v1_27(node: Node) -> None:
    """activeDeadlineSeconds on the v1.34 kubelet: the status written while its containers
    are killed keeps the API's phase and no reason; Failed/DeadlineExceeded comes after."""
    _on(node, 34)
    uid = node.add(pod_body(activeDeadlineSeconds=5))
    node.sync_until_ready(uid)
    node.update_status(uid)  # the informer has the Running status
    node.clock.advance(6)
    node.sync_until(uid, lambda: node.last_status(uid)["phase"] == "Failed", "Failed")
    history = node.status.history(uid)
    assert all(s.get("reason") == "DeadlineExceeded" for s in history if s["phase"] == "Failed")
    killing = [s for s in history if s["phase"] == "Running" and "reason" not in s]
    assert {c["type"]: c.get("reason") for c in killing[-1]["conditions"]}["Ready"] == "PodFailed"
    assert history[-1]["reason"] == "DeadlineExceeded"


def test_warnings_have_a_spam_bucket_of_their_own_from_v1_32() -> None:
    """client-go's getSpamKey ends with the event's type from v1.32: 25 Warnings (BackOff
    after many Unhealthy and MissingClusterDNS) leave the Normal events theirs. Seen on the
    v1.34 kubelet: 25 Warnings and 20 Normals for one pod, BackOff among them."""
    assert not KubeletGeneration(31).spam_key_by_type
    assert KubeletGeneration(32).spam_key_by_type
    pod = EventRef("ns", "p", "uid-1")
    for by_type, normal_allowed in ((False, False), (True, True)):

        def keyed_by_type(b: bool = by_type) -> bool:
            return b

        spam = SpamFilter(lambda: 0.0, by_type=keyed_by_type)
        assert all(spam.allow(pod, "Warning") for _ in range(SPAM_BURST))
        assert not spam.allow(pod, "Warning")
        assert spam.allow(pod, "Normal") is normal_allowed
