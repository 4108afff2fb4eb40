"""A real control plane on loopback for the tests, the way controller-runtime's envtest does it.

`KubeEnv` starts etcd and kube-apiserver (and kube-controller-manager and kube-scheduler when
their binaries are there) with client-certificate authentication, `Node,RBAC` authorization and
`NodeRestriction`, so that an agent given `node_kubeconfig(name)` is treated exactly as a kubelet.
Binaries come from `KUBEBUILDER_ASSETS` (envtest's convention) or `KUBELET_SIM_KUBE_BIN`; etcd
may also come from PATH (Debian's `etcd-server`).

`python -m tests.kubeenv` runs one by hand and prints where its admin kubeconfig is.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ASSETS_ENVS = ("KUBEBUILDER_ASSETS", "KUBELET_SIM_KUBE_BIN")
HOW_TO_GET_BINARIES = (
    "set KUBEBUILDER_ASSETS to a directory with kube-apiserver (and etcd, or have etcd on PATH), "
    "e.g. from `setup-envtest use -p path`, or point KUBELET_SIM_TEST_KUBECONFIG at a cluster"
)


class KubeEnvError(RuntimeError):
    """The control plane could not be found or started; the message says why."""


@dataclass
class Binaries:
    apiserver: Path
    etcd: Path
    controller_manager: Path | None
    scheduler: Path | None


def find_binaries() -> Binaries:
    """Locate the binaries, or raise KubeEnvError with what is missing and how to get it."""
    dirs = [Path(os.environ[e]) for e in ASSETS_ENVS if os.environ.get(e)]

    def find(name: str, path_too: bool = False) -> Path | None:
        for d in dirs:
            candidate = d / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
        found = shutil.which(name) if path_too else None
        return Path(found) if found else None

    apiserver, etcd = find("kube-apiserver"), find("etcd", path_too=True)
    if apiserver is None or etcd is None:
        missing = " and ".join(
            n for n, p in (("kube-apiserver", apiserver), ("etcd", etcd)) if p is None
        )
        where = ", ".join(f"{e}={os.environ.get(e, '')!r}" for e in ASSETS_ENVS)
        raise KubeEnvError(f"no {missing} found ({where}): {HOW_TO_GET_BINARIES}")
    return Binaries(apiserver, etcd, find("kube-controller-manager"), find("kube-scheduler"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Linux's parent-death signal (util-linux setpriv): a killed test run leaves no control plane
# behind. KILL, since a kube-scheduler given TERM without its API server was seen to hang.
# Set through a wrapper, not preexec_fn, which is unsafe in a process with threads.
_SETPRIV = shutil.which("setpriv")
_DIE_WITH_PARENT = [_SETPRIV, "--pdeathsig", "KILL", "--"] if _SETPRIV else []


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


@dataclass
class KubeEnv:
    """One control plane; `start()` then `stop()` (or use it as a context manager)."""

    binaries: Binaries
    controllers: bool = True  # run controller-manager and scheduler when their binaries exist
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="kubeenv-")))
    url: str = ""
    admin_kubeconfig: Path = Path()
    _procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    # --- lifecycle -------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> KubeEnv:
        try:
            self._pki()
            etcd_url = self._start_etcd()
            self._start_apiserver(etcd_url, timeout)
            self.admin_kubeconfig = self.kubeconfig_for("admin", ["system:masters"], "admin")
            if self.controllers and self.binaries.controller_manager is not None:
                self._start_controller_manager()
            if self.controllers and self.binaries.scheduler is not None:
                self._start_scheduler()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for _name, proc in reversed(self._procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        # A throw-away control plane: kube-apiserver drains for 10 s and more after SIGTERM,
        # which nothing here needs; what has not gone after 2 s is killed.
        for _name, proc in reversed(self._procs):
            try:
                proc.wait(2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self._procs.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> KubeEnv:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log(self, name: str) -> str:
        """A component's log so far (`etcd`, `kube-apiserver`, ...), for failure messages."""
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # --- credentials -----------------------------------------------------------------------

    def kubeconfig_for(self, user: str, groups: list[str], filename: str) -> Path:
        """A kubeconfig with a client certificate for `user` in `groups`, signed by our CA."""
        crt, key = self._client_cert(user, groups, filename)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "kubeenv",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": _b64(self.workdir / "certs/apiserver.crt"),
                    },
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate-data": _b64(crt),
                        "client-key-data": _b64(key),
                    },
                }
            ],
            "contexts": [{"name": "kubeenv", "context": {"cluster": "kubeenv", "user": user}}],
            "current-context": "kubeenv",
        }
        path = self.workdir / f"{filename}.kubeconfig"
        path.write_text(json.dumps(config, indent=2))
        return path

    def _client_cert(self, user: str, groups: list[str], filename: str) -> tuple[Path, Path]:
        pki = self.workdir / "pki"
        key, csr, crt = (pki / f"{filename}.{ext}" for ext in ("key", "csr", "crt"))
        subject = "".join(f"/O={g}" for g in groups) + f"/CN={user}"
        _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key.name, cwd=pki)
        _openssl("req", "-new", "-key", key.name, "-subj", subject, "-out", csr.name, cwd=pki)
        _openssl(
            "x509", "-req", "-in", csr.name, "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "30", "-out", crt.name, cwd=pki,
        )  # fmt: skip
        return crt, key

    @property
    def client_ca(self) -> tuple[Path, Path]:
        """The CA (certificate, key) that signs client certificates, kubelet-client's among
        them: kubelets of this control plane trust it, as kubeadm's trust the cluster CA."""
        pki = self.workdir / "pki"
        return pki / "ca.crt", pki / "ca.key"

    def node_kubeconfig(self, node_name: str) -> Path:
        """Credentials a kubelet has: `system:node:<name>` in `system:nodes`."""
        return self.kubeconfig_for(f"system:node:{node_name}", ["system:nodes"], node_name)

    # --- components ------------------------------------------------------------------------

    def _pki(self) -> None:
        pki = self.workdir / "pki"
        pki.mkdir(parents=True)
        _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
        _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
        _openssl(
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "30",
            "-subj", "/CN=kubeenv-client-ca", cwd=pki,
        )  # fmt: skip
        # What the API server shows kubelets when it proxies (kubeadm's apiserver-kubelet-client)
        self._client_cert("kube-apiserver-kubelet-client", ["system:masters"], "kubelet-client")

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            [*_DIE_WITH_PARENT, *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            start_new_session=True,
        )
        log.close()
        self._procs.append((name, proc))
        return proc

    def _start_etcd(self) -> str:
        client, peer = _free_port(), _free_port()
        url = f"http://127.0.0.1:{client}"
        self._spawn(
            "etcd",
            [
                str(self.binaries.etcd),
                "--data-dir", str(self.workdir / "etcd"),
                "--listen-client-urls", url,
                "--advertise-client-urls", url,
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", f"default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
            ],
        )  # fmt: skip
        return url

    def _start_apiserver(self, etcd_url: str, timeout: float) -> None:
        """Flags as ../shared/kube-bin/README.md says, the issuer (token audience) as kind's."""
        port = _free_port()
        pki = self.workdir / "pki"
        self.url = f"https://127.0.0.1:{port}"
        proc = self._spawn(
            "kube-apiserver",
            [
                str(self.binaries.apiserver),
                "--etcd-servers", etcd_url,
                "--bind-address", "127.0.0.1",
                "--secure-port", str(port),
                "--advertise-address", "127.0.0.1",
                "--cert-dir", str(self.workdir / "certs"),
                "--client-ca-file", str(pki / "ca.crt"),
                "--kubelet-client-certificate", str(pki / "kubelet-client.crt"),
                "--kubelet-client-key", str(pki / "kubelet-client.key"),
                "--kubelet-preferred-address-types", "InternalIP,Hostname",
                "--authorization-mode", "Node,RBAC",
                "--enable-admission-plugins", "NodeRestriction",
                "--service-account-key-file", str(pki / "sa.pub"),
                "--service-account-signing-key-file", str(pki / "sa.key"),
                "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range", "10.96.0.0/16",
                "--allow-privileged=true",
                "--endpoint-reconciler-type", "none",
            ],
        )  # fmt: skip
        self._wait_ready(proc, timeout)

    def _wait_ready(self, proc: subprocess.Popen[bytes], timeout: float) -> None:
        """Until /readyz answers 200 (anonymous is allowed to read it), or fail with the log."""
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", context=context, timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        tail = "\n".join(self.log("kube-apiserver").splitlines()[-20:])
        etcd = "\n".join(self.log("etcd").splitlines()[-5:])
        raise KubeEnvError(f"kube-apiserver not ready in {timeout}s:\n{tail}\netcd:\n{etcd}")

    def _component_args(self, port_flag: int) -> list[str]:
        k = str(self.admin_kubeconfig)
        return [
            "--kubeconfig", k,
            "--authentication-kubeconfig", k,
            "--authorization-kubeconfig", k,
            "--bind-address", "127.0.0.1",
            "--secure-port", str(port_flag),
            "--leader-elect=false",
        ]  # fmt: skip

    def _start_controller_manager(self) -> None:
        assert self.binaries.controller_manager is not None
        pki = self.workdir / "pki"
        self._spawn(
            "kube-controller-manager",
            [
                str(self.binaries.controller_manager),
                *self._component_args(_free_port()),
                "--cert-dir", str(self.workdir / "kcm-certs"),
                "--use-service-account-credentials=false",
                "--service-account-private-key-file", str(pki / "sa.key"),
                "--cluster-signing-cert-file", str(pki / "ca.crt"),
                "--cluster-signing-key-file", str(pki / "ca.key"),
                "--controllers", "*,-serviceaccount-token",
            ],
        )  # fmt: skip

    def _start_scheduler(self) -> None:
        assert self.binaries.scheduler is not None
        self._spawn(
            "kube-scheduler",
            [
                str(self.binaries.scheduler),
                *self._component_args(_free_port()),
                "--cert-dir",
                str(self.workdir / "scheduler-certs"),
            ],
        )

    @property
    def components(self) -> list[str]:
        return [name for name, _ in self._procs]


def main() -> None:
    """Run a control plane until Ctrl-C, for trying the agent by hand."""
    stop_signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)  # sigwait needs them blocked
    env = KubeEnv(find_binaries()).start()
    print(f"export KUBECONFIG={env.admin_kubeconfig}  # {', '.join(env.components)}", flush=True)
    for name in sys.argv[1:]:
        print(f"{name}: --kubeconfig {env.node_kubeconfig(name)}", flush=True)
    try:
        signal.sigwait(stop_signals)
    finally:
        env.stop()


if __name__ == "__main__":
    main()
