"""A real upstream kubelet beside the virtual nodes: the reference a comparison is made with.

`ReferenceNode` runs, under one work directory of its own, a containerd (its own root, state
and socket, CRI plugin on a bridge CNI network of its own) and the upstream `kubelet` on it,
registered to a started `ControlPlane` with node credentials (`system:node:<name>`). Images come
from the Docker engine (`docker save | ctr import`): the machines this runs on reach no registry.

What it changes on the host, and `stop()` undoes: a bridge and its route, a cgroup root of its
own in each hierarchy (`/ksref-<id>`), the CNI chains named for its network and containers
(cni_chains.py; never another network's nor the plugins' shared ones), the kernel settings the
kubelet sets at start (it sets `vm.overcommit_memory` and others; restored), libcni's result
cache for its network. containerd and the kubelet run in a mount namespace of their own where
/var/log is the node's: pod logs stay in its work directory, and its kubelet's GC never sees
another kubelet's. A killed parent takes the kubelet and containerd with it (setpriv
--pdeathsig); running containers' shims then outlive them (containerd's design), which only
`stop()` prevents.

Speaks to its processes only through subprocess (`ctr`, `ip`, `iptables`, `docker`), the CRI
over gRPC (four calls, messages encoded by hand) and HTTPS to the API server (stdlib).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubelet_sim.controlplane import binaries, cni_chains, host, reference_config
from kubelet_sim.controlplane.cluster import (
    _DIE_WITH_PARENT,
    ControlPlane,
    spawn_child,
    stop_child,
)
from kubelet_sim.controlplane.cri_client import CriClient
from kubelet_sim.controlplane.reference_config import CNI_BIN_DIR, find_kubelet

# The project's local images (kubelet_sim.runtime.local_images, which this layer may not
# import: tests/testing_kit/test_reference_node.py checks they are the same names).
PAUSE_IMAGE = "kubelet-sim.local/pause:test"
BUSYBOX_IMAGE = "kubelet-sim.local/busybox:test"

CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap", "firewall")
CNI_CACHE = Path("/var/lib/cni/results")
NETNS = Path("/run/netns")
# Host directories the kubelet, containerd or libcni make when missing: removed at stop if
# they did not exist at start and are empty by then.
HOST_DIRS = (CNI_CACHE, CNI_CACHE.parent, NETNS)
# What containerd and the kubelet see at /var/log (they write pod logs to /var/log/pods and
# /var/log/containers, every kubelet of the host alike): a directory of the node's own.
LOG_DIR = Path("/var/log")
# What the kubelet sets at start (setupKernelTunables, protectKernelDefaults off).
KERNEL_TUNABLES = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
STOP_GRACE = 5.0
SOCKET_PATH_MAX = 100  # sun_path is 108 bytes; containerd adds ".ttrpc"


class ReferenceNodeError(RuntimeError):
    """The reference node could not start; the message says why (with a log's tail)."""


# --- the node -------------------------------------------------------------------------------


@dataclass
class ReferenceNode:
    """The upstream kubelet on a containerd of its own, as node `name` of `control_plane`.

    `start(timeout)` returns once the Node is Ready; `stop()` (or leaving a `with` block)
    removes everything it made. `images` are loaded from Docker besides the pause and busybox
    images; `load_image(name)` loads one more at any time. `node_ip` is the address the kubelet
    serves on and reports (its own bridge's gateway, so nothing reaches this host's outside
    addresses; the kubelet refuses a loopback one): the API
    server dials it when its --kubelet-preferred-address-types puts InternalIP before Hostname
    (the tests' and the demo's control planes do; the node's name resolves nowhere).
    `subnet` is the pods' bridge subnet (chosen free when None). `taints` ("key=value:Effect")
    and `labels` are the kubelet's --register-with-taints and --node-labels."""

    control_plane: ControlPlane = field(repr=False)
    name: str
    workdir: Path
    images: Sequence[str] = ()
    pause_image: str = PAUSE_IMAGE
    busybox_image: str = BUSYBOX_IMAGE
    node_ip: str | None = None
    subnet: ipaddress.IPv4Network | None = None
    cluster_dns: Sequence[str] = ()
    cluster_domain: str = "cluster.local"
    taints: Sequence[str] = ()
    labels: dict[str, str] = field(default_factory=dict)
    kubelet: Path | None = None
    verbosity: int = 2
    on_step: Callable[[str, float], None] | None = field(default=None, repr=False)
    static_pod_path: Path | None = None  # the kubelet's staticPodPath (a directory it makes)
    # Set by start(): what the node is and where its pieces are.
    port: int = 0
    healthz_port: int = 0
    bridge: str = ""
    _id: str = field(repr=False, default_factory=lambda: secrets.token_hex(4))
    _procs: dict[str, subprocess.Popen[bytes]] = field(repr=False, default_factory=dict)
    _socket_dir: Path | None = field(default=None, repr=False)
    _cgroups: list[Path] = field(repr=False, default_factory=list)
    _tunables: dict[str, str] = field(repr=False, default_factory=dict)
    _host_dirs_made: list[Path] = field(repr=False, default_factory=list)
    _container_ids: set[str] = field(repr=False, default_factory=set)
    _reader: tuple[Path, Path] | None = field(default=None, repr=False)
    _started: float = field(default=0.0, repr=False)

    # --- what it needs ---------------------------------------------------------------------

    @staticmethod
    def unavailable(kubelet: Path | None = None) -> str | None:
        """Why no reference node can run here (one line), or None."""
        if os.geteuid() != 0:
            return "the reference node needs root (containerd, mounts, a bridge, cgroups)"
        if (kubelet or find_kubelet()) is None:
            return (
                "no upstream kubelet binary (KUBELET_SIM_KUBELET, KUBELET_SIM_KUBE_BIN or the"
                f" cache {binaries.cache_dir()}/<version>/kubelet; scripts/provision unpacks one)"
            )
        for tool, package in (
            ("containerd", "containerd"),
            ("ctr", "containerd"),
            ("containerd-shim-runc-v2", "containerd"),
            ("runc", "runc"),
            ("docker", "docker.io"),
            ("ip", "iproute2"),
            ("iptables", "iptables"),
            ("unshare", "util-linux"),
            ("nsenter", "util-linux"),
            ("mount", "mount"),
        ):
            if shutil.which(tool) is None:
                return f"no {tool} on PATH (apt-get install {package})"
        lacking = [p for p in CNI_PLUGINS if not (CNI_BIN_DIR / p).is_file()]
        if lacking:
            return (
                f"no CNI plugin {', '.join(lacking)} in {CNI_BIN_DIR}"
                " (apt-get install containernetworking-plugins)"
            )
        if not _DIE_WITH_PARENT:
            return "no setpriv (util-linux): a killed test would leave the kubelet running"
        try:
            problem = host.cgroup_problem()
        except OSError as exc:
            return f"cannot read the cgroup hierarchies: {exc}"
        if problem:
            return problem
        try:
            subprocess.run(["docker", "version"], capture_output=True, check=True, timeout=20)
        except (subprocess.SubprocessError, OSError):
            return "no Docker engine answers (the reference node's images come from it)"
        return None

    def _kubelet(self) -> Path | None:
        """`kubelet` if given, else the API server's own version's: the binary beside its
        kube-apiserver, or the cache's directory of the version /version answers."""
        if self.kubelet is not None:
            return self.kubelet
        apiserver = self.control_plane.binaries.apiserver
        beside = apiserver.parent / "kubelet"
        if "KUBELET_SIM_KUBELET" not in os.environ and os.access(beside, os.X_OK):
            return beside
        version = None
        with contextlib.suppress(Exception):  # no answer: the other places, newest first
            self.workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
            version = str((self.api("GET", "/version") or {}).get("gitVersion") or "")
        return find_kubelet(beside=apiserver, version=version)

    # --- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> ReferenceNode:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> ReferenceNode:
        why = self.unavailable(self._kubelet())
        if why:
            raise ReferenceNodeError(why)
        self._started = time.monotonic()
        try:
            self.workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._host_dirs_made = [d for d in HOST_DIRS if not d.exists()]
            self._network()
            # The node's address is its own bridge's (the kubelet refuses a loopback one): the
            # API server dials it there, and nothing talks to this host's outside addresses.
            assert self.subnet is not None
            self.node_ip = self.node_ip or str(self.subnet[1])
            self._step("network")
            self._start_containerd(timeout)
            self._step("containerd")
            for image in dict.fromkeys([self.pause_image, self.busybox_image, *self.images]):
                self.load_image(image)
            self._step("images")
            self._cgroup_root()
            self._save_tunables()
            self._start_kubelet()
            self._wait_ready(timeout)
            self._step("kubelet Ready")
        except host.HostCommandError as exc:
            self.stop()
            raise ReferenceNodeError(str(exc)) from exc
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the kubelet, remove every pod sandbox and container, stop containerd, and
        remove what they left: mounts, its chains, bridge, cgroups, the work directory (with
        its pods' logs)."""
        with contextlib.suppress(Exception):
            self._record_containers()
        self._end("kubelet")
        if "containerd" in self._procs:
            self._remove_pods()
        self._end("containerd")
        for point in host.mount_points_under([self.workdir, *self._extra_dirs()]):
            host.quiet(["umount", "-l", str(point)])
        if self.subnet is not None:  # while the bridge holds the subnet: no other node's yet
            cni_chains.remove(self.network_name, self._container_ids, self.subnet)
        if self.bridge:
            host.quiet(["ip", "link", "del", self.bridge])
        self._remove_cgroups()
        self._restore_tunables()
        for path in CNI_CACHE.glob(f"{self.network_name}-*"):
            path.unlink(missing_ok=True)
        for directory in self._host_dirs_made:
            with contextlib.suppress(OSError):
                directory.rmdir()  # only if empty: another node's files stay
        for d in self._extra_dirs():
            shutil.rmtree(d, ignore_errors=True)
        if not host.mount_points_under([self.workdir]):  # never remove files through a mount
            shutil.rmtree(self.workdir, ignore_errors=True)

    def leftovers(self) -> list[str]:
        """What of this node is still on the host, one line each (empty after `stop()`):
        processes naming its directories (kubelet, containerd, shims), mounts under them, its
        bridge, cgroups, the CNI chains and rules naming its network or containers, the work
        directory."""
        found = []
        dirs = [str(self.workdir), *map(str, self._extra_dirs())]
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
                if any(d in arg for arg in argv for d in dirs):
                    found.append(f"process {proc.name}: {' '.join(argv)[:120]}")
        found += [
            f"mount {p}" for p in host.mount_points_under([self.workdir, *self._extra_dirs()])
        ]
        if self.bridge and Path("/sys/class/net", self.bridge).exists():
            found.append(f"bridge {self.bridge}")
        found += [f"cgroup {p}" for p in self._own_cgroups()]
        if self.subnet is not None:
            found += cni_chains.describe(self.network_name, self._container_ids, self.subnet)
        found += [f"file {p}" for p in CNI_CACHE.glob(f"{self.network_name}-*")]
        if self.workdir.exists():
            found.append(f"directory {self.workdir}")
        return found

    def log(self, name: str = "kubelet") -> str:
        """A process's log so far (`kubelet` or `containerd`)."""
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    @property
    def processes(self) -> list[tuple[str, int]]:
        return [(name, proc.pid) for name, proc in self._procs.items() if proc.poll() is None]

    @property
    def socket(self) -> Path:
        """containerd's gRPC socket (the CRI endpoint is unix://<this>)."""
        base = self._socket_dir or self.workdir / "containerd"
        return base / "containerd.sock"

    @property
    def kubelet_url(self) -> str:
        return f"https://{self.node_ip}:{self.port}"

    # --- images ------------------------------------------------------------------------------

    def load_image(self, image: str) -> None:
        """Copy `image` from the Docker engine into containerd's k8s.io namespace."""
        save = subprocess.Popen(
            ["docker", "save", image], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert save.stdout is not None
        try:
            load = subprocess.run(
                [*self._ctr(), "images", "import", "--snapshotter", "overlayfs", "-"],
                stdin=save.stdout,
                capture_output=True,
                check=False,
                timeout=300,
            )
        finally:
            save.stdout.close()
            _, saved_err = save.communicate(timeout=60)
        if save.returncode != 0:
            raise ReferenceNodeError(
                f"docker save {image} failed: {saved_err.decode(errors='replace').strip()}"
            )
        if load.returncode != 0:
            raise ReferenceNodeError(
                f"ctr images import of {image} failed: {load.stderr.decode(errors='replace')}"
            )

    def containers(self) -> list[dict[str, Any]]:
        """containerd's containers in k8s.io (id and labels: io.kubernetes.pod.uid, ...)."""
        out = subprocess.run(
            [*self._ctr(), "containers", "ls", "-q"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.split()
        found = []
        for cid in out:
            info = subprocess.run(
                [*self._ctr(), "containers", "info", cid],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            if info.returncode == 0:
                data = json.loads(info.stdout)
                found.append({"id": cid, "labels": data.get("Labels") or {}})
        return found

    # --- pieces ------------------------------------------------------------------------------

    @property
    def network_name(self) -> str:
        """Its CNI network's name (`ksref-<id>`): libcni's cache files and the plugins' chains
        are named from it."""
        return f"ksref-{self._id}"

    @property
    def cgroup_root(self) -> str:
        """The kubelet's --cgroup-root, made in every hierarchy at start."""
        return f"/ksref-{self._id}"

    def _extra_dirs(self) -> list[Path]:
        return [self._socket_dir] if self._socket_dir else []

    def _step(self, what: str) -> None:
        if self.on_step is not None:
            self.on_step(what, time.monotonic() - self._started)

    def _ctr(self) -> list[str]:
        return ["ctr", "-a", str(self.socket), "-n", "k8s.io"]

    def _own_mounts(self, args: list[str]) -> list[str]:
        """`args` run in a mount namespace of their own where /var/log is the node's `log`
        directory: every kubelet writes pod logs under /var/log/pods and garbage-collects
        there what is not its own pods' (another kubelet's included), and v1.24 cannot be
        told another directory. Mounts made there (containerd's, the kubelet's, the shims')
        stay there, and go with the last of its processes."""
        logs = self.workdir / "log"
        logs.mkdir(exist_ok=True)
        bind = f'mount --bind "$0" {LOG_DIR} && exec "$@"'
        return ["unshare", "--mount", "--propagation", "slave", "--", "sh", "-c", bind,
                str(logs), *args]  # fmt: skip

    def _containerds_mounts(self, args: list[str]) -> list[str]:
        """`args` run in containerd's mount namespace: the kubelet sees the same /var/log and
        containerd sees the volumes the kubelet mounts. containerd is our child and not yet
        reaped (running), so its pid names it."""
        containerd = self._procs["containerd"]
        namespace = Path(f"/proc/{containerd.pid}/ns/mnt")
        ours = Path("/proc/self/ns/mnt").readlink()
        if containerd.poll() is not None or namespace.readlink() == ours:
            raise ReferenceNodeError(f"containerd has no mount namespace of its own ({ours})")
        return ["nsenter", f"--mount={namespace}", "--", *args]

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        proc = spawn_child(args, self.workdir / f"{name}.log", self.workdir, append=True)
        self._procs[name] = proc
        return proc

    def _end(self, name: str) -> None:
        proc = self._procs.pop(name, None)
        if proc is not None:
            stop_child(proc, STOP_GRACE)

    def _tail(self, name: str, lines: int = 25) -> str:
        return "\n".join(self.log(name).splitlines()[-lines:])

    def _network(self) -> None:
        """A bridge of the node's own with the gateway address (so the subnet is taken at once,
        before the first pod), and a conflist for containerd's CNI."""
        self.subnet = self.subnet or host.free_subnet()
        if self.subnet is None:
            raise ReferenceNodeError(f"no free /24 in {host.POD_RANGE} for the pods' bridge")
        self.bridge = f"ksr{self._id}"
        gateway = self.subnet[1]
        for args in (
            ["link", "add", self.bridge, "type", "bridge"],
            ["addr", "add", f"{gateway}/{self.subnet.prefixlen}", "dev", self.bridge],
            ["link", "set", self.bridge, "up"],
        ):
            host.run(["ip", *args])
        conf = self.workdir / "cni"
        conf.mkdir(exist_ok=True)
        (conf / "10-ksref.conflist").write_text(
            json.dumps(reference_config.cni_conflist(self), indent=2)
        )

    def _start_containerd(self, timeout: float) -> None:
        base = self.workdir / "containerd"
        base.mkdir(exist_ok=True)
        if len(str(base / "containerd.sock.ttrpc")) > SOCKET_PATH_MAX:
            self._socket_dir = Path(tempfile.mkdtemp(prefix="ksref-", dir="/run"))
        config = reference_config.containerd_config(self, base)
        (base / "config.toml").write_text(config)
        proc = self._spawn(
            "containerd",
            self._own_mounts(["containerd", "--config", str(base / "config.toml")]),
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            ready = subprocess.run(
                [*self._ctr(), "version"], capture_output=True, check=False, timeout=10
            )
            if ready.returncode == 0 and "io.containerd.grpc.v1.cri" in self.log("containerd"):
                return
            time.sleep(0.1)
        why = f"exited with {proc.returncode}" if proc.poll() is not None else "not ready"
        raise ReferenceNodeError(f"containerd {why}; its log ends:\n{self._tail('containerd')}")

    def _cgroup_root(self) -> None:
        """`/ksref-<id>` in every hierarchy: the kubelet's --cgroup-root (it must exist), so
        its kubepods tree is its own and goes with it."""
        for mount, fstype in host.cgroup_mounts():
            if fstype == "cgroup2" and mount != host.CGROUP_ROOT:
                continue  # a hybrid host's unified hierarchy: libcontainer's v1 mode skips it
            path = mount / self.cgroup_root.lstrip("/")
            path.mkdir(exist_ok=True)
            self._cgroups.append(path)
            if "cpuset" in mount.name.split(","):
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    (path / knob).write_text((mount / knob).read_text())
            if fstype == "cgroup2":
                wanted = (mount / "cgroup.subtree_control").read_text().split()
                with contextlib.suppress(OSError):
                    (path / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))

    def _save_tunables(self) -> None:
        for name in KERNEL_TUNABLES:
            with contextlib.suppress(OSError):
                self._tunables[name] = (Path("/proc/sys") / name).read_text().strip()

    def _restore_tunables(self) -> None:
        for name, value in self._tunables.items():
            path = Path("/proc/sys") / name
            with contextlib.suppress(OSError):
                if path.read_text().strip() != value:
                    path.write_text(value)
        self._tunables.clear()

    def _start_kubelet(self) -> None:
        assert self.node_ip is not None
        cp = self.control_plane
        kubelet = self._kubelet()
        assert kubelet is not None
        creds = cp.node_credentials(self.name, (self.node_ip,))
        self.port, self.healthz_port = host.free_port(self.node_ip), host.free_port("127.0.0.1")
        self._spawn(
            "kubelet",
            self._containerds_mounts(reference_config.kubelet_command(self, kubelet, creds)),
        )

    # --- the API server ----------------------------------------------------------------------

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """A request to the control plane as an admin (the node's own reads and cleanup)."""
        cp = self.control_plane
        if self._reader is None:
            pair = cp.ca.issue(f"ksref-{self._id}-admin", "kubelet-sim:reference-node",
                               groups=("system:masters",), directory=self.workdir)  # fmt: skip
            self._reader = (pair.cert, pair.key)
        context = ssl.create_default_context(cafile=str(cp.ca.pair.cert))
        context.check_hostname = False
        context.load_cert_chain(str(self._reader[0]), str(self._reader[1]))
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            cp.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return json.loads(answer.read() or b"null")

    def node(self) -> dict[str, Any] | None:
        """The Node object, or None while it is not registered."""
        try:
            found: dict[str, Any] = self.api("GET", f"/api/v1/nodes/{self.name}")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        return found

    def ready(self) -> bool:
        node = self.node()
        conditions = (node or {}).get("status", {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        kubelet = self._procs["kubelet"]
        pause = 0.1
        while time.monotonic() < deadline and kubelet.poll() is None:
            with contextlib.suppress(OSError, urllib.error.URLError):
                if self.ready():
                    return
            time.sleep(pause)
            pause = min(pause * 1.5, 0.5)
        why = f"exited with {kubelet.returncode}" if kubelet.poll() is not None else "not Ready"
        raise ReferenceNodeError(
            f"kubelet of node {self.name} {why} after {timeout:.0f} s; its log ends:\n"
            f"{self._tail('kubelet')}"
        )

    # --- cleanup -----------------------------------------------------------------------------

    def _record_containers(self) -> None:
        """The ids of the containers and sandboxes containerd holds: the CNI plugins name their
        chains from them (and the network's name), so these are the chains it removes."""
        if "containerd" in self._procs:
            self._container_ids |= {c["id"] for c in self.containers()}

    def _remove_pods(self) -> None:
        """Every sandbox stopped (CNI DEL: addresses, firewall rules, the netns) and removed
        through the CRI, then whatever containerd still holds, through ctr."""
        with contextlib.suppress(Exception):
            cri = CriClient(self.socket)
            try:
                for sandbox in cri.sandboxes():
                    with contextlib.suppress(Exception):
                        cri.stop_sandbox(sandbox)
                    with contextlib.suppress(Exception):
                        cri.remove_sandbox(sandbox)
            finally:
                cri.close()
        ctr = self._ctr()
        for task in host.quiet([*ctr, "tasks", "ls", "-q"]).split():
            host.quiet([*ctr, "tasks", "kill", "-s", "SIGKILL", task])
            host.quiet([*ctr, "tasks", "rm", "-f", task])
        for container in host.quiet([*ctr, "containers", "ls", "-q"]).split():
            host.quiet([*ctr, "containers", "rm", container])

    def _own_cgroups(self) -> list[Path]:
        """Its cgroup root in every hierarchy: those made at start and those runc made (a
        hybrid host's unified hierarchy)."""
        with contextlib.suppress(OSError):
            found = [m / self.cgroup_root.lstrip("/") for m, _ in host.cgroup_mounts()]
            return [p for p in dict.fromkeys([*self._cgroups, *found]) if p.is_dir()]
        return [p for p in self._cgroups if p.is_dir()]

    def _remove_cgroups(self) -> None:
        for path in self._own_cgroups():
            for sub in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                if sub.is_dir():
                    with contextlib.suppress(OSError):
                        sub.rmdir()
            with contextlib.suppress(OSError):
                path.rmdir()
