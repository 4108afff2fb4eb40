"""What kube-proxy's iptables mode would program, computed from Services and EndpointSlices.

Pure: API objects (plain dicts) in, the text `iptables-restore --noflush` takes out. The chains
have kube-proxy's shape (a SERVICES dispatch chain, one chain per service port that picks an
endpoint with `statistic` and honours ClientIP affinity with `recent`, one chain per endpoint
that DNATs; a REJECT in the filter table for a service port without ready endpoints), with our
own prefix, so they live beside anything else in the namespace (Docker's embedded DNS rules)
and are found again after a restart.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from kubelet_sim.formats.jsontypes import Json

PREFIX = "KSIM"
SERVICES_CHAIN = f"{PREFIX}-SERVICES"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
PROTOCOLS = {"TCP": "tcp", "UDP": "udp", "SCTP": "sctp"}
DEFAULT_AFFINITY_SECONDS = 10800  # the API's default for sessionAffinityConfig.clientIP


@dataclass(frozen=True)
class Endpoint:
    ip: str
    port: int


@dataclass(frozen=True)
class ServicePort:
    """One port of one Service's ClusterIP, with the ready endpoints behind it."""

    namespace: str
    service: str
    port_name: str
    cluster_ip: str
    port: int
    protocol: str  # TCP, UDP, SCTP
    endpoints: tuple[Endpoint, ...]
    affinity_seconds: int | None = None  # sessionAffinity: ClientIP

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.service}:{self.port_name}/{self.protocol}"


@dataclass(frozen=True)
class Skipped:
    """Something we cannot serve, for a warning on the object it came from."""

    namespace: str
    name: str
    kind: str  # Service or EndpointSlice
    reason: str


def service_ports(
    services: Iterable[Json], slices: Iterable[Json]
) -> tuple[list[ServicePort], list[Skipped]]:
    """Every ClusterIP service port (IPv4) with its ready endpoints, in a stable order."""
    by_service: dict[tuple[str, str], list[Json]] = {}
    skipped: list[Skipped] = []
    for eps in slices:
        meta = eps.get("metadata") or {}
        owner = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
        if not owner:
            continue
        if eps.get("addressType") != "IPv4":
            reason = f"address type {eps.get('addressType')} is not served by this node (IPv4 only)"
            skipped.append(
                Skipped(meta.get("namespace", ""), meta.get("name", ""), "EndpointSlice", reason)
            )
            continue
        by_service.setdefault((meta.get("namespace", ""), owner), []).append(eps)
    found: list[ServicePort] = []
    for svc in services:
        meta, spec = svc.get("metadata") or {}, svc.get("spec") or {}
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        cluster_ip = str(spec.get("clusterIP") or "")
        if spec.get("type") == "ExternalName" or cluster_ip in ("", "None"):
            continue  # headless and ExternalName: DNS answers, nothing to program
        if not _ipv4(cluster_ip):
            continue
        affinity = None
        if spec.get("sessionAffinity") == "ClientIP":
            config = ((spec.get("sessionAffinityConfig") or {}).get("clientIP")) or {}
            affinity = _bounded(config.get("timeoutSeconds"), DEFAULT_AFFINITY_SECONDS)
        for port in spec.get("ports") or []:
            protocol = str(port.get("protocol") or "TCP")
            number = port.get("port")
            if protocol not in PROTOCOLS or not _valid_port(number):
                reason = f"port {port.get('name') or number!r} ({protocol}) cannot be served"
                skipped.append(Skipped(namespace, name, "Service", reason))
                continue
            port_name = str(port.get("name") or "")
            endpoints = _ready_endpoints(by_service.get((namespace, name), []), port_name, protocol)
            found.append(
                ServicePort(
                    namespace, name, port_name, cluster_ip, int(number), protocol,
                    tuple(endpoints), affinity,
                )
            )  # fmt: skip
    found.sort(key=lambda p: p.key)
    return found, skipped


def _ready_endpoints(slices: list[Json], port_name: str, protocol: str) -> list[Endpoint]:
    """Ready addresses times the slice port of that name and protocol (EndpointSlice semantics:
    `ready` unset means ready), deduplicated and sorted so the rules do not churn."""
    found: set[Endpoint] = set()
    for eps in slices:
        target = next(
            (
                p.get("port")
                for p in eps.get("ports") or []
                if str(p.get("name") or "") == port_name
                and str(p.get("protocol") or "TCP") == protocol
            ),
            None,
        )
        if not _valid_port(target):
            continue
        for endpoint in eps.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") is False:
                continue
            for address in endpoint.get("addresses") or []:
                if _ipv4(str(address)):
                    found.add(Endpoint(str(address), int(target)))  # type: ignore[arg-type]
    return sorted(found, key=lambda e: (ipaddress.ip_address(e.ip), e.port))


@functools.lru_cache(maxsize=16384)
def _ipv4(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).version == 4
    except ValueError:
        return False


@functools.lru_cache(maxsize=16384)
def _on_link(address: str, subnet: str) -> bool:
    return ipaddress.ip_address(address) in ipaddress.ip_network(subnet, strict=False)


@functools.lru_cache(maxsize=16384)
def _routed_range(cidr: str, subnet: str) -> str | None:
    """An IPv4 pod range apart from the pods' own network, normalised; else None."""
    try:
        parsed = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return None
    if parsed.version != 4 or parsed.overlaps(ipaddress.ip_network(subnet, strict=False)):
        return None
    return str(parsed)


