"""Naming a pod and its containers in events and logs, as the kubelet does."""

from __future__ import annotations

from kubelet_sim.kube.events import EventRef
from kubelet_sim.pod.spec import ContainerView, PodView


def container_spec(view: PodView, name: str) -> ContainerView | None:
    for container in view.all_containers:
        if container.name == name:
            return container
    return None


def pod_name(view: PodView) -> str:
    return f"{view.namespace}/{view.name}"


def event_ref(view: PodView, container: ContainerView | None = None) -> EventRef:
    """The pod, or one of its containers by field path (`spec.containers{c}`, as the kubelet's
    GenerateContainerRef: app containers first, then init, then ephemeral ones)."""
    field_path = ""
    if container is not None:
        field_path = f"spec.{view.kind_of(container)}{{{container.name}}}"
    rv = str((view.raw.get("metadata") or {}).get("resourceVersion") or "")
    return EventRef(view.namespace, view.name, view.uid, rv, field_path)
