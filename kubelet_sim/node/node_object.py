"""The Node object the kubelet registers and the status it writes, as pure functions on dicts.

Field names, condition reasons and messages are the upstream kubelet's
(`pkg/kubelet/kubelet_node_status.go`, `pkg/kubelet/nodestatus/setters.go`), so that our Node
reads like a real one in `kubectl describe node`.
"""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from kubelet_sim import __version__, cri
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.node.host import HostFacts
from kubelet_sim.node.settings import NodeSettings, cpu_millicores, memory_bytes, reserved_amount
from kubelet_sim.pod.admission import LABEL_OS, NODE_OS
from kubelet_sim.pod.generation import CURRENT, KubeletGeneration
from kubelet_sim.validation import KUBELET_COMPAT_VERSION

# The kubelet release whose behaviour we follow. Build metadata (like k3s' "+k3s1") shows that
# this is kubelet-sim while comparing equal to v1.34.0 wherever the version is parsed.
KUBELET_VERSION = f"{KUBELET_COMPAT_VERSION}+kubelet-sim-{__version__}"

LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_ARCH = "kubernetes.io/arch"
LABEL_BETA_OS = "beta.kubernetes.io/os"
LABEL_BETA_ARCH = "beta.kubernetes.io/arch"
LABEL_VIRTUAL = "kubelet-sim.io/virtual"
# Set by the kubelet at registration (enableControllerAttachDetach defaults to true).
ANNOTATION_CMAD = "volumes.kubernetes.io/controller-managed-attach-detach"
ANNOTATION_CREATOR = "kubelet-sim.io/creator"  # NodeSettings.creator

# Default hard eviction thresholds, which the kubelet subtracts from capacity for allocatable.
EVICTION_MEMORY_BYTES = 100 * 1024 * 1024
EVICTION_NODEFS_FRACTION = 0.10
MAX_IMAGES = 50  # --node-status-max-images
MAX_NAMES_PER_IMAGE = 5  # MaxNamesPerImageInNodeStatus

READY_MESSAGE = "kubelet is posting ready status"
RUNTIME_DOWN = "container runtime is down"
RUNTIME_NOT_CHECKED = "container runtime status check may not have completed yet"

# (type, reason, message) of the pressure conditions, in the kubelet's order; all False here:
# kubelet-sim has no eviction manager, so it never reports pressure.
PRESSURE_CONDITIONS = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)


def format_time(moment: datetime) -> str:
    """metav1.Time: RFC 3339 in UTC, whole seconds."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(moment: datetime) -> str:
    """metav1.MicroTime (Lease renewTime): RFC 3339 in UTC with six fraction digits."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_labels(settings: NodeSettings, host: HostFacts) -> dict[str, str]:
    """The labels the kubelet owns and re-asserts on every start (`updateDefaultLabels`)."""
    return {
        LABEL_HOSTNAME: settings.node_name,
        LABEL_OS: NODE_OS,
        LABEL_ARCH: host.architecture,
        LABEL_BETA_OS: NODE_OS,
        LABEL_BETA_ARCH: host.architecture,
        LABEL_VIRTUAL: "true",
    }


@dataclass(frozen=True)
class StatusFacts:
    """What a node status is made of besides the settings and the host, read at one moment: the
    runtime's version and the kubelet's errors about it, the time, the runtime's images, what
    the node name resolves to on this host (see `addresses`), whose rules apply."""

    runtime_version: str
    runtime_errors: list[str]
    now: datetime
    images: Sequence[cri.ImageSummary] = ()
    name_addresses: Collection[str] = ()
    generation: KubeletGeneration = CURRENT


def build_node(settings: NodeSettings, host: HostFacts, facts: StatusFacts) -> Json:
    """The Node to create at registration; node labels and taints apply only here, as upstream."""
    node: Json = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": settings.node_name,
            "labels": {**settings.node_labels, **default_labels(settings, host)},
            "annotations": {ANNOTATION_CMAD: "true", **creator_annotation(settings)},
        },
        "spec": {},
        "status": node_status(settings, host, facts, []),
    }
    if settings.register_with_taints:
        node["spec"]["taints"] = copy.deepcopy(settings.register_with_taints)
    return node


def creator_annotation(settings: NodeSettings) -> dict[str, str]:
    return {} if settings.creator is None else {ANNOTATION_CREATOR: settings.creator}


