"""What a real cluster's controllers add to every namespace, done at once instead of soon.

The ServiceAccount controller creates the `default` ServiceAccount and the root CA publisher
the `kube-root-ca.crt` ConfigMap; pods need both (admission and the kube-api-access volume).
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from typing import Any

Obj = dict[str, Any]

# Not a real certificate: nothing here verifies TLS, but the ConfigMap has the real shape.
FAKE_CA = "-----BEGIN CERTIFICATE-----\nZmFrZSBjbHVzdGVyIENB\n-----END CERTIFICATE-----\n"


def namespace_objects(namespace: str) -> list[tuple[str, Obj]]:
    """(resource, object) pairs to create in a new namespace."""
    return [
        ("serviceaccounts", {"metadata": {"name": "default", "namespace": namespace}}),
        (
            "configmaps",
            {
                "metadata": {
                    "name": "kube-root-ca.crt",
                    "namespace": namespace,
                    "annotations": {
                        "kubernetes.io/description": "Contains a CA bundle that can be used to"
                        " verify the kube-apiserver when using internal endpoints such as the"
                        " internal service IP or kubernetes.default.svc. No other usage is"
                        " guaranteed across distributions of Kubernetes clusters."
                    },
                },
                "data": {"ca.crt": FAKE_CA},
            },
        ),
    ]


def issue_token(namespace: str, service_account: str, request: Obj) -> Obj:
    """A TokenRequest answer: a JWT-shaped token bound to the pod the request names."""
    spec = dict(request.get("spec") or {})
    spec.setdefault("expirationSeconds", 3600)
    if not spec.get("audiences"):  # the API server's own audience, as kind configures it
        spec["audiences"] = ["https://kubernetes.default.svc.cluster.local"]
    now = int(time.time())
    expires = now + int(spec["expirationSeconds"])
    claims = {
        "aud": spec["audiences"],
        "exp": expires,
        "iat": now,
        "iss": "https://kubernetes.default.svc.cluster.local",
        "jti": str(uuid.uuid4()),
        "sub": f"system:serviceaccount:{namespace}:{service_account}",
        "kubernetes.io": {
            "namespace": namespace,
            "serviceaccount": {"name": service_account},
            "pod": spec.get("boundObjectRef"),
        },
    }
    token = (
        ".".join(
            base64.urlsafe_b64encode(json.dumps(part).encode()).decode().rstrip("=")
            for part in ({"alg": "RS256", "kid": "fake"}, claims)
        )
        + ".c2lnbmF0dXJl"
    )
    return {
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {
            "name": service_account,
            "namespace": namespace,
            "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        },
        "spec": spec,
        "status": {
            "token": token,
            "expirationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires)),
        },
    }


NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}


def taint_new_node(node: Obj) -> None:
    """TaintNodesByCondition admission: every new Node starts not-ready for the scheduler."""
    taints = node.setdefault("spec", {}).setdefault("taints", [])
    if not any(t.get("key") == NOT_READY_TAINT["key"] for t in taints):
        taints.append(dict(NOT_READY_TAINT))


def sync_not_ready_taint(node: Obj) -> None:
    """The node lifecycle controller's NoSchedule tainting pass, on each status write: the
    not-ready taint goes once Ready is True and comes back when it is not."""
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c.get("status") for c in conditions if c.get("type") == "Ready"), None)
    if ready is None:
        return
    spec = node.setdefault("spec", {})
    taints = list(spec.get("taints") or [])
    tainted = any(t.get("key") == NOT_READY_TAINT["key"] for t in taints)
    if ready == "True":
        taints = [t for t in taints if t.get("key") != NOT_READY_TAINT["key"]]
    elif not tainted:
        added = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        taints.append({**NOT_READY_TAINT, "timeAdded": added})
    if taints:
        spec["taints"] = taints
    else:
        spec.pop("taints", None)
