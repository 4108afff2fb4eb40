"""The running agent: wires the API edge, the Docker runtime and the controllers together."""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kubelet_sim import cri
from kubelet_sim.config import ConfigError
from kubelet_sim.jsontypes import Json
from kubelet_sim.kube.client import KubeConnection, wait_for_api_server
from kubelet_sim.kube.events import EventRecorder
from kubelet_sim.kube.informer import DELETED, Informer
from kubelet_sim.kube.node_api import NodeApi
from kubelet_sim.kube.object_watches import Ref, ReferencedObjectWatches
from kubelet_sim.kube.pod_api import MirrorPodApi, PodStatusWriter, delete_pod_finally
from kubelet_sim.kube.reviews import Reviews
from kubelet_sim.kube.schema import ServerSchema
from kubelet_sim.kube.shared_watches import Feed, NodeHandlers, SharedFeed, SharedWatches
from kubelet_sim.kube.tokens import TokenManager
from kubelet_sim.kube.watches import all_services, own_node, pods_on_node
from kubelet_sim.logs import get_logger
from kubelet_sim.node.host import HostFacts, detect_host, host_usage
from kubelet_sim.node.lifecycle import NodeLifecycle, RuntimeProbe
from kubelet_sim.node.node_object import resources
from kubelet_sim.node.settings import NodeSettings
from kubelet_sim.pod.admission import Allocatable
from kubelet_sim.pod.dns import NodeDNS, ResolvConf, parse_resolv_conf
from kubelet_sim.pod.generation import KubeletGeneration, generation_of
from kubelet_sim.pod.references import referenced_objects
from kubelet_sim.pod.static import is_mirror_pod
from kubelet_sim.podworkers.gc import ContainerGC
from kubelet_sim.podworkers.pool import SandboxPool
from kubelet_sim.podworkers.sync import PodSyncer, SyncSettings
from kubelet_sim.podworkers.workers import RELIST_LAG, PodWorkers, waker
from kubelet_sim.proxy.proxy import ProxySettings, ServiceProxy
from kubelet_sim.quantity import milli_value, value
from kubelet_sim.runtime.node_runtime import NodeRuntime
from kubelet_sim.runtime.observe import ContainerEvents, ContainerWatcher
from kubelet_sim.server.auth import Gate
from kubelet_sim.server.http import KubeletServer
from kubelet_sim.server.listener import Listener
from kubelet_sim.server.metrics import Family, Sample, histogram_family, render
from kubelet_sim.server.settings import ServerSettings
from kubelet_sim.server.usage import NodeUsage, PodUsage
from kubelet_sim.staticpods.source import StaticPods
from kubelet_sim.staticpods.status import MirrorStatus
from kubelet_sim.supervise import LoopFailed, LoopHealth, Supervisor
from kubelet_sim.timers import Timers
from kubelet_sim.volumes import VolumeManager
from kubelet_sim.workqueue import WorkQueue

# Connections kept for ConfigMap/Secret watches: a pod using two objects of its own is common
# (an env ConfigMap, a Secret); watches beyond it still work on connections not kept.
OBJECT_WATCHES_PER_POD = 2
SHUTDOWN_SECONDS = 3.0  # how long a stop waits for threads in a Docker or API call


SERVICES_GRACE = 5.0  # seconds the pod workers wait for the first list of Services


class Stoppable(Protocol):
    def stop(self, timeout: float) -> None: ...


@dataclass(frozen=True)
class PodSettings:
    pause_image: str = "registry.k8s.io/pause:3.10"
    allow_privileged: bool = False
    workers: int = 8
    dns: NodeDNS = dataclasses.field(default_factory=NodeDNS)  # resolvers and hosts files
    allowed_unsafe_sysctls: tuple[str, ...] = ()
    sandbox_pool_size: int = 0  # warm sandboxes kept ready (podworkers/pool.py); 0: none
    pod_manifest_path: Path | None = None  # static pods' manifests (staticpods/); None: none


DEFAULT_RESOLV_CONF = "/etc/resolv.conf"
SYSTEMD_RESOLV_CONF = "/run/systemd/resolve/resolv.conf"


