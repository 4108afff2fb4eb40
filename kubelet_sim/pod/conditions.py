"""The pod conditions the kubelet writes (status/generate.go: GeneratePodReadyCondition,
GeneratePodInitializedCondition, GenerateContainersReadyCondition, and
PodReadyToStartContainers), and which conditions are the kubelet's own.

Pure, as pod/status.py, which writes them into the status it generates from the container
statuses and the phase it decided first.
"""

from __future__ import annotations

from collections.abc import Sequence

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.pod.generation import KubeletGeneration
from kubelet_sim.pod.spec import PodView

KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")


# PodScheduled is also written by the kubelet (always True) but first set by the scheduler.
OWNED_CONDITIONS = (*KUBELET_CONDITIONS, "PodScheduled")


# In-place resize's (pod/resize.py decides them): pending (Deferred, Infeasible), in progress.
RESIZE_CONDITIONS = ("PodResizePending", "PodResizeInProgress")


def _go_list(names: Sequence[str]) -> str:
    return "[" + " ".join(names) + "]"


def pod_conditions(
    pod: PodView,
    status: Json,
    old: Json,
    *,
    sandbox_ready: bool,
    generation: KubeletGeneration,
    now: str | None,
    resize_conditions: Sequence[Json] = (),
) -> list[Json]:
    """The conditions of `status` (its container statuses and phase decided): those others
    wrote kept, the resize's, then the kubelet's, each keeping its transition time while its
    status holds (`old`: the status last written)."""
    phase = status["phase"]
    kept = [
        c
        for c in pod.status.get("conditions") or []
        if c.get("type") not in (*OWNED_CONDITIONS, *RESIZE_CONDITIONS)
    ]
    generated = [_initialized(pod, status, phase, generation)]
    if generation.ready_to_start_condition:
        state = "True" if sandbox_ready else "False"
        generated.insert(0, {"type": "PodReadyToStartContainers", "status": state})
    containers_ready = _containers_ready(pod, status, phase, generation)
    ready = _ready(pod, containers_ready, kept)
    generated += [ready, containers_ready, {"type": "PodScheduled", "status": "True"}]
    old_conditions = {c.get("type"): c for c in old.get("conditions") or []}
    api_conditions = {c.get("type"): c for c in pod.status.get("conditions") or []}
    for condition in generated:
        previous = old_conditions.get(condition["type"]) or api_conditions.get(condition["type"])
        condition["lastProbeTime"] = None
        if previous is not None and previous.get("status") == condition["status"]:
            condition["lastTransitionTime"] = previous.get("lastTransitionTime") or now
        else:
            condition["lastTransitionTime"] = now
    # determinePodResizeStatus' conditions come before the ones the kubelet generates.
    return kept + [dict(c) for c in resize_conditions] + generated


def _ready(pod: PodView, containers_ready: Json, others: Sequence[Json]) -> Json:
    """GeneratePodReadyCondition: ContainersReady, then every readiness gate's condition."""
    if containers_ready["status"] != "True":
        return dict(containers_ready, type="Ready")
    by_type = {c.get("type"): c for c in others}
    unready = []
    for gate in pod.spec.get("readinessGates") or []:
        kind = str(gate.get("conditionType", ""))
        found = by_type.get(kind)
        if found is None:
            unready.append(
                f'corresponding condition of pod readiness gate "{kind}" does not exist.'
            )
        elif (state := found.get("status")) != "True":
            unready.append(f'the status of pod readiness gate "{kind}" is not "True", but {state}')
    if unready:
        return {
            "type": "Ready",
            "status": "False",
            "reason": "ReadinessGatesNotReady",
            "message": ", ".join(unready),
        }
    return {"type": "Ready", "status": "True"}


def _initialized(pod: PodView, status: Json, phase: str, generation: KubeletGeneration) -> Json:
    """GeneratePodInitializedCondition: with or without init containers, a Succeeded pod is
    Initialized with reason PodCompleted."""
    by_name = {s["name"]: s for s in status.get("initContainerStatuses", [])}
    unknown = [c.name for c in pod.init_containers if c.name not in by_name]
    # isInitContainerInitialized: a sidecar once started, a regular one once it succeeded
    incomplete = [
        c.name
        for c in pod.init_containers
        if c.name in by_name and not by_name[c.name]["started" if c.is_sidecar else "ready"]
    ]
    if phase == "Succeeded" and not unknown:
        return {"type": "Initialized", "status": "True", "reason": "PodCompleted"}
    # HasAnyRegularContainerStarted: a pod whose app containers ran was initialized before.
    if generation.sidecars and any(
        "running" in s["state"] or "terminated" in s["state"] for s in status["containerStatuses"]
    ):
        return {"type": "Initialized", "status": "True"}
    return _not_ready("Initialized", "ContainersNotInitialized", unknown, incomplete, "incomplete")


def _containers_ready(
    pod: PodView, status: Json, phase: str, generation: KubeletGeneration
) -> Json:
    by_name = {s["name"]: s for s in status["containerStatuses"]}
    by_name.update((s["name"], s) for s in status.get("initContainerStatuses", []))
    containers = [*pod.sidecars, *pod.containers]  # sidecars count for readiness, first
    unknown = [c.name for c in containers if c.name not in by_name]
    unready = [c.name for c in containers if c.name in by_name and not by_name[c.name]["ready"]]
    if phase == "Succeeded" and not unknown:
        return {"type": "ContainersReady", "status": "False", "reason": "PodCompleted"}
    if phase == "Failed" and generation.terminal_phase:
        return {"type": "ContainersReady", "status": "False", "reason": "PodFailed"}
    return _not_ready("ContainersReady", "ContainersNotReady", unknown, unready, "unready")


def _not_ready(
    kind: str, reason: str, unknown: Sequence[str], not_ready: Sequence[str], adjective: str
) -> Json:
    """False with the kubelet's message listing the containers, or True when none is listed."""
    messages = []
    if unknown:
        messages.append(f"containers with unknown status: {_go_list(unknown)}")
    if not_ready:
        messages.append(f"containers with {adjective} status: {_go_list(not_ready)}")
    if not messages:
        return {"type": kind, "status": "True"}
    return {"type": kind, "status": "False", "reason": reason, "message": ", ".join(messages)}
