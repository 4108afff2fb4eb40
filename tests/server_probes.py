"""What a cluster has, asked of the server itself rather than assumed from the tests' own
control plane: a scheduler, a workload controller, a CSR signer, the Node authorizer, the CA
that signs the API server's kubelet-client certificate.

Each probe makes an object that asks for the component's work without running anything (a pod
that fits no node, a workload that makes no pods, a CSR), waits up to `PROBE_DEADLINE` for the
component's answer and returns what the cluster lacks in one line, or None. The `ApiUnderTest`
methods (`tests/cluster.py`) ask each once per session and skip with that line.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import ssl
import tempfile
import threading
from pathlib import Path
from typing import Any

from kubelet_sim.kube.rest import ApiError, request_json
from tests.node_certs import NoNodeCredentials, mint_node_kubeconfig
from tests.polling import poll

PROBE_DEADLINE = 15.0  # a running scheduler or controller answers within a second
# Never pulled (imagePullPolicy Never), never started: nothing is scheduled to run it.
_CONTAINER = {"name": "c", "image": "kubelet-sim.local/probe", "imagePullPolicy": "Never"}
_NOWHERE = {"kubelet-sim.io/probe": "nowhere"}  # a node selector no node matches


def ask_service_account_admission(api: Any, namespace: str) -> str | None:
    """A pod created with dryRun=All in `namespace` (admitted, not stored): the API server's
    ServiceAccount admission plugin gives it the ServiceAccount `default` (and its
    kube-api-access volume); a server running without that plugin leaves it unset."""
    pod = {"metadata": {"name": "kubelet-sim-probe"}, "spec": {"containers": [_CONTAINER]}}
    made = request_json(api, "POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", pod)
    if (made.get("spec") or {}).get("serviceAccountName"):
        return None
    return (
        "needs the API server's ServiceAccount admission plugin: a pod created here got no "
        "ServiceAccount (kube-apiserver --disable-admission-plugins ServiceAccount?)"
    )


def ask_signer(api: Any, kubeconfig: str, node_name: str) -> str | None:
    """An approved CSR for a kubelet's client certificate, which a controller-manager signs."""
    with tempfile.TemporaryDirectory() as scratch:
        try:
            mint_node_kubeconfig(api, kubeconfig, node_name, Path(scratch) / "probe")
        except NoNodeCredentials as exc:
            return str(exc)
    return None


def check_node_authorizer(kubeconfig: str, node_name: str) -> None:
    """Node credentials are worth having only where the Node authorizer serves them: as that
    node, list the pods bound to it (what a kubelet does first); NoNodeCredentials if refused."""
    from kubernetes import config

    api = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    try:
        request_json(api, "GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node_name}&limit=1")
    except ApiError as exc:
        raise NoNodeCredentials(
            f"system:node:{node_name} may not list its pods (no Node authorizer?): {exc}"
        ) from None
    finally:
        api.close()


def ask_scheduler(api: Any, namespace: str, scale: float = 1.0) -> str | None:
    """A pod that fits no node: a scheduler marks it PodScheduled=False (Unschedulable)."""
    path = f"/api/v1/namespaces/{namespace}/pods/kubelet-sim-probe-scheduler"
    pod = {
        "metadata": {"name": path.rsplit("/", 1)[1]},
        "spec": {
            "nodeSelector": _NOWHERE,
            "automountServiceAccountToken": False,
            "containers": [_CONTAINER],
        },
    }
    request_json(api, "POST", path.rsplit("/", 1)[0], pod)

    def scheduled() -> bool:
        conditions = request_json(api, "GET", path).get("status", {}).get("conditions") or []
        return any(c.get("type") == "PodScheduled" for c in conditions)

    try:
        if poll(scheduled, PROBE_DEADLINE * scale):
            return None
    finally:
        request_json(api, "DELETE", path, {"gracePeriodSeconds": 0})
    return (
        f"the cluster runs no scheduler: a pending probe pod got no PodScheduled condition "
        f"within {PROBE_DEADLINE:.0f} s"
    )


