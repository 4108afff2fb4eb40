"""configmap-apps: a ConfigMap labelled `example.kubelet-sim.io/app: "true"` becomes a
Deployment of the same name (and, given a port, a Service), owned by the ConfigMap, so that
deleting the ConfigMap deletes them (the API server's garbage collector does it).

The ConfigMap's data (strings, as ConfigMap data always is):

    image     the container image (required)
    replicas  how many pods (default "1")
    port      the TCP port the container serves: a readiness probe and a Service on it
    command   the container's command, split as a shell would split it (default: the image's)

Run it against a kubeconfig (`python controller.py`: its current context) or in a pod
(in-cluster config; manifests/controller.yaml). It watches one namespace: $WATCH_NAMESPACE,
else "default".
"""

from __future__ import annotations

import logging
import os
import shlex
import threading
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

APP_LABEL = "example.kubelet-sim.io/app"
SELECTOR = f"{APP_LABEL}=true"
FIELD_MANAGER = "configmap-apps"
NAME_LABEL = "app.kubernetes.io/name"  # the pods' label: the Deployment's and Service's selector
APPLY = "application/apply-patch+yaml"  # server-side apply: create or update in one request

log = logging.getLogger("configmap-apps")


class InvalidApp(ValueError):
    """The ConfigMap's data does not describe an app; the message says why."""


def desired_objects(
    name: str, namespace: str, uid: str, data: dict[str, str]
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The Deployment, and the Service (None without a port), that a ConfigMap asks for."""
    image = data.get("image", "").strip()
    if not image:
        raise InvalidApp("no image")
    try:
        replicas = int(data.get("replicas", "1"))
        port = int(data["port"]) if data.get("port") else None
    except ValueError as exc:
        raise InvalidApp(f"replicas and port must be integers: {exc}") from None
    container: dict[str, Any] = {"name": "app", "image": image, "imagePullPolicy": "IfNotPresent"}
    if data.get("command"):
        container["command"] = shlex.split(data["command"])
    if port is not None:
        container["ports"] = [{"containerPort": port, "protocol": "TCP"}]
        container["readinessProbe"] = {"tcpSocket": {"port": port}, "periodSeconds": 2}
    labels = {NAME_LABEL: name, "app.kubernetes.io/managed-by": FIELD_MANAGER}
    metadata = {
        "name": name,
        "namespace": namespace,
        "labels": labels,
        # The ConfigMap owns what it made: deleting it deletes them.
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid, "controller": True}
        ],
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {NAME_LABEL: name}},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }
    if port is None:
        return deployment, None
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "selector": {NAME_LABEL: name},
            "ports": [{"port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }
    return deployment, service


def reconcile(api: client.ApiClient, configmap: client.V1ConfigMap) -> None:
    """Make the ConfigMap's Deployment and Service what it asks for (idempotent)."""
    meta = configmap.metadata
    name, namespace = meta.name, meta.namespace
    try:
        deployment, service = desired_objects(name, namespace, meta.uid, configmap.data or {})
    except InvalidApp as exc:
        log.warning("skipped %s/%s: %s", namespace, name, exc)
        return
    client.AppsV1Api(api).patch_namespaced_deployment(
        name, namespace, deployment, field_manager=FIELD_MANAGER, force=True, _content_type=APPLY
    )
    core = client.CoreV1Api(api)
    if service is not None:
        core.patch_namespaced_service(
            name, namespace, service, field_manager=FIELD_MANAGER, force=True, _content_type=APPLY
        )
    else:
        _delete_own_service(core, name, namespace, meta.uid)
    log.info(
        "reconciled %s/%s (resourceVersion %s): %s replicas",
        namespace,
        name,
        meta.resource_version,
        deployment["spec"]["replicas"],
    )


def _delete_own_service(core: client.CoreV1Api, name: str, namespace: str, uid: str) -> None:
    """The port went away: its Service goes too, if this ConfigMap made it."""
    try:
        existing = core.read_namespaced_service(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return
        raise
    if any(ref.uid == uid for ref in existing.metadata.owner_references or []):
        core.delete_namespaced_service(name, namespace)


def run(
    api: client.ApiClient, namespace: str, stop: threading.Event, resync_seconds: int = 60
) -> None:
    """List the labelled ConfigMaps and reconcile each, then watch for changes; every
    `resync_seconds` (and after any error) list again, so that nothing missed stays missed.
    Returns once `stop` is set (within `resync_seconds`)."""
    core = client.CoreV1Api(api)
    while not stop.is_set():
        try:
            listed = core.list_namespaced_config_map(namespace, label_selector=SELECTOR)
            for configmap in listed.items:
                _reconcile_logged(api, configmap)
            events = watch.Watch().stream(
                core.list_namespaced_config_map,
                namespace,
                label_selector=SELECTOR,
                resource_version=listed.metadata.resource_version,
                timeout_seconds=resync_seconds,
            )
            for event in events:
                if stop.is_set():
                    break
                # DELETED needs nothing: the garbage collector removes what the ConfigMap owned.
                if event["type"] in ("ADDED", "MODIFIED"):
                    _reconcile_logged(api, event["object"])
        except Exception:  # the API server away, an expired watch (410): start over
            log.exception("watching ConfigMaps in %s failed; listing again in 2 s", namespace)
            stop.wait(2)


def _reconcile_logged(api: client.ApiClient, configmap: client.V1ConfigMap) -> None:
    try:
        reconcile(api, configmap)
    except ApiException as exc:  # the next event or resync tries again
        meta = configmap.metadata
        log.error("reconciling %s/%s: %s %s", meta.namespace, meta.name, exc.status, exc.reason)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        config.load_incluster_config()
        credentials = "in-cluster config (the pod's ServiceAccount)"
    except config.ConfigException:
        config.load_kube_config()  # $KUBECONFIG or ~/.kube/config
        credentials = "kubeconfig"
    namespace = os.environ.get("WATCH_NAMESPACE") or "default"
    log.info("watching ConfigMaps labelled %s in %s, with %s", SELECTOR, namespace, credentials)
    run(client.ApiClient(), namespace, threading.Event())


if __name__ == "__main__":
    main()
