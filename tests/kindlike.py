"""A kind-shaped topology: the API server runs inside a container on a Docker network the test
makes, as kind's control-plane node does, and agents run on this host with
`--docker-network <that network>`.

- **Image**: `kubelet-sim.local/kindlike-control-plane:test`, made with `docker import` from a
  tiny root filesystem: the host's static busybox (a shell for the start script), the static
  kube-apiserver and kube-controller-manager of the tests' binaries, and etcd with the shared
  libraries `ldd` names (Debian's etcd links libc). Nothing is pulled. Built once per set of
  binaries (a label records which) and kept, like the tests' busybox and pause images.
- **In the container**: etcd on the container's loopback (tmpfs data), kube-apiserver on
  `<container IP>:6443` (`Node,RBAC`, NodeRestriction, ServiceAccount keys, the
  kubelet-client certificate, `--kubelet-preferred-address-types InternalIP,Hostname` as
  kind's), and kube-controller-manager with the controllers this topology needs:
  `serviceaccount` (pods are admitted only once `default` exists), `endpointslice` (Services
  with selectors get their slices, as on kind) and `root-ca-cert-publisher`.
- **Certificates**: `kubelet_sim.controlplane.pki.CertificateAuthority`; the serving
  certificate names the container's IP on the network, known only once the container runs,
  so the container waits for its start script, written after the certificates.
- **What kind has from the start**: a `kube-dns` Service at 10.96.0.10 in kube-system
  (selector `k8s-app: kube-dns`; a test puts a DNS server behind it), and kube-proxy's rights
  (`system:node-proxier`) bound to `system:nodes`, so each agent's service proxy runs with
  its node credentials.
- **Traffic**: the host talks to the container's IP on the test's network; the API server
  dials kubelets at their InternalIP, this host's gateway address on that network. The
  container's DNS forwards to its own loopback, so no name lookup leaves it.
- **Cleanup by label** (`io.kubelet-sim.kindlike=<token>` on the network and every container
  of the topology, `io.kubelet-sim.node=<name>` on the pods of the nodes it minted
  credentials for), then the files.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import secrets
import shlex
import shutil
import ssl
import subprocess
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from docker.errors import ImageNotFound, NotFound

from kubelet_sim import cri
from kubelet_sim.controlplane.binaries import BinariesMissing, find_binaries
from kubelet_sim.controlplane.cluster import write_kubeconfig
from kubelet_sim.controlplane.pki import CertificateAuthority, service_account_keys
from kubelet_sim.kube.rest import ApiError, exists, request_json
from kubelet_sim.runtime.local_images import PAUSE_IMAGE
from tests.agent_process import AgentProcess
from tests.cluster import ApiUnderTest, _Session, wait_for
from tests.docker_env import TEST_LABEL, DockerEnv
from tests.mounts import remove_root

IMAGE = "kubelet-sim.local/kindlike-control-plane:test"
RECIPE_LABEL = "io.kubelet-sim.recipe"
LABEL = "io.kubelet-sim.kindlike"
API_PORT = 6443
SERVICE_CIDR = "10.96.0.0/16"
API_SERVICE_IP = "10.96.0.1"
DNS_IP = "10.96.0.10"  # kind's kube-dns ClusterIP
CLUSTER_DOMAIN = "cluster.local"
ISSUER = "https://kubernetes.default.svc.cluster.local"
CONTROLLERS = "serviceaccount,endpointslice,root-ca-cert-publisher"
# The v1.34.9 build here is OpenShift's fork (../shared/kube-bin/README.md): its admission adds
# the ConfigMap `openshift-service-ca.crt` to every kube-api-access volume, and this controller
# of its controller-manager publishes it in each namespace (pods mount nothing without it).
SERVICE_CA_PUBLISHER = "service-ca-certificate-publisher-controller"
_RECIPE_VERSION = "1"
_BIN = "usr/local/bin"
# The container waits for its start script: the certificates need its IP first.
_WAIT_FOR_SCRIPT = "until [ -e /ks/start.sh ]; do sleep 0.05; done; exec sh /ks/start.sh"


class Unavailable(Exception):
    """What this topology needs is not on this machine; the message says what, in one line."""


@dataclass(frozen=True)
class Parts:
    apiserver: Path
    controller_manager: Path
    etcd: Path
    busybox: Path
    controllers: str = CONTROLLERS  # kube-controller-manager's --controllers


def find_parts() -> Parts:
    """The binaries the image is made of (the tests' own, as kubeenv finds them)."""
    try:
        found = find_binaries(require_controllers=False)
    except BinariesMissing as exc:
        raise Unavailable(str(exc).splitlines()[0]) from None
    if found.controller_manager is None:
        raise Unavailable("kube-controller-manager not found (it writes the EndpointSlices)")
    busybox = Path(shutil.which("busybox") or "/bin/busybox")
    if not busybox.is_file() or _shared_libraries(busybox):
        raise Unavailable("no static busybox (Debian's busybox-static) for the image's shell")
    controllers = CONTROLLERS
    kcm_help = subprocess.run(
        [str(found.controller_manager), "--help"], capture_output=True, text=True, check=False
    )
    if SERVICE_CA_PUBLISHER in kcm_help.stdout + kcm_help.stderr:
        controllers += "," + SERVICE_CA_PUBLISHER
    return Parts(found.apiserver, found.controller_manager, found.etcd, busybox, controllers)


def _shared_libraries(binary: Path) -> list[str]:
    """The absolute paths `ldd` names (the loader included); none for a static binary."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False)
    paths = []
    for line in out.stdout.splitlines():
        words = line.replace("=>", " ").split()
        paths += [w for w in words if w.startswith("/")]
    return sorted(set(paths))


def control_plane_image(docker_env: DockerEnv, parts: Parts) -> str:
    """The image, built unless one made from the same binaries is there."""
    files = {
        f"{_BIN}/kube-apiserver": parts.apiserver,
        f"{_BIN}/kube-controller-manager": parts.controller_manager,
        f"{_BIN}/etcd": parts.etcd,
        "bin/busybox": parts.busybox,
    }
    for binary in (parts.apiserver, parts.controller_manager, parts.etcd):
        for library in _shared_libraries(binary):  # Debian's etcd links libc
            files[library.lstrip("/")] = Path(os.path.realpath(library))
    recipe = hashlib.sha256(_RECIPE_VERSION.encode())
    for name, path in sorted(files.items()):
        st = path.stat()
        recipe.update(f"{name}={path}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    digest = recipe.hexdigest()[:16]
    with contextlib.suppress(ImageNotFound):
        labels = docker_env.client.images.get(IMAGE).attrs["Config"].get("Labels") or {}
        if labels.get(RECIPE_LABEL) == digest:
            return IMAGE
    with tempfile.TemporaryDirectory(prefix="ks-kindlike-image-") as scratch:
        tar_path = Path(scratch) / "rootfs.tar"
        _rootfs(tar_path, files, parts.busybox)
        repository, tag = IMAGE.rsplit(":", 1)
        docker_env.client.api.import_image_from_file(
            str(tar_path),
            repository=repository,
            tag=tag,
            changes=[
                f"ENV PATH=/{_BIN}:/bin:/sbin:/usr/bin:/usr/sbin",
                f"LABEL {RECIPE_LABEL}={digest}",
            ],
        )
    return IMAGE


def _rootfs(tar_path: Path, files: dict[str, Path], busybox: Path) -> None:
    applets = subprocess.run(
        [str(busybox), "--list-full"], capture_output=True, text=True, check=True
    ).stdout.split()
    with tarfile.open(tar_path, "w") as tar:
        leaves = {"etc", "tmp", "var/lib/etcd", "ks", "proc", "sys", "dev", "root"}
        leaves |= {str(Path(name).parent) for name in [*files, *applets]}
        directories = {str(p) for leaf in leaves for p in (Path(leaf), *Path(leaf).parents)}
        for directory in sorted(directories - {"."}):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
        for name, path in files.items():
            tar.add(str(path), arcname=name)
        for applet in applets:
            if applet != "bin/busybox":
                link = tarfile.TarInfo(applet)
                link.type, link.linkname, link.mode = tarfile.SYMTYPE, "/bin/busybox", 0o777
                tar.addfile(link)
        for name, text in {
            "etc/passwd": "root:x:0:0:root:/root:/bin/sh\n",
            "etc/group": "root:x:0:\n",
            "etc/nsswitch.conf": "hosts: files dns\n",
        }.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))


@dataclass
class KindLike:
    """One topology: its network, its control-plane container, its credentials."""

    docker: DockerEnv
    token: str
    workdir: Path
    network: Any = None  # docker.models.networks.Network
    container: Any = None  # the control plane's
    ip: str = ""  # the API server's, on the network
    gateway: str = ""  # this host's address on the network: the agents' InternalIP
    subnet: str = ""
    ca: CertificateAuthority | None = None
    admin_kubeconfig: Path = Path()
    api: Any = None  # an admin kubernetes.client.ApiClient
    core: Any = None  # its CoreV1Api
    node_names: list[str] = field(default_factory=list)

    @property
    def labels(self) -> dict[str, str]:
        """Labels for every container of the topology (a test's "kind node" too)."""
        return {LABEL: self.token, TEST_LABEL: f"kindlike-{self.token}"}

    @property
    def url(self) -> str:
        return f"https://{self.ip}:{API_PORT}"

    @property
    def pki(self) -> Path:
        return self.workdir / "pki"

    def _ca(self) -> CertificateAuthority:
        assert self.ca is not None, "start() first"
        return self.ca

    def kubeconfig(
        self, user: str, groups: tuple[str, ...], filename: str, server: str = ""
    ) -> Path:
        ca = self._ca()
        pair = ca.issue(filename, user, groups=groups)
        path = self.workdir / f"{filename}.kubeconfig"
        return write_kubeconfig(path, server or self.url, ca.pair.cert, pair, user)

    def node_kubeconfig(self, name: str) -> Path:
        """A kubelet's credentials for `name` (`system:node:<name>` in `system:nodes`); the
        node's pods are removed with the topology."""
        self.node_names.append(name)
        return self.kubeconfig(f"system:node:{name}", ("system:nodes",), f"node-{name}")

    def log(self, component: str) -> str:
        path = self.workdir / f"{component}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def cluster(self, namespace: str, node_name: str) -> ApiUnderTest:
        """What the tests' pod helpers take: the admin client, a namespace, a node."""
        return ApiUnderTest(
            api=self.api, core=self.core, coordination=None,
            kubeconfig=str(self.admin_kubeconfig), fake=None, namespace=namespace,
            node_name=node_name, session=_Session(str(self.admin_kubeconfig), None),
        )  # fmt: skip

    def namespace(self, prefix: str = "kl") -> str:
        """A new namespace, once its `default` ServiceAccount is there (pods need it)."""
        name = f"{prefix}-{secrets.token_hex(3)}"
        self.post("/api/v1/namespaces", {"metadata": {"name": name}})
        path = f"/api/v1/namespaces/{name}/serviceaccounts/default"
        wait_for(lambda: exists(self.api, path), 30, f"serviceaccount {name}/default")
        return name

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return request_json(self.api, "POST", path, body)

    # --- start and stop --------------------------------------------------------------------

    def start(self, parts: Parts, timeout: float = 90.0) -> KindLike:
        image = control_plane_image(self.docker, parts)
        self.network = self.docker.client.networks.create(
            f"ks-kind-{self.token}", driver="bridge", labels=self.labels
        )
        self.network.reload()
        (ipam,) = self.network.attrs["IPAM"]["Config"]
        self.subnet, self.gateway = ipam["Subnet"], ipam["Gateway"]
        self.container = self.docker.client.containers.run(
            image, ["sh", "-c", _WAIT_FOR_SCRIPT], detach=True,
            name=f"ks-kind-control-plane-{self.token}", hostname="kind-control-plane",
            network=self.network.name, labels=self.labels, dns=["127.0.0.1"],
            volumes={str(self.workdir): {"bind": "/ks", "mode": "rw"}},
            tmpfs={"/var/lib/etcd": "size=256m"},
        )  # fmt: skip
        self.container.reload()
        self.ip = self.container.attrs["NetworkSettings"]["Networks"][self.network.name][
            "IPAddress"
        ]
        self._certificates()
        script = self.workdir / "start.sh"
        script.with_suffix(".tmp").write_text(self._start_script(parts.controllers))
        script.with_suffix(".tmp").rename(script)  # whole, or not there
        self._wait_ready(timeout)
        from kubernetes import client, config

        self.api = config.new_client_from_config(config_file=str(self.admin_kubeconfig))  # type: ignore[no-untyped-call]
        self.core = client.CoreV1Api(self.api)
        path = "/api/v1/namespaces/default/serviceaccounts/default"
        self._wait(lambda: exists(self.api, path), timeout, "kube-controller-manager")
        self._bootstrap()
        return self

    def stop(self) -> None:
        """Everything the topology made, by label; then its files."""
        if self.api is not None:
            self.api.close()
        for name in self.node_names:
            self.docker.remove_labelled(f"{cri.LABEL_NODE}={name}")
        self.docker.remove_labelled(f"{LABEL}={self.token}")
        for network in self.docker.client.networks.list(filters={"label": f"{LABEL}={self.token}"}):
            with contextlib.suppress(NotFound):
                network.remove()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _certificates(self) -> None:
        self.ca = CertificateAuthority(self.pki)
        service_account_keys(self.pki)
        names = ("kubernetes", "kubernetes.default", "kubernetes.default.svc")
        self.ca.issue(
            "apiserver", "kube-apiserver", server=True,
            dns_names=("localhost", "kind-control-plane", *names, f"{names[-1]}.{CLUSTER_DOMAIN}"),
            ips=(self.ip, "127.0.0.1", API_SERVICE_IP),
        )  # fmt: skip
        # kubeadm's apiserver-kubelet-client: what kubelets see when the API server dials them
        self.ca.issue("kubelet-client", "kube-apiserver-kubelet-client", groups=("system:masters",))
        self.admin_kubeconfig = self.kubeconfig("kubernetes-admin", ("system:masters",), "admin")
        self.kubeconfig(
            "system:kube-controller-manager", ("system:masters",), "controller-manager",
            server=f"https://127.0.0.1:{API_PORT}",
        )  # fmt: skip

    def _start_script(self, controllers: str) -> str:
        etcd = [
            "etcd", "--data-dir", "/var/lib/etcd/data", "--unsafe-no-fsync",
            "--listen-client-urls", "http://127.0.0.1:2379",
            "--advertise-client-urls", "http://127.0.0.1:2379",
            "--listen-peer-urls", "http://127.0.0.1:2380",
            "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
            "--initial-cluster", "default=http://127.0.0.1:2380",
        ]  # fmt: skip
        apiserver = [
            "kube-apiserver",
            "--etcd-servers", "http://127.0.0.1:2379",
            "--bind-address", "0.0.0.0",
            "--secure-port", str(API_PORT),
            "--advertise-address", self.ip,
            "--cert-dir", "/tmp/apiserver-certs",
            "--tls-cert-file", "/ks/pki/apiserver.crt",
            "--tls-private-key-file", "/ks/pki/apiserver.key",
            "--client-ca-file", "/ks/pki/ca.crt",
            "--kubelet-client-certificate", "/ks/pki/kubelet-client.crt",
            "--kubelet-client-key", "/ks/pki/kubelet-client.key",
            "--kubelet-preferred-address-types", "InternalIP,Hostname",
            "--authorization-mode", "Node,RBAC",
            "--enable-admission-plugins", "NodeRestriction",
            "--service-account-key-file", "/ks/pki/sa.pub",
            "--service-account-signing-key-file", "/ks/pki/sa.key",
            "--service-account-issuer", ISSUER,
            "--service-cluster-ip-range", SERVICE_CIDR,
            "--allow-privileged=true",
        ]  # fmt: skip
        kubeconfig = "/ks/controller-manager.kubeconfig"
        controller_manager = [
            "kube-controller-manager",
            "--kubeconfig", kubeconfig,
            "--authentication-kubeconfig", kubeconfig,
            "--authorization-kubeconfig", kubeconfig,
            "--bind-address", "127.0.0.1",
            "--cert-dir", "/tmp/kcm-certs",
            "--leader-elect=false",
            "--use-service-account-credentials=false",
            "--service-account-private-key-file", "/ks/pki/sa.key",
            "--root-ca-file", "/ks/pki/ca.crt",
            "--controllers", controllers,
        ]  # fmt: skip
        # kube-controller-manager gives up if the API server is not up within 10 s: again.
        return "\n".join(
            [
                f"{shlex.join(etcd)} >/ks/etcd.log 2>&1 &",
                f"{shlex.join(apiserver)} >/ks/kube-apiserver.log 2>&1 &",
                f"(until {shlex.join(controller_manager)}; do sleep 1; done)"
                " >/ks/kube-controller-manager.log 2>&1 &",
                "wait",
                "",
            ]
        )

    def _wait_ready(self, timeout: float) -> None:
        """Until the API server answers /readyz with the serving certificate for its IP."""
        context = ssl.create_default_context(cafile=str(self._ca().pair.cert))

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", context=context, timeout=2) as r:
                    return bool(r.status == 200)
            except (urllib.error.URLError, OSError):
                return False

        self._wait(ready, timeout, "kube-apiserver")

    def _wait(self, predicate: Any, timeout: float, component: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            self.container.reload()
            if self.container.status != "running" or time.monotonic() > deadline:
                tail = "\n".join(self.log(component).splitlines()[-20:])
                why = f"container {self.container.status}"
                raise RuntimeError(f"{component} not ready after {timeout:.0f} s ({why}):\n{tail}")
            time.sleep(0.2)

    def _bootstrap(self) -> None:
        """What kind's cluster has before any node joins: kube-proxy's rights, kube-dns."""
        self.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "metadata": {"name": "kubelet-sim:node-proxier"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "system:node-proxier"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                          "name": "system:nodes"}],
        })  # fmt: skip
        self.post("/api/v1/namespaces/kube-system/services", {
            "metadata": {"name": "kube-dns", "labels": {"k8s-app": "kube-dns"}},
            "spec": {"clusterIP": DNS_IP, "selector": {"k8s-app": "kube-dns"}, "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
            ]},
        })  # fmt: skip


