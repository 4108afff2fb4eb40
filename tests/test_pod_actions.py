"""computePodActions as a pure function: what the next sync does."""

from __future__ import annotations

from typing import Any

from kubelet_sim.cri import ContainerState, ObservedContainer, PodRef
from kubelet_sim.pod.actions import compute_actions
from kubelet_sim.pod.image_ref import invalid_image_message
from kubelet_sim.pod.spec import ContainerView, PodView

REF = PodRef("n", "p", "ns", "u")
RUN, EXIT = ContainerState.RUNNING, ContainerState.EXITED


def pod(
    restart: str = "Always", init: tuple[str, ...] = (), names: tuple[str, ...] = ("a", "b")
) -> PodView:
    spec: dict[str, Any] = {
        "restartPolicy": restart,
        "containers": [{"name": n, "image": "i:1"} for n in names],
    }
    if init:
        spec["initContainers"] = [{"name": n, "image": "i:1"} for n in init]
    return PodView.from_api(
        {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": spec}
    )


def c(
    name: str,
    state: ContainerState = RUN,
    attempt: int = 0,
    exit_code: int | None = None,
    spec_hash: str = "h",
) -> ObservedContainer:
    return ObservedContainer(
        id=f"{name}{attempt}",
        pod=REF,
        name=name,
        attempt=attempt,
        state=state,
        image="i:1",
        exit_code=exit_code,
        spec_hash=spec_hash,
    )


def hash_h(_: ContainerView) -> str:
    return "h"


def names(views: list[ContainerView]) -> list[str]:
    return [v.name for v in views]


def test_new_pod_creates_sandbox_and_starts_all() -> None:
    a = compute_actions(pod(), [], hash_h)
    assert (a.create_sandbox, a.sandbox_attempt, a.kill_pod) == (True, 0, False)
    assert names(a.containers_to_start) == ["a", "b"]


def test_running_pod_needs_nothing() -> None:
    a = compute_actions(pod(), [c("POD"), c("a"), c("b")], hash_h)
    assert not (a.create_sandbox)
    assert not (a.kill_pod)
    assert not (a.containers_to_start)
    assert not (a.containers_to_kill)


def test_crashed_container_restarts_per_policy() -> None:
    crashed = [c("POD"), c("a"), c("b", EXIT, exit_code=1)]
    assert names(compute_actions(pod("Always"), crashed, hash_h).containers_to_start) == ["b"]
    assert names(compute_actions(pod("OnFailure"), crashed, hash_h).containers_to_start) == ["b"]
    assert compute_actions(pod("Never"), crashed, hash_h).containers_to_start == []
    done = [c("POD"), c("a", EXIT, exit_code=0), c("b", EXIT, exit_code=0)]
    assert compute_actions(pod("OnFailure"), done, hash_h).kill_pod
    assert names(compute_actions(pod("Always"), done, hash_h).containers_to_start) == ["a", "b"]


def test_dead_sandbox_is_recreated_unless_never_and_ran() -> None:
    dead = [c("POD", EXIT, exit_code=0), c("a", EXIT, exit_code=137), c("b", EXIT, exit_code=137)]
    again = compute_actions(pod("Always"), dead, hash_h)
    assert (again.create_sandbox, again.sandbox_attempt, again.kill_pod) == (True, 1, True)
    never = compute_actions(pod("Never"), dead, hash_h)
    assert (never.create_sandbox, never.kill_pod) == (False, True)


def test_init_containers_in_order_and_failure_with_never() -> None:
    p = pod("Never", init=("i1", "i2"))
    first = compute_actions(p, [], hash_h)
    assert first.init_to_start is not None
    assert first.init_to_start.name == "i1"
    assert first.containers_to_start == []
    second = compute_actions(p, [c("POD"), c("i1", EXIT, exit_code=0)], hash_h)
    assert second.init_to_start is not None
    assert second.init_to_start.name == "i2"
    waiting = compute_actions(p, [c("POD"), c("i1", RUN)], hash_h)
    assert waiting.init_to_start is None
    assert waiting.containers_to_start == []
    failed = compute_actions(p, [c("POD"), c("i1", EXIT, exit_code=1)], hash_h)
    assert failed.init_failed
    assert failed.kill_pod
    done = compute_actions(
        p, [c("POD"), c("i1", EXIT, exit_code=0), c("i2", EXIT, exit_code=0)], hash_h
    )
    assert names(done.containers_to_start) == ["a", "b"]


def test_changed_spec_kills_and_restarts() -> None:
    a = compute_actions(pod(), [c("POD"), c("a", spec_hash="old"), c("b")], hash_h)
    assert [k.name for k, _ in a.containers_to_kill] == ["a"]
    assert names(a.containers_to_start) == ["a"]


def test_invalid_image_names() -> None:
    for good in (
        "busybox",
        "busybox:1.36",
        "localhost:5000/a/b:c",
        "kubelet-sim.local/busybox:test",
        "a@sha256:" + "0" * 64,
    ):
        assert invalid_image_message(good) is None, good
    for bad in ("UPPER:1", "a b", "busybox:", ":tag", ""):
        assert invalid_image_message(bad) is not None, bad


def test_ephemeral_containers_start_once_even_before_init_and_keep_nothing_alive() -> None:
    raw = pod(init=("i",)).raw
    raw["spec"]["ephemeralContainers"] = [{"name": "dbg", "image": "i:1"}]
    view = PodView.from_api(raw)
    sandbox = c("POD")
    first = compute_actions(view, [sandbox, c("i")], hash_h)
    assert names(first.ephemeral_to_start) == ["dbg"], "while init still runs"
    again = compute_actions(
        view, [sandbox, c("i", EXIT, exit_code=0), c("dbg", EXIT, exit_code=1)], hash_h
    )
    assert again.ephemeral_to_start == [], "never restarted"
    done = pod(restart="Never", names=("a",)).raw
    done["spec"]["ephemeralContainers"] = [{"name": "dbg", "image": "i:1"}]
    finished = [sandbox, c("a", EXIT, exit_code=0), c("dbg")]
    assert compute_actions(PodView.from_api(done), finished, hash_h).kill_pod, (
        "a running debug container does not keep a finished pod"
    )