# kind → (collection, spec fields beside selector and template, pod spec fields)
_WORKLOADS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "Deployment": ("deployments", {"replicas": 0}, {}),
    "DaemonSet": ("daemonsets", {}, {"nodeSelector": _NOWHERE}),
}


def ask_controller(api: Any, namespace: str, kind: str, scale: float = 1.0) -> str | None:
    """A `kind` object that makes no pods: its controller writes status.observedGeneration."""
    collection, spec, pod_spec = _WORKLOADS[kind]
    labels = {"kubelet-sim.io/probe": kind.lower()}
    body = {
        "metadata": {"name": f"kubelet-sim-probe-{kind.lower()}"},
        "spec": {
            **spec,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {**pod_spec, "containers": [_CONTAINER]},
            },
        },
    }
    path = f"/apis/apps/v1/namespaces/{namespace}/{collection}"
    request_json(api, "POST", path, body)
    path = f"{path}/{body['metadata']['name']}"

    def observed() -> bool:
        return bool(request_json(api, "GET", path).get("status", {}).get("observedGeneration"))

    try:
        if poll(observed, PROBE_DEADLINE * scale):
            return None
    finally:
        request_json(api, "DELETE", path, {"propagationPolicy": "Background"})
    return (
        f"the cluster runs no {kind} controller: a probe {kind} got no status within "
        f"{PROBE_DEADLINE:.0f} s"
    )


KUBELET_CLIENT_CA_ENV = "KUBELET_SIM_TEST_KUBELET_CLIENT_CA"


class _CertificateCatcher:
    """A TLS listener on loopback, served on a thread, that asks each client for a certificate
    and takes any (the kubelet's RequestClientCert, `kubelet_sim.server.tls`), keeps the
    first one shown and answers every request 200 `ok`."""

    OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"

    def __init__(self, context: ssl.SSLContext) -> None:
        self.context = context
        self.seen: list[bytes] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.5)
        self.port = int(self.listener.getsockname()[1])
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="kubelet-client probe")
        self.thread.daemon = True
        self.thread.start()

    def _serve(self) -> None:
        while not self.done.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with contextlib.suppress(OSError, ssl.SSLError):
                conn.settimeout(10)
                with self.context.wrap_socket(conn, server_side=True) as tls:
                    der = tls.getpeercert(binary_form=True)
                    if der:
                        self.seen.append(der)
                    tls.recv(65536)
                    tls.sendall(self.OK)

    def close(self) -> None:
        self.done.set()
        self.listener.close()
        self.thread.join(5)


def _catcher() -> _CertificateCatcher | str:
    from kubelet_sim.controlplane.pki import CertificateAuthority
    from kubelet_sim.server.tls import _request_client_certificate

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if not _request_client_certificate(context):
        return "this Python's ssl cannot take a client certificate without checking it"
    with tempfile.TemporaryDirectory() as scratch:
        ca = CertificateAuthority(Path(scratch), "kubelet-sim-probe")
        serving = ca.issue("serving", "kubelet-sim-probe", ips=("127.0.0.1",), server=True)
        context.load_cert_chain(serving.cert, serving.key)
    return _CertificateCatcher(context)


