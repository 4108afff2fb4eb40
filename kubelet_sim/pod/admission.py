"""Whether the node accepts a pod bound to it: the kubelet's admit handlers, in miniature.

A pod the scheduler placed here can still be refused: the kubelet re-runs the scheduler's resource
fit against the pods it already runs (lifecycle/predicate.go, noderesources/fit.go) and, before
v1.15, refused privileged pods unless started with --allow-privileged (privilegeAdmitHandler);
kubelet-sim's switch covers whatever reaches the host (pod/host_access.py). A refused pod is marked
Failed with the reason and the message returned here (kubelet.rejectPod).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubelet_sim.formats.quantity import add_saturating, milli_value, value
from kubelet_sim.pod.host_access import forbidden_message
from kubelet_sim.pod.security import (
    APPARMOR_REASON,
    SYSCTL_FORBIDDEN,
    apparmor_rejection,
    sysctl_rejection,
)
from kubelet_sim.pod.spec import ContainerView, PodView

REJECTED_PREFIX = "Pod was rejected: "  # kubelet.rejectPod writes this before every message
FORBIDDEN = "Forbidden"
UNEXPECTED = "UnexpectedAdmissionError"  # lifecycle/predicate.go, when a check itself fails


@dataclass(frozen=True)
class Allocatable:
    """What the node offers to pods (Node.status.allocatable)."""

    cpu_milli: int
    memory_bytes: int
    pods: int
    ephemeral_storage_bytes: int | None = None  # None: not reported (no downward API default)


@dataclass(frozen=True)
class Rejection:
    """Why the pod may not run here: its status reason and message (phase Failed)."""

    reason: str
    message: str

    @property
    def event_message(self) -> str:
        """rejectPod's Warning event says it without the status message's prefix."""
        return self.message.removeprefix(REJECTED_PREFIX)


@dataclass(frozen=True)
class Requests:
    """A pod's effective requests, as the scheduler and the kubelet count them."""

    cpu_milli: int = 0
    memory_bytes: int = 0

    def __add__(self, other: Requests) -> Requests:
        """Within int64, as the kubelet counts: a sum of huge requests stays huge."""
        return Requests(
            add_saturating(self.cpu_milli, other.cpu_milli),
            add_saturating(self.memory_bytes, other.memory_bytes),
        )

    def max(self, other: Requests) -> Requests:
        return Requests(
            max(self.cpu_milli, other.cpu_milli), max(self.memory_bytes, other.memory_bytes)
        )


def admit(
    pod: PodView,
    *,
    active_pods: Sequence[PodView],
    allocatable: Allocatable,
    allow_privileged: bool,
    allowed_unsafe_sysctls: Sequence[str] = (),
    apparmor: bool = False,
) -> Rejection | None:
    """None if the pod may run; else the first reason the kubelet would give for refusing it.

    `active_pods` are the other pods already admitted and not terminated (not `pod` itself).
    """
    refused_sysctl = sysctl_rejection(pod, allowed_unsafe_sysctls)
    if refused_sysctl:  # the sysctl handler comes before the resource fit
        return Rejection(SYSCTL_FORBIDDEN, REJECTED_PREFIX + refused_sysctl)
    if not allow_privileged:
        forbidden = forbidden_message(pod)
        if forbidden:
            return Rejection(FORBIDDEN, REJECTED_PREFIX + forbidden)
    misfit = _fit(pod, active_pods, allocatable)
    if misfit is not None:
        return misfit
    refused_apparmor = apparmor_rejection(pod, apparmor)  # after the resource fit
    if refused_apparmor:
        return Rejection(APPARMOR_REASON, REJECTED_PREFIX + refused_apparmor)
    return None


