"""The one composition root: settings in, a running set of nodes out.

The `kubelet-sim` command, the demo, the tests and bench/ build their nodes here, so a node
is wired the same way wherever it runs. Nodes share the Docker client and, unless a node brings
its own credentials, the API connection pool. Several nodes on the set's credentials, when
those may watch every pod and Node (admin, a ServiceAccount), also share one watch per
resource and one timer thread for their Leases, status and service proxies
(`kube/shared_watches.py`, `timers.py`): a thousand nodes then cost no thread each at rest.
A node with credentials of its own (`system:node:<name>`) keeps its own watches and loops.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from kubelet_sim.agent import Agent, PodSettings
from kubelet_sim.backoff import Backoff
from kubelet_sim.config import ConfigError
from kubelet_sim.kube.client import KubeConnection, connect, wait_for_api_server
from kubelet_sim.kube.schema import ServerSchema
from kubelet_sim.kube.shared_watches import SharedWatches, may_watch_every_node
from kubelet_sim.logs import get_logger
from kubelet_sim.node.host import detect_host
from kubelet_sim.node.settings import NodeSettings
from kubelet_sim.node.shared_probe import SharedProbe
from kubelet_sim.runtime.engine import DockerEngine
from kubelet_sim.runtime.log_rotation import LogRotation
from kubelet_sim.runtime.node_runtime import NodeRuntime
from kubelet_sim.runtime.observe import ContainerEvents
from kubelet_sim.server.listener import Listener
from kubelet_sim.server.settings import ServerSettings
from kubelet_sim.supervise import Supervisor
from kubelet_sim.timers import Timers

# Each node holds about 4 connections at once (2 watches, its writes, its lease).
CONNECTIONS_PER_NODE = 4
# Nodes sharing watches hold no watch each: their writes and a Lease renewal in flight.
SHARED_CONNECTIONS_PER_NODE = 1
STARTERS = 16  # nodes registered and started at once (each waits on a few API calls)


@dataclass(frozen=True)
class NodeIdentity:
    """One node: what it registers as, and credentials of its own where it has them (a
    kubelet after TLS bootstrap: a `system:node:<name>` kubeconfig and a serving
    certificate); without them it uses the set's kubeconfig and server settings."""

    settings: NodeSettings
    kubeconfig: str | None = None
    serving_cert: tuple[Path, Path] | None = None  # certificate, key
    root_dir: Path | None = None  # where its pod files live; default: the set's root/<name>


@dataclass(frozen=True)
class NodeSetSettings:
    nodes: tuple[NodeIdentity, ...]
    root_dir: Path
    pods: PodSettings = field(default_factory=PodSettings)
    # Node i listens on port + i; None: no kubelet API at all (tests that need none).
    server: ServerSettings | None = field(default_factory=ServerSettings)
    kubeconfig: str | None = None
    context: str | None = None
    docker_network: str = "bridge"
    image_pull_progress_deadline: float = 60.0
    log_rotation: LogRotation = field(default_factory=LogRotation)
    owner_labels: dict[str, str] = field(default_factory=dict)  # on every container made
    # The service proxy (Services and other nodes' pod ranges inside each pod's namespace),
    # with kube-proxy's credentials when given (node credentials may not list EndpointSlices).
    service_proxy: bool = True
    proxy_kubeconfig: str | None = None

    def __post_init__(self) -> None:
        names = [n.settings.node_name for n in self.nodes]
        if not names:
            raise ConfigError("no node to run")
        if len(set(names)) != len(names):
            raise ConfigError(f"node names repeat: {', '.join(names)}")


