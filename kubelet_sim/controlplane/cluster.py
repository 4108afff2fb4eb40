"""A real control plane on loopback: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler as child processes, the way controller-runtime's envtest starts one.

The demo and the tests start it through this one class. Authentication is by client
certificate (one CA signs every certificate), authorization `Node,RBAC` with
`NodeRestriction`, so a node given `node_credentials(name)` is treated exactly as a kubelet
after TLS bootstrap; ServiceAccount tokens are signed with a key made here and the
controller-manager signs CSRs with the CA.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubelet_sim.controlplane.binaries import Binaries
from kubelet_sim.controlplane.pki import CertificateAuthority, CertPair, service_account_keys
from kubelet_sim.controlplane.relay import PODS_BOUNDS, ApiRelay, listen_in_netns
from kubelet_sim.formats.pem import write_private
from kubelet_sim.linux.namespaces import Namespace

SERVICE_CIDR = "10.96.0.0/16"
API_SERVICE_IP = "10.96.0.1"
ISSUER = "https://kubernetes.default.svc.cluster.local"  # kind's: the token audience
STOP_GRACE = 2.0  # a throw-away control plane needs no 10 s API-server drain
# kube-apiserver's own default for --kubelet-preferred-address-types (what None gives).
UPSTREAM_ADDRESS_TYPES = "Hostname,InternalDNS,InternalIP,ExternalDNS,ExternalIP"

# Linux's parent-death signal (util-linux setpriv): a killed parent leaves no control plane
# behind. KILL, since a kube-scheduler given TERM without its API server was seen to hang.
# Set through a wrapper, not preexec_fn, which is unsafe in a process with threads.
_SETPRIV = shutil.which("setpriv")
_DIE_WITH_PARENT = [_SETPRIV, "--pdeathsig", "KILL", "--"] if _SETPRIV else []


def spawn_child(
    args: list[str], log: Path, cwd: Path, *, append: bool = False
) -> subprocess.Popen[bytes]:
    """A child process that dies with us (the parent-death signal), its output in `log`, in a
    session of its own: a Ctrl-C at the terminal reaches us, not it."""
    with log.open("ab" if append else "wb") as out:
        return subprocess.Popen(
            [*_DIE_WITH_PARENT, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            start_new_session=True,
        )


def stop_child(
    proc: subprocess.Popen[Any],
    grace: float,
    *,
    sig: signal.Signals = signal.SIGTERM,
    kill_wait: float = 10,
) -> None:
    """`sig` to a child still running, then SIGKILL if it has not ended `grace` seconds later."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(kill_wait)


@dataclass(frozen=True)
class PodEndpoint:
    """Where pods reach the API server: `ip` on the pods' network, the address of a container
    made for it; the API server advertises it (the `kubernetes` Service's endpoints) and its
    certificate names it, and a relay listens in that container's network namespace `netns`
    (opened when the container started, not entered by a pid read seconds before: a reused
    pid could be a host process's), as kind's control-plane node serves on the nodes'
    network. The control plane it is given to closes `netns` when it stops."""

    ip: str
    netns: Namespace


class ControlPlaneError(RuntimeError):
    """The control plane could not start; the message says why (with the component's log)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def first_service_ip(cidr: str) -> str:
    """The `kubernetes` Service's address: the first of the Service range."""
    return str(ipaddress.ip_network(cidr)[1])


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, server: str, ca_cert: Path, pair: CertPair, user: str) -> Path:
    """A kubeconfig (mode 0600) for `server`, trusting `ca_cert`, as the holder of `pair`."""
    cluster = {"server": server, "certificate-authority-data": _b64(ca_cert)}
    credentials = {"client-certificate-data": _b64(pair.cert), "client-key-data": _b64(pair.key)}
    return _write_kubeconfig(path, cluster, user, credentials)