@pytest.fixture(scope="module")
def kindlike(docker_session: DockerEnv) -> Iterator[KindLike]:
    """The topology, shared by a module's tests; skipped (one line) without its binaries."""
    try:
        parts = find_parts()
    except Unavailable as exc:
        pytest.skip(f"no kind-shaped topology: {exc}")
    topology = KindLike(
        docker_session, secrets.token_hex(3), Path(tempfile.mkdtemp(prefix="ks-kindlike-"))
    )
    try:
        began = time.monotonic()
        topology.start(parts)
        print(f"kind-shaped control plane at {topology.url} in {time.monotonic() - began:.1f}s")
        yield topology
    finally:
        topology.stop()


@contextmanager
def agent(topology: KindLike, name: str, *extra: str) -> Iterator[AgentProcess]:
    """`kubelet-sim` as a process on this host, a kubelet's credentials, its pods on the
    topology's network (its InternalIP: this host's address there), cluster DNS as kind's."""
    root = Path(tempfile.mkdtemp(prefix="kubelet-sim-kindlike-root-"))
    args = [
        "--node-name", name,
        "--kubeconfig", str(topology.node_kubeconfig(name)),
        "--docker-network", topology.network.name,
        "--address", topology.gateway,  # the kubelet API, only where the API server dials
        "--cluster-dns", DNS_IP,
        "--cluster-domain", CLUSTER_DOMAIN,
        "--log-format", "json",
        "--root-dir", str(root),
    ]  # fmt: skip
    env = {"KUBELET_SIM_POD_INFRA_IMAGE": PAUSE_IMAGE, "KUBELET_SIM_PORT": "0"}
    process = AgentProcess([*args, *extra], env=env)
    try:
        yield process
    finally:
        if process.proc.poll() is None:
            process.terminate()
        remove_root(root)


def node_ready(topology: KindLike, name: str) -> bool:
    try:
        node = request_json(topology.api, "GET", f"/api/v1/nodes/{name}")
    except ApiError as exc:
        if exc.not_found:
            return False
        raise
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def kubectl(topology: KindLike) -> list[str]:
    """The command line of kubectl as the cluster's admin (skips without kubectl)."""
    found = shutil.which("kubectl")
    if found is None:
        pytest.skip("kubectl not on PATH")
    return [found, "--kubeconfig", str(topology.admin_kubeconfig), "--request-timeout", "30s"]


def dump(topology: KindLike, *agents: AgentProcess) -> str:
    """What to read when a test fails: the components' and agents' last lines."""
    parts = []
    for component in ("kube-apiserver", "kube-controller-manager"):
        tail = topology.log(component).splitlines()[-15:]
        parts.append(f"--- {component}\n" + "\n".join(tail))
    for process in agents:
        parts.append("--- agent\n" + "\n".join(json.dumps(r) for r in process.records()[-15:]))
    return "\n".join(parts)
