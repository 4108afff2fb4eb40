"""TLS bootstrap and client certificate rotation, as the kubelet does them.

With `--bootstrap-kubeconfig` (a bootstrap token, as `kubeadm join` and kind give), a node that
has no valid client certificate asks for one: an ECDSA P-256 key, a CertificateSigningRequest for
`system:node:<name>` in `system:nodes` with the signer
`kubernetes.io/kube-apiserver-client-kubelet` and the usages the kubelet asks for (kubelet's
certificate/kubelet.go, client-go's util/certificate). The controller-manager's csrapproving
controller approves it (the token's group may create `certificatesigningrequests/nodeclient`),
csrsigning signs it. The node keeps key and certificate in one PEM file 0600 under its
certificate directory (`kubelet-client-<time>.pem`, `kubelet-client-current.pem` naming the
newest, as client-go's FileStore), writes a kubeconfig that names that file, and uses it.
Before the certificate expires (at 70 to 84 % of its life, client-go's jittered deadline) it asks
for the next one with its own credentials (`selfnodeclient`).
"""

from __future__ import annotations

import base64
import json
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import urllib3
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kubelet_sim.formats import yaml_text
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.formats.pem import write_private
from kubelet_sim.formats.versions import server_minor
from kubelet_sim.kube.client import KubeConfigError, KubeConnection, connect, wait_for_api_server
from kubelet_sim.kube.rest import ApiError, request_json
from kubelet_sim.kube.schema import ServerSchema
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.backoff import Backoff
from kubelet_sim.loops.supervise import Supervisor

SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
# An ECDSA key: no key encipherment (client-go's DefaultKubeletClientGetUsages, v1.27 on). A
# kubelet before v1.27 asked for it with any key, and a server before v1.25 approves no kubelet
# client CSR without it: the node asks as the kubelet of its server's version would.
USAGES = ["digital signature", "client auth"]
USAGES_BEFORE_1_27 = ["digital signature", "key encipherment", "client auth"]
CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
CURRENT = "kubelet-client-current.pem"
PAIR_PREFIX = "kubelet-client"
BOOTSTRAP_PARALLEL = 16  # CSRs asked at once by a process of many nodes
BOOTSTRAP_TIMEOUT = 300.0  # for a CSR to be signed; then the node gives up with one line
# client-go: the deadline is 70 % of the certificate's life, plus up to 20 % of that.
ROTATE_AT, ROTATE_JITTER = 0.7, 0.2


class BootstrapError(Exception):
    """No client certificate could be had; the message says why in one line."""


@dataclass(frozen=True)
class ClientCertificate:
    path: Path  # certificate and key, one PEM file
    subject: str
    not_before: datetime
    not_after: datetime

    def rotation_deadline(self, rng: random.Random) -> datetime:
        life = (self.not_after - self.not_before).total_seconds()
        share = ROTATE_AT * (1 + ROTATE_JITTER * rng.random())
        return self.not_before + timedelta(seconds=life * share)


class CertificateStore:
    """One node's client certificates in its directory, the newest named by a symlink."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @property
    def current_path(self) -> Path:
        return self.directory / CURRENT

    def current(self, now: datetime) -> ClientCertificate | None:
        """The certificate in use if it is there and valid now."""
        try:
            data = self.current_path.read_bytes()
            cert = x509.load_pem_x509_certificate(data)
            serialization.load_pem_private_key(data, None)
        except (OSError, ValueError):
            return None
        found = _described(self.current_path, cert)
        return found if found.not_before <= now < found.not_after else None

    def update(self, cert_pem: bytes, key_pem: bytes, now: datetime) -> ClientCertificate:
        """Write the pair (0600), then point the current link at it."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        stamp = now.strftime("%Y-%m-%d-%H-%M-%S-%f")
        pair = write_private(self.directory / f"{PAIR_PREFIX}-{stamp}.pem", cert_pem + key_pem)
        link = self.directory / f".{CURRENT}.{stamp}"
        link.symlink_to(pair.name)
        link.replace(self.current_path)
        return _described(self.current_path, x509.load_pem_x509_certificate(cert_pem))


def _described(path: Path, cert: x509.Certificate) -> ClientCertificate:
    return ClientCertificate(
        path=path,
        subject=cert.subject.rfc4514_string(),
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
    )


def client_request(node_name: str) -> tuple[bytes, bytes]:
    """A new key (PEM) and the CSR (PEM) for `system:node:<name>` in `system:nodes`."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node_name}"),
        ]
    )
    csr = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    return key_pem, csr.public_bytes(serialization.Encoding.PEM)


def usages_for(minor: int | None) -> list[str]:
    """The usages the kubelet of this server's minor version asks for with an ECDSA key."""
    return USAGES_BEFORE_1_27 if minor is not None and minor < 27 else USAGES


