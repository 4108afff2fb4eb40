"""computePodActions as a pure function: what the next sync does."""

from __future__ import annotations

from typing import Any

from kubelet_sim.cri import ContainerState, ObservedContainer
from kubelet_sim.pod.actions import compute_actions
from kubelet_sim.pod.image_ref import invalid_image_message
from kubelet_sim.pod.probes import ContainerProbes, ProbeResults, Result
from kubelet_sim.pod.spec import ContainerView, PodView
from tests.manifests import pod_manifest, served
from tests.observed import observed_container

RUN, EXIT = ContainerState.RUNNING, ContainerState.EXITED


def pod(
    restart: str = "Always",
    init: tuple[str, ...] = (),
    names: tuple[str, ...] = ("a", "b"),
    sidecars: tuple[str, ...] = (),
    startup_probe: tuple[str, ...] = (),
) -> PodView:
    """`init` in order; those also named in `sidecars` are restartable (restartPolicy Always)."""
    spec: dict[str, Any] = {
        "restartPolicy": restart,
        "containers": [{"name": n, "image": "i:1"} for n in names],
    }
    if init:
        spec["initContainers"] = [
            {"name": n, "image": "i:1"}
            | ({"restartPolicy": "Always"} if n in sidecars else {})
            | ({"startupProbe": {"exec": {"command": ["true"]}}} if n in startup_probe else {})
            for n in init
        ]
    return PodView.from_api(served(pod_manifest("p", **spec), uid="u"))


def c(name: str, state: ContainerState = RUN, attempt: int = 0, **fields: Any) -> ObservedContainer:
    """Observed with the spec hash `hash_h` gives, unless told."""
    return observed_container(name, attempt, state, **{"spec_hash": "h", **fields})


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
    assert names(first.init_to_start) == ["i1"]
    assert first.containers_to_start == []
    second = compute_actions(p, [c("POD"), c("i1", EXIT, exit_code=0)], hash_h)
    assert names(second.init_to_start) == ["i2"]
    waiting = compute_actions(p, [c("POD"), c("i1", RUN)], hash_h)
    assert waiting.init_to_start == []
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


# --- sidecars (restartable init containers): computeInitContainerActions --------------------


def test_a_sidecar_does_not_block_the_next_init_container_and_keeps_running() -> None:
    p = pod("Never", init=("s", "i"), sidecars=("s",))
    assert names(compute_actions(p, [], hash_h).init_to_start) == ["s"]
    started = compute_actions(p, [c("POD"), c("s")], hash_h)
    assert names(started.init_to_start) == ["i"]  # s runs on; i starts beside it
    initializing = compute_actions(p, [c("POD"), c("s"), c("i")], hash_h)
    assert (initializing.init_to_start, initializing.containers_to_start) == ([], [])
    done = [c("POD"), c("s"), c("i", EXIT, exit_code=0)]
    assert names(compute_actions(p, done, hash_h).containers_to_start) == ["a", "b"]


def test_a_stopped_sidecar_restarts_whatever_the_pod_policy() -> None:
    p = pod("Never", init=("s", "i"), sidecars=("s",))
    crashed = [c("POD"), c("s", EXIT, exit_code=1), c("i", EXIT, exit_code=0), c("a"), c("b")]
    actions = compute_actions(p, crashed, hash_h)
    assert names(actions.init_to_start) == ["s"]
    assert not actions.kill_pod
    before_init = compute_actions(p, [c("POD"), c("s", EXIT, exit_code=0)], hash_h)
    assert names(before_init.init_to_start) == ["s"]  # restarted, and i waits for it


def test_sidecars_do_not_keep_a_finished_pod_alive() -> None:
    p = pod("Never", init=("s",), sidecars=("s",), names=("a",))
    finished = compute_actions(p, [c("POD"), c("s"), c("a", EXIT, exit_code=0)], hash_h)
    assert finished.kill_pod
    assert finished.init_to_start == []


def test_a_sidecars_startup_probe_gates_the_next_init_container() -> None:
    p = pod(init=("s", "i"), sidecars=("s",), startup_probe=("s",))
    observed = [c("POD"), c("s")]
    unknown = compute_actions(p, observed, hash_h, ProbeResults())
    assert unknown.init_to_start == []  # not probed yet: wait
    results = {"s0": ContainerProbes(startup=Result.UNKNOWN)}
    assert compute_actions(p, observed, hash_h, ProbeResults(results)).init_to_start == []
    results = {"s0": ContainerProbes(startup=Result.SUCCESS)}
    assert names(compute_actions(p, observed, hash_h, ProbeResults(results)).init_to_start) == ["i"]
    results = {"s0": ContainerProbes(startup=Result.FAILURE)}
    failed = compute_actions(p, observed, hash_h, ProbeResults(results))
    assert [(k.name, m) for k, m in failed.containers_to_kill] == [
        ("s", "Init container s failed startup probe")
    ]
    assert names(failed.init_to_start) == ["s"]
    assert "s0" in failed.probe_kills


def test_a_started_sidecar_is_restarted_on_liveness_failure_or_a_changed_definition() -> None:
    p = pod(init=("s",), sidecars=("s",), names=("a",))
    running = [c("POD"), c("s"), c("a")]
    dead = ProbeResults({"s0": ContainerProbes(liveness=Result.FAILURE)})
    actions = compute_actions(p, running, hash_h, dead)
    assert [(k.name, m) for k, m in actions.containers_to_kill] == [
        ("s", "Init container s failed liveness probe")
    ]
    assert names(actions.init_to_start) == ["s"]
    assert actions.containers_to_start == []  # a keeps running
    changed = compute_actions(p, [c("POD"), c("s", spec_hash="old"), c("a")], hash_h)
    assert [(k.name, m) for k, m in changed.containers_to_kill] == [
        ("s", "Init container s definition changed")
    ]


def test_a_sidecar_gone_without_trace_after_initialization_is_started_again() -> None:
    p = pod(init=("i", "s"), sidecars=("s",), names=("a",))
    actions = compute_actions(p, [c("POD"), c("a")], hash_h)  # i and s removed since
    assert names(actions.init_to_start) == ["s"]  # a regular init container never reruns
