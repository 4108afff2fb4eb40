"""A set of nodes in one process: settings in, running nodes out (build.py makes each).

The `kubelet-sim` command, the demo, the pytest plugin, the tests and bench/ run their nodes
here. Every node of the process shares its engine, timers, Docker events stream and kubelet
API listener (process.py). What differs is whose watches a node reads: nodes on the set's
credentials, when there are several and those credentials may watch every pod and Node
(admin, a ServiceAccount), share one watch per resource (`kube/shared_watches.py`): a
thousand nodes then cost no thread each at rest. A node with credentials of its own
(`system:node:<name>`), or the one node of a process, gets watches of its own with the
kubelet's field selectors.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kubelet_sim import cri
from kubelet_sim.assembly.build import NodeWiring, build_node
from kubelet_sim.assembly.node import SHUTDOWN_SECONDS, Node
from kubelet_sim.assembly.process import ProcessContext, RuntimeOptions, timer_pool
from kubelet_sim.kube.client import KubeConnection, connect, wait_for_api_server
from kubelet_sim.kube.schema import ServerSchema
from kubelet_sim.kube.shared_watches import SharedWatches, may_watch_every_node
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.backoff import Backoff
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.node.host import detect_host
from kubelet_sim.node.settings import NodeSettings
from kubelet_sim.node.shared_probe import SharedProbe
from kubelet_sim.podworkers.settings import PodSettings
from kubelet_sim.proxy import netns
from kubelet_sim.runtime.engine import DockerEngine
from kubelet_sim.runtime.log_rotation import LogRotation
from kubelet_sim.runtime.node_runtime import NodeRuntime
from kubelet_sim.runtime.observe import ContainerEvents
from kubelet_sim.server.listener import Listener
from kubelet_sim.server.settings import ServerSettings
from kubelet_sim.server.tokens import TokenGuard
from kubelet_sim.validation import ConfigError

# Each node holds about 4 connections at once (2 watches, its writes, its lease).
CONNECTIONS_PER_NODE = 4
# Nodes sharing watches hold no watch each: their writes and a Lease renewal in flight.
SHARED_CONNECTIONS_PER_NODE = 1
STARTERS = 16  # nodes registered and started at once (each waits on a few API calls)
SETTLE_EVERY = 500  # started nodes between two freezes of what they made (loops/collector.py)


class ApiGate(Protocol):
    """What stands between one node and the API server, and can cut it off
    (controlplane/relay.py's ApiRelay, through which the node's kubeconfig points)."""

    def cut(self, seconds: float) -> None: ...
    def restore(self) -> None: ...


@dataclass(frozen=True)
class NodeIdentity:
    """One node: what it registers as, and credentials of its own where it has them (a
    kubelet after TLS bootstrap: a `system:node:<name>` kubeconfig and a serving
    certificate); without them it uses the set's kubeconfig and server settings."""

    settings: NodeSettings
    kubeconfig: str | None = None
    serving_cert: tuple[Path, Path] | None = None  # certificate, key
    root_dir: Path | None = None  # where its pod files live; default: the set's root/<name>
    api_gate: ApiGate | None = None  # for `kill_node` and `cut_node`


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


@dataclass
class _Scope:
    """The watches of the nodes on one set of credentials: every node's (with a check that
    the credentials may hold them), or one node's own."""

    watches: SharedWatches
    connection: KubeConnection
    every_node: bool
    names: list[str]
    proxy_api: Any = None  # the service proxy's client (its own credentials), if it runs