def _valid_port(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536


def _bounded(value: object, default: int) -> int:
    """timeoutSeconds: the API allows 1..86400; anything else gets the default."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 86400:
        return value
    return default


def chain(kind: str, key: str) -> str:
    """kube-proxy's naming: a hash of what the chain is for, short enough for iptables (28)."""
    digest = hashlib.sha256(key.encode()).digest()
    return f"{PREFIX}-{kind}-{base64.b32encode(digest).decode()[:16]}"


@dataclass(frozen=True)
class RuleSet:
    """iptables-restore input for the nat and filter tables, and the chains it owns."""

    nat: str
    filter: str
    nat_chains: frozenset[str]
    filter_chains: frozenset[str]

    def text(self, stale_nat: Iterable[str] = (), stale_filter: Iterable[str] = ()) -> str:
        """The restore input; chains we made before and no longer need are flushed and deleted."""
        nat_stale = sorted(set(stale_nat) - self.nat_chains)
        filter_stale = sorted(set(stale_filter) - self.filter_chains)
        nat = self.nat.replace("COMMIT\n", _delete(nat_stale) + "COMMIT\n")
        filt = self.filter.replace("COMMIT\n", _delete(filter_stale) + "COMMIT\n")
        return nat + filt


def _delete(chains: list[str]) -> str:
    return "".join(f":{c} - [0:0]\n" for c in chains) + "".join(f"-X {c}\n" for c in chains)


def render(ports: Iterable[ServicePort]) -> RuleSet:
    nat_chains = [SERVICES_CHAIN]
    nat_rules: list[str] = []
    filter_rules: list[str] = []
    for sp in ports:
        proto = PROTOCOLS[sp.protocol]
        match = f"-d {sp.cluster_ip}/32 -p {proto} -m {proto} --dport {sp.port}"
        comment = f'-m comment --comment "{sp.key}"'
        if not sp.endpoints:  # kube-proxy's REJECT: refused at once instead of a hang
            reject = "-j REJECT --reject-with icmp-port-unreachable"
            filter_rules.append(f"-A {SERVICES_CHAIN} {match} {comment} {reject}")
            continue
        svc = chain("SVC", sp.key)
        nat_chains.append(svc)
        nat_rules.append(f"-A {SERVICES_CHAIN} {match} {comment} -j {svc}")
        seps = [chain("SEP", f"{sp.key}|{e.ip}:{e.port}") for e in sp.endpoints]
        nat_chains.extend(seps)
        if sp.affinity_seconds is not None:
            nat_rules.extend(
                f"-A {svc} -m recent --name {sep} --mask 255.255.255.255 --rsource --rcheck"
                f" --seconds {sp.affinity_seconds} --reap -j {sep}"
                for sep in seps
            )
        count = len(seps)
        for i, sep in enumerate(seps):
            if i < count - 1:
                nat_rules.append(
                    f"-A {svc} -m statistic --mode random --probability {1 / (count - i):.10f}"
                    f" -j {sep}"
                )
            else:
                nat_rules.append(f"-A {svc} -j {sep}")
        for sep, endpoint in zip(seps, sp.endpoints, strict=True):
            recent = ""
            if sp.affinity_seconds is not None:
                recent = f"-m recent --name {sep} --mask 255.255.255.255 --rsource --set "
            nat_rules.append(
                f"-A {sep} -p {proto} -m {proto} {recent}-j DNAT"
                f" --to-destination {endpoint.ip}:{endpoint.port}"
            )
    nat = "*nat\n" + "".join(f":{c} - [0:0]\n" for c in nat_chains)
    nat += "".join(f"{r}\n" for r in nat_rules) + "COMMIT\n"
    filt = f"*filter\n:{SERVICES_CHAIN} - [0:0]\n" + "".join(f"{r}\n" for r in filter_rules)
    filt += "COMMIT\n"
    return RuleSet(nat, filt, frozenset(nat_chains), frozenset({SERVICES_CHAIN}))


@dataclass(frozen=True)
class Route:
    """A pod range of another node, reached through that node's address (what kindnet does)."""

    cidr: str
    via: str


def pod_routes(
    nodes: Iterable[Json], own_node: str, subnet: str | None, gateway: str | None = None
) -> list[Route]:
    """Other nodes' IPv4 podCIDRs via their InternalIP, when that address is on the pods'
    own network (on-link); a range behind anything else is not ours to route. Nor is one
    behind the pods' `gateway`: their default route goes there already (every node of this
    machine's processes has it as its address: 5,000 of them were as many routes a pod)."""
    if not subnet:
        return []
    routes = []
    for node in nodes:  # every Node of the cluster, for each pass of each node: no parse twice
        meta, spec = node.get("metadata") or {}, node.get("spec") or {}
        if meta.get("name") == own_node:
            continue
        addresses = (node.get("status") or {}).get("addresses") or []
        via = next(
            (
                str(a.get("address"))
                for a in addresses
                if a.get("type") == "InternalIP" and _ipv4(str(a.get("address")))
            ),
            None,
        )
        if via is None or via == gateway or not _on_link(via, subnet):
            continue
        cidrs = spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else [])
        for cidr in cidrs:
            routed = _routed_range(str(cidr), subnet)
            if routed is not None:
                routes.append(Route(routed, via))
    return sorted(set(routes), key=lambda r: (r.cidr, r.via))
