"""Service-link environment variables, as the kubelet computes them (getServiceEnvVarMap and
pkg/kubelet/envvars): the Services of the pod's namespace when enableServiceLinks is not false,
and the `kubernetes` Service of `default` always; each with a ClusterIP gives FOO_SERVICE_HOST,
FOO_SERVICE_PORT(_NAME) and the Docker-link FOO_PORT_... variables."""

from __future__ import annotations

from collections.abc import Iterable

from kubelet_sim.formats.jsontypes import Json

MASTER_NAMESPACE = "default"
MASTER_SERVICES = ("kubernetes",)
NOT_SYNCED = "services have not yet been read at least once, cannot construct envvars"


def service_env(services: Iterable[Json], namespace: str, enable_links: bool) -> dict[str, str]:
    chosen: dict[str, Json] = {}
    for service in services:
        meta, spec = service.get("metadata") or {}, service.get("spec") or {}
        if spec.get("clusterIP") in (None, "", "None"):
            continue
        name = str(meta.get("name", ""))
        if meta.get("namespace") == MASTER_NAMESPACE and name in MASTER_SERVICES:
            chosen.setdefault(name, service)
        elif meta.get("namespace") == namespace and enable_links:
            chosen[name] = service
    env: dict[str, str] = {}
    for name in sorted(chosen):  # Go's map order is random; a stable one here
        env.update(_variables(chosen[name]))
    return env


def _env_name(text: str) -> str:
    return text.replace("-", "_").upper()


def _variables(service: Json) -> dict[str, str]:
    """FromServices for one Service."""
    spec = service["spec"]
    ip, ports = str(spec["clusterIP"]), spec.get("ports") or []
    prefix = _env_name(str(service["metadata"]["name"]))
    out = {f"{prefix}_SERVICE_HOST": ip}
    if not ports:
        return out
    out[f"{prefix}_SERVICE_PORT"] = str(ports[0]["port"])
    for port in ports:
        if port.get("name"):
            out[f"{prefix}_SERVICE_PORT_{_env_name(str(port['name']))}"] = str(port["port"])
    host = f"[{ip}]" if ":" in ip else ip
    for index, port in enumerate(ports):
        protocol = str(port.get("protocol") or "TCP")
        address = f"{protocol.lower()}://{host}:{port['port']}"
        if index == 0:
            out[f"{prefix}_PORT"] = address  # Docker special-cases the first port
        each = f"{prefix}_PORT_{port['port']}_{protocol.upper()}"
        out[each] = address
        out[f"{each}_PROTO"] = protocol.lower()
        out[f"{each}_PORT"] = str(port["port"])
        out[f"{each}_ADDR"] = ip
    return out
