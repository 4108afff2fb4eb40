"""In-place resize (the `resize` subresource, v1.33+): what the node decides, does to the
container and writes, as the v1.34 kubelet did on this machine's rig (a pod of one container,
requests cpu 100m memory 32Mi, limits cpu 200m memory 64Mi)."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from kubelet_sim import cri
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.pod import resize
from kubelet_sim.pod.admission import Allocatable
from kubelet_sim.pod.container_config import legacy_spec_hash, spec_hash, with_current_hashes
from kubelet_sim.pod.spec import PodView
from kubelet_sim.podworkers.resizer import PodResizer
from tests.unit.harness import Node, container, pod_body

NODE_CPU = Allocatable(cpu_milli=4000, memory_bytes=8 << 30, pods=110)  # the harness node's


def _resources(cpu_request: str, cpu_limit: str, mem_request: str = "32Mi") -> Json:
    return {
        "requests": {"cpu": cpu_request, "memory": mem_request},
        "limits": {"cpu": cpu_limit, "memory": "64Mi"},
    }


def _pod(**fields: Any) -> Json:
    body = pod_body(containers=[container("main", resources=_resources("100m", "200m"), **fields)])
    body["metadata"]["generation"] = 1
    return body


def _ready(node: Node, **fields: Any) -> tuple[str, cri.ObservedContainer]:
    """A pod of _pod(**fields) added and synced until Ready: its uid and its one container."""
    uid = node.add(_pod(**fields))
    node.sync_until_ready(uid)
    (first,) = node.containers(uid, "main")
    return uid, first


def _resize(node: Node, uid: str, resources: Json, name: str = "main") -> None:
    """What PATCH pods/<p>/resize leaves in the pod the node's watch delivers."""
    node.update_status(uid)
    pod = copy.deepcopy(node.pods[uid])
    for c in pod["spec"]["containers"]:
        if c["name"] == name:
            c["resources"] = resources
    pod["metadata"]["generation"] += 1
    node.pods[uid] = pod


def _condition(node: Node, uid: str, kind: str) -> Json | None:
    found = [c for c in node.last_status(uid).get("conditions") or [] if c["type"] == kind]
    return found[0] if found else None


# -- the pure decision ------------------------------------------------------------------------


def test_the_container_hash_leaves_resources_and_resize_policy_out() -> None:
    view = PodView.from_api(_pod())
    resized = PodView.from_api(_pod(resizePolicy=[{"resourceName": "cpu"}]))
    bare = PodView.from_api(pod_body(containers=[container("main")]))
    assert spec_hash(view.containers[0]) == spec_hash(resized.containers[0])
    assert spec_hash(view.containers[0]) == spec_hash(bare.containers[0])


def test_a_resize_past_the_nodes_allocatable_is_infeasible_with_the_kubelets_words() -> None:
    allocated = resize.allocation_of(PodView.from_api(_pod()))
    body = _pod()
    body["spec"]["containers"][0]["resources"] = _resources("100", "100")
    verdict = resize.decide(PodView.from_api(body), [], NODE_CPU, allocated=allocated)
    assert verdict == resize.Verdict(
        resize.Outcome.INFEASIBLE,
        "Node didn't have enough capacity: cpu, requested: 100000, capacity: 4000",
    )
    body["spec"]["containers"][0]["resources"] = _resources("100m", "200m", mem_request="9Gi")
    verdict = resize.decide(PodView.from_api(body), [], NODE_CPU, allocated=allocated)
    assert verdict.message == (
        "Node didn't have enough capacity: memory, requested: 9663676416, capacity: 8589934592"
    )


def test_a_resize_that_fits_the_node_but_not_beside_its_pods_is_deferred() -> None:
    allocated = resize.allocation_of(PodView.from_api(_pod()))
    other = _pod()
    other["spec"]["containers"][0]["resources"] = _resources("2", "2")
    body = _pod()
    body["spec"]["containers"][0]["resources"] = _resources("3", "3")
    verdict = resize.decide(
        PodView.from_api(body), [PodView.from_api(other)], NODE_CPU, allocated=allocated
    )
    assert verdict == resize.Verdict(
        resize.Outcome.DEFERRED,
        "Node didn't have enough resource: cpu, requested: 3000, used: 2000, capacity: 4000",
    )
    alone = resize.decide(PodView.from_api(body), [], NODE_CPU, allocated=allocated)
    assert alone.outcome is resize.Outcome.ACCEPTED


def test_the_same_amounts_written_otherwise_are_no_resize() -> None:
    allocated = resize.allocation_of(PodView.from_api(_pod()))
    body = _pod()
    body["spec"]["containers"][0]["resources"] = _resources("0.1", "0.2")
    verdict = resize.decide(PodView.from_api(body), [], NODE_CPU, allocated=allocated)
    assert verdict.outcome is resize.Outcome.NONE