class NodeSet:
    """Built in one go (connect, bind every kubelet port); `start` runs the nodes' threads,
    `wait` returns once they stopped with the failures (node, why).

    Construction raises ConfigError, KubeConfigError, RuntimeUnavailable or ServerError with
    a one-line message; nothing runs until `start`."""

    def __init__(self, settings: NodeSetSettings) -> None:
        self.settings = settings
        kube: dict[str, KubeConnection] = {}  # the API first: a missing kubeconfig says so first
        shared: KubeConnection | None = None
        on_set = [n for n in settings.nodes if n.kubeconfig is None]
        per_node = SHARED_CONNECTIONS_PER_NODE if len(on_set) > 1 else CONNECTIONS_PER_NODE
        for node in settings.nodes:
            if node.kubeconfig is None:
                if shared is None:
                    pool = per_node * len(on_set) + 8
                    shared = connect(settings.kubeconfig, settings.context, pool_size=pool)
                kube[node.settings.node_name] = shared
            else:
                pool = CONNECTIONS_PER_NODE + 4
                kube[node.settings.node_name] = connect(node.kubeconfig, pool_size=pool)
        proxy: KubeConnection | None = None
        if settings.service_proxy and settings.proxy_kubeconfig is not None:
            pool = 2 * len(settings.nodes) + 2
            proxy = connect(settings.proxy_kubeconfig, pool_size=pool)
        self.engine = engine_for(
            settings.docker_network, pull_progress_deadline=settings.image_pull_progress_deadline
        )
        self.watches: SharedWatches | None = None
        self.container_events: ContainerEvents | None = None
        self._shared_connection = shared
        self.timers: Timers | None = None
        if shared is not None and len(on_set) > 1:
            self.watches = SharedWatches(
                shared.api,
                proxy_api=(proxy or shared).api if settings.service_proxy else None,
            )
            self.timers = Timers()
            self.container_events = ContainerEvents(self.engine)
        self.listener = shared_listener(settings)
        try:
            self.agents = self._build(settings, kube, proxy, shared)
        except BaseException:
            self.engine.close()
            raise
        self.failures: list[tuple[str, str]] = []
        self._threads: list[threading.Thread] = []

    def _build(
        self,
        settings: NodeSetSettings,
        kube: dict[str, KubeConnection],
        proxy: KubeConnection | None,
        shared: KubeConnection | None,
    ) -> list[Agent]:
        identities = list(settings.nodes)
        if settings.docker_network != "bridge":
            gateway = self.engine.network_gateway()  # also: the network exists, or one line
            identities = [
                dataclasses.replace(n, settings=dataclasses.replace(n.settings, node_ip=gateway))
                if n.settings.node_ip is None
                else n
                for n in identities
            ]
        # Read once for all the nodes (it is the same server), on its first use.
        schema = ServerSchema.of_server(next(iter(kube.values())).api) if kube else ServerSchema()
        agents = []
        host = detect_host()  # the same host for every node: read once
        probe = SharedProbe(self.engine) if len(identities) > 1 else None
        for i, node in enumerate(identities):
            name = node.settings.node_name
            runtime = node_runtime(
                self.engine,
                name,
                node.root_dir or settings.root_dir / name,
                log_rotation=settings.log_rotation,
                owner_labels=dict(settings.owner_labels),
            )
            server = settings.server
            if server is not None:
                port = server.port + i if server.port else 0
                server = dataclasses.replace(server, port=port)
            if server is not None and node.serving_cert is not None:
                cert, key = node.serving_cert
                server = dataclasses.replace(server, tls_cert_file=cert, tls_private_key_file=key)
            agents.append(
                Agent(
                    node.settings,
                    kube[name],
                    runtime,
                    settings.pods,
                    schema,
                    server,
                    proxy=(proxy or kube[name]) if settings.service_proxy else None,
                    shared=self.watches if kube[name] is shared else None,
                    timers=self.timers if kube[name] is shared else None,
                    container_events=self.container_events if kube[name] is shared else None,
                    host=host,
                    runtime_probe=probe,
                    listener=self.listener,
                )
            )
        return agents

    @property
    def runtimes(self) -> dict[str, NodeRuntime]:
        return {agent.node_name: agent.runtime for agent in self.agents}

    def start(self, stop: threading.Event) -> None:
        """Start every node, STARTERS at a time, on threads that end once their nodes run;
        a node whose start fails, or whose loop later fails for good, sets `stop` for all (its
        reason lands in `failures`). Shared watches start first, once the server says these
        credentials may hold them."""
        waiting = list(reversed(self.agents))
        lock = threading.Lock()

        def start_nodes() -> None:
            while not stop.is_set():
                with lock:
                    if not waiting:
                        return
                    agent = waiting.pop()
                try:
                    agent.start_up(stop)
                except Exception as exc:  # a bug: this node cannot run, so none does
                    get_logger("kubelet_sim.nodeset", node=agent.node_name).exception(
                        "node failed to start"
                    )
                    self.failures.append((agent.node_name, f"{type(exc).__name__}: {exc}"))
                    stop.set()

        def start_all() -> None:
            if self.watches is not None and not self._start_shared(stop):
                return
            for i in range(1, min(STARTERS, len(self.agents))):
                thread = threading.Thread(target=start_nodes, name=f"node starter {i}", daemon=True)
                thread.start()
                self._threads.append(thread)
            start_nodes()

        def listener_failed(why: str) -> None:
            self.failures.append(("(kubelet API listener)", why))
            stop.set()

        if self.listener is not None:
            self.listener.start(Supervisor(on_failure=listener_failed))
        thread = threading.Thread(target=start_all, name="node starter 0", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _start_shared(self, stop: threading.Event) -> bool:
        """Once the server answers: may these credentials watch every pod and Node? Then run
        the shared watches and timers; else fail the set in one line."""
        connection = self._shared_connection
        if self.watches is None or self.timers is None or connection is None:
            return True
        refused = None
        backoff = Backoff(initial=0.8, cap=30.0)
        while True:
            if wait_for_api_server(connection, stop) is None:
                return False
            try:
                refused = may_watch_every_node(connection.api)
                break
            except Exception as exc:  # a 5xx or a cut: ask again, as a start waits for a server
                delay = backoff.next_delay()
                get_logger("kubelet_sim.nodeset").warning(
                    "cannot check the credentials' rights yet; retrying",
                    error=str(exc)[:300],
                    retry_in_seconds=round(delay, 1),
                )
                if stop.wait(delay):
                    return False
        if refused is not None:
            names = [a.node_name for a in self.agents if a.kube is connection]
            self.failures.append((f"{names[0]}…{names[-1]}", refused))
            stop.set()
            return False
        get_logger("kubelet_sim.nodeset").info(
            "nodes share their watches and timers",
            nodes=sum(1 for a in self.agents if a.kube is connection),
        )
        self.watches.start()
        self.timers.start()
        if self.container_events is not None:
            self.container_events.start()
        return True

    def wait(self, stop: threading.Event) -> list[tuple[str, str]]:
        # Never block without a timeout here: the kernel may hand SIGTERM to any thread, and
        # the main thread runs the Python handler only when it wakes up.
        while not stop.wait(0.5):
            failed = [a for a in self.agents if a.supervisor.failed.is_set()]
            for agent in failed:
                agent.log.error("stopped: a loop kept failing", error=agent.supervisor.failure)
                self.failures.append((agent.node_name, agent.supervisor.failure))
            if failed:
                stop.set()
        for agent in self.agents:
            agent.lifecycle.interrupt()
        for thread in self._threads:
            while thread.is_alive():
                thread.join(0.5)
        self._shut_down_all()
        return self.failures

    def _shut_down_all(self) -> None:
        """Every node at once (each within its own deadline), then what they shared."""
        remaining = list(self.agents)
        lock = threading.Lock()

        def shut_down() -> None:
            while True:
                with lock:
                    if not remaining:
                        return
                    agent = remaining.pop()
                agent.shut_down()
                get_logger("kubelet_sim.nodeset", node=agent.node_name).info("stopped")

        threads = [
            threading.Thread(target=shut_down, name=f"node stopper {i}", daemon=True)
            for i in range(min(STARTERS * 4, len(self.agents)))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.5)
        if self.watches is not None:
            self.watches.stop()
        if self.timers is not None:
            self.timers.stop()
        if self.container_events is not None:
            self.container_events.stop()
        if self.listener is not None:
            self.listener.stop()

    def run(self, stop: threading.Event) -> list[tuple[str, str]]:
        self.start(stop)
        return self.wait(stop)

    def close(self) -> None:
        if self.listener is not None:
            self.listener.stop()
        self.engine.close()


def engine_for(network: str = "bridge", *, pull_progress_deadline: float = 60.0) -> DockerEngine:
    """The process's Docker engine, connected and pinged (RuntimeUnavailable in one line if it
    does not answer): `network` is the one the pods' sandboxes join. The only maker of one."""
    return DockerEngine.connect(network=network, pull_progress_deadline=pull_progress_deadline)


def node_runtime(
    engine: DockerEngine,
    node_name: str,
    root_dir: Path,
    *,
    owner_labels: dict[str, str] | None,
    log_rotation: LogRotation | None = None,
) -> NodeRuntime:
    """A node's runtime on `engine`, its pod files under `root_dir`; `owner_labels` on what it
    makes (None: it reads every container of the node, whoever made it). The only maker of one."""
    return NodeRuntime(
        engine,
        node_name,
        root_dir,
        log_rotation=log_rotation or LogRotation(),
        owner_labels=owner_labels,
    )


def shared_listener(settings: NodeSetSettings) -> Listener | None:
    """One kubelet API listener (a thread and a pool) for all the nodes; a single node has one
    of its own, started and stopped with it."""
    if settings.server is None or len(settings.nodes) < 2:
        return None
    return Listener(settings.server.limits, get_logger("kubelet_sim.server"))


def exit_past_calls_in_flight(code: int) -> None:
    """Exit now if a thread is still inside a Docker or API call (a pod worker, an image pull).

    The nodes have stopped in order; waiting for such a call could take a pull's whole
    deadline, and a daemon thread that logs during interpreter shutdown aborts the process.
    The kubelet exits the same way: what Docker has is adopted by the next start.
    """
    busy = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
    if busy:
        get_logger("kubelet_sim.nodeset").info("exiting with calls in flight", threads=sorted(busy))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def usable_root_dir(explicit: Path | None) -> Path:
    """The pod files directory, created now so that a read-only place fails in one line."""
    if explicit is not None:
        root = explicit
    elif os.geteuid() == 0:
        root = Path("/var/lib/kubelet-sim")
    else:
        root = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local/share") / "kubelet-sim"
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(root, 0o700)  # pods' secrets live below: no other user may look in
    except OSError as exc:
        raise ConfigError(f"cannot use --root-dir {root}: {exc.strerror}") from exc
    if not os.access(root, os.W_OK):
        raise ConfigError(f"cannot use --root-dir {root}: not writable")
    return root
