"""In-place pod resize (InPlacePodVerticalScaling, on by default from v1.33): pure decisions.

A user PATCHes pods/<p>/resize; the spec's resources change, the containers do not. The kubelet
keeps two records per pod (pkg/kubelet/allocation): what it *allocated* (the resources it
admitted the pod, or a resize, at) and what it *actuated* (what each running container was
last given). The pod the node runs and reports is the spec with the allocation in it
(UpdatePodFromAllocation), so a resize that does not fit changes nothing but a condition.

Here: whether a resize fits (canResizePod), what each running container needs
(computePodResizeAction: an update in place, or a restart where its resizePolicy says so),
and the words the kubelet uses (conditions, the ResizeCompleted event). No I/O.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kubelet_sim.cri import ContainerState, ObservedContainer
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.formats.quantity import milli_value, value
from kubelet_sim.pod.admission import Allocatable, _fit, pod_requests
from kubelet_sim.pod.attempts import latest_attempt
from kubelet_sim.pod.conditions import RESIZE_CONDITIONS
from kubelet_sim.pod.spec import ContainerView, PodView

RESIZABLE = ("cpu", "memory")
PENDING, IN_PROGRESS = RESIZE_CONDITIONS
# allocation_manager.go: a deferred resize is looked at again on this period (retryDelay).
DEFERRED_RETRY = 180.0

Requirements = Json  # a container's `resources`: {"requests": {...}, "limits": {...}}


class Outcome(Enum):
    NONE = "none"  # spec == allocation: nothing to decide
    ACCEPTED = "accepted"
    DEFERRED = "Deferred"  # v1.PodReasonDeferred: fits the node, not beside its other pods
    INFEASIBLE = "Infeasible"  # v1.PodReasonInfeasible: never fits this node


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    message: str = ""


@dataclass(frozen=True)
class ContainerResize:
    """One running container whose allocation differs from what it was given."""

    container: ContainerView  # as allocated
    observed: ObservedContainer
    restart: bool  # its resizePolicy says RestartContainer for a changed resource


def resizable_containers(pod: PodView) -> tuple[ContainerView, ...]:
    """allocationFromPod / IsResizableContainer: app containers and sidecars (a regular init
    container has run its course; an ephemeral one has no resources)."""
    return (*pod.containers, *pod.sidecars)


def allocation_of(pod: PodView) -> dict[str, Requirements]:
    """What a pod is admitted at: each resizable container's resources, as the spec says."""
    return {c.name: copy.deepcopy(c.raw.get("resources") or {}) for c in resizable_containers(pod)}


def with_allocation(pod: PodView, allocated: Mapping[str, Requirements]) -> PodView:
    """UpdatePodFromAllocation: the spec with the allocated resources in it; the same view when
    they agree (a container the allocation does not know keeps its spec)."""
    if not differs(pod, allocated):
        return pod
    raw = copy.deepcopy(pod.raw)
    spec = raw.get("spec") or {}
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            if container.get("name") in allocated:
                resources = copy.deepcopy(allocated[container["name"]])
                if resources:
                    container["resources"] = resources
                else:
                    container.pop("resources", None)
    return PodView.from_api(raw)


def differs(pod: PodView, allocated: Mapping[str, Requirements]) -> bool:
    """Whether the spec asks for other resources than those allocated (Semantic.DeepEqual:
    quantities compared by value, so "0.1" and "100m" agree)."""
    return any(
        c.name in allocated and _amounts(_resources(c)) != _amounts(allocated[c.name])
        for c in resizable_containers(pod)
    )


def decide(
    desired: PodView,
    others: Sequence[PodView],
    allocatable: Allocatable,
    *,
    allocated: Mapping[str, Requirements],
) -> Verdict:
    """handlePodResourcesResize / canResizePod for a pod whose spec differs from its allocation.

    Infeasible when the pod's requests exceed the node's allocatable (memory named first, as
    the kubelet checks it first); Deferred when the admission fit (noderesources) refuses it
    beside `others`, the node's other active pods as allocated; else accepted."""
    if not differs(desired, allocated):
        return Verdict(Outcome.NONE)
    wanted = pod_requests(desired)
    if wanted.memory_bytes > allocatable.memory_bytes or wanted.cpu_milli > allocatable.cpu_milli:
        if wanted.memory_bytes > allocatable.memory_bytes:
            what = f"memory, requested: {wanted.memory_bytes}, capacity: {allocatable.memory_bytes}"
        else:
            what = f"cpu, requested: {wanted.cpu_milli}, capacity: {allocatable.cpu_milli}"
        return Verdict(Outcome.INFEASIBLE, "Node didn't have enough capacity: " + what)
    misfit = _fit(desired, [p for p in others if p.uid != desired.uid], allocatable)
    if misfit is not None:  # canAdmitPod's message, without rejectPod's prefix
        return Verdict(Outcome.DEFERRED, misfit.event_message)
    return Verdict(Outcome.ACCEPTED)