def test_the_completed_message_is_the_kubelets_json() -> None:
    body = _pod()
    body["spec"]["containers"][0]["resources"] = _resources("150m", "250m")
    assert resize.completed_message(PodView.from_api(body)) == (
        'Pod resize completed: {"containers":[{"name":"main","resources":{"limits":'
        '{"cpu":"250m","memory":"64Mi"},"requests":{"cpu":"150m","memory":"32Mi"}}}]}'
    )


# -- the node ---------------------------------------------------------------------------------


def test_an_accepted_resize_is_applied_in_place_and_told(node: Node) -> None:
    uid, first = _ready(node)
    _resize(node, uid, _resources("150m", "250m"))

    node.sync(uid)  # allocated, told in progress, then applied
    progress = _condition(node, uid, "PodResizeInProgress")
    assert progress is not None
    assert progress["status"] == "True"
    assert progress["observedGeneration"] == 2
    assert "reason" not in progress
    told = node.container_status(uid, "main")
    assert told["allocatedResources"] == {"cpu": "150m", "memory": "32Mi"}
    assert told["resources"] == _resources("100m", "200m")  # not yet given
    assert node.runtime.operations("update") == [first.id]

    delay = node.sync(uid)
    assert _condition(node, uid, "PodResizeInProgress") is None
    told = node.container_status(uid, "main")
    assert told["resources"] == _resources("150m", "250m")
    assert told["allocatedResources"] == {"cpu": "150m", "memory": "32Mi"}
    assert told["restartCount"] == 0
    assert told["containerID"].endswith(first.id)
    (event,) = node.events.of("ResizeCompleted")
    assert (event.type, event.field_path) == ("Normal", "")
    assert event.message == (
        'Pod resize completed: {"containers":[{"name":"main","resources":{"limits":'
        '{"cpu":"250m","memory":"64Mi"},"requests":{"cpu":"150m","memory":"32Mi"}}}]}'
    )
    assert node.runtime.resources_of(first.id) == cri.Resources(
        cpu_period=100000, cpu_quota=25000, cpu_shares=153, memory_limit_bytes=64 << 20
    )
    assert node.containers(uid, "main") == [first]
    assert "Killing" not in node.events.reasons(uid)
    assert delay is None  # nothing left to do
    node.sync(uid)
    assert len(node.events.of("ResizeCompleted")) == 1  # told once


def test_an_infeasible_resize_changes_nothing_but_a_condition(node: Node) -> None:
    uid, first = _ready(node)
    _resize(node, uid, _resources("100", "100"))
    node.sync(uid)
    pending = _condition(node, uid, "PodResizePending")
    assert pending is not None
    assert (pending["status"], pending["reason"], pending["observedGeneration"]) == (
        "True",
        "Infeasible",
        2,
    )
    assert pending["message"] == (
        "Node didn't have enough capacity: cpu, requested: 100000, capacity: 4000"
    )
    assert pending["lastProbeTime"]
    assert pending["lastTransitionTime"]
    kinds = [c["type"] for c in node.last_status(uid)["conditions"]]
    assert kinds.index("PodResizePending") < kinds.index("PodReadyToStartContainers")
    told = node.container_status(uid, "main")
    assert told["resources"] == _resources("100m", "200m")
    assert told["allocatedResources"] == {"cpu": "100m", "memory": "32Mi"}
    assert node.runtime.operations("update") == []
    assert node.runtime.resources_of(first.id) == cri.Resources(
        cpu_period=100000, cpu_quota=20000, cpu_shares=102, memory_limit_bytes=64 << 20
    )
    written = len(node.status.history(uid))
    node.sync(uid)  # decided once: the same condition, no new write
    assert len(node.status.history(uid)) == written
    # Reverted: the condition goes, nothing else happens.
    _resize(node, uid, _resources("100m", "200m"))
    node.sync(uid)
    assert _condition(node, uid, "PodResizePending") is None
    assert node.events.of("ResizeCompleted") == []
    assert node.containers(uid, "main") == [first]


def test_a_crashed_container_restarts_at_its_allocation_not_a_pending_spec(node: Node) -> None:
    uid, first = _ready(node)
    _resize(node, uid, _resources("100", "100"))
    node.sync(uid)
    node.runtime.exit(first.id, 1)
    node.sync_until(uid, lambda: len(node.containers(uid, "main")) == 2, "restarted")
    second = node.containers(uid, "main")[-1]
    assert node.runtime.resources_of(second.id) == node.runtime.resources_of(first.id)