class NodeSet:
    """Built in one go (connect, bind every kubelet port); `start` runs the nodes' threads,
    `wait` returns once they stopped with the failures (node, why). While it runs, one node
    may be stopped, started again (built afresh on the same process context), killed or cut
    off the API server (through its identity's `api_gate`): the test Cluster's node faults.

    Construction raises ConfigError, KubeConfigError, RuntimeUnavailable or ServerError with
    a one-line message; nothing runs until `start`."""

    def __init__(self, settings: NodeSetSettings, engine: DockerEngine) -> None:
        """`engine`: the process's (`process.engine_for`), whose pods join the settings'
        network; its caller connected it, for work of its own as well (the demo's and a test
        cluster's images and pod endpoint), and closes it after `close`."""
        self.settings = settings
        self.failures: list[tuple[str, str]] = []
        self._threads: list[threading.Thread] = []
        self._stop: threading.Event | None = None
        self._stopped = False
        # Per node: what it was built from, its own stop (set by the set's end too), and
        # whether it is halted on its own (stop_node, kill_node) while the others run.
        self._wirings: dict[str, tuple[NodeWiring, _Scope]] = {}
        self._node_stops: dict[str, threading.Event] = {}
        self._halted: set[str] = set()
        self._a_node_failed = threading.Event()  # a node's loop gave up: `wait` looks which
        self._lock = threading.Lock()
        kube = _connections(settings)  # the API first: a missing kubeconfig says so first
        self.connections = kube
        proxy: KubeConnection | None = None
        if settings.service_proxy and settings.proxy_kubeconfig is not None:
            pool = 2 * len(settings.nodes) + 2
            proxy = connect(settings.proxy_kubeconfig, pool_size=pool)
        if engine.network != settings.docker_network:
            raise ConfigError(
                f"the engine's pods join {engine.network!r}, the nodes' {settings.docker_network!r}"
            )
        self.engine = engine
        try:
            self.process = _process_context(settings, self.engine, self._process_failed)
            self.nodes, self.scopes = self._build(settings, kube, proxy)
        except BaseException:
            self.close()
            raise

    def _build(
        self,
        settings: NodeSetSettings,
        kube: dict[str, KubeConnection],
        proxy: KubeConnection | None,
    ) -> tuple[list[Node], list[_Scope]]:
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
        self._schema = schema
        on_set = [n.settings.node_name for n in identities if n.kubeconfig is None]
        # Where pods' namespaces cannot be entered, no proxy runs and nothing is watched for it.
        proxy_off = netns.unavailable() if settings.service_proxy else None
        proxies = settings.service_proxy and proxy_off is None
        scopes: dict[str, _Scope] = {}
        nodes = []
        for i, node in enumerate(identities):
            name = node.settings.node_name
            connection = kube[name]
            supervisor = Supervisor(node=name, on_failure=self._node_failed)
            every_node = node.kubeconfig is None and len(on_set) > 1
            key = "" if every_node else name
            if key not in scopes:
                proxy_api = (proxy or connection).api if proxies else None
                watches = SharedWatches(
                    connection.api,
                    node=None if every_node else name,
                    proxy_api=proxy_api,
                    supervisor=self.process.supervisor if every_node else supervisor,
                )
                scopes[key] = _Scope(watches, connection, every_node, [], proxy_api)
            scopes[key].names.append(name)
            server = settings.server
            if server is not None:
                port = server.port + i if server.port else 0
                server = dataclasses.replace(server, port=port)
            if server is not None and node.serving_cert is not None:
                cert, key_file = node.serving_cert
                server = dataclasses.replace(
                    server, tls_cert_file=cert, tls_private_key_file=key_file
                )
            wiring = NodeWiring(
                node.settings,
                node.root_dir or settings.root_dir / name,
                connection,
                scopes[key].watches,
                server,
                supervisor=supervisor,
                proxy_off=proxy_off,
            )
            self._wirings[name] = (wiring, scopes[key])
            self._node_stops[name] = threading.Event()
            built = build_node(wiring, settings.pods, self.process, schema)
            # Before any watch starts: the first list reaches the node as a list.
            scopes[key].watches.register(name, built.handlers())
            nodes.append(built)
        return nodes, list(scopes.values())

    @property
    def runtimes(self) -> dict[str, NodeRuntime]:
        return {node.node_name: node.runtime for node in self.nodes}

    def start(self, stop: threading.Event, *, settle: Callable[[], None] | None = None) -> None:
        """Start every node, STARTERS at a time (while the periodic work is on time), on
        threads that end once their nodes run; a node whose start fails, or whose loop later
        fails for good, sets `stop` for all (its reason in `failures`). Watches of every node
        start first, once the server says these credentials may hold them; a node's own once
        its Node is registered. `settle` runs after each SETTLE_EVERY started and at the end."""
        self._stop = stop
        self.process.start()
        waiting = list(reversed(self.nodes))
        lock = threading.Lock()
        started = itertools.count(1)

        def start_nodes() -> None:
            while not stop.is_set():
                self.process.timers.wait_caught_up(stop)  # heartbeats before more nodes
                with lock:
                    if not waiting:
                        return
                    node = waiting.pop()
                self._start_node(node, stop)
                if settle is not None and next(started) % SETTLE_EVERY == 0:
                    settle()

        def start_all() -> None:
            for scope in self.scopes:
                if scope.every_node and not self._start_every_node(scope, stop):
                    return
            starters = []
            for i in range(1, min(STARTERS, len(self.nodes))):
                thread = threading.Thread(target=start_nodes, name=f"node starter {i}", daemon=True)
                thread.start()
                starters.append(thread)
                self._threads.append(thread)
            start_nodes()
            for thread in starters:
                thread.join()
            if settle is not None and not stop.is_set():
                settle()

        thread = threading.Thread(target=start_all, name="node starter 0", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _start_node(self, node: Node, stop: threading.Event) -> None:
        own = self._node_stops[node.node_name]
        try:
            node.start(own)
        except Exception as exc:  # a bug: this node cannot run, so none does
            get_logger("kubelet_sim.nodeset", node=node.node_name).exception("node failed to start")
            self.failures.append((node.node_name, f"{type(exc).__name__}: {exc}"))
            stop.set()
            own.set()

    # -- one node of a running set ----------------------------------------------------------

    def drop_connections(self, name: str) -> None:
        """The node's client certificate changed (rotation): its next requests connect anew."""
        self.connections[name].drop_connections()

    def stop_node(self, name: str) -> None:
        """The node's agent stops cleanly while the others run; its containers keep running.
        Its Lease ages and the controller-manager marks the Node NotReady (after the grace
        period)."""
        node = self._node(name)
        with self._lock:
            if name in self._halted:
                return
            self._halted.add(name)
        self._node_stops[name].set()
        node.lifecycle.interrupt()
        node.stop()
        _wiring, scope = self._wirings[name]
        if not scope.every_node:  # its own watches: no one else reads them
            scope.watches.stop(SHUTDOWN_SECONDS)

    def start_node(self, name: str) -> None:
        """Start a stopped or killed node again, built afresh on the set's process context
        (its API restored): it adopts its containers, as a restarted kubelet. Returns at once;
        the node is Ready when the API server says so."""
        stop = self._stop
        if stop is None or stop.is_set():
            raise ConfigError("the node set is not running")
        self.stop_node(name)
        gate = self._gate(name)
        if gate is not None:
            gate.restore()
        wiring, scope = self._wirings[name]
        supervisor = Supervisor(node=name, on_failure=self._node_failed)
        if not scope.every_node:
            watches = SharedWatches(
                wiring.kube.api, node=name, proxy_api=scope.proxy_api, supervisor=supervisor
            )
            scope = _Scope(watches, scope.connection, False, [name], scope.proxy_api)
        wiring = dataclasses.replace(wiring, watches=scope.watches, supervisor=supervisor)
        built = build_node(wiring, self.settings.pods, self.process, self._schema)
        scope.watches.register(name, built.handlers())
        with self._lock:
            self._wirings[name] = (wiring, scope)
            self.nodes = [built if n.node_name == name else n for n in self.nodes]
            if not scope.every_node:  # its old watches stopped with it
                self.scopes = [sc for sc in self.scopes if name not in sc.names or sc.every_node]
                self.scopes.append(scope)
            self._node_stops[name] = threading.Event()
            self._halted.discard(name)
        thread = threading.Thread(
            target=self._start_node, args=(built, stop), name=f"node starter {name}", daemon=True
        )
        thread.start()
        self._threads.append(thread)

    def kill_node(self, name: str) -> None:
        """As a crash: the node's API connections drop at once, with no last write, and its
        threads are stopped behind that cut; its containers keep running."""
        self._required_gate(name).cut(float("inf"))
        self.stop_node(name)

    def cut_node(self, name: str, seconds: float) -> None:
        """The node loses the API server for `seconds` (from now; this returns at once): its
        connections drop and new ones are refused. Then it reconnects and resyncs."""
        self._required_gate(name).cut(seconds)

    def health(self) -> tuple[bool, str]:
        """(True, "") while the process's loops and every node's run; else the first failure,
        with its node's name: what the process's `/healthz` answers."""
        if not self.process.supervisor.healthy:
            return False, self.process.supervisor.failure or "a loop of the process is restarting"
        for node in self.nodes:
            if not node.supervisor.healthy:
                why = node.supervisor.failure or "a loop is restarting"
                return False, f"node {node.node_name}: {why}"
        return True, ""

    def _node(self, name: str) -> Node:
        for node in self.nodes:
            if node.node_name == name:
                return node
        names = [n.node_name for n in self.nodes]
        raise ConfigError(f"no node {name!r}; the nodes are {names}")

    def _gate(self, name: str) -> ApiGate | None:
        self._node(name)
        return next(n.api_gate for n in self.settings.nodes if n.settings.node_name == name)

    def _required_gate(self, name: str) -> ApiGate:
        gate = self._gate(name)
        if gate is None:
            raise ConfigError(f"node {name!r} has no API gate to cut")
        return gate

    def _process_failed(self, why: str) -> None:
        """A loop of the process's (the listener, the timers, the events stream, the watches
        of every node) failed for good: every node stops (the one node's name is said)."""
        names = [n.settings.node_name for n in self.settings.nodes]
        self.failures.append((names[0] if len(names) == 1 else "(process)", why))
        if self._stop is not None:
            self._stop.set()

    def _start_every_node(self, scope: _Scope, stop: threading.Event) -> bool:
        """Once the server answers: may these credentials watch every pod and Node? Then run
        the watches; else fail the set in one line."""
        connection = scope.connection
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
            self.failures.append((f"{scope.names[0]}…{scope.names[-1]}", refused))
            stop.set()
            return False
        get_logger("kubelet_sim.nodeset").info(
            "nodes share their watches and timers", nodes=len(scope.names)
        )
        scope.watches.start()
        return True

    def _node_failed(self, _why: str) -> None:
        self._a_node_failed.set()

    def wait(self, stop: threading.Event) -> list[tuple[str, str]]:
        # Never block without a timeout here: the kernel may hand SIGTERM to any thread, and
        # the main thread runs the Python handler only when it wakes up.
        while not stop.wait(0.5):
            if not self._a_node_failed.is_set():
                continue  # not a look at each of thousands of nodes twice a second
            failed = [
                n
                for n in self.nodes
                if n.supervisor.failed.is_set() and n.node_name not in self._halted
            ]
            for node in failed:
                node.log.error("stopped: a loop kept failing", error=node.supervisor.failure)
                self.failures.append((node.node_name, node.supervisor.failure))
            if failed:
                stop.set()
        for node in self.nodes:
            self._node_stops[node.node_name].set()
            node.lifecycle.interrupt()
        for thread in list(self._threads):
            while thread.is_alive():
                thread.join(0.5)
        self._stop_all()
        return self.failures

    def _stop_all(self) -> None:
        """Every node at once (each within its own deadline), then what they shared; once."""
        if self._stopped:
            return
        self._stopped = True
        remaining = list(self.nodes)
        lock = threading.Lock()

        def stop_nodes() -> None:
            while True:
                with lock:
                    if not remaining:
                        return
                    node = remaining.pop()
                node.stop()

        threads = [
            threading.Thread(target=stop_nodes, name=f"node stopper {i}", daemon=True)
            for i in range(min(STARTERS * 4, len(self.nodes)))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.5)
        for scope in self.scopes:  # every watch asked at once, then waited for within one deadline
            scope.watches.stop(0)
        deadline = time.monotonic() + SHUTDOWN_SECONDS
        for scope in self.scopes:
            scope.watches.stop(max(0.0, deadline - time.monotonic()))
            _log_counters(scope)
        self.process.stop()
        for node in self.nodes:
            get_logger("kubelet_sim.nodeset", node=node.node_name).info("stopped")

    def run(self, stop: threading.Event) -> list[tuple[str, str]]:
        """The process's own nodes, until `stop`: what their start makes lives as long as
        the process, and is frozen out of garbage collection (loops/collector.py)."""
        self.start(stop, settle=self.process.collector.settle)
        return self.wait(stop)

    def close(self) -> None:
        process = getattr(self, "process", None)
        if process is not None and process.listener is not None:
            process.listener.stop()


def _connections(settings: NodeSetSettings) -> dict[str, KubeConnection]:
    """Each node's API connection: the set's (one pool for all), or its own kubeconfig's."""
    kube: dict[str, KubeConnection] = {}
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
    return kube


def _process_context(
    settings: NodeSetSettings, engine: DockerEngine, on_failure: Callable[[str], None]
) -> ProcessContext:
    """One of each for the process; a process of one node takes only its own containers'
    Docker events."""
    supervisor = Supervisor(on_failure=on_failure)
    names = [n.settings.node_name for n in settings.nodes]
    label = f"{cri.LABEL_NODE}={names[0]}" if len(names) == 1 else cri.LABEL_NODE
    host = detect_host()  # the same host for every node: read once
    if not host.may_mount:
        _say_volumes_stay_on_disk(settings.root_dir)
    listener = None
    if settings.server is not None:
        log = get_logger("kubelet_sim.server")
        listener = Listener(settings.server.limits, log, tokens=TokenGuard())
    return ProcessContext(
        engine=engine,
        timers=timer_pool(len(names), supervisor),
        container_events=ContainerEvents(engine, label=label, supervisor=supervisor),
        listener=listener,
        host=host,
        probe=SharedProbe(engine),
        supervisor=supervisor,
        runtime_options=RuntimeOptions(
            log_rotation=settings.log_rotation,
            owner_labels=dict(settings.owner_labels),
        ),
    )


def _say_volumes_stay_on_disk(root_dir: Path) -> None:
    """Once a process: what its nodes' volumes do without CAP_SYS_ADMIN."""
    get_logger("kubelet_sim.volumes").warning(
        "cannot mount (needs root or CAP_SYS_ADMIN): secret and service account token"
        " volumes are kept on disk under the root dir instead of tmpfs, and subPaths are"
        " mounted by path, open to a symlink swapped in between check and mount; an"
        " emptyDir of medium Memory is a tmpfs Docker makes per container, emptied at"
        " a restart",
        root_dir=str(root_dir),
    )


def _log_counters(scope: _Scope) -> None:
    for name, informer in (("pods", scope.watches.pods), ("node", scope.watches.nodes)):
        stats = informer.stats
        get_logger("kubelet_sim.nodeset").info(
            "watch counters",
            watch=name,
            nodes=len(scope.names),
            lists=stats.lists,
            relists=stats.relists,
            watches=stats.watches,
            expired=stats.expired,
            reconnects=stats.reconnects,
            events=dict(stats.events),
        )


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
