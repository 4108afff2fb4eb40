"""The sample Deployment the demo applies: small pods that say where they run and stop at
once on SIGTERM, so scaling down shows a quick, clean deletion."""

from __future__ import annotations

from typing import Any

from kubelet_sim.kube.client import KubeConnection
from kubelet_sim.kube.rest import ApiError, request_json
from kubelet_sim.node.settings import VIRTUAL_NODE_TAINT

SAMPLE_NAME = "hello"
SAMPLE_NAMESPACE = "default"

_SCRIPT = (
    'echo "hello from $POD_NAME on node $NODE_NAME"; '
    'trap "echo bye; exit 0" TERM; '
    "while true; do sleep 3600 & wait $!; done"
)


def deployment(image: str, replicas: int) -> dict[str, Any]:
    spec = {
        # Virtual nodes carry this taint unless told otherwise (the demo's do not):
        # the toleration shows how a workload opts in.
        "tolerations": [{**VIRTUAL_NODE_TAINT, "operator": "Equal"}],
        "terminationGracePeriodSeconds": 5,
        "containers": [
            {
                "name": "hello",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", _SCRIPT],
                "env": [
                    _field_env("POD_NAME", "metadata.name"),
                    _field_env("NODE_NAME", "spec.nodeName"),
                ],
            }
        ],
    }
    return deployment_of(SAMPLE_NAME, replicas, spec)


def deployment_of(name: str, replicas: int, pod_spec: dict[str, Any]) -> dict[str, Any]:
    """A Deployment `name` of `replicas` pods of `pod_spec`, it and its pods labelled app=`name`
    (the scheduler-to-kubelet handoff test's too)."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def apply(kube: KubeConnection, image: str, replicas: int) -> None:
    """Create it, or set image and replicas on the one a kept demo already has."""
    path = f"/apis/apps/v1/namespaces/{SAMPLE_NAMESPACE}/deployments"
    body = deployment(image, replicas)
    try:
        request_json(kube.api, "POST", path, body=body)
    except ApiError as exc:
        if exc.status != 409:
            raise
        request_json(kube.api, "PUT", f"{path}/{SAMPLE_NAME}", body=_with_version(kube, body))


def _with_version(kube: KubeConnection, body: dict[str, Any]) -> dict[str, Any]:
    path = f"/apis/apps/v1/namespaces/{SAMPLE_NAMESPACE}/deployments/{SAMPLE_NAME}"
    current = request_json(kube.api, "GET", path)
    version = (current.get("metadata") or {}).get("resourceVersion")
    return {**body, "metadata": {**body["metadata"], "resourceVersion": version}}
