"""Whether the node accepts a pod bound to it: the kubelet's admit handlers, in miniature.

A pod the scheduler placed here can still be refused: the kubelet checks the pod's OS, re-runs the
scheduler's resource, node affinity and host-port fit against its Node and the pods it already runs
and checks the Node's NoExecute taints (lifecycle/predicate.go, scheduler.AdmissionCheck) and,
before v1.15, refused privileged pods unless started with --allow-privileged
(privilegeAdmitHandler); kubelet-sim's switch covers whatever reaches the host
(pod/host_access.py). A refused pod is marked Failed with the reason and the message returned here
(kubelet.rejectPod, `rejected_status`). Which of the v1.34 kubelet's handlers are here, and which
are not: docs/behaviour.md, "Admission".
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.formats.quantity import add_saturating, milli_value, value
from kubelet_sim.pod.conditions import OWNED_CONDITIONS
from kubelet_sim.pod.host_access import forbidden_message
from kubelet_sim.pod.security import (
    APPARMOR_REASON,
    SYSCTL_FORBIDDEN,
    apparmor_rejection,
    sysctl_rejection,
)
from kubelet_sim.pod.spec import ContainerView, PodView
from kubelet_sim.pod.static import is_static_pod

REJECTED_PREFIX = "Pod was rejected: "  # kubelet.rejectPod writes this before every message
FORBIDDEN = "Forbidden"
UNEXPECTED = "UnexpectedAdmissionError"  # lifecycle/predicate.go, when a check itself fails
NODE_OS = "linux"  # the kubelet's runtime.GOOS: a Docker node runs Linux containers
LABEL_OS = "kubernetes.io/os"
HUGEPAGES_PREFIX = "hugepages-"
QOS_KEPT_SINCE = 32  # the kubelet minor whose rejectPod keeps the pod's qosClass
OS_LABEL_MISMATCH = "PodOSSelectorNodeLabelDoesNotMatch"
OS_NOT_SUPPORTED = "PodOSNotSupported"
SUPPLEMENTAL_GROUPS_NOT_SUPPORTED = "SupplementalGroupsPolicyNotSupported"
ANY_IP = "0.0.0.0"  # an empty hostIP: every address of the node
# The scheduler plugins' names: the reasons of their predicate failures, with their words.
NODE_AFFINITY = ("NodeAffinity", "node(s) didn't match Pod's node affinity/selector")
NODE_PORTS = ("NodePorts", "node(s) didn't have free ports for the requested pod ports")
TAINTS = ("TaintToleration", "node(s) had taints that the pod didn't tolerate")


@dataclass(frozen=True)
class Allocatable:
    """What the node offers to pods (Node.status.allocatable)."""

    cpu_milli: int
    memory_bytes: int
    pods: int
    ephemeral_storage_bytes: int | None = None  # None: not reported (no downward API default)
    hugepages: Mapping[str, int] = field(default_factory=dict)  # "hugepages-2Mi": bytes


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
    ephemeral_storage_bytes: int = 0
    hugepages: Mapping[str, int] = field(default_factory=dict)  # "hugepages-2Mi": bytes

    def __add__(self, other: Requests) -> Requests:
        """Within int64, as the kubelet counts: a sum of huge requests stays huge."""
        return self._combine(other, add_saturating)

    def max(self, other: Requests) -> Requests:
        return self._combine(other, max)

    def _combine(self, other: Requests, each: Callable[[int, int], int]) -> Requests:
        """`each` of the two amounts of every resource (a huge page size one lacks is 0)."""
        return Requests(
            each(self.cpu_milli, other.cpu_milli),
            each(self.memory_bytes, other.memory_bytes),
            each(self.ephemeral_storage_bytes, other.ephemeral_storage_bytes),
            {
                name: each(self.hugepages.get(name, 0), other.hugepages.get(name, 0))
                for name in {**self.hugepages, **other.hugepages}
            },
        )


def admit(
    pod: PodView,
    *,
    active_pods: Sequence[PodView],
    allocatable: Allocatable,
    allow_privileged: bool,
    allowed_unsafe_sysctls: Sequence[str] = (),
    apparmor: bool = False,
    node: Json | None = None,
) -> Rejection | None:
    """None if the pod may run; else the first reason the kubelet would give for refusing it.

    `active_pods` are the other pods already admitted and not terminated (not `pod` itself);
    `node` is the node's own Node (getNodeAnyWay's); None leaves its labels and taints unchecked.
    """
    refused_sysctl = sysctl_rejection(pod, allowed_unsafe_sysctls)
    if refused_sysctl:  # the sysctl handler comes before the resource fit
        return Rejection(SYSCTL_FORBIDDEN, REJECTED_PREFIX + refused_sysctl)
    if not allow_privileged:
        forbidden = forbidden_message(pod)
        if forbidden:
            return Rejection(FORBIDDEN, REJECTED_PREFIX + forbidden)
    refused = _predicates(pod, active_pods, allocatable, node)
    if refused is not None:
        return refused
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
    node: Json | None = None,
) -> dict[str, Rejection | None]:
    """HandlePodAdditions: decide each new pod in creation order, counting only what was admitted.

    `undecided` comes in the order the node saw the pods (the sort is stable, so pods created in
    the same second keep it); `admitted` are the pods admitted earlier that still run or are
    being stopped. Pods in `already_here` (this node's own containers show that an earlier run
    of the agent admitted them; never the pod's status, which others may write) are admitted
    first and without checks: a restart with a smaller node never kills what runs.
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
                node=node,
            )
        except Exception as exc:  # one pod's input never blocks the others' admission
            rejection = unexpected(exc)
        decisions[pod.uid] = rejection
        if rejection is None:
            active.append(pod)
    return decisions


