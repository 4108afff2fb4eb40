"""The suite's one pod builder: a Pod manifest as a user writes it, each test adding only what
it is about. The API-side helpers (tests/pods.py `make_pod`, tests/cluster.py `pod_body`) and the
unit layer's (tests/unit/harness.py `pod_body`, which adds what the API server would) build on it.
"""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]

# kubelet-sim registers with this NoSchedule taint unless told otherwise: pods meant for the
# virtual node tolerate it, as the docs' examples do.
TOLERATE_VIRTUAL = [
    {"key": "kubelet-sim.io/virtual", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
]


def pod_manifest(
    name: str,
    containers: list[Json],
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> Json:
    """`kind: Pod` named `name` with these containers; keyword arguments go into `spec` as they
    are (None values too: a test may send a field as null)."""
    meta: Json = {"name": name}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": containers, **spec},
    }


def to_schedule_on(node: str) -> Json:
    """The spec fields of a pod for the scheduler to place on `node` (or nowhere, if there is
    no such node): no spec.nodeName, a nodeSelector naming it, the virtual node's taint
    tolerated; no service account token and 5 s of grace, as the tests' other pods."""
    return {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": TOLERATE_VIRTUAL,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 5,
    }


def served(body: Json, *, namespace: str = "ns", uid: str = "u1", **metadata: Any) -> Json:
    """`body` as the API server hands it to a node: in a namespace, with a uid (and any other
    metadata given: resourceVersion, generation, ...); a `status` keyword becomes its status."""
    status = metadata.pop("status", None)
    body["metadata"].update(namespace=namespace, uid=uid, **metadata)
    if status is not None:
        body["status"] = status
    return body
