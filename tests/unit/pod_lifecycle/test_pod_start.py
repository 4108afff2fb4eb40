"""A pod starting: sandbox, image, containers, the statuses and events on the way."""

from __future__ import annotations

from typing import Any

from kubelet_sim import cri
from tests.fakeruntime import Behaviour
from tests.unit.harness import IMAGE, Node, container, pod_body


def _waiting(node: Node, uid: str) -> Any:
    """Container app's waiting state after two syncs: the first learns the reason, the next
    tells it (as the kubelet's reasonCache)."""
    node.sync(uid)
    node.sync(uid)
    return node.container_status(uid, "app")["state"]["waiting"]


def test_a_pod_starts_and_is_told_running_and_ready(node: Node) -> None:
    uid = node.add(pod_body())
    node.sync_until_ready(uid)
    status = node.last_status(uid)
    assert status["phase"] == "Running"
    assert status["podIP"].startswith("10.88.0.")
    assert status["hostIP"] == "192.0.2.10"
    assert node.container_status(uid, "app")["state"].keys() == {"running"}
    assert node.runtime.operations("run_sandbox") == [uid]
    assert node.runtime.operations("create") == ["app"]
    assert node.events.reasons(uid) == ["Pulled", "Created", "Started"]
    first = node.status.history(uid)[0]
    assert first["phase"] == "Pending"
    assert node.container_status(uid, "app")["ready"] is True
    assert node.syncer.start_duration.snapshot()


def test_a_new_sandbox_or_container_start_comes_only_after_the_pace_let_it(node: Node) -> None:
    """The process's heartbeats first: the pace (it waits while Lease renewals lag) comes
    before each sandbox is made and before each container starts, once for each."""
    first = node.add(pod_body("first"))
    node.sync_until_ready(first)
    second = node.add(pod_body("second"))
    node.sync_until_ready(second)
    assert node.paced == [(0, 0), (1, 0), (1, 1), (2, 1)]


def test_a_missing_image_is_pulled_off_the_worker_and_the_pull_wakes_the_pod(
    node: Node,
) -> None:
    image = "registry.example/app:2"
    uid = node.add(pod_body(containers=[container(image=image)]))
    node.sync(uid)
    node.wait_woken(uid)
    assert node.runtime.operations("pull") == [image]
    node.sync_until_ready(uid)
    assert "Pulling" in node.events.reasons(uid)
    pulled = node.events.of("Pulled")[-1].message
    assert pulled.startswith(f'Successfully pulled image "{image}"')


def test_a_failed_pull_is_err_image_pull_then_image_pull_back_off(node: Node) -> None:
    image = "registry.example/missing:1"
    node.runtime.pull_errors[image] = "manifest unknown"
    uid = node.add(pod_body(containers=[container(image=image)]))
    node.sync(uid)
    node.wait_woken(uid)
    node.sync(uid)  # takes the pull's outcome: told by the next sync, as the reasonCache
    node.sync(uid)
    waiting = node.container_status(uid, "app")["state"]["waiting"]
    assert waiting == {"reason": "ErrImagePull", "message": "manifest unknown"}
    node.sync(uid)  # within the backoff: no pull, ImagePullBackOff
    assert node.runtime.operations("pull") == [image]
    node.sync(uid)
    assert node.container_status(uid, "app")["state"]["waiting"]["reason"] == "ImagePullBackOff"
    node.clock.advance(11)  # past the first backoff (10 s): pulled again
    node.sync(uid)
    node.wait_woken(uid)
    assert node.runtime.operations("pull") == [image, image]


def test_pull_policy_never_without_the_image_is_err_image_never_pull(node: Node) -> None:
    uid = node.add(pod_body(containers=[container(image="absent:1", imagePullPolicy="Never")]))
    assert _waiting(node, uid)["reason"] == "ErrImageNeverPull"
    assert node.runtime.operations("pull") == []


