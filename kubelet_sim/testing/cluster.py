"""`Cluster`: the demo's control plane and N kubelet-sim nodes, for a controller's tests.

    with Cluster(nodes=3) as cluster:
        cluster.kubectl("get", "nodes")

The control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) starts as
the demo's does; the nodes run in this process with kubelet credentials (`system:node:<name>`),
as the demo's, without its sample. The nodes are one NodeSet (one process context: timers,
Docker events stream, kubelet API listener), each behind an `ApiRelay` of its own, so that
one node can be stopped, started, killed or cut off the API server while the others run.
On exit (an exception too) the nodes stop, every container with the cluster's label is
removed, the control plane ends and its data goes.

    with Cluster(nodes=2, kubeconfig="~/.kube/config") as cluster:   # kind, for example

joins a cluster the user has instead: no control plane of ours; the nodes use that
kubeconfig's credentials, put their pods on `docker_network` (default: `kind` where Docker
has such a network) and are reached by its API server at this host's address there. It
never adopts or deletes what it did not make (`testing/joined.py`): it refuses to start where
a Node of its nodes' names exists, and on exit deletes only the Nodes (and the
ClusterRoleBinding) it created; the user's kubeconfig is left as it was.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from kubelet_sim import cri
from kubelet_sim.assembly.nodeset import NodeIdentity, NodeSet, NodeSetSettings
from kubelet_sim.assembly.process import engine_for
from kubelet_sim.controlplane.binaries import Binaries, BinariesMissing, cache_dir, find_binaries
from kubelet_sim.controlplane.cluster import ControlPlane
from kubelet_sim.controlplane.relay import ApiRelay
from kubelet_sim.formats.pem import copy_private
from kubelet_sim.kube.client import KubeConnection, connect
from kubelet_sim.kube.rest import ApiError, request_json
from kubelet_sim.linux.safe_paths import remove_tree
from kubelet_sim.localcluster.images import DEFAULT_SAMPLE_IMAGE, ensure_images
from kubelet_sim.localcluster.local_cluster import (
    NODE_IP,
    LocalCluster,
    node_proxier_binding,
    wait_default_account,
    wait_nodes_ready,
)
from kubelet_sim.node.settings import NodeSettings
from kubelet_sim.runtime.engine import DockerEngine, RuntimeUnavailable
from kubelet_sim.server.settings import ServerSettings
from kubelet_sim.testing import joined
from kubelet_sim.testing.kubeconfigs import api_server, through_relay
from kubelet_sim.testing.leftovers import PROCESS_LABEL, remove_dead_clusters, this_process
from kubelet_sim.volumes.hostmount import mount_points_under, unmount

DEFAULT_PAUSE_IMAGE = "registry.k8s.io/pause:3.10"  # the CLI's default (cli/node_options.py)
# How long a Node's Lease may age before the controller-manager marks it NotReady: twice the
# nodes' 10 s renewal, so that a stopped node is NotReady within about 25 s (upstream: 40 s).
NODE_MONITOR_GRACE_PERIOD = 20.0
# How long a pod stays bound to a NotReady node before it is evicted (upstream: 300 s): with
# the grace period, a stopped node's pods are replaced elsewhere within about 30 s.
NOT_READY_TOLERATION = 10


class ClusterError(RuntimeError):
    """The cluster could not start, or a call on it failed; the message says why."""


class KubectlMissing(ClusterError):
    """No kubectl binary; the message says where we looked."""


class Cluster:
    """A control plane and `nodes` nodes (n1, n2, ...); `start()`/`close()` or a `with` block.

    `kube_bin`: where the control plane's binaries are (else where `kubelet-sim demo` looks).
    `kube_version`: the Kubernetes version taken from the download cache (default: the demo's,
    DEFAULT_KUBE_VERSION); a directory named by `kube_bin` is taken as it is.
    `workdir`: where its data goes (default: a new temporary directory, removed on exit).
    `node_monitor_grace_period`: seconds (None: the controller-manager's own 40 s).
    `not_ready_toleration`: seconds a pod stays on a NotReady node before it is evicted (None:
    the API server's own 300 s). `on_step(what, seconds)` hears each step of `start()` end,
    with the seconds since it began (bench/).

    `kubeconfig` (and `context`): join that cluster instead of starting a control plane (the
    two settings above are then the cluster's own). `docker_network`: where the pods go
    (default: `bridge` with our control plane; joining, `kind` if Docker has it, else
    `bridge`).

    Its public attributes: `nodes` (the nodes' names, `["n1", "n2"]`), `kubeconfig` (the
    admin kubeconfig's path; joining, the user's), `context` (its context; None: its current
    one), `image` (a busybox image the nodes have: pulled, or made from this host's busybox)
    and `pod_endpoint_missing` (why pods cannot reach the API server; "" when they can, and
    in-cluster config works)."""

    def __init__(
        self,
        nodes: int = 2,
        *,
        kube_bin: Path | str | None = None,
        kube_version: str | None = None,
        workdir: Path | str | None = None,
        node_monitor_grace_period: float | None = NODE_MONITOR_GRACE_PERIOD,
        not_ready_toleration: int | None = NOT_READY_TOLERATION,
        timeout: float = 120.0,
        on_step: Callable[[str, float], None] | None = None,
        kubeconfig: Path | str | None = None,
        context: str | None = None,
        docker_network: str | None = None,
    ) -> None:
        if nodes < 1:
            raise ValueError("a cluster needs at least one node")
        self.joined = None if kubeconfig is None else Path(kubeconfig).expanduser()
        self.context = context
        self._network = docker_network
        self.binaries: Binaries | None = None
        try:
            self.binaries = find_binaries(
                None if kube_bin is None else Path(kube_bin),
                version=kube_version,
                require_controllers=self.joined is None,
            )
        except BinariesMissing:
            if self.joined is None:
                raise  # joining, only kubectl is looked for (then on PATH too)
        self._kube_bin = None if kube_bin is None else Path(kube_bin)
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="kubelet-sim-cluster-"))
        self.nodes: list[str] = [f"n{i}" for i in range(1, nodes + 1)]
        self.labels = {
            cri.LABEL_OWNER: f"testing-{secrets.token_hex(6)}",
            PROCESS_LABEL: this_process(),
        }
        self.timeout = timeout
        self.kubeconfig: Path = self.joined or self.workdir / "kubeconfig"
        self._grace = node_monitor_grace_period
        self._toleration = not_ready_toleration
        self._on_step = on_step
        self._began = 0.0
        self._local: LocalCluster | None = None  # our control plane, unless joining
        self._engine: DockerEngine | None = None
        self._admin: KubeConnection | None = None
        # The nodes: one set, so one process context (timers, events stream, listener).
        self._nodeset: NodeSet | None = None
        self._relays: dict[str, ApiRelay] = {}
        self._stop = threading.Event()
        self._binding_uid: str | None = None  # the ClusterRoleBinding we made in a joined one
        self._pause = DEFAULT_PAUSE_IMAGE
        self.image = DEFAULT_SAMPLE_IMAGE  # busybox: pulled, or the local look-alike
        # Why pods cannot reach the API server ("" when they can: in-cluster config works).
        self.pod_endpoint_missing = ""

    # --- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def start(self) -> Cluster:
        """Start the control plane (or join the cluster) and the nodes, and return once the
        nodes are Ready and the `default` ServiceAccount exists; on a failure, stop what
        started, then raise (ClusterError says why)."""
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _step(self, what: str) -> None:
        if self._on_step is not None:
            self._on_step(what, time.monotonic() - self._began)

    def _start(self) -> None:
        self._began = time.monotonic()
        self._stop = threading.Event()
        self.workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        network = self._network or ("bridge" if self.joined is None else _kind_or_bridge())
        self._engine = engine = engine_for(network)
        remove_dead_clusters(engine)
        self.image, self._pause = ensure_images(
            engine,
            DEFAULT_SAMPLE_IMAGE,
            DEFAULT_PAUSE_IMAGE,
            defaults=(DEFAULT_SAMPLE_IMAGE, DEFAULT_PAUSE_IMAGE),
            say=lambda _line: None,
        )
        self._step("images")
        if self.joined is not None:
            self._start_nodes()
        else:
            self._start_plane(engine)
        self.wait_ready(*self.nodes)
        self._step("nodes Ready")
        never = threading.Event()
        assert self._admin is not None
        if not wait_default_account(self._admin, "default", never, self.timeout):
            raise ClusterError(f"no default ServiceAccount after {self.timeout:.0f} s")
        self._step("default ServiceAccount")

    @property
    def plane(self) -> ControlPlane | None:
        """Our control plane (None when joining a cluster, or before `start`)."""
        return self._local.plane if self._local is not None else None

    def _start_plane(self, engine: DockerEngine) -> None:
        assert self.binaries is not None
        self._local = LocalCluster(
            self.binaries,
            self.workdir / "control-plane",
            engine,
            pause_image=self._pause,
            owner_labels=self.labels,
            node_monitor_grace_period=self._grace,
            default_toleration_seconds=self._toleration,
            on_step=lambda what, _seconds: self._step(what),
        )
        self._local.start(self.timeout, meanwhile=self._start_nodes)
        self.pod_endpoint_missing = self._local.pod_endpoint_missing

    def _start_nodes(self) -> None:
        """The nodes, as soon as the API server serves (the controllers start meanwhile)."""
        plane = self.plane
        if plane is not None:
            copy_private(plane.admin_kubeconfig, self.kubeconfig)
            host, port = api_server(self.kubeconfig)
        else:
            host, port = api_server(self.kubeconfig, self.context)
        # Our control plane's admin connection is the local cluster's (it granted the role).
        local = self._local
        self._admin = admin = local.admin if local else connect(str(self.kubeconfig), self.context)
        try:
            if plane is None:
                joined.refuse_taken_names(admin, self.nodes)
                self._binding_uid = joined.create_binding(admin, node_proxier_binding())
        except joined.NameTaken as exc:
            raise ClusterError(str(exc)) from None
        except ApiError as exc:
            raise ClusterError(f"granting the nodes kube-proxy's role: {exc}") from None
        assert self._engine is not None
        # Where the API server reaches the nodes: loopback with our control plane, this
        # host's address on the pods' network when joining (kind's nodes are there).
        address = NODE_IP if self._engine.network == "bridge" else self._engine.network_gateway()
        nodes = NodeSetSettings(
            nodes=tuple(
                NodeIdentity(
                    NodeSettings(
                        node_name=name,
                        node_ip=address,
                        kubelet_port=0,
                        register_with_taints=[],
                        creator=self.labels[cri.LABEL_OWNER],
                    )
                )
                for name in self.nodes
            ),
            root_dir=self.workdir / "nodes",
            docker_network=self._engine.network,
            server=ServerSettings(address=address, port=0),
            owner_labels=dict(self.labels),
        )
        if self._local is not None:
            try:
                nodes = self._local.join(nodes)
            except ApiError as exc:
                raise ClusterError(f"granting the nodes kube-proxy's role: {exc}") from None
        else:
            nodes = _with_pause_image(nodes, self._pause)
        # Each node reaches the API server through a relay of its own, which `kill_node` and
        # `cut_node` cut; its kubeconfig (its own credentials, or the user's) points there.
        identities = []
        for node in nodes.nodes:
            name = node.settings.node_name
            relay = self._relays[name] = ApiRelay(host, port)
            source = Path(node.kubeconfig) if node.kubeconfig else self.kubeconfig
            own = through_relay(
                source, self.workdir / f"{name}.kubeconfig", relay.port, self.context
            )
            identities.append(dataclasses.replace(node, kubeconfig=str(own), api_gate=relay))
        self._nodeset = NodeSet(dataclasses.replace(nodes, nodes=tuple(identities)), self._engine)
        self._nodeset.start(self._stop)
        self._step("nodes started")

    def close(self) -> None:
        """Stop everything this cluster started; safe to call more than once."""
        nodeset, self._nodeset = self._nodeset, None
        if nodeset is not None:
            self._stop.set()
            with contextlib.suppress(Exception):
                nodeset.wait(self._stop)
            nodeset.close()
        for relay in self._relays.values():
            relay.close()
        self._relays.clear()
        if self.joined is not None and self._admin is not None:
            # A cluster of the user's keeps no NotReady leftovers of ours, and all of its own.
            with contextlib.suppress(Exception):
                joined.delete_created_nodes(self._admin, self.nodes, self.labels[cri.LABEL_OWNER])
            if self._binding_uid is not None:
                with contextlib.suppress(Exception):
                    name = node_proxier_binding()["metadata"]["name"]
                    joined.delete_binding(self._admin, name, self._binding_uid)
                self._binding_uid = None
        if self._engine is not None:
            with contextlib.suppress(Exception):
                self._engine.remove_owned(self.labels)
            self._engine.close()
            self._engine = None
        if self._local is not None:
            self._local.stop(remove=True)
            self._local = None
        nodes_dir = self.workdir / "nodes"
        if nodes_dir.exists():
            for point in mount_points_under(nodes_dir.resolve()):
                with contextlib.suppress(OSError):
                    unmount(point)
        if self._own_workdir:
            remove_tree(self.workdir)
        else:
            remove_tree(nodes_dir)

    # --- the cluster -----------------------------------------------------------------------

    def api_client(self) -> Any:
        """An official client's `kubernetes.client.ApiClient` for the admin kubeconfig."""
        return connect(str(self.kubeconfig), self.context).api

    def kubectl(self, *args: str, timeout: float = 60.0) -> str:
        """kubectl with the admin kubeconfig; its output, or ClusterError with its stderr."""
        context = ["--context", self.context] if self.context else []
        done = subprocess.run(
            [str(self._kubectl()), "--kubeconfig", str(self.kubeconfig), *context, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def _kubectl(self) -> Path:
        if self.binaries is not None and self.binaries.kubectl is not None:
            return self.binaries.kubectl
        found = shutil.which("kubectl")
        if found:
            return Path(found)
        looked = [f"--kube-bin {self._kube_bin}"] if self._kube_bin else []
        looked += ["$KUBEBUILDER_ASSETS", "$KUBELET_SIM_KUBE_BIN", str(cache_dir()), "PATH"]
        raise KubectlMissing(
            f"no kubectl found; looked in: {', '.join(looked)}"
            " (`kubelet-sim demo --download` fetches one into the cache)"
        )

    def create_namespace(self, name: str) -> None:
        """Create namespace `name` and wait for its `default` ServiceAccount (pods need it)."""
        assert self._admin is not None, "start() first"
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        try:
            request_json(self._admin.api, "POST", "/api/v1/namespaces", body)
            ready = wait_default_account(self._admin, name, threading.Event(), self.timeout)
        except ApiError as exc:
            raise ClusterError(f"namespace {name}: {exc}") from None
        if not ready:
            raise ClusterError(
                f"namespace {name}: no default ServiceAccount after {self.timeout} s"
            )

    def delete_namespace(self, name: str) -> None:
        """Delete namespace `name` (its pods go as the nodes stop them; this does not wait)."""
        assert self._admin is not None, "start() first"
        try:
            request_json(self._admin.api, "DELETE", f"/api/v1/namespaces/{name}")
        except ApiError as exc:
            if exc.status != 404:
                raise ClusterError(f"namespace {name}: {exc}") from None

    def wait_ready(self, *names: str, timeout: float | None = None) -> None:
        """Until the nodes `names` are Ready (ClusterError at the deadline)."""
        assert self._admin is not None, "start() first"
        try:
            wait_nodes_ready(self._admin, names, threading.Event(), timeout=timeout or self.timeout)
        except RuntimeError as exc:
            raise ClusterError(str(exc)) from None

    # --- node faults -----------------------------------------------------------------------

    def stop_node(self, name: str) -> None:
        """The node's agent stops cleanly; its containers keep running. Its Lease ages and the
        controller-manager marks the Node NotReady (after the grace period)."""
        self._running(name).stop_node(name)

    def start_node(self, name: str, *, wait: bool = True) -> None:
        """Start a stopped or killed node again (API restored): it adopts its containers."""
        self._running(name).start_node(name)
        if wait:
            self.wait_ready(name)

    def kill_node(self, name: str) -> None:
        """As a crash: the node's API connections drop at once, with no last write, and its
        threads are stopped behind that cut; its containers keep running."""
        self._running(name).kill_node(name)

    def cut_node(self, name: str, seconds: float) -> None:
        """The node loses the API server for `seconds` (from now; this returns at once): its
        connections drop and new ones are refused. Then it reconnects and resyncs."""
        self._running(name).cut_node(name, seconds)

    def _running(self, name: str) -> NodeSet:
        if name not in self.nodes:
            raise ClusterError(f"no node {name!r}; the nodes are {self.nodes}")
        if self._nodeset is None:
            raise ClusterError("the cluster is not running: start() first")
        return self._nodeset


def _kind_or_bridge() -> str:
    """kind's network where Docker has one (its nodes, and so its API server, are there)."""
    engine = engine_for("kind")
    try:
        engine.network_gateway()
    except RuntimeUnavailable:
        return "bridge"
    finally:
        engine.close()
    return "kind"


def _with_pause_image(nodes: NodeSetSettings, image: str) -> NodeSetSettings:
    return dataclasses.replace(nodes, pods=dataclasses.replace(nodes.pods, pause_image=image))
