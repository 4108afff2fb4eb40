"""What the node registers as and how often it heartbeats, with the CLI's parsing helpers.

Errors are `ConfigError` (a `ValueError`) with a message that names the bad item, so the CLI
can print one line and exit before anything starts.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kubelet_sim.formats.quantity import INT64_MAX, parse_quantity
from kubelet_sim.validation import ConfigError, is_dns1123_subdomain, validate_node_name

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# The taint a node registers with unless told otherwise, as virtual-kubelet and kwok register
# theirs: ordinary workloads and DaemonSets stay off a node whose pod IPs the rest of the cluster
# cannot reach; pods meant for it tolerate it.
VIRTUAL_NODE_TAINT = {"key": "kubelet-sim.io/virtual", "value": "true", "effect": "NoSchedule"}


def default_taints() -> list[dict[str, str]]:
    return [dict(VIRTUAL_NODE_TAINT)]


# NodeRestriction (and the kubelet's own flag check) allow only these under kubernetes.io/k8s.io.
KUBELET_LABELS = frozenset(
    {
        "kubernetes.io/hostname",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
        # Deprecated spellings the kubelet still accepts.
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/instance-type",
        "failure-domain.beta.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
    }
)
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")

_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")


@dataclass(frozen=True)
class NodeSettings:
    """The node's identity and sizing, plus the kubelet's heartbeat intervals (tests shorten them).

    `cpu`/`memory` override what the host has (a virtual node can claim any size); None means
    the host's real CPUs and memory.
    """

    node_name: str
    node_labels: dict[str, str] = field(default_factory=dict)
    register_with_taints: list[dict[str, str]] = field(default_factory=default_taints)
    cpu: str | None = None
    memory: str | None = None
    pods: int = 110
    node_ip: str | None = None
    kubelet_port: int = 10250
    delete_node_on_exit: bool = False
    # A token written on the Node this node creates (annotation kubelet-sim.io/creator) and
    # required before it adopts an existing Node of its name: a node joining a cluster it does
    # not own never takes over a Node someone else made. None: adopt any Node of the name, as
    # the kubelet does on a restart.
    creator: str | None = None
    lease_duration_seconds: int = 40
    lease_renew_interval: float = 10.0
    status_update_interval: float = 10.0
    status_report_interval: float = 300.0
    system_reserved: dict[str, str] = field(default_factory=dict)  # --system-reserved
    kube_reserved: dict[str, str] = field(default_factory=dict)  # --kube-reserved

    def __post_init__(self) -> None:
        for reserved in (self.system_reserved, self.kube_reserved):
            for name, quantity in reserved.items():
                reserved_amount(name, quantity)
        validate_node_name(self.node_name)
        validate_node_labels(self.node_labels)
        for taint in self.register_with_taints:
            _validate_taint(taint)
        if self.cpu is not None:
            cpu_millicores(self.cpu)
        if self.memory is not None:
            memory_bytes(self.memory)
        if self.pods < 1:
            raise ConfigError(f"--pods must be at least 1, got {self.pods}")
        if self.node_ip is not None:
            _validate_ip(self.node_ip)
        if not 0 <= self.kubelet_port < 65536:  # 0 until the server has bound a free port
            raise ConfigError(f"kubelet port {self.kubelet_port} is not a TCP port (1-65535)")
        if self.lease_duration_seconds < 1 or min(self._intervals()) <= 0:
            raise ConfigError("lease duration and heartbeat intervals must be positive")

    @property
    def heartbeat_timeout(self) -> tuple[float, float]:
        """(connect, read) seconds of a Lease or node status call: the kubelet's heartbeat
        client times out after the status update interval or the lease duration, the less."""
        limit = min(self.status_update_interval, float(self.lease_duration_seconds))
        return min(5.0, limit), limit

    def _intervals(self) -> tuple[float, ...]:
        return (
            self.lease_renew_interval,
            self.status_update_interval,
            self.status_report_interval,
        )


def parse_labels(text: str) -> dict[str, str]:
    """`--node-labels a=b,c=d` as the kubelet takes it; an empty string means no labels."""
    labels: dict[str, str] = {}
    for key, value in _pairs(text, "node label", "key=value"):
        if key in labels and labels[key] != value:
            raise ConfigError(f"node label {key!r} is given twice with different values")
        validate_label(key, value)
        labels[key] = value
    return labels


def parse_taints(text: str) -> list[dict[str, str]]:
    """`--register-with-taints k=v:NoSchedule,k2:NoExecute` as kubectl/kubelet spell taints."""
    taints: list[dict[str, str]] = []
    for item in _items(text):
        spec, sep, effect = item.rpartition(":")
        if not sep or not spec:
            raise ConfigError(
                f"invalid taint {item!r}: expected key=value:effect or key:effect,"
                f" effect one of {', '.join(TAINT_EFFECTS)}"
            )
        key, _, value = spec.partition("=")
        taint = {"key": key.strip(), "effect": effect.strip()}
        if value.strip():
            taint["value"] = value.strip()
        _validate_taint(taint)
        if any(t["key"] == taint["key"] and t["effect"] == taint["effect"] for t in taints):
            raise ConfigError(f"taint {taint['key']}:{taint['effect']} is given twice")
        taints.append(taint)
    return taints


def validate_node_labels(labels: dict[str, str]) -> None:
    """Refuse, before registering, what NodeRestriction would refuse with a 403 later."""
    for key, value in labels.items():
        validate_label(key, value)
    forbidden = sorted(k for k in labels if not is_allowed_node_label(k))
    if forbidden:
        raise ConfigError(
            f"node labels not allowed for a kubelet: {', '.join(forbidden)}."
            " Labels under kubernetes.io/ or k8s.io/ must be one of"
            f" {', '.join(sorted(KUBELET_LABELS))} or start with"
            f" {' or '.join(p + '/' for p in KUBELET_LABEL_NAMESPACES)}"
            " (NodeRestriction); use your own prefix such as example.com/ instead"
        )


def is_allowed_node_label(key: str) -> bool:
    """The kubelet's rule (`kubeletapis.IsKubeletLabel` or outside the reserved namespaces)."""
    namespace = key.rpartition("/")[0]
    if key in KUBELET_LABELS or _in_namespaces(namespace, KUBELET_LABEL_NAMESPACES):
        return True
    return not _in_namespaces(namespace, ("kubernetes.io", "k8s.io"))