def node_dns(
    cluster_dns: list[str],
    domain: str,
    resolv_conf: str,
    *,
    default: str = DEFAULT_RESOLV_CONF,
    systemd: str = SYSTEMD_RESOLV_CONF,
) -> NodeDNS:
    """--cluster-dns (repeated or comma-separated), --cluster-domain and --resolv-conf read
    once; ConfigError in one line when an address or the file is bad.

    The default file naming only systemd-resolved's stub (127.0.0.53, useless inside a pod)
    gives way to systemd-resolved's real upstreams, as kubeadm configures kubelets."""
    servers = [ip.strip() for item in cluster_dns for ip in item.split(",") if ip.strip()]
    for ip in servers:
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            raise ConfigError(f"--cluster-dns: {ip!r} is not an IP address") from None
    host = None
    if resolv_conf:
        host = _read_resolv_conf(resolv_conf)
        stub_only = bool(host.servers) and all(_loopback(s) for s in host.servers)
        if resolv_conf == default and stub_only and Path(systemd).exists():
            host = _read_resolv_conf(systemd)
    return NodeDNS(tuple(servers), domain.strip(".").lower(), host)


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _read_resolv_conf(path: str) -> ResolvConf:
    try:
        return parse_resolv_conf(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read --resolv-conf {path}: {exc.strerror or exc}") from None


class Agent:
    """Owns every long-running part of the node; `run` returns once `stop` is set.

    Start order: API server reachable → Node registered (Lease and status threads) → watches
    on the Node, the pods bound to it and the node's containers → pod workers, once both the
    pod list and the container list are in (so nothing is mistaken for an orphan). Stop order
    is the reverse; running pods are left alone, as the kubelet leaves them.

    Every thread runs under `supervisor`: a loop that raised is restarted; one that keeps
    failing stops the agent, and `run` raises `LoopFailed` (the command exits 1).
    """

    _node: Json | None = None  # our Node as the informer last told (the mirror pods' owner)
    static: StaticPods | None = None  # the static pods' source (--pod-manifest-path)
    _kubelet_generation: KubeletGeneration | None = None  # see _generation

    def __init__(
        self,
        settings: NodeSettings,
        kube: KubeConnection,
        runtime: NodeRuntime,
        pods: PodSettings | None = None,
        schema: ServerSchema | None = None,
        server: ServerSettings | None = None,
        *,
        proxy: KubeConnection | None = None,
        shared: SharedWatches | None = None,
        timers: Timers | None = None,
        host: HostFacts | None = None,
        container_events: ContainerEvents | None = None,
        listener: Listener | None = None,
        runtime_probe: RuntimeProbe | None = None,
    ) -> None:
        """`proxy`: the service proxy's connection (kube-proxy's rights); None runs none.

        `shared`, `timers`, `container_events`, `listener`: a process of many nodes gives its
        watches (pods, Nodes, Services, EndpointSlices), its periodic loops (Lease, status,
        proxy, GC), its Docker events stream and its kubelet API listener to all of them;
        None: this node has its own. `host`: the host, read once for all the nodes of a set;
        `runtime_probe`: the engine's health, version and images, asked once for all of them."""
        self.kube = kube
        self.runtime = runtime
        self.node_name = settings.node_name
        self.log = get_logger("kubelet_sim.agent", node=self.node_name)
        host = host or detect_host()
        self.server: KubeletServer | None = None
        if server is not None:  # bound first: the Node advertises the port it really has
            self.server = self._kubelet_server(settings, server, host, listener)
            settings = dataclasses.replace(settings, kubelet_port=self.server.port)
        self.settings = settings
        self._halt = threading.Event()  # the caller's stop, or a loop that failed for good
        self._started_lock = threading.Lock()
        self._controllers_started = False
        self.supervisor = supervisor = Supervisor(
            on_failure=lambda _why: self._halt.set(), node=self.node_name
        )
        self.schema = schema or ServerSchema.of_server(kube.api)  # read on first use
        self.lifecycle = NodeLifecycle(
            settings,
            NodeApi(kube.api, self.schema),
            runtime_probe or runtime,
            host=host,
            supervisor=supervisor,
            timers=timers,
        )
        self.objects = ReferencedObjectWatches(
            kube.api,
            self._on_object_change,
            node=self.node_name,
            supervisor=supervisor,
            pool_size=OBJECT_WATCHES_PER_POD * self._allocatable().pods,
        )
        self.shared = shared
        self.timers = timers
        self.node_informer: Feed
        self.pod_informer: Feed
        self.service_informer: Feed
        if shared is not None:
            self.node_informer = SharedFeed(shared.nodes)
            self.pod_informer = SharedFeed(shared.pods)
        else:
            self.node_informer = Informer(
                own_node(kube.api, self.node_name),
                self._on_node_event,
                supervisor=supervisor,
                node=self.node_name,
            )
            self.pod_informer = Informer(
                pods_on_node(kube.api, self.node_name),
                self._on_pod_event,
                supervisor=supervisor,
                node=self.node_name,
            )
        self.events = EventRecorder(kube.api, self.node_name, supervisor=supervisor)
        self.proxy: ServiceProxy | None = None
        if proxy is not None:
            self.proxy = ServiceProxy(
                ProxySettings(self.node_name, runtime.network_subnet()),
                proxy,
                self._services,
                self._running_sandboxes,
                self.events,
                supervisor,
                shared=(shared.slices, shared.nodes)
                if shared is not None and shared.slices is not None
                else None,
                timers=timers,
            )
        # The kubelet's service informer: service-link variables are read from its cache (and
        # the service proxy's rules from it).
        if shared is not None:
            self.service_informer = SharedFeed(shared.services)
        else:
            self.service_informer = Informer(
                all_services(kube.api),
                self._on_service_event if self.proxy is not None else None,
                supervisor=supervisor,
                node=self.node_name,
            )
        self._pods: dict[str, Json] = {}
        self._pods_lock = threading.Lock()
        pod_settings = pods or PodSettings()
        node_ip = settings.node_ip or self.lifecycle.host.node_ip or "127.0.0.1"
        # The pod workers' queue comes first: everything that brings a pod back to its worker
        # (Docker events, the informers, pulls, hooks, probes) is given `wake` when made.
        queue: WorkQueue[str] = WorkQueue(supervisor=supervisor)
        wake = waker(queue)
        self.watcher = ContainerWatcher(
            runtime,
            waker(queue, after=RELIST_LAG),
            node_name=self.node_name,
            supervisor=supervisor,
            events=container_events,
        )
        self.pool = SandboxPool(
            runtime,
            size=pod_settings.sandbox_pool_size,
            image=pod_settings.pause_image,
            pods_in_use=lambda: len(self.active_pods()),
            max_pods=self._allocatable().pods,
            supervisor=supervisor,
        )
        self.syncer = PodSyncer(
            SyncSettings(
                node_name=self.node_name,
                node_ip=node_ip,
                pause_image=pod_settings.pause_image,
                allow_privileged=pod_settings.allow_privileged,
                allocatable=self._allocatable(),
                dns=dataclasses.replace(pod_settings.dns, node_ips=(node_ip,)),
                allowed_unsafe_sysctls=pod_settings.allowed_unsafe_sysctls,
                apparmor=self.lifecycle.host.apparmor,
            ),
            runtime,
            watcher=self.watcher,
            status=self._status_sink(pod_settings, wake, timers),
            events=self.events,
            objects=self.objects,
            final_delete=self._final_delete,
            pod_of=self.pod_of,
            active_pods=self.active_pods,
            volumes=VolumeManager(runtime.root_dir, allocatable=self._allocatable()),
            tokens=TokenManager(kube.api),
            wake=wake,
            services=self._services,
            supervisor=supervisor,
            network=self.proxy.setup if self.proxy is not None else None,
            pool=self.pool if pod_settings.sandbox_pool_size > 0 else None,
            generation=self._generation,
        )
        self.workers = PodWorkers(
            self.syncer, queue, workers=pod_settings.workers, supervisor=supervisor
        )
        self.gc = ContainerGC(
            self.watcher,
            self.syncer.stopper,
            self.node_name,
            supervisor=supervisor,
            backoffs=(
                self.syncer.mount_backoff,
                self.syncer.starter.crash_backoff,
                self.syncer.starter.puller.backoff,
            ),
            timers=timers,
        )
        if shared is not None:
            shared.register(
                self.node_name,
                NodeHandlers(
                    self._on_pod_event,
                    self._on_node_event,
                    self.proxy.changed if self.proxy is not None else None,
                ),
            )

    def _status_sink(
        self, pods: PodSettings, wake: Callable[[str], None], timers: Timers | None
    ) -> PodStatusWriter | MirrorStatus:
        """The pod workers' status sink; with static pods, their source (`self.static`, a
        second beside the API's, into the same index) and a sink that writes their status to
        their mirror pods."""
        writer = PodStatusWriter(self.kube.api, self.schema)
        if pods.pod_manifest_path is None:
            return writer
        self.static = static = StaticPods(
            pods.pod_manifest_path,
            self.node_name,
            MirrorPodApi(self.kube.api),
            on_pod=self._on_static_pod,
            wake=wake,
            node=lambda: self._node,
            known=lambda uid: uid in self.syncer.states,
            supervisor=self.supervisor,
            timers=timers,
        )
        return MirrorStatus(writer, static.mirror_of, static.owns)

    def health(self) -> dict[str, LoopHealth]:
        """Each supervised loop's state and restarts, for a `/healthz`."""
        return self.supervisor.health()

    def run(self, stop: threading.Event) -> None:
        """Run until `stop` is set; raises LoopFailed if a loop failed beyond its limit."""
        relay = threading.Thread(target=self._halt_on, args=(stop,), daemon=True)
        relay.start()
        try:
            if self.start_up(self._halt):
                self._halt.wait()
        finally:
            self._halt.set()
            self.shut_down()
            relay.join()
        self.raise_if_failed()

    def raise_if_failed(self) -> None:
        if self.supervisor.failed.is_set():
            self.log.error("stopped: a loop kept failing", error=self.supervisor.failure)
            raise LoopFailed(self.supervisor.failure)

    def _halt_on(self, stop: threading.Event) -> None:
        """Stop on the caller's event, and stop the node lifecycle at once (even mid-retry)."""
        while not stop.wait(0.5) and not self._halt.is_set():
            pass
        self._halt.set()
        self.lifecycle.interrupt()

    def start_up(self, stop: threading.Event) -> bool:
        """Up to serving pods: True once the pod workers run; False if `stop` came first.

        Returns, unlike `run`: a set of many nodes starts each on a short-lived thread and
        keeps none per node after (`shut_down` ends what this started)."""
        self.log.info(
            "starting",
            api_server=self.kube.host,
            config_source=self.kube.source,
            docker_version=self.runtime.version(),
        )
        if wait_for_api_server(self.kube, stop) is None:
            self.log.info("stopped before the API server answered")
            return False
        if not self.lifecycle.start():
            return False
        with self._started_lock:
            if stop.is_set():
                return False
            self._controllers_started = True
            watcher = self.watcher
            if self.server is not None:
                self.server.start(self.supervisor)
            self.events.start()
            self.node_informer.start()
            self.pod_informer.start()
            self.service_informer.start()
            if self.proxy is not None:
                self.proxy.start()
            watcher.start()
        for synced in (self.pod_informer.synced.wait, watcher.wait_synced):
            while not stop.is_set() and not synced(0.5):  # wakes only to notice a stop
                pass
        # The Services too, briefly: a container started before them would wait out a retry
        # (the kubelet does not wait; a node that may not list them must still run pods).
        self.service_informer.synced.wait(SERVICES_GRACE)
        if stop.is_set():
            return False
        if self.static is not None:  # its pods in the index before the workers look for orphans
            self.static.start()
        self.workers.start()
        self.gc.start()
        self.pool.start()
        for uid in {*self._pod_uids(), *watcher.pod_uids()}:
            self.workers.enqueue(uid)
        self.log.info("running")
        return True

    def shut_down(self) -> None:
        """Stop what `start_up` started, within SHUTDOWN_SECONDS; running pods are left alone.

        Safe to call while `start_up` still runs on another thread (it then starts nothing
        more) and more than once."""
        self.lifecycle.interrupt()  # at once: a registration still retrying gives up
        with self._started_lock:
            started, self._controllers_started = self._controllers_started, False
        if started:
            self._stop_controllers()
        elif self.server is not None:
            self.server.stop()
        self.lifecycle.stop()

    def _stop_controllers(self) -> None:
        self.log.info("stopping")
        if self.shared is not None:
            self.shared.unregister(self.node_name)
        deadline = time.monotonic() + SHUTDOWN_SECONDS
        parts: list[Stoppable] = [
            *([self.static] if self.static is not None else []),
            self.pod_informer,
            self.node_informer,
            self.service_informer,
            *([self.proxy] if self.proxy is not None else []),
            self.gc,
            self.workers,
            self.pool,  # removes its unclaimed sandboxes
            self.watcher,
            self.objects,
            self.events,
        ]
        for part in parts:  # ask every part at once, so that none waits behind a slow one
            part.stop(0)
        # Then wait within one deadline. A thread still inside a Docker or API call past it is
        # left to it: the call either happened or did not, and the next start adopts what
        # Docker has, as the kubelet's restart does.
        for part in parts:
            part.stop(max(0.0, deadline - time.monotonic()))
        if self.server is not None:
            self.server.stop()
        if self.shared is not None:
            return  # the set's watches: their counters are the set's
        for name, informer in (("pods", self.pod_informer), ("node", self.node_informer)):
            stats = informer.stats
            self.log.info(
                "watch counters",
                watch=name,
                lists=stats.lists,
                relists=stats.relists,
                watches=stats.watches,
                expired=stats.expired,
                reconnects=stats.reconnects,
                events=dict(stats.events),
            )

    def _kubelet_server(
        self,
        node: NodeSettings,
        settings: ServerSettings,
        host: HostFacts,
        listener: Listener | None,
    ) -> KubeletServer:
        ips = [node.node_ip or host.node_ip or "", "127.0.0.1"]
        names = [node.node_name, host.hostname, "localhost"]
        made = functools.partial(
            _self_signed, self.runtime.root_dir / "pki", node.node_name, names, ips
        )
        return KubeletServer(
            _AgentView(self),
            self.runtime.streams,
            Gate(Reviews(self.kube.api), node.node_name, settings.anonymous_auth),
            address=settings.address,
            port=settings.port,
            cert_file=settings.tls_cert_file,
            key_file=settings.tls_private_key_file,
            self_signed=made,
            client_ca_file=settings.client_ca_file or self.kube.ca_file,
            limits=settings.limits,
            listener=listener,
        )

    # -- the pod index (by uid) for the workers --------------------------------------------

    def _generation(self) -> KubeletGeneration:
        """The kubelet whose status rules apply: the API server's version's (read once)."""
        if self._kubelet_generation is None:
            version, known = self.schema.version(), self.schema.properties()
            self._kubelet_generation = generation_of(version, known)
            self.log.info("status rules", kubelet_minor=self._kubelet_generation.minor)
        return self._kubelet_generation

    def pod_of(self, uid: str) -> Json | None:
        with self._pods_lock:
            return self._pods.get(uid)

    def _on_service_event(self, _kind: str, _service: Json) -> None:
        if self.proxy is not None:
            self.proxy.changed()

    def _running_sandboxes(self) -> list[cri.ObservedContainer]:
        return [
            c
            for c in self.watcher.all_containers()
            if c.is_sandbox and c.state == cri.ContainerState.RUNNING
        ]

    def _services(self) -> list[Json] | None:
        """Every Service, once the first list is in (None before: no variables can be made)."""
        if not self.service_informer.synced.is_set():
            return None
        return self.service_informer.items()

    def active_pods(self) -> list[Json]:
        with self._pods_lock:
            return list(self._pods.values())

    def _pod_uids(self) -> set[str]:
        with self._pods_lock:
            return set(self._pods)

    # -- handlers (run on informer and watcher threads: quick, they only enqueue) ----------

    def _on_node_event(self, kind: str, node: Json) -> None:
        self._node = None if kind == DELETED else node
        if kind == DELETED:
            self.log.warning("own Node deleted; registering it again")
            self.lifecycle.node_deleted()
        else:
            self.lifecycle.node_changed(node)

    def _on_pod_event(self, kind: str, pod: Json) -> None:
        if is_mirror_pod(pod):  # the API's copy of a static pod: never run for itself
            if self.static is not None:
                self.static.mirror_event(kind, pod)
            return
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        log = self.log.bind(pod=f"{meta.get('namespace')}/{meta.get('name')}", uid=uid)
        with self._pods_lock:
            if kind == DELETED:
                self._pods.pop(uid, None)
            else:
                self._pods[uid] = pod
        if kind == DELETED:
            self.objects.forget_pod(uid)
            log.info("pod removed from the API")
        else:
            self.objects.set_pod_references(uid, referenced_objects(pod))
            if kind == "ADDED":
                log.info("pod bound to this node", phase=(pod.get("status") or {}).get("phase"))
                self.syncer.journal(
                    uid,
                    "seen",
                    event=kind,
                    via="watch" if self.pod_informer.synced.is_set() else "list",
                    resourceVersion=meta.get("resourceVersion"),
                )
        (self.workers.enqueue_gone if kind == DELETED else self.workers.enqueue)(uid)

    def _on_static_pod(self, uid: str, pod: Json | None) -> None:
        """A static pod read from its file (None: gone and terminated), into the index."""
        with self._pods_lock:
            new = uid not in self._pods
            if pod is None:
                self._pods.pop(uid, None)
            else:
                self._pods[uid] = pod
        if pod is None:
            self.objects.forget_pod(uid)
            self.workers.enqueue_gone(uid)
            return
        self.objects.set_pod_references(uid, referenced_objects(pod))
        if new:
            meta = pod["metadata"]
            self.log.info(
                "static pod from a file", pod=f"{meta['namespace']}/{meta['name']}", uid=uid
            )
            self.syncer.journal(uid, "seen", event="ADDED", via="file")
        self.workers.enqueue(uid)

    def _final_delete(self, namespace: str, name: str, uid: str) -> None:
        """The pod workers' last word on a deleted pod: the API's DELETE, or for a static pod
        gone from its file, its end (it leaves the index, its mirror is deleted)."""
        if self.static is not None and self.static.owns(uid):
            self.static.finished(uid)
            return
        delete_pod_finally(self.kube.api, namespace, name, uid)

    def _on_object_change(self, ref: Ref) -> None:
        for uid in self.objects.users_of(ref):
            self.workers.enqueue(uid)

    def _allocatable(self) -> Allocatable:
        _, allocatable = resources(self.settings, self.lifecycle.host)
        return Allocatable(
            cpu_milli=milli_value(allocatable["cpu"]),
            memory_bytes=value(allocatable["memory"]),
            pods=int(allocatable["pods"]),
            ephemeral_storage_bytes=value(allocatable["ephemeral-storage"]),
        )


class _AgentView:
    """What the kubelet API server reads of the agent (server.routes.NodeView)."""

    def __init__(self, agent: Agent) -> None:
        self._agent = agent
        self.node_name = agent.node_name

    def pods(self) -> list[Json]:
        return self._agent.active_pods()

    def containers(self, uid: str) -> Sequence[cri.ObservedContainer]:
        return self._agent.watcher.pod_containers(uid)

    def health(self) -> tuple[bool, str]:
        supervisor = self._agent.supervisor
        return supervisor.healthy, supervisor.failure or "a loop is restarting"

    def metrics(self) -> str:
        agent = self._agent
        running = [c for uid in agent._pod_uids() for c in self._running(uid)]
        stats = agent.runtime.stats
        docker = [
            Sample({"kind": kind}, float(getattr(stats, kind)))
            for kind in sorted(vars(stats))
            if not kind.startswith("_")
        ]
        informers = (
            ("pods", agent.pod_informer),
            ("node", agent.node_informer),
            ("services", agent.service_informer),
        )
        relists = [Sample({"resource": n}, i.stats.relists) for n, i in informers]
        restarts = [Sample({"resource": n}, i.stats.reconnects) for n, i in informers]
        requests = [
            Sample({"code": code, "host": agent.kube.host, "method": method}, n)
            for (method, code), n in sorted(agent.kube.request_counts().items())
        ]
        sandboxes = sum(1 for c in running if c.is_sandbox)
        histograms = histogram_family(
            "kubelet_pod_start_duration_seconds",
            "Duration in seconds from kubelet seeing a pod for the first time to the pod starting"
            " to run",
            agent.syncer.start_duration.snapshot(),
        ) + histogram_family(
            "kubelet_pod_worker_duration_seconds",
            "Duration in seconds to sync a single pod.",
            agent.workers.duration.snapshot(),
            {"operation": "sync"},
        )
        late: list[Family] = []
        timers = agent.timers
        if timers is not None:  # the set's: every node's renewals, as seen by each node
            if "lease" in timers.lateness:
                histograms += histogram_family(
                    "kubelet_sim_lease_renewal_lateness_seconds",
                    "How long after its due time each Lease renewal of the process started",
                    timers.lateness["lease"].snapshot(),
                )
            late = [
                Family(
                    "kubelet_sim_periodic_runs_late_total",
                    "counter",
                    "Periodic runs (Lease, node status, proxy, GC) started over 1 s late",
                    [Sample({"kind": k}, n) for k, n in sorted(timers.late_runs.items())],
                )
            ]
        return histograms + render(
            [
                *late,
                Family(
                    "kubelet_running_pods",
                    "gauge",
                    "Number of pods that have a running pod sandbox",
                    [Sample({}, sandboxes)],
                ),
                Family(
                    "kubelet_running_containers",
                    "gauge",
                    "Number of containers currently running",
                    [Sample({"container_state": "running"}, len(running) - sandboxes)],
                ),
                Family(
                    "kubelet_sim_probe_attempts_total",
                    "counter",
                    "Probe attempts run (every kind)",
                    [Sample({}, agent.syncer.prober.attempts)],
                ),
                Family("kubelet_sim_docker_calls_total", "counter", "Docker engine calls", docker),
                Family("kubelet_sim_watch_relists_total", "counter", "Relists after 410", relists),
                Family(
                    "kubelet_sim_watch_restarts_total",
                    "counter",
                    "Watches started again after an error or a cut",
                    restarts,
                ),
                Family(
                    "rest_client_requests_total",
                    "counter",
                    "Number of HTTP requests, partitioned by status code, method, and host.",
                    requests,
                ),
            ]
        )

    def usage(self) -> tuple[NodeUsage, list[PodUsage]]:
        """One sample of the node and of every running container (a Docker call each)."""
        agent = self._agent
        cpu, memory = host_usage()
        node = NodeUsage(cpu, memory, time.time())
        pods = []
        for pod in agent.active_pods():
            meta = pod.get("metadata") or {}
            uid = str(meta.get("uid", ""))
            containers, sandbox, starts = {}, None, {}
            for c in self._running(uid):
                sample = agent.runtime.container_stats(c.id)
                if sample is None:
                    continue
                if c.is_sandbox:
                    sandbox = sample
                else:
                    containers[c.name] = sample
                    if c.started_at is not None:
                        starts[c.name] = c.started_at.timestamp()
            if containers or sandbox:
                name, namespace = str(meta.get("name")), str(meta.get("namespace"))
                pods.append(PodUsage(namespace, name, uid, containers, sandbox, starts))
        return node, pods

    def _running(self, uid: str) -> list[cri.ObservedContainer]:
        return [
            c
            for c in self._agent.watcher.pod_containers(uid)
            if c.state is cri.ContainerState.RUNNING
        ]


def _self_signed(
    directory: Path, node_name: str, names: list[str], ips: list[str]
) -> tuple[Path, Path]:
    """`server.certs` and its `cryptography` (some 8 MiB) imported at a node's first client."""
    from kubelet_sim.server.certs import self_signed  # noqa: PLC0415

    return self_signed(directory, node_name, names, ips)