def server_usages(conn: KubeConnection) -> list[str]:
    """`usages_for` the server's version (its schema read only if the version says nothing)."""
    schema = ServerSchema.of_server(conn.api)
    return usages_for(server_minor(schema.version(), schema.properties))


class ServerUsages:
    """`server_usages`, asked once for the process (the nodes share one server)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._usages: list[str] | None = None

    def __call__(self, conn: KubeConnection) -> list[str]:
        with self._lock:
            if self._usages is None:
                self._usages = server_usages(conn)
            return self._usages


def request_certificate(
    conn: KubeConnection,
    node_name: str,
    csr_pem: bytes,
    *,
    usages: Sequence[str],
    timeout: float,
    stop: threading.Event,
) -> bytes:
    """Create the CertificateSigningRequest and wait for its certificate (PEM)."""
    body: Json = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-"},
        "spec": {
            "request": base64.b64encode(csr_pem).decode(),
            "signerName": SIGNER,
            "usages": list(usages),
        },
    }
    try:
        created = request_json(conn.api, "POST", CSRS, body)
    except ApiError as exc:
        raise BootstrapError(f"node {node_name}: the CSR was refused: {exc}") from exc
    name = created["metadata"]["name"]
    deadline = time.monotonic() + timeout
    backoff = Backoff(initial=0.2, cap=2.0)
    while True:
        try:
            status = request_json(conn.api, "GET", f"{CSRS}/{name}").get("status") or {}
        except ApiError as exc:
            if not exc.retriable:
                raise BootstrapError(f"node {node_name}: CSR {name}: {exc}") from exc
            status = {}
        except urllib3.exceptions.HTTPError:  # the server away a moment: ask again
            status = {}
        for condition in status.get("conditions") or []:
            if condition.get("type") in ("Denied", "Failed"):
                why = condition.get("message") or condition.get("reason") or ""
                raise BootstrapError(f"node {node_name}: CSR {name} {condition['type']}: {why}")
        if status.get("certificate"):
            return base64.b64decode(status["certificate"])
        if time.monotonic() >= deadline:
            raise BootstrapError(
                f"node {node_name}: CSR {name} not signed within {timeout:g} s (is"
                " kube-controller-manager running with csrapproving and csrsigning?)"
            )
        if stop.wait(backoff.next_delay()):
            raise BootstrapError(f"node {node_name}: stopped while CSR {name} waited")


def node_kubeconfig(source: KubeConnection, cert_file: Path) -> bytes:
    """The kubelet's written kubeconfig: the bootstrap one's server and CA, the node's PEM."""
    cluster = source.cluster_entry()
    user = {"client-certificate": str(cert_file), "client-key": str(cert_file)}
    config: Json = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "default-cluster", "cluster": cluster}],
        "contexts": [
            {
                "name": "default-context",
                "context": {"cluster": "default-cluster", "user": "default-auth"},
            }
        ],
        "current-context": "default-context",
        "users": [{"name": "default-auth", "user": user}],
    }
    return json.dumps(config, indent=2).encode()  # JSON is YAML: any client reads it


@dataclass(frozen=True)
class Bootstrapped:
    """A node's credentials after bootstrap: the kubeconfig to connect with, its store."""

    node_name: str
    kubeconfig: Path
    store: CertificateStore


def _written_for(kubeconfig: Path, store: CertificateStore) -> bool:
    """Whether the file is a kubeconfig this bootstrap wrote (its user names the store's
    current pair): only such a one is replaced. A user's admin kubeconfig never is."""
    try:
        config = yaml_text.load(kubeconfig.read_bytes())
        users = config.get("users") or []
        user = (users[0].get("user") or {}) if len(users) == 1 else {}
    except (OSError, yaml_text.YAMLError, AttributeError, TypeError):
        return False
    return bool(user.get("client-certificate") == str(store.current_path))