def admit_in_order(
    undecided: Sequence[PodView],
    *,
    admitted: Sequence[PodView],
    already_here: Collection[str],
    allocatable: Allocatable,
    allow_privileged: bool,
    allowed_unsafe_sysctls: Sequence[str] = (),
    apparmor: bool = False,
) -> dict[str, Rejection | None]:
    """HandlePodAdditions: decide each new pod in creation order, counting only what was admitted.

    `undecided` comes in the order the node saw the pods (the sort is stable, so pods created in
    the same second keep it); `admitted` are the pods admitted earlier that still run or are
    being stopped. Pods in `already_here` (their containers or status show that an earlier run of
    the agent admitted them) are admitted first and without checks: a restart with a smaller
    node never kills what runs.
    """
    active = list(admitted)
    decisions: dict[str, Rejection | None] = {}
    ordered = sorted(undecided, key=lambda p: p.creation_timestamp)
    for pod in ordered:
        if pod.uid in already_here:
            decisions[pod.uid] = None
            active.append(pod)
    for pod in ordered:
        if pod.uid in decisions:
            continue
        try:
            rejection = admit(
                pod,
                active_pods=active,
                allocatable=allocatable,
                allow_privileged=allow_privileged,
                allowed_unsafe_sysctls=allowed_unsafe_sysctls,
                apparmor=apparmor,
            )
        except Exception as exc:  # one pod's input never blocks the others' admission
            rejection = unexpected(exc)
        decisions[pod.uid] = rejection
        if rejection is None:
            active.append(pod)
    return decisions


def unexpected(exc: Exception) -> Rejection:
    """predicate.go's answer when a check itself fails: "GeneralPredicates failed due to %v,
    which is unexpected." (the error named by its type too, and cut short)."""
    error = f"{type(exc).__name__}: {exc}"[:200]
    return Rejection(
        UNEXPECTED,
        f"{REJECTED_PREFIX}GeneralPredicates failed due to {error}, which is unexpected.",
    )


def _fit(
    pod: PodView, active_pods: Sequence[PodView], allocatable: Allocatable
) -> Rejection | None:
    """fitsRequest: pod count, then cpu, then memory; the kubelet reports only the first."""
    if len(active_pods) + 1 > allocatable.pods:
        return _insufficient("pods", 1, len(active_pods), allocatable.pods)
    wanted = pod_requests(pod)
    if wanted.cpu_milli == 0 and wanted.memory_bytes == 0:
        return None
    used = total_requests(active_pods)
    if wanted.cpu_milli > allocatable.cpu_milli - used.cpu_milli:
        return _insufficient("cpu", wanted.cpu_milli, used.cpu_milli, allocatable.cpu_milli)
    if wanted.memory_bytes > allocatable.memory_bytes - used.memory_bytes:
        return _insufficient(
            "memory", wanted.memory_bytes, used.memory_bytes, allocatable.memory_bytes
        )
    return None


def _insufficient(resource: str, requested: int, used: int, capacity: int) -> Rejection:
    """InsufficientResourceError, as the predicate admit handler turns it into a rejection."""
    return Rejection(
        f"OutOf{resource}",
        f"{REJECTED_PREFIX}Node didn't have enough resource: {resource}, "
        f"requested: {requested}, used: {used}, capacity: {capacity}",
    )


def pod_requests(pod: PodView) -> Requests:
    """resourcehelper.PodRequests: max(app containers + sidecars, each init step) + overhead.

    An init container runs alongside the sidecars (restartPolicy Always) declared before it;
    sidecars keep running with the app containers, so they add to their sum.
    """
    total = sum((container_requests(c) for c in pod.containers), Requests())
    sidecars, init_peak = Requests(), Requests()
    for init in pod.init_containers:
        own = container_requests(init)
        if init.restart_policy == "Always":
            total += own
            sidecars += own
            init_peak = init_peak.max(sidecars)
        else:
            init_peak = init_peak.max(own + sidecars)
    return total.max(init_peak) + _requests_of(pod.spec.get("overhead") or {})


def container_requests(container: ContainerView) -> Requests:
    """requests, each defaulting to the limit when unset (the API server's defaulting)."""
    resources = container.raw.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = {**limits, **(resources.get("requests") or {})}
    return _requests_of(requests)


def _requests_of(resources: Mapping[str, Any]) -> Requests:
    return Requests(
        cpu_milli=milli_value(resources["cpu"]) if "cpu" in resources else 0,
        memory_bytes=value(resources["memory"]) if "memory" in resources else 0,
    )


def total_requests(pods: Iterable[PodView]) -> Requests:
    """What a set of pods asks of the node (Node.status bookkeeping, `used` above)."""
    return sum((pod_requests(p) for p in pods), Requests())
