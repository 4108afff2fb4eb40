"""TokenReview and SubjectAccessReview, as a real server with `Node,RBAC` answers them.

Who a token is: a kubeconfig token of this server (an admin in `system:masters`, or a node in
`system:nodes`), or a service account token this server issued (TokenRequest) and not expired.
What they may do: `system:masters` everything; a node what the Node authorizer grants (never
`nodes/proxy` and the like: a kubelet does not reach other kubelets); anyone else nothing, as
RBAC with no bindings (the fake keeps no Roles).
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from tests.fakeapi import authz

Obj = dict[str, Any]
ISSUER = "https://kubernetes.default.svc.cluster.local"


def user_info(tokens: dict[str, str], token: str) -> Obj | None:
    user = tokens.get(token)
    if user is not None:
        if user.startswith(authz.NODE_USER):
            return {"username": user, "groups": ["system:nodes", "system:authenticated"]}
        return {"username": user, "groups": ["system:masters", "system:authenticated"]}
    claims = _claims(token)
    if claims is None or claims.get("iss") != ISSUER or claims.get("exp", 0) < time.time():
        return None
    namespace = (claims.get("kubernetes.io") or {}).get("namespace", "")
    return {
        "username": claims.get("sub", ""),
        "uid": claims.get("jti", ""),
        "groups": [
            "system:serviceaccounts",
            f"system:serviceaccounts:{namespace}",
            "system:authenticated",
        ],
    }


def token_review(tokens: dict[str, str], body: Obj) -> Obj:
    token = str((body.get("spec") or {}).get("token") or "")
    user = user_info(tokens, token)
    status: Obj = {"user": {}}
    if user is not None:
        status = {"authenticated": True, "user": user}
    return {
        "kind": "TokenReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": body.get("spec") or {},
        "status": status,
    }


def access_review(body: Obj) -> Obj:
    spec = body.get("spec") or {}
    attrs = spec.get("resourceAttributes") or {}
    groups = spec.get("groups") or []
    user = str(spec.get("user") or "")
    allowed = "system:masters" in groups
    if not allowed and user.startswith(authz.NODE_USER) and "system:nodes" in groups:
        key = (str(attrs.get("resource", "")), str(attrs.get("subresource", "")))
        allowed = str(attrs.get("verb", "")) in authz.STATIC_RULES.get(key, frozenset())
    status: Obj = {"allowed": allowed}
    return {
        "kind": "SubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": spec,
        "status": status,
    }


def _claims(token: str) -> Obj | None:
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        claims = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    return claims if isinstance(claims, dict) else None