def bootstrap(
    node_name: str,
    bootstrap_kubeconfig: str,
    cert_dir: Path,
    *,
    kubeconfig: Path | None = None,
    usages: Callable[[KubeConnection], Sequence[str]] = server_usages,
    timeout: float = BOOTSTRAP_TIMEOUT,
    stop: threading.Event,
) -> Bootstrapped:
    """The node's kubeconfig (`kubeconfig`, default `<cert_dir>/kubeconfig`): the one written
    before if its certificate is still valid, else a new certificate asked for with the
    bootstrap credentials."""
    cert_dir = cert_dir.absolute()  # the kubeconfig names its pair by this path, from anywhere
    store = CertificateStore(cert_dir)
    kubeconfig = kubeconfig or cert_dir / "kubeconfig"
    log = get_logger(__name__, node=node_name)
    now = datetime.now(UTC)
    current = store.current(now)
    if kubeconfig.is_file() and not _written_for(kubeconfig, store):
        raise BootstrapError(
            f"node {node_name}: {kubeconfig} exists and names no certificate of {store.directory}:"
            " not overwritten (give --kubeconfig a path of its own)"
        )
    if kubeconfig.is_file() and current is not None:
        log.info("client certificate kept", subject=current.subject, expires=current.not_after)
        return Bootstrapped(node_name, kubeconfig, store)
    try:
        source = connect(bootstrap_kubeconfig)
    except KubeConfigError as exc:
        raise BootstrapError(f"--bootstrap-kubeconfig: {exc}") from exc
    try:
        # As the kubelet: a server not up yet (a node booting with its cluster) is waited for.
        if wait_for_api_server(source, stop) is None:
            raise BootstrapError(f"node {node_name}: stopped before the API server answered")
        key_pem, csr_pem = client_request(node_name)
        cert_pem = request_certificate(
            source, node_name, csr_pem, usages=usages(source), timeout=timeout, stop=stop
        )
        issued = store.update(cert_pem, key_pem, datetime.now(UTC))
        write_private(kubeconfig, node_kubeconfig(source, store.current_path))
    except (ApiError, OSError, urllib3.exceptions.HTTPError) as exc:  # unreachable, unwritable
        raise BootstrapError(f"node {node_name}: no client certificate: {exc}") from exc
    finally:
        source.api.close()
    log.info("client certificate issued", subject=issued.subject, expires=issued.not_after)
    return Bootstrapped(node_name, kubeconfig, store)


def bootstrap_nodes(
    names: Sequence[str],
    bootstrap_kubeconfig: str,
    cert_dir: Path,
    *,
    kubeconfig: Path | None = None,
    stop: threading.Event,
) -> list[Bootstrapped]:
    """Each node its own certificate, in `<cert_dir>/<name>/` (several asked at once);
    `kubeconfig` is where a single node's is written (the kubelet's --kubeconfig)."""
    if kubeconfig is not None and len(names) != 1:
        raise BootstrapError("--kubeconfig with --bootstrap-kubeconfig names one node's file")

    usages = ServerUsages()

    def one(name: str) -> Bootstrapped:
        return bootstrap(
            name,
            bootstrap_kubeconfig,
            cert_dir / name,
            kubeconfig=kubeconfig,
            usages=usages,
            stop=stop,
        )

    with ThreadPoolExecutor(max_workers=min(BOOTSTRAP_PARALLEL, len(names)) or 1) as pool:
        return list(pool.map(one, names))


class CertificateRotation:
    """One thread for every bootstrapped node of the process: each node's next certificate
    before its deadline, asked for with the node's own credentials; `on_rotated(name)` then
    (the node's open connections carry the old certificate: close them)."""

    def __init__(
        self,
        nodes: Sequence[Bootstrapped],
        on_rotated: Callable[[str], None],
        *,
        supervisor: Supervisor,
        rng: random.Random | None = None,
    ) -> None:
        self.nodes = {n.node_name: n for n in nodes}
        self.on_rotated = on_rotated
        self.rng = rng or random.Random()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._supervisor = supervisor
        self._usages = ServerUsages()
        self._log = get_logger(__name__)

    def start(self) -> CertificateRotation:
        if self.nodes:
            self._thread = self._supervisor.thread("certificate-rotation", self._run, self._stop)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def deadline(self, node: Bootstrapped, now: datetime) -> datetime:
        """When to ask for the next certificate: at once if the current one is gone."""
        current = node.store.current(now)
        return now if current is None else current.rotation_deadline(self.rng)

    def _run(self) -> None:
        now = datetime.now(UTC)
        due = {name: self.deadline(node, now) for name, node in self.nodes.items()}
        backoffs = {name: Backoff(initial=5.0, cap=300.0) for name in self.nodes}
        while not self._stop.is_set():
            name = min(due, key=due.__getitem__)
            wait = (due[name] - datetime.now(UTC)).total_seconds()
            if wait > 0:
                self._stop.wait(min(wait, 60.0))  # and look again: the wall clock may jump
                continue
            try:
                self.rotate(self.nodes[name])
            except (BootstrapError, KubeConfigError, OSError) as exc:
                delay = backoffs[name].next_delay()
                self._log.warning("client certificate not rotated", node=name, error=str(exc))
                due[name] = datetime.now(UTC) + timedelta(seconds=delay)
                continue
            backoffs[name].reset()
            due[name] = self.deadline(self.nodes[name], datetime.now(UTC))

    def rotate(self, node: Bootstrapped) -> ClientCertificate:
        conn = connect(str(node.kubeconfig))
        try:
            key_pem, csr_pem = client_request(node.node_name)
            cert_pem = request_certificate(
                conn,
                node.node_name,
                csr_pem,
                usages=self._usages(conn),
                timeout=BOOTSTRAP_TIMEOUT,
                stop=self._stop,
            )
        finally:
            conn.api.close()
        issued = node.store.update(cert_pem, key_pem, datetime.now(UTC))
        self._log.info("client certificate rotated", node=node.node_name, expires=issued.not_after)
        self.on_rotated(node.node_name)
        return issued
