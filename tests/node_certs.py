"""Node credentials on a cluster of the user's, made as deploy/node-credentials.sh makes them:
a CertificateSigningRequest for `system:node:<name>` (signer
`kubernetes.io/kube-apiserver-client-kubelet`), approved with the session's admin rights and
signed by the cluster's controller-manager. A kubelet after TLS bootstrap holds the same.

Whether the cluster can do it is asked once per session: the first request gets a deadline, and
a cluster that signs nothing in time (no CSR signer), refuses the request, or does not let the
signed identity list pods (no Node authorizer) is remembered with that one-line reason.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kubelet_sim.kube.rest import ApiError, request_json
from tests.polling import poll

SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
SIGN_DEADLINE = 15.0  # the controller-manager signs an approved request within a second


class NoNodeCredentials(Exception):
    """The cluster cannot give this session node credentials; the message says why."""


def mint_node_kubeconfig(api: Any, admin_kubeconfig: str, node_name: str, dest: Path) -> Path:
    """A kubeconfig at `dest` for the cluster of `admin_kubeconfig` as `system:node:<name>`."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node_name}"),
        ]
    )
    csr = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    name = f"kubelet-sim-test-{node_name}-{secrets.token_hex(3)}"
    body = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": base64.b64encode(csr.public_bytes(serialization.Encoding.PEM)).decode(),
            "signerName": SIGNER,
            "usages": ["digital signature", "key encipherment", "client auth"],
        },
    }
    try:
        request_json(api, "POST", CSRS, body)
    except ApiError as exc:
        raise NoNodeCredentials(f"the cluster refused a CSR for {SIGNER}: {exc}") from None
    try:
        certificate = _approve_and_wait(api, name)
    finally:
        with contextlib.suppress(ApiError):
            request_json(api, "DELETE", f"{CSRS}/{name}")
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    config = _kubeconfig_like(admin_kubeconfig, node_name, certificate, key_pem)
    dest.write_text(json.dumps(config, indent=2))
    dest.chmod(0o600)
    return dest


def _approve_and_wait(api: Any, name: str) -> str:
    approved = {
        "type": "Approved",
        "status": "True",
        "reason": "KubeletSimTest",
        "message": "approved by the kubelet-sim test suite",
    }
    for attempt in range(5):  # a controller may write the new request's status meanwhile
        csr = request_json(api, "GET", f"{CSRS}/{name}")
        csr["status"] = {**(csr.get("status") or {}), "conditions": [approved]}
        try:
            request_json(api, "PUT", f"{CSRS}/{name}/approval", csr)
            break
        except ApiError as exc:
            if exc.conflict and attempt < 4:
                continue
            raise NoNodeCredentials(
                f"the session may not approve a CSR for {SIGNER}: {exc}"
            ) from None

    def signed() -> str | None:
        status = request_json(api, "GET", f"{CSRS}/{name}").get("status") or {}
        failed = [c for c in status.get("conditions") or [] if c.get("type") == "Failed"]
        if failed and not status.get("certificate"):
            why = failed[0].get("message") or failed[0].get("reason")
            raise NoNodeCredentials(f"the cluster did not sign a CSR for {SIGNER}: {why}")
        return status.get("certificate") or None

    certificate = poll(signed, SIGN_DEADLINE)
    if certificate is None:
        raise NoNodeCredentials(
            f"the cluster signs no CSR for {SIGNER} (an approved one was not signed within "
            f"{SIGN_DEADLINE:.0f} s: no controller-manager signer)"
        )
    return str(certificate)


def kubeconfig_cluster(kubeconfig: str) -> dict[str, Any]:
    """The current context's cluster entry (server, CA) of `kubeconfig`, its CA file inlined
    as certificate-authority-data."""
    config = yaml.safe_load(Path(kubeconfig).read_text())
    contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
    current = contexts.get(config.get("current-context"), {})
    clusters = {c["name"]: c["cluster"] for c in config.get("clusters") or []}
    cluster = dict(clusters.get(current.get("cluster")) or next(iter(clusters.values())))
    if "certificate-authority" in cluster:  # a relative path means relative to the kubeconfig
        ca = Path(kubeconfig).parent / cluster.pop("certificate-authority")
        cluster["certificate-authority-data"] = base64.b64encode(ca.read_bytes()).decode()
    return cluster


def _kubeconfig_like(admin_kubeconfig: str, node_name: str, cert_b64: str, key: bytes) -> Any:
    """The admin kubeconfig's cluster (server, CA) with the node's client certificate."""
    cluster = kubeconfig_cluster(admin_kubeconfig)
    user = f"system:node:{node_name}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": cluster}],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": cert_b64,
                    "client-key-data": base64.b64encode(key).decode(),
                },
            }
        ],
        "contexts": [{"name": node_name, "context": {"cluster": "cluster", "user": user}}],
        "current-context": node_name,
    }


def remove_joined(api: Any, names: list[str], token: str) -> None:
    """What nodes joining with a bootstrap token leave in the cluster: their Nodes, the CSRs of
    the token and of the nodes, and the token's Secret."""
    token_id = token.partition(".")[0]
    for name in names:
        with contextlib.suppress(ApiError):
            request_json(api, "DELETE", f"/api/v1/nodes/{name}")
    users = {f"system:bootstrap:{token_id}", *(f"system:node:{n}" for n in names)}
    with contextlib.suppress(ApiError):
        for csr in request_json(api, "GET", CSRS).get("items") or []:
            if csr["spec"].get("username") in users:
                with contextlib.suppress(ApiError):
                    request_json(api, "DELETE", f"{CSRS}/{csr['metadata']['name']}")
    with contextlib.suppress(ApiError):
        request_json(
            api, "DELETE", f"/api/v1/namespaces/kube-system/secrets/bootstrap-token-{token_id}"
        )