def rejected_status(generated: Json, previous: Json, kubelet_minor: int) -> Json:
    """What rejectPod writes, from the status a sync would write: the phase, reason and message,
    startTime and observedGeneration, nothing of containers or IPs. As the status manager's
    merge, the conditions the kubelet owns go (PodScheduled too), those of others stay; qosClass
    is kept from v1.32 (kubernetes#128083: older kubelets dropped it)."""
    status: Json = {
        key: generated[key]
        for key in ("phase", "reason", "message", "startTime", "observedGeneration")
        if key in generated
    }
    if kubelet_minor >= QOS_KEPT_SINCE and (previous.get("qosClass") or generated.get("qosClass")):
        status["qosClass"] = previous.get("qosClass") or generated["qosClass"]
    others = [c for c in previous.get("conditions") or [] if c.get("type") not in OWNED_CONDITIONS]
    if others:
        status["conditions"] = others
    for key in ("resourceClaimStatuses", "extendedResourceClaimStatus"):  # not the kubelet's
        if key in previous:
            status[key] = previous[key]
    return status


def unexpected(exc: Exception) -> Rejection:
    """predicate.go's answer when a check itself fails: "GeneralPredicates failed due to %v,
    which is unexpected." (the error named by its type too, and cut short)."""
    error = f"{type(exc).__name__}: {exc}"[:200]
    return Rejection(
        UNEXPECTED,
        f"{REJECTED_PREFIX}GeneralPredicates failed due to {error}, which is unexpected.",
    )


def _predicates(
    pod: PodView, active_pods: Sequence[PodView], allocatable: Allocatable, node: Json | None
) -> Rejection | None:
    """predicateAdmitHandler.Admit: the checks preemption cannot help first (the OS, the
    supplemental groups policy), then the scheduler's admission check (resources, node
    affinity, host ports) and the NoExecute taints, the first failure told."""
    os_label = ((pod.raw.get("metadata") or {}).get("labels") or {}).get(LABEL_OS)
    if os_label is not None and os_label != NODE_OS:  # the pod's label, not its nodeSelector
        return Rejection(
            OS_LABEL_MISMATCH,
            REJECTED_PREFIX
            + "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label",
        )
    os_field = pod.spec.get("os")
    if os_field is not None and (os_field or {}).get("name") != NODE_OS:
        return Rejection(
            OS_NOT_SUPPORTED,
            REJECTED_PREFIX + "Failed to admit pod as the OS field doesn't match node OS",
        )
    if (pod.spec.get("securityContext") or {}).get("supplementalGroupsPolicy") == "Strict":
        # The node reports no features.supplementalGroupsPolicy: Docker cannot keep out the
        # groups an image's /etc/group adds.
        return Rejection(
            SUPPLEMENTAL_GROUPS_NOT_SUPPORTED,
            REJECTED_PREFIX + "SupplementalGroupsPolicy=Strict is not supported in this node",
        )
    misfit = _fit(pod, active_pods, allocatable)
    if misfit is not None:
        return misfit
    if node is not None and not node_affinity_matches(pod, node):
        return _predicate_failure(NODE_AFFINITY)
    if not _ports_fit(pod, active_pods):
        return _predicate_failure(NODE_PORTS)
    if node is not None and not is_static_pod(pod.raw) and _untolerated_no_execute(pod, node):
        return _predicate_failure(TAINTS)
    return None


def _predicate_failure(predicate: tuple[str, str]) -> Rejection:
    """PredicateFailureError: the plugin's name is the reason."""
    name, words = predicate
    return Rejection(name, f"{REJECTED_PREFIX}Predicate {name} failed: {words}")