def test_an_invalid_image_name_is_never_pulled(node: Node) -> None:
    uid = node.add(pod_body(containers=[container(image="UPPER/Case")]))
    assert _waiting(node, uid)["reason"] == "InvalidImageName"
    assert "InspectFailed" in node.events.reasons(uid)


def test_a_sandbox_that_fails_is_told_and_retried(node: Node) -> None:
    node.runtime.sandbox_error = "network down"
    uid = node.add(pod_body())
    assert node.sync(uid) == 10.0
    failed = node.events.of("FailedCreatePodSandBox")
    assert failed[0].message == "Failed to create pod sandbox: network down"
    node.runtime.sandbox_error = ""
    node.sync_until_ready(uid)


def test_init_containers_run_one_after_the_other_before_the_app(node: Node) -> None:
    node.runtime.behave("init-a", Behaviour(exit_code=0))
    node.runtime.behave("init-b", Behaviour(exit_code=0))
    uid = node.add(pod_body(initContainers=[container("init-a"), container("init-b")]))
    node.sync_until_ready(uid)
    assert node.runtime.operations("create") == ["init-a", "init-b", "app"]
    assert node.container_status(uid, "init-b")["state"]["terminated"]["reason"] == "Completed"


def test_a_container_that_cannot_start_is_run_container_error(node: Node) -> None:
    node.runtime.behave("app", Behaviour(start_error="exec: no such file"))
    uid = node.add(pod_body(restartPolicy="Never"))
    node.sync(uid)
    assert "Failed" in node.events.reasons(uid)
    assert any("no such file" in e.message for e in node.events.of("Failed"))


def test_a_create_that_fails_is_create_container_error(node: Node) -> None:
    node.runtime.behave("app", Behaviour(create_error="name conflict"))
    uid = node.add(pod_body())
    waiting = _waiting(node, uid)
    assert waiting == {"reason": "CreateContainerError", "message": "name conflict"}


def test_a_missing_config_map_key_is_create_container_config_error(node: Node) -> None:
    env = [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}]
    uid = node.add(pod_body(containers=[container(env=env)]))
    waiting = _waiting(node, uid)
    assert waiting["reason"] == "CreateContainerConfigError"
    assert node.runtime.operations("create") == []
    node.objects.objects[("ConfigMap", "ns", "cm")] = {"data": {"k": "v"}}
    node.clock.advance(10)
    node.sync_until_ready(uid)


def test_services_not_listed_yet_hold_the_container(node: Node) -> None:
    node.services = None
    uid = node.add(pod_body())
    waiting = _waiting(node, uid)
    assert waiting["reason"] == "CreateContainerConfigError"


def test_run_as_non_root_against_a_root_image_is_refused(node: Node) -> None:
    security = {"runAsNonRoot": True}
    uid = node.add(pod_body(containers=[container(securityContext=security)]))
    waiting = _waiting(node, uid)
    assert waiting["reason"] == "CreateContainerConfigError"
    assert "runAsNonRoot and image will run as root" in waiting["message"]


def test_a_privileged_container_is_refused_without_allow_privileged(node: Node) -> None:
    uid = node.add(pod_body())
    node.sync_until_ready(uid)
    pod = node.pods[uid]
    pod["spec"]["ephemeralContainers"] = [
        {"name": "debug", "image": IMAGE, "securityContext": {"privileged": True}}
    ]
    node.sync(uid)
    assert any("privileged" in e.message for e in node.events.of("Failed"))
    assert "debug" not in node.runtime.operations("create")


def test_an_ephemeral_container_joins_its_target(node: Node) -> None:
    uid = node.add(pod_body())
    node.sync_until_ready(uid)
    node.pods[uid]["spec"]["ephemeralContainers"] = [
        {"name": "debug", "image": IMAGE, "targetContainerName": "app"}
    ]
    node.sync(uid)
    assert node.runtime.operations("create") == ["app", "debug"]
    debug = node.containers(uid, "debug")[0]
    assert debug.state is cri.ContainerState.RUNNING
