"""Which ConfigMaps and Secrets a pod uses: the objects the node must watch for it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

CONFIG_MAP, SECRET = "ConfigMap", "Secret"


class ObjectRef(NamedTuple):
    kind: str
    namespace: str
    name: str


def referenced_objects(pod: dict[str, Any]) -> set[ObjectRef]:
    """Every ConfigMap and Secret named by env, envFrom, volumes, projections or pull secrets."""
    namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
    spec = pod.get("spec") or {}
    return {ObjectRef(kind, namespace, name) for kind, name in _names(spec) if name}


def _names(spec: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for secret in spec.get("imagePullSecrets") or []:
        yield SECRET, secret.get("name", "")
    for group in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(group) or []:
            yield from _container_names(container)
    for volume in spec.get("volumes") or []:
        yield from _volume_names(volume)


def _container_names(container: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for env in container.get("env") or []:
        source = env.get("valueFrom") or {}
        if "configMapKeyRef" in source:
            yield CONFIG_MAP, source["configMapKeyRef"].get("name", "")
        if "secretKeyRef" in source:
            yield SECRET, source["secretKeyRef"].get("name", "")
    for env_from in container.get("envFrom") or []:
        if "configMapRef" in env_from:
            yield CONFIG_MAP, env_from["configMapRef"].get("name", "")
        if "secretRef" in env_from:
            yield SECRET, env_from["secretRef"].get("name", "")


def _volume_names(volume: dict[str, Any]) -> Iterator[tuple[str, str]]:
    if "configMap" in volume:
        yield CONFIG_MAP, volume["configMap"].get("name", "")
    if "secret" in volume:
        yield SECRET, volume["secret"].get("secretName", "")
    for source in (volume.get("projected") or {}).get("sources") or []:
        if "configMap" in source:
            yield CONFIG_MAP, source["configMap"].get("name", "")
        if "secret" in source:
            yield SECRET, source["secret"].get("name", "")
