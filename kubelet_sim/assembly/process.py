"""What a process gives every node it runs: one of each, whatever the number of nodes.

The Docker engine, the timers (Leases, node status, service proxies, GC, static pods), the
Docker events stream (each node's watcher takes its own containers' events), the kubelet API
listener (a thread and a pool, each node its own port), the host's facts and the runtime's
probe. A process of one node has them too, so every part has one way to run.
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass, field

from kubelet_sim.loops.collector import GarbageCollector
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.loops.timers import POOL_THREADS, YIELD_LAG, Timers
from kubelet_sim.node.host import HostFacts
from kubelet_sim.node.lifecycle import RuntimeProbe
from kubelet_sim.runtime.engine import DockerEngine, RuntimeUnavailable
from kubelet_sim.runtime.log_rotation import LogRotation
from kubelet_sim.runtime.observe import ContainerEvents
from kubelet_sim.server.listener import Listener

# Timer pool threads per node: its Lease, status, proxy and GC may each wait in a call at once.
TIMER_THREADS_PER_NODE = 4


def timer_threads(nodes: int) -> int:
    """A pool that never makes one node's tasks wait behind its own, up to POOL_THREADS."""
    return min(POOL_THREADS, TIMER_THREADS_PER_NODE * max(nodes, 1))


def engine_for(network: str = "bridge", *, pull_progress_deadline: float = 60.0) -> DockerEngine:
    """The process's Docker engine, connected and pinged (RuntimeUnavailable in one line if it
    does not answer): `network` is the one the pods' sandboxes join; pulls that make no
    progress for `pull_progress_deadline` seconds are cancelled. The one maker of an engine."""
    return DockerEngine.connect(network=network, pull_progress_deadline=pull_progress_deadline)


@dataclass(frozen=True)
class RuntimeOptions:
    """How each node's runtime makes containers (the same for every node of the process)."""

    log_rotation: LogRotation = field(default_factory=LogRotation)
    owner_labels: dict[str, str] = field(default_factory=dict)  # on every container made


@dataclass
class ProcessContext:
    engine: DockerEngine
    timers: Timers
    container_events: ContainerEvents
    listener: Listener | None  # None: no node serves the kubelet API
    host: HostFacts
    probe: RuntimeProbe
    supervisor: Supervisor  # its loops' failures fail every node of the process
    runtime_options: RuntimeOptions
    collector: GarbageCollector = field(default_factory=GarbageCollector)

    @functools.cached_property
    def pod_network(self) -> tuple[str | None, str | None]:
        """The IPv4 subnet and gateway of the sandboxes' network, read once for every node's
        service proxy (at its first use: a process without proxies never asks)."""
        try:
            gateway: str | None = self.engine.network_gateway()
        except RuntimeUnavailable:
            gateway = None
        return self.engine.network_subnet(), gateway

    def pace_pod_starts(self) -> None:
        """Before a node makes a sandbox: wait (10 s at most) while the Lease renewals lag,
        so that many pods starting at once slow their own start, not every node's heartbeat.
        Other periodic work may lag: pod starts are what it waits for."""
        self.timers.wait_caught_up(threading.Event(), lag=(YIELD_LAG[0], math.inf))

    def start(self) -> None:
        self.collector.watch()
        if self.listener is not None:
            self.listener.start(self.supervisor)
        self.timers.start()
        self.container_events.start()

    def stop(self) -> None:
        self.container_events.stop()
        self.timers.stop()
        if self.listener is not None:
            self.listener.stop()
        self.collector.unwatch()
