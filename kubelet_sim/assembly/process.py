"""What a process gives every node it runs: one of each, whatever the number of nodes.

The Docker engine, the timers (Leases, node status, service proxies, GC, static pods), the
Docker events stream (each node's watcher takes its own containers' events), the kubelet API
listener (a thread and a pool, each node its own port), the host's facts and the runtime's
probe. A process of one node has them too, so every part has one way to run.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from kubelet_sim.loops.collector import GarbageCollector
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.loops.timers import POOL_THREADS, URGENT_SHARE, YIELD_LAG, Timers
from kubelet_sim.node.host import HostFacts
from kubelet_sim.node.lifecycle import RuntimeProbe
from kubelet_sim.runtime.engine import DockerEngine, RuntimeUnavailable
from kubelet_sim.runtime.log_rotation import LogRotation
from kubelet_sim.runtime.observe import ContainerEvents
from kubelet_sim.server.listener import Listener

# Sandboxes made at once by all nodes of the process: making one takes runc, the kernel and
# dockerd a good part of a core, and the API server needs its share meanwhile.
POD_START_SLOTS = 2 * (os.cpu_count() or 2)

# Timer pool threads per node: its Lease, status, proxy and GC may each wait in a call at once.
TIMER_THREADS_PER_NODE = 4
NODES_PER_URGENT_THREAD = 50


def timer_pool(nodes: int, supervisor: Supervisor) -> Timers:
    """A pool that never makes one node's tasks wait behind its own, up to POOL_THREADS, and
    one more thread for the Lease renewals alone per NODES_PER_URGENT_THREAD nodes: with
    5,000 nodes on a machine their pods' starts fill, a renewal waits on a busy API server
    half a second, and 167 are due a second."""
    pool = min(POOL_THREADS, TIMER_THREADS_PER_NODE * max(nodes, 1))
    normal = pool - pool // URGENT_SHARE
    return Timers(
        pool_threads=pool + nodes // NODES_PER_URGENT_THREAD,
        normal_threads=normal,
        supervisor=supervisor,
    )


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
    _pod_start_slots: threading.BoundedSemaphore = field(
        default_factory=lambda: threading.BoundedSemaphore(POD_START_SLOTS)
    )

    @functools.cached_property
    def pod_network(self) -> tuple[str | None, str | None]:
        """The IPv4 subnet and gateway of the sandboxes' network, read once for every node's
        service proxy (at its first use: a process without proxies never asks)."""
        try:
            gateway: str | None = self.engine.network_gateway()
        except RuntimeUnavailable:
            gateway = None
        return self.engine.network_subnet(), gateway

    @contextlib.contextmanager
    def pace_pod_starts(self) -> Iterator[None]:
        """Held while a node makes a pod's sandbox and its network, starts a container, stops
        a sandbox or removes a container (runc and the kernel's work): one of
        POD_START_SLOTS, taken once the Lease renewals lag by under half a second (10 s at
        most). A hundred pods started at once on two cores left kube-apiserver no CPU for the
        renewals of 5,000 nodes: the pods now slow their own start, not every heartbeat."""
        with self._pod_start_slots:
            self.timers.wait_caught_up(threading.Event(), lag=(YIELD_LAG[0], math.inf))
            yield

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
