"""A bootstrap token to join nodes with, as `kubeadm token create` and kubeadm's init make:
the token's Secret in kube-system, the ClusterRoleBindings that let its holders ask for a node
client certificate and have it approved (and nodes renew their own), and a bootstrap kubeconfig
for `kubelet-sim --bootstrap-kubeconfig`.
"""

from __future__ import annotations

import json
import secrets
import string
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.formats.pem import write_private
from kubelet_sim.kube.client import KubeConnection
from kubelet_sim.kube.rest import ApiError, request_json

ALPHABET = string.ascii_lowercase + string.digits  # [a-z0-9]{6}.[a-z0-9]{16}
GROUP = "system:bootstrappers:kubelet-sim"  # beside system:bootstrappers, as kubeadm's own
BINDINGS = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
# kubeadm's three: create CSRs, have a bootstrap CSR approved, have a node's renewal approved.
ROLES = (
    ("kubelet-sim:kubelet-bootstrap", "system:node-bootstrapper", "system:bootstrappers"),
    (
        "kubelet-sim:node-autoapprove-bootstrap",
        "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        "system:bootstrappers",
    ),
    (
        "kubelet-sim:node-autoapprove-certificate-rotation",
        "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
        "system:nodes",
    ),
)


def _random(n: int) -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(n))


def token_secret(token_id: str, token_secret_value: str, ttl: timedelta) -> Json:
    expiration = (datetime.now(UTC) + ttl).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"bootstrap-token-{token_id}", "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "token-id": token_id,
            "token-secret": token_secret_value,
            "expiration": expiration,
            "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true",
            "auth-extra-groups": GROUP,
            "description": "kubelet-sim: nodes join with it",
        },
    }


def binding(name: str, role: str, group: str) -> Json:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
    }


def create_join_token(
    admin: KubeConnection, kubeconfig: Path, ttl: timedelta = timedelta(hours=24)
) -> str:
    """A new token (its Secret), the bindings if missing, and `kubeconfig` (0600) that holds
    the token with the admin connection's server and CA. Returns the token."""
    token_id, token_secret_value = _random(6), _random(16)
    request_json(
        admin.api,
        "POST",
        "/api/v1/namespaces/kube-system/secrets",
        token_secret(token_id, token_secret_value, ttl),
    )
    for name, role, group in ROLES:
        try:
            request_json(admin.api, "POST", BINDINGS, binding(name, role, group))
        except ApiError as exc:
            if not exc.already_exists:
                raise
    token = f"{token_id}.{token_secret_value}"
    write_private(kubeconfig, bootstrap_kubeconfig(admin, token))
    return token


def bootstrap_kubeconfig(admin: KubeConnection, token: str) -> bytes:
    cluster = admin.cluster_entry()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubernetes", "cluster": cluster}],
        "contexts": [
            {"name": "tls-bootstrap", "context": {"cluster": "kubernetes", "user": "bootstrap"}}
        ],
        "current-context": "tls-bootstrap",
        "users": [{"name": "bootstrap", "user": {"token": token}}],
    }
    return json.dumps(config, indent=2).encode()
