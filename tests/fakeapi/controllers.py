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
    spec.setdefault("audiences", ["https://kubernetes.default.svc.cluster.local"])
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