def kubelet_client_certificate(api: Any, scale: float = 1.0, namespace: str = "") -> bytes | str:
    """The certificate the API server shows a kubelet when it proxies (logs, exec, ...), DER;
    or why none was seen, in one line. As a node sees it: `_CertificateCatcher` as the kubelet
    endpoint of a Node `kubelet-sim-probe-*` (tainted: no scheduler places a pod there), and a
    request for the log of a pod bound to it in `namespace` (its container never runs), as
    `kubectl logs` asks. Not the node proxy (nodes/proxy): the API server refuses to proxy to a
    loopback address there ("address not allowed"), where the tests' nodes serve, though logs,
    exec and port-forward reach them; without `namespace` it is asked all the same."""
    catcher = _catcher()
    if isinstance(catcher, str):
        return catcher
    name = f"kubelet-sim-probe-{secrets.token_hex(3)}"
    addresses = [{"type": t, "address": "127.0.0.1"} for t in ("InternalIP", "Hostname")]
    endpoint = {"kubeletEndpoint": {"Port": catcher.port}}
    node = {
        "metadata": {"name": name, "labels": {"kubelet-sim.io/probe": "kubelet-client"}},
        "spec": {"taints": [{"key": "kubelet-sim.io/probe", "effect": "NoSchedule"}]},
        "status": {"addresses": addresses, "daemonEndpoints": endpoint},
    }
    pod = {
        "metadata": {"name": name},
        "spec": {
            "nodeName": name,
            "containers": [_CONTAINER],
            "tolerations": [{"operator": "Exists"}],
            "automountServiceAccountToken": False,
        },
    }
    pods = f"/api/v1/namespaces/{namespace}/pods"
    path = f"{pods}/{name}/log?container=c" if namespace else f"/api/v1/nodes/{name}/proxy/healthz"
    answer = ""
    try:
        request_json(api, "POST", "/api/v1/nodes", node)
        try:
            if namespace:
                request_json(api, "POST", pods, pod)
            proxied = api.param_serialize("GET", path, auth_settings=["BearerToken"])
            response = api.call_api(*proxied, _request_timeout=(5, 30 * scale))
            answer = f"{response.status} {response.read()[:200]!r}"
        except Exception as exc:  # the proxy's own failure, as the API server says it
            answer = f"{type(exc).__name__}: {exc}"
    finally:
        catcher.close()
        if namespace:
            with contextlib.suppress(ApiError):
                request_json(api, "DELETE", f"{pods}/{name}", {"gracePeriodSeconds": 0})
        with contextlib.suppress(ApiError):
            request_json(api, "DELETE", f"/api/v1/nodes/{name}")
    if catcher.seen:
        return catcher.seen[0]
    return (
        "the API server showed no client certificate to a kubelet with a self-signed serving "
        f"certificate on 127.0.0.1 (it answered {answer.splitlines()[0]})"
    )


def ask_kubelet_client_ca(
    api: Any, trusted: str | None, scale: float = 1.0, namespace: str = ""
) -> str | None:
    """Whether a node trusting `trusted` (a PEM file: the kubeconfig's CA and any given in
    KUBELET_SIM_TEST_KUBELET_CLIENT_CA; None: nothing) lets the API server in: what the
    cluster lacks for logs, exec, attach and port-forward through it, or None."""
    from cryptography import x509

    from kubelet_sim.server.x509auth import X509Authenticator

    der = kubelet_client_certificate(api, scale, namespace)
    if isinstance(der, str):
        return der
    # A kubeconfig without a CA (insecure-skip-tls-verify) gives none: then nothing verifies.
    roots = X509Authenticator.from_pem(Path(trusted).read_bytes()) if trusted else None
    verdict = (roots or X509Authenticator()).verify(der)
    if verdict.user is not None:
        return None
    cert = x509.load_der_x509_certificate(der)
    what = f"{cert.subject.rfc4514_string()}, issued by {cert.issuer.rfc4514_string()}"
    if trusted and os.environ.get(KUBELET_CLIENT_CA_ENV):
        return (
            f"{KUBELET_CLIENT_CA_ENV}={os.environ[KUBELET_CLIENT_CA_ENV]} does not verify the API "
            f"server's kubelet-client certificate ({what}): {verdict.error}"
        )
    return (
        f"needs {KUBELET_CLIENT_CA_ENV} (the CA nodes trust for the API server): its "
        f"kubelet-client certificate ({what}) is signed by no CA of the kubeconfig"
    )
