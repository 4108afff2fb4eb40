"""One node's running parts, made by `build.build_node`; `start` and `stop` are its one lifecycle.

Start order: API server reachable → Node registered (Lease and status on the process's timers)
→ the node's watches (its own; watches of every node run already), its kubelet API port and
the node's containers → pod workers, once both the pod list and the container list are in (so
nothing is mistaken for an orphan). The node's handlers are on its watches from its making,
so the first list reaches it as a list. Stop order is the reverse; running pods are left
alone, as the kubelet leaves them.

Every loop of the node runs under its `supervisor`: a loop that raised is restarted; one that
keeps failing marks the node failed, and its set stops every node (the command exits 1).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Protocol

from kubelet_sim.assembly.intake import PodIntake
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.client import KubeConnection, wait_for_api_server
from kubelet_sim.kube.events import EventRecorder
from kubelet_sim.kube.informer import DELETED
from kubelet_sim.kube.object_watches import ReferencedObjectWatches
from kubelet_sim.kube.shared_watches import NodeHandlers, SharedWatches
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.supervise import LoopHealth, Supervisor
from kubelet_sim.node.lifecycle import NodeLifecycle
from kubelet_sim.node.settings import NodeSettings
from kubelet_sim.podworkers.gc import ContainerGC
from kubelet_sim.podworkers.pod_manager import PodManager
from kubelet_sim.podworkers.pool import SandboxPool
from kubelet_sim.podworkers.sync import PodSyncer
from kubelet_sim.podworkers.workers import PodWorkers
from kubelet_sim.proxy.proxy import ServiceProxy
from kubelet_sim.runtime.node_runtime import NodeRuntime
from kubelet_sim.runtime.observe import ContainerWatcher
from kubelet_sim.server.http import KubeletServer
from kubelet_sim.staticpods.source import StaticPods

SHUTDOWN_SECONDS = 3.0  # how long a stop waits for threads in a Docker or API call
SERVICES_GRACE = 5.0  # seconds the pod workers wait for the first list of Services


class Stoppable(Protocol):
    def stop(self, timeout: float) -> None: ...


@dataclass
class NodeParts:
    """Everything a node runs, made and wired by the builder."""

    settings: NodeSettings
    kube: KubeConnection
    runtime: NodeRuntime
    supervisor: Supervisor
    lifecycle: NodeLifecycle
    watches: SharedWatches  # the node's credentials' watches (every node's, or its own)
    pods: PodManager
    intake: PodIntake
    objects: ReferencedObjectWatches
    events: EventRecorder
    watcher: ContainerWatcher
    pool: SandboxPool
    syncer: PodSyncer
    workers: PodWorkers
    gc: ContainerGC
    proxy: ServiceProxy | None
    server: KubeletServer | None
    static: StaticPods | None
    proxy_off: str | None = None  # why no service proxy runs though one was asked for


class Node:
    """A node built by `build.build_node`: its parts, and their start and stop in order."""

    def __init__(self, parts: NodeParts) -> None:
        self.parts = p = parts
        self.settings = p.settings
        self.node_name = p.settings.node_name
        self.kube, self.runtime, self.supervisor = p.kube, p.runtime, p.supervisor
        self.lifecycle, self.watches, self.pods = p.lifecycle, p.watches, p.pods
        self.objects, self.events, self.watcher = p.objects, p.events, p.watcher
        self.pool, self.syncer, self.workers, self.gc = p.pool, p.syncer, p.workers, p.gc
        self.proxy, self.server, self.static = p.proxy, p.server, p.static
        self.log = get_logger("kubelet_sim.node", node=self.node_name)
        self.node_object: Json | None = None  # our Node as the watch last told
        self._started_lock = threading.Lock()
        self._controllers_started = False

    def health(self) -> dict[str, LoopHealth]:
        """Each supervised loop's state and restarts, for a `/healthz`."""
        return self.supervisor.health()

    def start(self, stop: threading.Event) -> bool:
        """Up to serving pods: True once the pod workers run; False if `stop` came first.

        It returns once the node runs: a set of many nodes starts each on a short-lived thread
        and keeps none per node after (`stop` ends what this started)."""
        self.log.info(
            "starting",
            api_server=self.kube.host,
            config_source=self.kube.source,
            docker_version=self.runtime.engine.version(),
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
            if self.server is not None:
                self.server.start()
            self.events.start()
            self.watches.start()
            if self.parts.proxy_off is not None:
                self.log.warning(
                    "Services are not programmed into pods", reason=self.parts.proxy_off
                )
            if self.proxy is not None:
                self.proxy.start()
            self.watcher.start()
        for synced in (self.watches.pods.synced.wait, self.watcher.wait_synced):
            while not stop.is_set() and not synced(0.5):  # wakes only to notice a stop
                pass
        # The Services too, briefly: a container started before them would wait out a retry
        # (the kubelet does not wait; a node that may not list them must still run pods).
        self.watches.services.synced.wait(SERVICES_GRACE)
        if stop.is_set():
            return False
        if self.static is not None:  # its pods in the index before the workers look for orphans
            self.static.start()
        self.workers.start()
        self.gc.start()
        self.pool.start()
        for uid in {*self.pods.uids(), *self.watcher.pod_uids()}:
            self.workers.enqueue(uid)
        self.log.info("running")
        return True

    def stop(self) -> None:
        """Stop what `start` started, within SHUTDOWN_SECONDS; running pods are left alone.

        Safe to call while `start` still runs on another thread (it then starts nothing
        more) and more than once."""
        self.lifecycle.interrupt()  # at once: a registration still retrying gives up
        with self._started_lock:
            started, self._controllers_started = self._controllers_started, False
        if started:
            self._stop_controllers()
        elif self.server is not None:
            self.server.stop()  # bound at its making: its port closes
        self.lifecycle.stop()

    def _stop_controllers(self) -> None:
        self.log.info("stopping")
        self.watches.unregister(self.node_name)
        deadline = time.monotonic() + SHUTDOWN_SECONDS
        parts: list[Stoppable] = [
            *([self.static] if self.static is not None else []),
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

    # -- what the watches tell (on their threads: quick, they only index and enqueue) ----------

    def handlers(self) -> NodeHandlers:
        """What the node's watches tell it: registered by the set at the node's making."""
        proxy = self.proxy
        return NodeHandlers(
            self.parts.intake.on_pod_event,
            self._on_node_event,
            proxy.changed if proxy is not None else None,
        )

    def _on_node_event(self, kind: str, node: Json) -> None:
        self.node_object = None if kind == DELETED else node
        if kind == DELETED:
            self.log.warning("own Node deleted; registering it again")
            self.lifecycle.node_deleted()
        else:
            self.lifecycle.node_changed(node)
