"""The one composition root: settings in, a running set of nodes out.

The `kubelet-sim` command, the demo, the tests and bench/ build their nodes here, so a node
is wired the same way wherever it runs. Each node is an Agent on its own thread; nodes share
the Docker client and, unless a node brings its own credentials, the API connection pool.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from kubelet_sim.agent import Agent, PodSettings
from kubelet_sim.config import ConfigError
from kubelet_sim.kube.client import KubeConnection, connect
from kubelet_sim.kube.schema import ServerSchema
from kubelet_sim.logs import get_logger
from kubelet_sim.node.settings import NodeSettings
from kubelet_sim.runtime.docker_runtime import DockerRuntime
from kubelet_sim.runtime.log_rotation import LogRotation
from kubelet_sim.server.listener import Listener
from kubelet_sim.server.settings import ServerSettings
from kubelet_sim.supervise import LoopFailed, Supervisor

# Each node holds about 4 connections at once (2 watches, its writes, its lease).
CONNECTIONS_PER_NODE = 4


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
        for node in settings.nodes:
            if node.kubeconfig is None:
                if shared is None:
                    pool = CONNECTIONS_PER_NODE * len(settings.nodes) + 4
                    shared = connect(settings.kubeconfig, settings.context, pool_size=pool)
                kube[node.settings.node_name] = shared
            else:
                pool = CONNECTIONS_PER_NODE + 4
                kube[node.settings.node_name] = connect(node.kubeconfig, pool_size=pool)
        proxy: KubeConnection | None = None
        if settings.service_proxy and settings.proxy_kubeconfig is not None:
            pool = 2 * len(settings.nodes) + 2
            proxy = connect(settings.proxy_kubeconfig, pool_size=pool)
        self.engine = DockerRuntime.connect(network=settings.docker_network)
        self.listener = shared_listener(settings)
        try:
            self.agents = self._build(settings, kube, proxy)
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
        for i, node in enumerate(identities):
            name = node.settings.node_name
            runtime = DockerRuntime(
                client=self.engine.client,
                node_name=name,
                root_dir=node.root_dir or settings.root_dir / name,
                network=self.engine.network,
                pull_progress_deadline=settings.image_pull_progress_deadline,
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
                    listener=self.listener,
                )
            )
        return agents

    @property
    def runtimes(self) -> dict[str, DockerRuntime]:
        return {agent.node_name: agent.runtime for agent in self.agents}

    def start(self, stop: threading.Event) -> None:
        """Each node on its own thread until `stop`; a node whose loop failed for good sets
        `stop` for all (its reason lands in `failures`)."""

        def run_agent(agent: Agent) -> None:
            try:
                agent.run(stop)
            except LoopFailed as exc:
                self.failures.append((agent.node_name, str(exc)))
                stop.set()

        def listener_failed(why: str) -> None:
            self.failures.append(("(kubelet API listener)", why))
            stop.set()

        if self.listener is not None:
            self.listener.start(Supervisor(on_failure=listener_failed))
        for agent in self.agents:
            thread = threading.Thread(
                target=run_agent, args=(agent,), name=f"node {agent.node_name}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def wait(self, stop: threading.Event) -> list[tuple[str, str]]:
        # Never block without a timeout here: the kernel may hand SIGTERM to any thread, and
        # the main thread runs the Python handler only when it wakes up.
        while not stop.wait(0.5):
            pass
        for agent, thread in zip(self.agents, self._threads, strict=True):
            while thread.is_alive():
                thread.join(0.5)
            get_logger("kubelet_sim.nodeset", node=agent.node_name).info("stopped")
        if self.listener is not None:
            self.listener.stop()
        return self.failures

    def run(self, stop: threading.Event) -> list[tuple[str, str]]:
        self.start(stop)
        return self.wait(stop)

    def close(self) -> None:
        if self.listener is not None:
            self.listener.stop()
        self.engine.close()


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