def _write_kubeconfig(
    path: Path, cluster: Mapping[str, object], user: str, credentials: Mapping[str, str]
) -> Path:
    """One cluster, one user, one context (mode 0600)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubelet-sim", "cluster": cluster}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "kubelet-sim", "context": {"cluster": "kubelet-sim", "user": user}}],
        "current-context": "kubelet-sim",
    }
    return write_private(path, json.dumps(config, indent=2).encode())


@dataclass(frozen=True)
class NodeCredentials:
    """What a kubelet holds after TLS bootstrap: a kubeconfig as `system:node:<name>` and a
    serving certificate signed by the cluster CA."""

    kubeconfig: Path
    serving: CertPair
    client_ca: Path  # the CA that signs the API server's kubelet-client certificate


@dataclass
class ControlPlane:
    """One control plane in `workdir`; `start()` then `stop()` (or a `with` block).

    `on_step(what, seconds)` hears each component become ready. `verify_kubelets` makes the
    API server check kubelets' serving certificates against the CA (the demo's nodes have
    such certificates; the tests' agents make self-signed ones). `preferred_address_types` is
    the API server's --kubelet-preferred-address-types; None leaves the flag out, so the
    server's own default (UPSTREAM_ADDRESS_TYPES, Hostname first) applies.

    The rest set up a control plane other than the tests' own, as a user's cluster may be:
    `controller_list` is kube-controller-manager's --controllers (None: its default set),
    `scheduler=False` starts no kube-scheduler, `service_cidr` is the Service range (the API
    server's certificate names its first address), `controller_credentials` runs each controller
    with its own ServiceAccount's token (kubeadm's --use-service-account-credentials),
    `service_account_admission=False` turns the API server's ServiceAccount admission plugin off
    (no `default` ServiceAccount required, no `kube-api-access` volume added to pods)."""

    binaries: Binaries
    workdir: Path
    controllers: bool = True
    preferred_address_types: str | None = "InternalIP,Hostname"
    verify_kubelets: bool = False
    controller_list: str | None = "*,-serviceaccount-token"
    scheduler: bool = True
    service_cidr: str = SERVICE_CIDR
    controller_credentials: bool = False
    # kube-controller-manager's --node-monitor-grace-period in seconds (None: its 40 s): how
    # long a Node's Lease may age before it goes NotReady (a test of node faults sets ~20 s).
    node_monitor_grace_period: float | None = None
    # The API server's --default-not-ready-toleration-seconds and
    # --default-unreachable-toleration-seconds (None: its 300 s): how long a pod without
    # tolerations of its own stays on a NotReady node before it is evicted.
    default_toleration_seconds: int | None = None
    # kube-controller-manager's --cluster-signing-duration in seconds (None: its year): the
    # life of what it signs for a CSR (a test of client certificate rotation sets minutes).
    cluster_signing_duration: float | None = None
    token_user: bool = False
    own_kubelet_client_ca: bool = False
    root_ca_file: bool = True
    service_account_issuer: str = ISSUER
    service_account_admission: bool = True
    pod_endpoint: PodEndpoint | None = None
    on_step: Callable[[str, float], None] | None = None
    url: str = ""
    etcd_url: str = ""
    admin_kubeconfig: Path = Path()
    _procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    _argv: dict[int, list[str]] = field(default_factory=dict)
    _ca: CertificateAuthority | None = None
    _kubelet_client_ca: CertificateAuthority | None = None
    _token: str = ""
    _pod_relay: ApiRelay | None = None

    # --- lifecycle -------------------------------------------------------------------------

    def start(
        self, timeout: float = 60.0, *, meanwhile: Callable[[], None] | None = None
    ) -> ControlPlane:
        """Until every component is healthy. `meanwhile` runs once the API server is ready
        (the admin kubeconfig written), while the controller-manager and scheduler start: a
        caller's nodes need only the API server."""
        try:
            self.workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
            began = time.monotonic()
            self._pki()
            self._step("certificates", began)
            self.etcd_url = self._start_etcd(timeout)
            self._start_apiserver(self.etcd_url, timeout)
            self._serve_pods()
            self.admin_kubeconfig = self.kubeconfig_for("admin", ("system:masters",), "admin")
            waits = []
            if self.controllers and self.binaries.controller_manager is not None:
                waits.append(self._start_controller_manager())
            if self.controllers and self.scheduler and self.binaries.scheduler is not None:
                waits.append(self._start_scheduler())
            if meanwhile is not None:
                meanwhile()
            for wait in waits:
                wait(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, *, remove: bool = True) -> None:
        if self._pod_relay is not None:
            self._pod_relay.close()
            self._pod_relay = None
        if self.pod_endpoint is not None:
            self.pod_endpoint.netns.close()
        for name, proc in reversed(self._procs):
            if proc.poll() is None:
                # kube-scheduler v1.24 was seen to wait out any grace on TERM; it keeps no state.
                proc.send_signal(signal.SIGKILL if name == "kube-scheduler" else signal.SIGTERM)
        for _name, proc in reversed(self._procs):
            try:
                proc.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self._procs.clear()
        if remove:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def components(self) -> list[str]:
        return [name for name, _ in self._procs]

    @property
    def processes(self) -> list[tuple[str, int, list[str]]]:
        """(component, pid, command line) of each child: what a dead parent's successor may
        end, and nothing else."""
        return [(name, proc.pid, self._argv[proc.pid]) for name, proc in self._procs]

    def log(self, name: str) -> str:
        """A component's log so far (`etcd`, `kube-apiserver`, ...), for failure messages."""
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _step(self, what: str, began: float) -> None:
        if self.on_step is not None:
            self.on_step(what, time.monotonic() - began)

    # --- credentials -----------------------------------------------------------------------

    @property
    def ca(self) -> CertificateAuthority:
        assert self._ca is not None, "start() first"
        return self._ca

    @property
    def client_ca(self) -> tuple[Path, Path]:
        """The CA (certificate, key) that signs the API server's kubelet-client certificate:
        kubelets of this control plane trust it. The cluster CA, as kubeadm's, unless
        `own_kubelet_client_ca`."""
        ca = self._kubelet_client_ca or self.ca
        return ca.pair.cert, ca.pair.key

    def token_kubeconfig(self, filename: str = "token-admin") -> Path:
        """With `token_user`: a kubeconfig for the static token's user (system:masters) that
        skips TLS verification (`insecure-skip-tls-verify`, no CA), as some handed-out
        kubeconfigs do."""
        assert self._token, "token_user=True, and start() first"
        cluster = {"server": self.url, "insecure-skip-tls-verify": True}
        path = self.workdir / f"{filename}.kubeconfig"
        return _write_kubeconfig(path, cluster, "token-admin", {"token": self._token})

    def kubeconfig_for(self, user: str, groups: tuple[str, ...], filename: str) -> Path:
        """A kubeconfig with a client certificate for `user` in `groups`, signed by our CA."""
        pair = self.ca.issue(filename, user, groups=groups)
        path = self.workdir / f"{filename}.kubeconfig"
        return write_kubeconfig(path, self.url, self.ca.pair.cert, pair, user)

    def node_kubeconfig(self, node_name: str) -> Path:
        """Credentials a kubelet has: `system:node:<name>` in `system:nodes`."""
        return self.kubeconfig_for(f"system:node:{node_name}", ("system:nodes",), node_name)

    def node_credentials(self, node_name: str, ips: tuple[str, ...]) -> NodeCredentials:
        serving = self.ca.issue(
            f"{node_name}-serving",
            f"system:node:{node_name}",
            groups=("system:nodes",),
            dns_names=(node_name,),
            ips=ips,
            server=True,
        )
        return NodeCredentials(self.node_kubeconfig(node_name), serving, self.client_ca[0])

    # --- components ------------------------------------------------------------------------

    def _pki(self) -> None:
        pki = self.workdir / "pki"
        self._ca = CertificateAuthority(pki)
        service_account_keys(pki)
        dns = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
        self.ca.issue(
            "apiserver",
            "kube-apiserver",
            dns_names=(*dns, "kubernetes.default.svc.cluster.local"),
            ips=("127.0.0.1", first_service_ip(self.service_cidr), *self._pod_ips()),
            server=True,
        )
        # What the API server shows kubelets when it proxies (kubeadm's apiserver-kubelet-client)
        signer = self.ca
        if self.own_kubelet_client_ca:
            signer = CertificateAuthority(pki / "kubelet-client-ca", "kubelet-client-ca")
            self._kubelet_client_ca = signer
        signer.issue(
            "kubelet-client",
            "kube-apiserver-kubelet-client",
            groups=("system:masters",),
            directory=pki,
        )
        if self.token_user:  # token,user,uid,"groups" (kube-apiserver --token-auth-file)
            self._token = secrets.token_hex(16)
            line = f'{self._token},token-admin,token-admin,"system:masters"\n'
            write_private(pki / "tokens.csv", line.encode())
        # etcd serves and peers with TLS, and takes only clients with the CA's certificates
        # (kubeadm's etcd/server, etcd/peer and apiserver-etcd-client): no other local user
        # reads the Secrets in it.
        self.ca.issue(
            "etcd", "etcd", dns_names=("localhost",), ips=("127.0.0.1",), server=True, client=True
        )
        self.ca.issue("apiserver-etcd-client", "kube-apiserver-etcd-client")

    def _pod_ips(self) -> tuple[str, ...]:
        return () if self.pod_endpoint is None else (self.pod_endpoint.ip,)

    def _serve_pods(self) -> None:
        """The pods' way in: a relay in the endpoint's namespace, on the API server's port."""
        if self.pod_endpoint is None:
            return
        port = int(self.url.rsplit(":", 1)[1])
        try:
            listening = listen_in_netns(self.pod_endpoint.netns, port)
        except (OSError, ValueError) as exc:
            raise ControlPlaneError(f"pods' endpoint {self.pod_endpoint.ip}: {exc}") from None
        self._pod_relay = ApiRelay("127.0.0.1", port, listening, PODS_BOUNDS)

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        proc = spawn_child(args, self.workdir / f"{name}.log", self.workdir)
        self._procs.append((name, proc))
        self._argv[proc.pid] = args
        return proc

    def _start_etcd(self, timeout: float) -> str:
        began = time.monotonic()
        client, peer = free_port(), free_port()
        url = f"https://127.0.0.1:{client}"
        pki = self.workdir / "pki"
        tls = {"cert-file": "etcd.crt", "key-file": "etcd.key", "trusted-ca-file": "ca.crt"}
        proc = self._spawn(
            "etcd",
            [
                str(self.binaries.etcd),
                "--data-dir", str(self.workdir / "etcd"),
                "--listen-client-urls", url,
                "--advertise-client-urls", url,
                "--listen-peer-urls", f"https://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"https://127.0.0.1:{peer}",
                "--initial-cluster", f"default=https://127.0.0.1:{peer}",
                *(f"--{flag}={pki / name}" for flag, name in tls.items()),
                *(f"--peer-{flag}={pki / name}" for flag, name in tls.items()),
                "--client-cert-auth", "--peer-client-cert-auth",
                "--unsafe-no-fsync",
                # One member on loopback: it leads at once (1 s of election timeout otherwise).
                "--heartbeat-interval", "10",
                "--election-timeout", "100",
            ],
        )  # fmt: skip
        self._wait_healthy("etcd", proc, f"{url}/health", timeout, client=self._etcd_client())
        self._step("etcd", began)
        return url

    def _etcd_client(self) -> CertPair:
        pki = self.workdir / "pki"
        return CertPair(pki / "apiserver-etcd-client.crt", pki / "apiserver-etcd-client.key")

    def _start_apiserver(self, etcd_url: str, timeout: float) -> None:
        """Flags as ../shared/kube-bin/README.md says, the issuer (token audience) as kind's."""
        began = time.monotonic()
        port = free_port()
        pki = self.workdir / "pki"
        self.url = f"https://127.0.0.1:{port}"
        verify = ["--kubelet-certificate-authority", str(pki / "ca.crt")]
        preferred = self.preferred_address_types
        prefer = [] if preferred is None else ["--kubelet-preferred-address-types", preferred]
        # With an address pods reach, the API server keeps the `kubernetes` Service's
        # endpoints (its lease reconciler, the default); loopback is no endpoint.
        endpoint = self.pod_endpoint
        advertise = (
            ["--advertise-address", endpoint.ip]
            if endpoint is not None
            else ["--advertise-address", "127.0.0.1", "--endpoint-reconciler-type", "none"]
        )
        no_sa_admission = ["--disable-admission-plugins", "ServiceAccount"]
        tolerate = self.default_toleration_seconds
        toleration = (
            []
            if tolerate is None
            else [
                f"--default-not-ready-toleration-seconds={tolerate}",
                f"--default-unreachable-toleration-seconds={tolerate}",
            ]
        )
        proc = self._spawn(
            "kube-apiserver",
            [
                str(self.binaries.apiserver),
                "--etcd-servers", etcd_url,
                "--etcd-cafile", str(pki / "ca.crt"),
                "--etcd-certfile", str(self._etcd_client().cert),
                "--etcd-keyfile", str(self._etcd_client().key),
                "--bind-address", "127.0.0.1",
                "--secure-port", str(port),
                *advertise,
                "--cert-dir", str(self.workdir / "certs"),
                "--tls-cert-file", str(pki / "apiserver.crt"),
                "--tls-private-key-file", str(pki / "apiserver.key"),
                "--client-ca-file", str(pki / "ca.crt"),
                "--kubelet-client-certificate", str(pki / "kubelet-client.crt"),
                "--kubelet-client-key", str(pki / "kubelet-client.key"),
                *(verify if self.verify_kubelets else []),
                *prefer,
                "--authorization-mode", "Node,RBAC",
                "--enable-admission-plugins", "NodeRestriction",
                *([] if self.service_account_admission else no_sa_admission),
                "--service-account-key-file", str(pki / "sa.pub"),
                "--service-account-signing-key-file", str(pki / "sa.key"),
                "--service-account-issuer", self.service_account_issuer,
                "--service-cluster-ip-range", self.service_cidr,
                "--allow-privileged=true",
                "--enable-bootstrap-token-auth",  # nodes may join as kubelets do (TLS bootstrap)
                *(["--token-auth-file", str(pki / "tokens.csv")] if self.token_user else []),
                *toleration,
            ],
        )  # fmt: skip
        self._wait_healthy("kube-apiserver", proc, f"{self.url}/readyz", timeout)
        self._step("kube-apiserver", began)

    def _component_args(self, port: int) -> list[str]:
        k = str(self.admin_kubeconfig)
        return [
            "--kubeconfig", k,
            "--authentication-kubeconfig", k,
            "--authorization-kubeconfig", k,
            "--bind-address", "127.0.0.1",
            "--secure-port", str(port),
            "--leader-elect=false",
        ]  # fmt: skip

    def _start_controller_manager(self) -> Callable[[float], None]:
        """Spawned; the returned call waits until it is healthy."""
        assert self.binaries.controller_manager is not None
        began = time.monotonic()
        pki = self.workdir / "pki"
        port = free_port()
        listed = self.controller_list
        controllers = [] if listed is None else ["--controllers", listed]
        grace = self.node_monitor_grace_period
        monitor = (
            []
            if grace is None
            else [f"--node-monitor-grace-period={grace:g}s", "--node-monitor-period=2s"]
        )
        duration = self.cluster_signing_duration
        signing = [] if duration is None else [f"--cluster-signing-duration={duration:g}s"]
        proc = self._spawn(
            "kube-controller-manager",
            [
                str(self.binaries.controller_manager),
                *self._component_args(port),
                "--cert-dir", str(self.workdir / "kcm-certs"),
                f"--use-service-account-credentials={str(self.controller_credentials).lower()}",
                "--service-account-private-key-file", str(pki / "sa.key"),
                *(["--root-ca-file", str(pki / "ca.crt")] if self.root_ca_file else []),
                "--cluster-signing-cert-file", str(pki / "ca.crt"),
                "--cluster-signing-key-file", str(pki / "ca.key"),
                *signing,
                *controllers,
                *monitor,
            ],
        )  # fmt: skip
        return self._waiter("kube-controller-manager", proc, port, began)

    def _start_scheduler(self) -> Callable[[float], None]:
        """Spawned; the returned call waits until it is healthy."""
        assert self.binaries.scheduler is not None
        began = time.monotonic()
        port = free_port()
        proc = self._spawn(
            "kube-scheduler",
            [
                str(self.binaries.scheduler),
                *self._component_args(port),
                "--cert-dir", str(self.workdir / "scheduler-certs"),
            ],
        )  # fmt: skip
        return self._waiter("kube-scheduler", proc, port, began)

    def _waiter(
        self, name: str, proc: subprocess.Popen[bytes], port: int, began: float
    ) -> Callable[[float], None]:
        """A call that waits until a spawned component's /healthz answers, then says so."""

        def wait(timeout: float) -> None:
            self._wait_healthy(name, proc, f"https://127.0.0.1:{port}/healthz", timeout)
            self._step(name, began)

        return wait

    def _wait_healthy(
        self,
        name: str,
        proc: subprocess.Popen[bytes],
        url: str,
        timeout: float,
        *,
        client: CertPair | None = None,
    ) -> None:
        """Until `url` answers 200 (anonymous may read health paths; etcd wants `client`'s
        certificate), or fail with the log."""
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        if client is not None:
            context.load_cert_chain(client.cert, client.key)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(url, context=context, timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        why = f"exited with {proc.returncode}" if proc.poll() is not None else "not ready"
        tail = "\n".join(self.log(name).splitlines()[-20:])
        raise ControlPlaneError(f"{name} {why} after {timeout:.0f} s; its log ends:\n{tail}")
