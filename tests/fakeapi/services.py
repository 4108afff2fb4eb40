"""Services as kube-apiserver stores them: the defaults of a ClusterIP Service, a ClusterIP from
--service-cluster-ip-range (the test control plane's 10.96.0.0/16), and the `kubernetes`
Service in `default` (its first address, port 443 named https)."""

from __future__ import annotations

import ipaddress
import threading
from typing import Any

from tests.fakeapi.errors import cause

Obj = dict[str, Any]
SERVICE_RANGE = ipaddress.ip_network("10.96.0.0/16")
MASTER_SERVICE: Obj = {
    "metadata": {"name": "kubernetes", "namespace": "default", "labels": {
        "component": "apiserver", "provider": "kubernetes"}},
    "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 6443}]},
}  # fmt: skip


class ClusterIPs:
    """The allocator: the range's first address is the master Service's, the rest in order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._used: set[str] = set()
        self._next = 2

    def take(self, wanted: str = "") -> str:
        with self._lock:
            if wanted:
                self._used.add(wanted)
                return wanted
            while str(SERVICE_RANGE[self._next]) in self._used:
                self._next += 1
            ip = str(SERVICE_RANGE[self._next])
            self._used.add(ip)
            return ip

    def release(self, ip: str) -> None:
        with self._lock:
            self._used.discard(ip)


def default_service(service: Obj, ips: ClusterIPs) -> list[dict[str, str]]:
    """Defaulting, validation of what the agent relies on, then a ClusterIP; the causes of a
    422 if the Service is invalid."""
    spec = service.setdefault("spec", {})
    kind = spec.setdefault("type", "ClusterIP")
    ports = spec.get("ports") or []
    if not ports and kind != "ExternalName" and spec.get("clusterIP") != "None":
        return [cause("FieldValueRequired", "spec.ports", "Required value")]
    for port in ports:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
    service.setdefault("status", {"loadBalancer": {}})
    if kind == "ExternalName":
        return []
    spec.setdefault("sessionAffinity", "None")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    wanted = spec.get("clusterIP") or ""
    if wanted == "None" and not spec.get("selector"):  # headless, no selector: both families
        spec.setdefault("ipFamilyPolicy", "RequireDualStack")
        spec.setdefault("ipFamilies", ["IPv4", "IPv6"])
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    if wanted != "None":
        spec["clusterIP"] = ips.take(wanted)
    spec["clusterIPs"] = [spec["clusterIP"]]
    return []