def validate_label(key: str, value: str) -> None:
    """Label syntax as the API server checks it, so a typo fails here and not at registration."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (prefix and is_dns1123_subdomain(prefix)):
        raise ConfigError(f"invalid label key {key!r}: the prefix must be a DNS subdomain")
    if not name or len(name) > 63 or not _NAME.match(name):
        raise ConfigError(
            f"invalid label key {key!r}: the name must be 1-63 characters of letters, digits,"
            " '-', '_' or '.', starting and ending with a letter or digit"
        )
    if value and (len(value) > 63 or not _NAME.match(value)):
        raise ConfigError(
            f"invalid value {value!r} for label {key!r}: at most 63 characters of letters,"
            " digits, '-', '_' or '.', starting and ending with a letter or digit"
        )


RESERVABLE = ("cpu", "memory", "ephemeral-storage", "pid")


def parse_reserved(text: str) -> dict[str, str]:
    """`--system-reserved cpu=200m,memory=500Mi,ephemeral-storage=1Gi,pid=1000`."""
    reserved: dict[str, str] = {}
    for name, quantity in _pairs(text, "reservation", "resource=quantity"):
        reserved_amount(name, quantity)
        reserved[name] = quantity
    return reserved


def reserved_amount(name: str, quantity: str) -> int:
    """Millicores for cpu, bytes for memory and storage, a count for pid."""
    if name not in RESERVABLE:
        raise ConfigError(f'cannot reserve "{name}" resource')  # the kubelet's words
    amount = _quantity(quantity, name) * (1000 if name == "cpu" else 1)
    if amount < 0 or amount.denominator != 1:
        raise ConfigError(f"invalid {name} reservation {quantity!r}")
    return int(amount)


def cpu_millicores(text: str) -> int:
    """A CPU quantity ("2", "500m", "1.5") in millicores."""
    millis = _quantity(text, "cpu") * 1000
    if millis.denominator != 1 or millis <= 0:
        raise ConfigError(f"invalid cpu {text!r}: use whole millicores, e.g. 2, 1.5 or 500m")
    return int(millis)


def memory_bytes(text: str) -> int:
    """A memory quantity ("8Gi", "512M", "1073741824") in bytes."""
    value = _quantity(text, "memory")
    if value < 1024 * 1024:
        raise ConfigError(f"invalid memory {text!r}: too small (did you forget a unit, e.g. 8Gi?)")
    return int(value)


def _quantity(text: str, what: str) -> Fraction:
    """The API's own quantity parser (kubelet_sim.formats.quantity), with the node's limit: what
    the node advertises must fit the kubelet's int64 counters (millicores for cpu)."""
    try:
        amount = parse_quantity(text)
    except ValueError as exc:
        raise ConfigError(
            f"invalid {what} {text!r}: not a quantity such as 4, 500m or 8Gi"
        ) from exc
    if abs(amount) * (1000 if what == "cpu" else 1) > INT64_MAX:
        raise ConfigError(f"invalid {what} {text!r}: more than a node can count")
    return amount


def _validate_taint(taint: dict[str, Any]) -> None:
    key, effect = taint.get("key", ""), taint.get("effect", "")
    if effect not in TAINT_EFFECTS:
        raise ConfigError(
            f"invalid taint effect {effect!r} for {key!r}: use one of {', '.join(TAINT_EFFECTS)}"
        )
    try:
        validate_label(key, str(taint.get("value", "")))
    except ConfigError as exc:
        raise ConfigError(f"invalid taint {key!r}: {exc}") from exc


def _validate_ip(text: str) -> None:
    try:
        ipaddress.ip_address(text)
    except ValueError as exc:
        raise ConfigError(f"invalid node IP {text!r}: not an IPv4 or IPv6 address") from exc


def _in_namespaces(namespace: str, roots: tuple[str, ...]) -> bool:
    return any(namespace == root or namespace.endswith("." + root) for root in roots)


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _pairs(text: str, what: str, form: str) -> list[tuple[str, str]]:
    """`a=b,c=d` as (key, value) pairs, stripped; ConfigError for an item without `=`."""
    pairs = []
    for item in _items(text):
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"invalid {what} {item!r}: expected {form}")
        pairs.append((key.strip(), value.strip()))
    return pairs
