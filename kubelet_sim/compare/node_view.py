"""The Node object of our node beside the reference kubelet's, normalised like pod states. Pure.

Each node is flattened into fields (`status.conditions.Ready`, `status.nodeInfo.bootID`, ...)
whose values leave out what differs between any two nodes (names, IPs, ports, times), so that
two kubelets on one machine should agree on every field. What differs by nature (a Docker
engine where the reference runs containerd, a virtual node's taint, ...) is listed with the
reason, never silently skipped; everything else that differs is a difference of ours.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kubelet_sim.formats.jsontypes import Json

ABSENT = "(absent)"

# Field (or field prefix, ending in "."), and why ours differs from a kubelet's there.
BY_NATURE: dict[str, str] = {
    "status.nodeInfo.containerRuntimeVersion": (
        "the runtime: a Docker engine (docker://) where the reference kubelet runs containerd"
    ),
    "status.images": (
        "each runtime lists its own image store (Docker's, containerd's): compared is that"
        " both list their images with names and sizes"
    ),
    "status.allocatable.": (
        "configuration: the reference kubelet runs with evictionHard empty (reference-node.md),"
        " ours keeps the kubelet's default hard eviction thresholds (memory.available 100Mi,"
        " nodefs.available 10%) out of allocatable"
    ),
    "status.addresses": (
        "a virtual node's name is not the machine's hostname: it is advertised as a Hostname"
        " address only where it resolves to the node's IP, or the API server's Hostname-first"
        " dialling (logs, exec) would go elsewhere"
    ),
    "spec.taints": "each node registers with its own taint (--register-with-taints)",
    "metadata.labels.kubelet-sim.io/virtual": "our node labels itself virtual",
    "status.nodeInfo.kubeletVersion": (
        "ours names kubelet-sim's version; it follows the status rules of its API server's"
        " minor version (pod/generation.py). Compared as v1.<minor> where both say one"
    ),
}

# Labels the kubelet itself sets (kubelet_node_status.go), compared by key and value.
KUBELET_LABEL_PREFIXES = ("kubernetes.io/", "beta.kubernetes.io/", "node.kubernetes.io/")


@dataclass(frozen=True)
class NodeField:
    """One field that is not the same on both nodes."""

    field: str
    ours: str
    reference: str
    why: str = ""  # for a difference by nature

    def as_dict(self) -> dict[str, str]:
        shown = {"field": self.field, "ours": self.ours, "reference": self.reference}
        return {**shown, "why": self.why} if self.why else shown


@dataclass
class NodeComparison:
    """Fields that differ (ours to explain) and those that differ by nature (with why)."""

    fields: int = 0
    differs: list[NodeField] = field(default_factory=list)
    by_nature: list[NodeField] = field(default_factory=list)

    @property
    def agrees(self) -> bool:
        return not self.differs

    def as_dict(self) -> dict[str, Any]:
        return {
            "agrees": self.agrees,
            "fields": self.fields,
            "differs": [f.as_dict() for f in self.differs],
            "by_nature": [f.as_dict() for f in self.by_nature],
        }


def compare_nodes(ours: Json, reference: Json) -> NodeComparison:
    """Every field of either node's view, judged."""
    mine, theirs = node_view(ours), node_view(reference)
    result = NodeComparison(fields=len(mine.keys() | theirs.keys()))
    for name in sorted(mine.keys() | theirs.keys()):
        a, b = mine.get(name, ABSENT), theirs.get(name, ABSENT)
        if a == b:
            continue
        why = nature_of(name)
        (result.by_nature if why else result.differs).append(NodeField(name, a, b, why))
    return result


def nature_of(name: str) -> str:
    """Why `name` differs by nature ("" if it should not)."""
    for known, why in BY_NATURE.items():
        if name == known or (known.endswith(".") and name.startswith(known)):
            return why
    return ""


def node_view(node: Json) -> dict[str, str]:
    """The node as comparable fields: no names, addresses, ports or times."""
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    name = str(meta.get("name") or "")
    view: dict[str, str] = {}
    for key, value in (meta.get("labels") or {}).items():
        if key.startswith(KUBELET_LABEL_PREFIXES) or key == "kubelet-sim.io/virtual":
            view[f"metadata.labels.{key}"] = "(node name)" if value == name else str(value)
    for key, value in (meta.get("annotations") or {}).items():
        view[f"metadata.annotations.{key}"] = str(value)
    spec = node.get("spec") or {}
    taints = [
        f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}" for t in spec.get("taints") or []
    ]
    view["spec.taints"] = ",".join(sorted(taints)) or ABSENT
    view["spec.unschedulable"] = str(bool(spec.get("unschedulable")))
    for condition in status.get("conditions") or []:
        words = (condition.get(k) or "" for k in ("status", "reason", "message"))
        view[f"status.conditions.{condition.get('type')}"] = " | ".join(words)
    view["status.addresses"] = ",".join(a.get("type", "") for a in status.get("addresses") or [])
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
    view["status.daemonEndpoints.kubeletEndpoint.Port"] = "set" if port else ABSENT
    _node_info(view, status.get("nodeInfo") or {})
    for what in ("capacity", "allocatable"):
        for resource, quantity in (status.get(what) or {}).items():
            view[f"status.{what}.{resource}"] = str(quantity)
    view["status.images"] = _images(status.get("images"))
    for key in ("features", "runtimeHandlers", "config", "volumesInUse", "volumesAttached"):
        if status.get(key):
            view[f"status.{key}"] = json.dumps(status[key], sort_keys=True)
    return view


def _node_info(view: dict[str, str], info: Json) -> None:
    kubelet = str(info.get("kubeletVersion") or "")
    for key, value in info.items():
        text = json.dumps(value, sort_keys=True) if isinstance(value, dict) else str(value)
        if key == "kubeletVersion":
            text = _minor(text)
        elif key == "kubeProxyVersion":
            text = "(the kubelet's)" if text and text == kubelet else (text or "(empty)")
        elif key == "containerRuntimeVersion":
            text = text.split("://")[0]
        view[f"status.nodeInfo.{key}"] = text


def _minor(version: str) -> str:
    parts = version.lstrip("v").split("+")[0].split("-")[0].split(".")
    if len(parts) >= 2 and parts[0] == "1" and parts[1].isdigit() and parts[1] != "0":
        return f"v1.{parts[1]}"
    return version


def _images(images: Any) -> str:
    if not images:
        return ABSENT
    sized = all(isinstance(image.get("sizeBytes"), int) for image in images)
    named = any(image.get("names") for image in images)
    return "listed with names and sizes" if sized and named else json.dumps(images)[:200]