def container_resizes(
    allocated_pod: PodView,
    observed: Sequence[ObservedContainer],
    actuated: Mapping[str, Requirements],
) -> list[ContainerResize]:
    """computePodResizeAction for each running resizable container whose actuated resources
    (by container id) differ from its allocation. A container never resized was created with
    the allocation it runs under, so one missing from `actuated` needs nothing."""
    out = []
    for container in resizable_containers(allocated_pod):
        latest = latest_attempt(observed, container.name)
        if latest is None or latest.state is not ContainerState.RUNNING:
            continue
        if latest.id not in actuated:
            continue
        want = _amounts(container.raw.get("resources") or {})
        have = _amounts(actuated[latest.id])
        if want == have:
            continue
        changed = {name.split(".")[0] for name, amount in want.items() if have.get(name) != amount}
        changed |= {name.split(".")[0] for name in have if name not in want}
        out.append(ContainerResize(container, latest, _restart_for(container, changed)))
    return out


def in_progress(
    allocated_pod: PodView,
    observed: Sequence[ObservedContainer],
    actuated: Mapping[str, Requirements],
) -> bool:
    """isPodResizeInProgress: a running resizable container not yet given its allocation."""
    return bool(container_resizes(allocated_pod, observed, actuated))


def status_resources(allocated: Requirements, actuated: Requirements | None) -> Requirements:
    """convertContainerStatusResources: the allocation, with the CPU request and limits and the
    memory limit the container was actually given (a runtime that reports them says so)."""
    resources = copy.deepcopy(allocated)
    if actuated is None:
        return resources
    for field, names in (("limits", ("cpu", "memory")), ("requests", ("cpu",))):
        if field not in resources:
            continue
        for name in names:
            given = (actuated.get(field) or {}).get(name)
            if given is not None:
                resources[field][name] = given
    return resources


def completed_message(allocated_pod: PodView) -> str:
    """podResizeCompletionMsg (v1.34: no generation in it): every init and app container of
    the allocated pod with its resources, as Go's encoding/json writes them."""
    summary: dict[str, Any] = {}
    for key, containers in (
        ("initContainers", allocated_pod.init_containers),
        ("containers", allocated_pod.containers),
    ):
        if containers:
            summary[key] = [
                {"name": c.name, "resources": _go_requirements(c.raw.get("resources") or {})}
                for c in containers
            ]
    return "Pod resize completed: " + json.dumps(summary, separators=(",", ":"))


def condition(
    kind: str,
    reason: str,
    message: str,
    *,
    now: str,
    generation: int | None,
    previous: Json | None = None,
) -> Json:
    """updatedPodResizeCondition: True, probed now, its transition kept while the reason is."""
    same = previous is not None and previous.get("reason", "") == reason
    out: Json = {"type": kind, "status": "True", "lastProbeTime": now}
    kept = previous.get("lastTransitionTime") if same and previous is not None else None
    out["lastTransitionTime"] = kept or now
    if generation:
        out["observedGeneration"] = generation
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


def _go_requirements(resources: Requirements) -> Json:
    """v1.ResourceRequirements' JSON: limits, requests (maps with sorted keys), claims."""
    out: Json = {}
    for field in ("limits", "requests", "claims"):
        if resources.get(field):
            value_ = resources[field]
            out[field] = dict(sorted(value_.items())) if isinstance(value_, dict) else value_
    return out


def _resources(container: ContainerView) -> Requirements:
    resources: Requirements = container.raw.get("resources") or {}
    return resources


def _amounts(resources: Requirements) -> dict[str, int]:
    """cpu (milli) and memory (bytes) requests and limits, for comparing by value."""
    out = {}
    for field in ("requests", "limits"):
        for name in RESIZABLE:
            raw = (resources.get(field) or {}).get(name)
            if raw is not None:
                out[f"{name}.{field}"] = milli_value(raw) if name == "cpu" else value(raw)
    return out


def _restart_for(container: ContainerView, changed: set[str]) -> bool:
    """A changed resource whose resizePolicy is RestartContainer (NotRequired by default)."""
    policy = container.raw.get("resizePolicy") or []
    policies = {p.get("resourceName"): p.get("restartPolicy") for p in policy}
    return any(policies.get(name) == "RestartContainer" for name in changed)