def created_by(node: Json, creator: str) -> bool:
    """Whether `node` is one that a node with this `NodeSettings.creator` made."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return bool(creator) and annotations.get(ANNOTATION_CREATOR) == creator


def reconcile_existing(existing: Json, settings: NodeSettings, host: HostFacts) -> Json | None:
    """On restart, the existing Node with our default labels and annotation re-asserted.

    Returns None when nothing differs. Spec (taints, unschedulable) and other labels are left
    as they are: after registration they belong to the cluster's administrators.
    """
    updated = copy.deepcopy(existing)
    meta = updated.setdefault("metadata", {})
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    meta["labels"] = {**labels, **default_labels(settings, host)}
    meta["annotations"] = {**annotations, ANNOTATION_CMAD: "true"}
    if meta["labels"] == labels and meta["annotations"] == annotations:
        return None
    return updated


def node_status(
    settings: NodeSettings, host: HostFacts, facts: StatusFacts, previous_conditions: list[Json]
) -> Json:
    """The whole `status` the kubelet owns, computed afresh at each status update."""
    capacity, allocatable = resources(settings, host)
    listed = node_images(facts.images)
    return {
        **({"images": listed} if listed else {}),
        "capacity": capacity,
        "allocatable": allocatable,
        "conditions": compute_conditions(previous_conditions, facts.runtime_errors, facts.now),
        "addresses": addresses(settings, host, facts.name_addresses),
        "daemonEndpoints": {"kubeletEndpoint": {"Port": settings.kubelet_port}},
        "nodeInfo": node_info(host, facts.runtime_version, facts.generation),
    }


def node_images(images: Sequence[cri.ImageSummary], limit: int = MAX_IMAGES) -> list[Json]:
    """The Images setter: the largest `limit` images (nodeStatusMaxImages), each named by its
    digests then its tags, at most MAX_NAMES_PER_IMAGE names.

    The same list of images gives the same list back (not a copy; nobody changes it): every
    node of a process shares the runtime's list (node/shared_probe.py), and thousands of
    nodes each sorting it every 10 s showed in the profile."""
    last = _LAST_LISTED[0]
    if last is not None and last[0] is images and last[1] == limit:
        return last[2]
    ordered = sorted(images, key=lambda i: (-i.size, i.id))[: max(limit, 0)]
    listed = [
        {"names": [*i.repo_digests, *i.repo_tags][:MAX_NAMES_PER_IMAGE], "sizeBytes": i.size}
        for i in ordered
    ]
    _LAST_LISTED[0] = (images, limit, listed)
    return listed


# The last images listed (replaced whole, so no lock): `node_images`'s memo.
_LAST_LISTED: list[tuple[Sequence[cri.ImageSummary], int, list[Json]] | None] = [None]


def resources(settings: NodeSettings, host: HostFacts) -> tuple[dict[str, str], dict[str, str]]:
    """Capacity, and allocatable = capacity minus --system-reserved, --kube-reserved and the
    default hard eviction thresholds (GetNodeAllocatableReservation), never below zero."""
    millicores = cpu_millicores(settings.cpu) if settings.cpu else host.cpus * 1000
    memory = memory_bytes(settings.memory) if settings.memory else host.memory_ki * 1024
    storage = host.ephemeral_storage_ki * 1024
    hugepages = {name: _bytes_quantity(size) for name, size in host.hugepages.items()}
    capacity = {
        "cpu": _cpu_quantity(millicores),
        "ephemeral-storage": _ki_quantity(storage),
        **hugepages,
        "memory": _ki_quantity(memory),
        "pods": str(settings.pods),
    }

    def reserved(name: str) -> int:
        return sum(
            reserved_amount(name, r[name])
            for r in (settings.system_reserved, settings.kube_reserved)
            if name in r
        )

    reserved_memory = reserved("memory") + EVICTION_MEMORY_BYTES + sum(host.hugepages.values())
    reserved_storage = reserved("ephemeral-storage") + int(storage * EVICTION_NODEFS_FRACTION)
    allocatable = {
        **capacity,
        "cpu": _cpu_quantity(max(millicores - reserved("cpu"), 0)),
        "ephemeral-storage": str(max(storage - reserved_storage, 0)),
        "memory": _ki_quantity(max(memory - reserved_memory, 0)),
    }
    return capacity, allocatable


def addresses(
    settings: NodeSettings, host: HostFacts, name_addresses: Collection[str] = ()
) -> list[Json]:
    """InternalIP, then Hostname (the node name) only where that name leads to the same place.

    The API server dials the first address of the first type in its
    --kubelet-preferred-address-types that the Node has (GetPreferredNodeAddress; upstream's
    default puts Hostname first) and does not fall back when that address fails. The kubelet
    always advertises its hostname (nodestatus.NodeAddress), the name of a real machine that
    the network usually knows; a virtual node's name (`n1`) is made up, and an API server that
    picked it failed with `lookup n1: no such host`. So Hostname is advertised only when the
    node name resolves, on this host (`name_addresses`), to the node IP: then it leads where
    InternalIP does. Otherwise the Node has InternalIP alone, as kwok's and virtual-kubelet's
    nodes have, and every preference that names InternalIP reaches it: Hostname first (the
    type is absent, so the next is tried), InternalIP first (kubeadm's, kind's), ExternalIP
    first (never advertised: no address here is external). Without a node IP, Hostname is
    kept when the name resolves at all, the only way left to reach the node.
    """
    node_ip = settings.node_ip or host.node_ip
    hostname = {"type": "Hostname", "address": settings.node_name}
    if not node_ip:
        return [hostname] if name_addresses else []
    result: list[Json] = [{"type": "InternalIP", "address": node_ip}]
    if any(_same_ip(node_ip, address) for address in name_addresses):
        result.append(hostname)
    return result


def _same_ip(a: str, b: str) -> bool:
    try:
        return ipaddress.ip_address(a) == ipaddress.ip_address(b)
    except ValueError:
        return False


def node_info(
    host: HostFacts, runtime_version: str, generation: KubeletGeneration = CURRENT
) -> dict[str, str]:
    """nodeInfo. kubeProxyVersion is deprecated and empty since 1.31, but still present: Go
    serialises it without omitempty and clients (the Python client's model) require it."""
    return {
        "machineID": host.machine_id,
        "systemUUID": host.system_uuid,
        "bootID": host.boot_id,
        "kernelVersion": host.kernel_version,
        "osImage": host.os_image,
        "containerRuntimeVersion": f"docker://{runtime_version}",
        "kubeletVersion": KUBELET_VERSION,
        "kubeProxyVersion": KUBELET_VERSION if generation.kube_proxy_version else "",
        "operatingSystem": NODE_OS,
        "architecture": host.architecture,
    }


def runtime_errors(runtime_answers: bool, runtime_ever_answered: bool) -> list[str]:
    """The kubelet's runtimeState errors for a runtime that does not answer its status check."""
    if runtime_answers:
        return []
    return [RUNTIME_DOWN if runtime_ever_answered else RUNTIME_NOT_CHECKED]


def compute_conditions(previous: list[Json], errors: list[str], now: datetime) -> list[Json]:
    """Pressure conditions (always False) and Ready, from the runtime's errors.

    As upstream: lastHeartbeatTime is `now` on every computation; lastTransitionTime moves only
    when a condition's status flips (or it is new).
    """
    wanted = [(kind, "False", reason, message) for kind, reason, message in PRESSURE_CONDITIONS]
    if errors:
        wanted.append(("Ready", "False", "KubeletNotReady", _aggregate(errors)))
    else:
        wanted.append(("Ready", "True", "KubeletReady", READY_MESSAGE))
    old = {c.get("type"): c for c in previous}
    stamp = format_time(now)
    conditions: list[Json] = []
    for kind, status, reason, message in wanted:
        before = old.get(kind)
        unchanged = before is not None and before.get("status") == status
        conditions.append(
            {
                "type": kind,
                "status": status,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": before.get("lastTransitionTime", stamp)
                if before is not None and unchanged
                else stamp,
                "reason": reason,
                "message": message,
            }
        )
    return conditions


def ready_condition(conditions: list[Json]) -> Json | None:
    return next((c for c in conditions if c.get("type") == "Ready"), None)


def desired_status(server: Json, ours: Json) -> Json:
    """The server's status with ours set on it, as the kubelet's setters change a copy of the
    Node it read: our fields replace theirs; conditions merge by type in the server's order, so
    one another component owns (NetworkUnavailable) stays."""
    desired = {**copy.deepcopy(server), **copy.deepcopy(ours)}
    mine = {c["type"]: c for c in ours.get("conditions") or []}
    conditions = [mine.pop(c.get("type"), c) for c in server.get("conditions") or []]
    desired["conditions"] = [*conditions, *mine.values()]
    return desired


def status_changed(old: Json | None, new: Json) -> bool:
    """Whether anything but heartbeat times differs (`nodeStatusHasChanged` upstream).

    Compared in place, not on stripped copies: thousands of nodes of a process ask this
    every status update, and copying their image lists was half of the process's CPU."""
    if old is None or old.keys() != new.keys():
        return True
    return any(
        _conditions_without_heartbeats(old[key]) != _conditions_without_heartbeats(value)
        if key == "conditions"
        else old[key] != value
        for key, value in new.items()
    )


def conditions_differ(served: list[Json], computed: list[Json]) -> bool:
    """Whether the server holds, for a condition we compute, another status, reason or message
    (another writer's: the node lifecycle controller's Unknown). Types others own are theirs."""
    if not served:
        return False
    held = {c.get("type"): c for c in served}
    fields = ("status", "reason", "message")
    return any((held.get(c["type"]) or {}).get(f) != c.get(f) for c in computed for f in fields)


def _conditions_without_heartbeats(conditions: list[Json]) -> list[Json]:
    return [{k: v for k, v in c.items() if k != "lastHeartbeatTime"} for c in conditions]


def _aggregate(errors: list[str]) -> str:
    """utilerrors.NewAggregate(...).Error(): one message alone, several as "[a, b]"."""
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def _cpu_quantity(millicores: int) -> str:
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def _ki_quantity(size: int) -> str:
    return f"{size // 1024}Ki"


def _bytes_quantity(size: int) -> str:
    return "0" if size == 0 else _ki_quantity(size)