def test_a_deferred_resize_is_tried_again_and_accepted_once_room_is_made(node: Node) -> None:
    big = _pod()
    big["metadata"]["name"] = "big"
    big["spec"]["containers"][0]["resources"] = _resources("3", "3")
    other = node.add(big)
    uid = node.add(_pod())
    node.sync_until_ready(other)
    node.sync_until_ready(uid)
    _resize(node, uid, _resources("1500m", "1500m"))
    delay = node.sync(uid)
    pending = _condition(node, uid, "PodResizePending")
    assert pending is not None
    assert pending["reason"] == "Deferred"
    assert pending["message"] == (
        "Node didn't have enough resource: cpu, requested: 1500, used: 3000, capacity: 4000"
    )
    assert delay == resize.DEFERRED_RETRY
    del node.pods[other]  # the other pod is gone
    node.sync(other)
    node.clock.advance(delay)
    node.sync(uid)
    assert _condition(node, uid, "PodResizePending") is None
    node.sync(uid)
    assert node.container_status(uid, "main")["resources"] == _resources("1500m", "1500m")
    assert len(node.events.of("ResizeCompleted")) == 1


def test_resize_policy_restart_container_restarts_that_container(node: Node) -> None:
    policy = [
        {"resourceName": "cpu", "restartPolicy": "NotRequired"},
        {"resourceName": "memory", "restartPolicy": "RestartContainer"},
    ]
    uid, first = _ready(node, resizePolicy=policy)
    _resize(node, uid, _resources("100m", "200m", mem_request="48Mi"))
    node.sync_until(
        uid,
        lambda: (
            node.container_status(uid, "main").get("restartCount") == 1
            and _condition(node, uid, "PodResizeInProgress") is None
        ),
        "restarted at its new size",
    )
    second = node.containers(uid, "main")[-1]
    assert second.id != first.id
    assert node.container_status(uid, "main")["allocatedResources"]["memory"] == "48Mi"
    assert node.runtime.operations("update") == []
    assert len(node.events.of("ResizeCompleted")) == 1


def test_the_allocation_outlives_the_agent_in_the_pods_checkpoint(node: Node) -> None:
    uid = node.add(_pod())
    node.sync_until_ready(uid)
    _resize(node, uid, _resources("150m", "250m"))
    node.sync(uid)
    node.sync(uid)
    _resize(node, uid, _resources("100", "100"))  # infeasible: pending when the agent stops
    node.sync(uid)
    restarted = PodResizer(
        node.runtime,
        node.cache,
        node.events,
        node.syncer.pods,
        NODE_CPU,
        clock=node.clock,
        enabled=lambda: True,
    )
    view = PodView.from_api(node.pods[uid])
    runs_at = restarted.resolve(view, syncing=True)
    assert runs_at.containers[0].raw["resources"] == _resources("150m", "250m")
    given, conditions = restarted.status_inputs(
        runs_at, node.cache.pod_containers(uid), terminal=False
    )
    assert given == {"main": _resources("150m", "250m")}
    assert [(c["type"], c["reason"]) for c in conditions] == [("PodResizePending", "Infeasible")]


def test_a_new_pod_is_admitted_beside_a_pending_resize_at_its_allocation(node: Node) -> None:
    big = _pod()
    big["metadata"]["name"] = "big"
    big["spec"]["containers"][0]["resources"] = _resources("3", "3")
    node.sync_until_ready(node.add(big))
    uid = node.add(_pod())
    node.sync_until_ready(uid)
    _resize(node, uid, _resources("1500m", "1500m"))
    node.sync(uid)
    pending = _condition(node, uid, "PodResizePending")
    assert pending is not None
    assert pending["reason"] == "Deferred"
    late = _pod()
    late["metadata"]["name"] = "late"
    late["spec"]["containers"][0]["resources"] = _resources("800m", "800m")
    # 3 + 100m (allocated, not the pending 1500m) + 800m fit in 4 CPUs.
    node.sync_until_ready(node.add(late))


def test_a_container_an_older_agent_labelled_with_the_whole_specs_hash_is_not_changed() -> None:
    view = PodView.from_api(_pod())
    spec = view.containers[0]
    pod_ref = cri.PodRef(node="n1", name="p", namespace="ns", uid=view.uid)
    old_label = legacy_spec_hash(spec)
    assert old_label != spec_hash(spec)  # resources were in it
    seen = cri.ObservedContainer("c1", pod_ref, "main", 0, cri.ContainerState.RUNNING, "img")
    labelled = [replace(seen, spec_hash=old_label), replace(seen, id="c2", spec_hash="0")]
    current = with_current_hashes(view, labelled)
    assert [c.spec_hash for c in current] == [spec_hash(spec), "0"]  # a changed one stays so