def node_affinity_matches(pod: PodView, node: Json) -> bool:
    """GetRequiredNodeAffinity(pod).Match(node): every nodeSelector label, and one of the
    required affinity's non-empty terms (all of its expressions and fields)."""
    meta: Json = node.get("metadata") or {}
    labels: Json = meta.get("labels") or {}
    selector: Json = pod.spec.get("nodeSelector") or {}
    if any(labels.get(key) != value for key, value in selector.items()):
        return False
    affinity: Json = (pod.spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    fields = {"metadata.name": str(meta.get("name") or "")}
    terms = [
        t
        for t in required.get("nodeSelectorTerms") or []
        if t.get("matchExpressions") or t.get("matchFields")
    ]
    return any(
        all(_label_matches(e, labels) for e in term.get("matchExpressions") or [])
        and all(_field_matches(e, fields) for e in term.get("matchFields") or [])
        for term in terms
    )


def _label_matches(expression: Json, labels: Json) -> bool:
    """labels.Requirement: In, NotIn (an absent label too), Exists, DoesNotExist, Gt and Lt
    (integers; a label that is not one fails)."""
    key, operator = str(expression.get("key") or ""), expression.get("operator")
    values = [str(v) for v in expression.get("values") or []]
    present, label = key in labels, str(labels.get(key, ""))
    match operator:
        case "In":
            return present and label in values
        case "NotIn":
            return not present or label not in values
        case "Exists":
            return present
        case "DoesNotExist":
            return not present
        case "Gt" | "Lt" if present and len(values) == 1:
            try:
                have, bound = int(label), int(values[0])
            except ValueError:
                return False
            return have > bound if operator == "Gt" else have < bound
    return False


def _field_matches(expression: Json, fields: Mapping[str, str]) -> bool:
    """matchFields: metadata.name only, In or NotIn with one value."""
    values = [str(v) for v in expression.get("values") or []]
    key, operator = str(expression.get("key") or ""), str(expression.get("operator") or "")
    if len(values) != 1 or key not in fields or operator not in ("In", "NotIn"):
        return False
    return (fields[key] == values[0]) == (operator == "In")


def _untolerated_no_execute(pod: PodView, node: Json) -> bool:
    """FindMatchingUntoleratedTaint for the NoExecute taints, the only ones the kubelet checks
    (the scheduler has kept NoSchedule ones away)."""
    tolerations: list[Json] = pod.spec.get("tolerations") or []
    return any(
        taint.get("effect") == "NoExecute" and not any(_tolerates(t, taint) for t in tolerations)
        for taint in (node.get("spec") or {}).get("taints") or []
    )


def _tolerates(toleration: Json, taint: Json) -> bool:
    """Toleration.ToleratesTaint: an empty effect or key matches all; Exists any value."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def host_ports(pod: PodView) -> list[tuple[str, str, int]]:
    """GetHostPorts as (host IP, protocol, port): app containers' and sidecars' (the init
    containers that run as long as the pod), an empty IP all of them, TCP by default."""
    containers = (*pod.sidecars, *pod.containers)
    return [
        (str(p.get("hostIP") or ANY_IP), str(p.get("protocol") or "TCP"), int(p["hostPort"]))
        for c in containers
        for p in c.raw.get("ports") or []
        if int(p.get("hostPort") or 0) > 0
    ]


def _ports_fit(pod: PodView, active_pods: Sequence[PodView]) -> bool:
    """nodeports.Fits: a wanted (IP, protocol, port) conflicts with one used on the same IP or
    on 0.0.0.0, and a wanted 0.0.0.0 with any IP's."""
    used = {port for other in active_pods for port in host_ports(other)}
    for ip, protocol, port in host_ports(pod):
        for used_ip, used_protocol, used_port in used:
            same_port = (protocol, port) == (used_protocol, used_port)
            if same_port and (ip == used_ip or ANY_IP in (ip, used_ip)):
                return False
    return True


def _fit(
    pod: PodView, active_pods: Sequence[PodView], allocatable: Allocatable
) -> Rejection | None:
    """fitsRequest: pod count, then cpu, memory, ephemeral storage and huge pages (a size the
    node lacks has none); the kubelet reports only the first. A resource the pod does not ask
    for never fails, even on a node that shrank. Extended resources are not counted: the node
    offers none, and the kubelet drops a request for one its node does not offer."""
    if len(active_pods) + 1 > allocatable.pods:
        return _insufficient("pods", 1, len(active_pods), allocatable.pods)
    wanted = pod_requests(pod)
    if wanted == Requests():
        return None
    used = total_requests(active_pods)
    checks = [
        ("cpu", wanted.cpu_milli, used.cpu_milli, allocatable.cpu_milli),
        ("memory", wanted.memory_bytes, used.memory_bytes, allocatable.memory_bytes),
    ]
    if allocatable.ephemeral_storage_bytes is not None:
        checks.append(
            (
                "ephemeral-storage",
                wanted.ephemeral_storage_bytes,
                used.ephemeral_storage_bytes,
                allocatable.ephemeral_storage_bytes,
            )
        )
    checks += [
        (
            name,
            wanted.hugepages[name],
            used.hugepages.get(name, 0),
            allocatable.hugepages.get(name, 0),
        )
        for name in sorted(wanted.hugepages)
    ]
    for resource, requested, in_use, capacity in checks:
        if requested > 0 and requested > capacity - in_use:
            return _insufficient(resource, requested, in_use, capacity)
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
        ephemeral_storage_bytes=(
            value(resources["ephemeral-storage"]) if "ephemeral-storage" in resources else 0
        ),
        hugepages={
            name: value(amount)
            for name, amount in resources.items()
            if name.startswith(HUGEPAGES_PREFIX)
        },
    )


def total_requests(pods: Iterable[PodView]) -> Requests:
    """What a set of pods asks of the node (Node.status bookkeeping, `used` above)."""
    return sum((pod_requests(p) for p in pods), Requests())
