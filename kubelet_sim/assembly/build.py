"""The one place a node is made: its settings and the process's context in, a `Node` out.

Every part a node runs is constructed here (and the pod workers' own parts in
podworkers/assemble.py, called from here), wired to the process's shared parts: the timers,
the Docker events stream and the kubelet API listener always come from the process, the
watches from the node's credentials (`nodeset.py` decides whose). The `kubelet-sim` command,
the demo, the pytest plugin, the tests and bench/ all get their nodes from here.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubelet_sim import cri
from kubelet_sim.assembly.intake import PodIntake
from kubelet_sim.assembly.node import Node, NodeParts
from kubelet_sim.assembly.process import ProcessContext
from kubelet_sim.assembly.served_node import ServedNode
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.formats.quantity import milli_value, value
from kubelet_sim.kube.client import KubeConnection
from kubelet_sim.kube.events import EventRecorder
from kubelet_sim.kube.node_api import NodeApi
from kubelet_sim.kube.object_watches import Ref, ReferencedObjectWatches
from kubelet_sim.kube.pod_api import MirrorPodApi, PodStatusWriter, delete_pod_finally
from kubelet_sim.kube.reviews import Reviews
from kubelet_sim.kube.schema import ServerSchema
from kubelet_sim.kube.shared_watches import SharedWatches
from kubelet_sim.kube.tokens import TokenManager
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.loops.workqueue import WorkQueue
from kubelet_sim.node.host import HostFacts
from kubelet_sim.node.lifecycle import NodeLifecycle
from kubelet_sim.node.node_object import StatusFacts, resources
from kubelet_sim.node.node_object import build_node as registered_node
from kubelet_sim.node.settings import NodeSettings
from kubelet_sim.pod.admission import HUGEPAGES_PREFIX, Allocatable
from kubelet_sim.pod.generation import KubeletGeneration, generation_of
from kubelet_sim.podworkers.assemble import SyncerPorts, pod_syncer
from kubelet_sim.podworkers.gc import ContainerGC
from kubelet_sim.podworkers.pod_manager import PodManager
from kubelet_sim.podworkers.pool import SandboxPool
from kubelet_sim.podworkers.settings import PodSettings, SyncSettings
from kubelet_sim.podworkers.waits import relist_lag
from kubelet_sim.podworkers.workers import PodWorkers, waker
from kubelet_sim.proxy.proxy import ProxySettings, ServiceProxy
from kubelet_sim.runtime.engine import DockerEngine
from kubelet_sim.runtime.node_runtime import NodeRuntime
from kubelet_sim.runtime.observe import ContainerWatcher
from kubelet_sim.server.auth import Gate
from kubelet_sim.server.http import KubeletServer
from kubelet_sim.server.settings import ServerSettings
from kubelet_sim.staticpods.source import StaticPods
from kubelet_sim.staticpods.status import MirrorStatus
from kubelet_sim.volumes import VolumeManager

# Connections kept for ConfigMap/Secret watches: a pod using two objects of its own is common
# (an env ConfigMap, a Secret); watches beyond it still work on connections not kept.
OBJECT_WATCHES_PER_POD = 2


@dataclass(frozen=True)
class NodeWiring:
    """What the set decided for one node: its settings, files, credentials and watches."""

    settings: NodeSettings
    root_dir: Path
    kube: KubeConnection
    watches: SharedWatches
    server: ServerSettings | None  # None: no kubelet API
    supervisor: Supervisor  # the node's loops' (its own watches' too)
    proxy_off: str | None = None  # why no service proxy runs though one was asked for


def node_runtime(process: ProcessContext, node_name: str, root_dir: Path) -> NodeRuntime:
    """A node's runtime on the process's engine."""
    options = process.runtime_options
    return NodeRuntime(
        process.engine,
        node_name,
        root_dir,
        log_rotation=options.log_rotation,
        owner_labels=dict(options.owner_labels),
    )


def reading_runtime(engine: DockerEngine, node_name: str, root_dir: Path) -> NodeRuntime:
    """A runtime that reads a node's containers and journal, whoever made them (the demo's
    too): for the tools and the web view, which run no node."""
    return NodeRuntime(engine, node_name, root_dir, owner_labels=None)


def build_node(
    wiring: NodeWiring,
    pods: PodSettings,
    process: ProcessContext,
    schema: ServerSchema,
) -> Node:
    """Construction raises ServerError (a port in use, a bad certificate) in one line;
    nothing runs until `Node.start`."""
    name = wiring.settings.node_name
    kube, watches = wiring.kube, wiring.watches
    supervisor = wiring.supervisor
    runtime = node_runtime(process, name, wiring.root_dir)
    allocatable = _allocatable(wiring.settings, process.host)
    node_ip = wiring.settings.node_ip or process.host.node_ip or "127.0.0.1"
    index = PodManager()
    # The pod workers' queue comes first: everything that brings a pod back to its worker
    # (Docker events, the informers, pulls, hooks, probes) is given `wake` when made.
    queue: WorkQueue[str] = WorkQueue(supervisor=supervisor)
    wake = waker(queue)

    # Parts made below are called back only once the node runs: these late calls reach them.
    def object_changed(ref: Ref) -> None:
        intake.on_object_change(ref)

    def journal(uid: str, step: str, **fields: Any) -> None:
        syncer.journal(uid, step, **fields)

    objects = ReferencedObjectWatches(
        kube.api,
        object_changed,
        node=name,
        supervisor=supervisor,
        pool_size=OBJECT_WATCHES_PER_POD * allocatable.pods,
    )
    generation = _Generation(schema, name)  # whose rules: the API server's version's kubelet
    events = EventRecorder(
        kube.api,
        name,
        supervisor=supervisor,
        spam_by_type=lambda: generation().spam_key_by_type,
    )
    watcher = ContainerWatcher(
        runtime,
        waker(queue, after=lambda uid: relist_lag(syncer.runs(uid))),
        node_name=name,
        events=process.container_events,
    )

    def running_sandboxes() -> list[cri.ObservedContainer]:
        return [
            c
            for c in watcher.all_containers()
            if c.is_sandbox and c.state == cri.ContainerState.RUNNING
        ]

    def services() -> list[Json] | None:
        """Every Service, once the first list is in (None before: no variables can be made)."""
        if not watches.services.synced.is_set():
            return None
        return watches.services.items()

    proxy = None
    proxy_watches = watches.proxy_watches
    if proxy_watches is not None:  # the set watches for a proxy only where one runs
        proxy = ServiceProxy(
            ProxySettings(name, *process.pod_network),
            services,
            running_sandboxes,
            events,
            watches=proxy_watches,
            timers=process.timers,
        )
    pool = SandboxPool(
        runtime,
        size=pods.sandbox_pool_size,
        image=pods.pause_image,
        pods_in_use=lambda: len(index),
        max_pods=allocatable.pods,
        supervisor=supervisor,
    )
    intake = PodIntake(
        name,
        index,
        objects,
        queue,
        journal,
        watches.pods.synced,
    )
    writer = PodStatusWriter(kube.api, schema)
    static = None
    status: PodStatusWriter | MirrorStatus = writer
    if pods.pod_manifest_path is not None:
        # The static pods' source: a second beside the API's, into the same index; their
        # status goes to their mirror pods.
        intake.static = static = StaticPods(
            pods.pod_manifest_path,
            name,
            MirrorPodApi(kube.api),
            events=events,
            on_pod=intake.on_static_pod,
            wake=wake,
            node=lambda: node.node_object,
            known=lambda uid: uid in syncer.states,
            timers=process.timers,
        )
        status = MirrorStatus(writer, static.mirror_of, static.owns)

    def final_delete(namespace: str, pod_name: str, uid: str) -> None:
        """The pod workers' last word on a deleted pod: the API's DELETE, or for a static pod
        gone from its file, its end (it leaves the index, its mirror is deleted)."""
        if static is not None and static.owns(uid):
            static.finished(uid)
            return
        delete_pod_finally(kube.api, namespace, pod_name, uid)

    syncer = pod_syncer(
        SyncSettings(
            node_name=name,
            node_ip=node_ip,
            pause_image=pods.pause_image,
            allow_privileged=pods.allow_privileged,
            allocatable=allocatable,
            dns=dataclasses.replace(pods.dns, node_ips=(node_ip,)),
            allowed_unsafe_sysctls=pods.allowed_unsafe_sysctls,
            apparmor=process.host.apparmor,
        ),
        SyncerPorts(
            runtime,
            watcher,
            status,
            events,
            objects,
            final_delete,
            index,
            VolumeManager(runtime.root_dir, allocatable=allocatable, mount=process.host.may_mount),
            TokenManager(kube.api),
            wake=wake,
            services=services,
            network=proxy.setup if proxy is not None else None,
            pool=pool if pool.enabled else None,
            generation=generation,
            pace=process.pace_pod_starts,
            # getNodeAnyWay: the Node the watch last told, else the one the node registers
            node=lambda: (
                node.node_object
                or registered_node(
                    wiring.settings, process.host, StatusFacts("", [], datetime.now(UTC))
                )
            ),
        ),
        supervisor,
    )
    workers = PodWorkers(syncer, queue, workers=pods.workers, supervisor=supervisor)
    gc = ContainerGC(
        watcher,
        syncer.stopper,
        name,
        process.timers,
        backoffs=syncer.backoffs(),
    )
    settings = wiring.settings
    server = None
    if wiring.server is not None:  # bound first: the Node advertises the port it really has
        served = ServedNode(
            name, index, watcher, syncer, workers, runtime, kube, watches, process.timers,
            (supervisor, process.supervisor), process.collector.pauses,
        )  # fmt: skip
        server = _kubelet_server(settings, wiring.server, process, kube, runtime, served)
        settings = dataclasses.replace(settings, kubelet_port=server.port)
    lifecycle = NodeLifecycle(
        settings,
        NodeApi(kube.heartbeat_api, schema, settings.heartbeat_timeout),  # the HeartbeatClient
        process.probe,
        process.timers,
        host=process.host,
        generation=syncer.generation,  # the node's status follows the same kubelet's rules
    )
    node = Node(
        NodeParts(
            settings=settings,
            kube=kube,
            runtime=runtime,
            supervisor=supervisor,
            lifecycle=lifecycle,
            watches=watches,
            pods=index,
            intake=intake,
            objects=objects,
            events=events,
            watcher=watcher,
            pool=pool,
            syncer=syncer,
            workers=workers,
            gc=gc,
            proxy=proxy,
            server=server,
            static=static,
            proxy_off=wiring.proxy_off,
        )
    )
    return node


class _Generation:
    """The kubelet whose status rules apply: the API server's version's (read once)."""

    def __init__(self, schema: ServerSchema, node_name: str) -> None:
        self._schema = schema
        self._node_name = node_name
        self._known: KubeletGeneration | None = None
        self._lock = threading.Lock()

    def __call__(self) -> KubeletGeneration:
        with self._lock:
            if self._known is None:
                version, known = self._schema.version(), self._schema.properties()
                self._known = generation_of(version, known)
                get_logger("kubelet_sim.node", node=self._node_name).info(
                    "status rules", kubelet_minor=self._known.minor
                )
            return self._known


def _allocatable(settings: NodeSettings, host: HostFacts) -> Allocatable:
    _, allocatable = resources(settings, host)
    return Allocatable(
        cpu_milli=milli_value(allocatable["cpu"]),
        memory_bytes=value(allocatable["memory"]),
        pods=int(allocatable["pods"]),
        ephemeral_storage_bytes=value(allocatable["ephemeral-storage"]),
        hugepages={
            name: value(amount)
            for name, amount in allocatable.items()
            if name.startswith(HUGEPAGES_PREFIX)
        },
    )


def _kubelet_server(
    node: NodeSettings,
    settings: ServerSettings,
    process: ProcessContext,
    kube: KubeConnection,
    runtime: NodeRuntime,
    served: ServedNode,
) -> KubeletServer:
    assert process.listener is not None, "a process whose nodes serve has a listener"
    host = process.host
    ips = [node.node_ip or host.node_ip or "", "127.0.0.1"]
    names = [node.node_name, host.hostname, "localhost"]
    made = functools.partial(_self_signed, runtime.root_dir / "pki", node.node_name, names, ips)
    return KubeletServer(
        served,
        runtime.streams,
        Gate(
            Reviews(kube.api),
            node.node_name,
            settings.anonymous_auth,
            tokens=process.listener.tokens,
        ),
        address=settings.address,
        port=settings.port,
        cert_file=settings.tls_cert_file,
        key_file=settings.tls_private_key_file,
        self_signed=made,
        client_ca_file=settings.client_ca_file or kube.ca_file,
        listener=process.listener,
    )


def _self_signed(
    directory: Path, node_name: str, names: list[str], ips: list[str]
) -> tuple[Path, Path]:
    """`server.certs` and its `cryptography` (some 8 MiB) imported at a node's first client."""
    from kubelet_sim.server.certs import self_signed  # noqa: PLC0415

    return self_signed(directory, node_name, names, ips)
