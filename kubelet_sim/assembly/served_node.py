"""What the kubelet API server reads of its node (server.routes.NodeView)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from kubelet_sim import cri
from kubelet_sim.formats.histogram import Histogram
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.client import KubeConnection
from kubelet_sim.kube.shared_watches import SharedWatches
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.loops.timers import Timers
from kubelet_sim.node.host import host_usage
from kubelet_sim.podworkers.pod_manager import PodManager
from kubelet_sim.podworkers.sync import PodSyncer
from kubelet_sim.podworkers.workers import PodWorkers
from kubelet_sim.runtime.node_runtime import NodeRuntime
from kubelet_sim.runtime.observe import ContainerWatcher
from kubelet_sim.server.node_metrics import NodeSample
from kubelet_sim.server.usage import NodeUsage, PodUsage


class ServedNode:
    """Reads the node's parts on each request."""

    def __init__(
        self,
        node_name: str,
        pods: PodManager,
        watcher: ContainerWatcher,
        syncer: PodSyncer,
        workers: PodWorkers,
        runtime: NodeRuntime,
        kube: KubeConnection,
        watches: SharedWatches,
        timers: Timers,
        supervisors: tuple[Supervisor, Supervisor],
        gc_pauses: Histogram,
    ) -> None:
        self.node_name = node_name
        self._pods, self._watcher, self._runtime = pods, watcher, runtime
        self.syncer, self.workers = syncer, workers
        self._kube, self._watches, self._timers = kube, watches, timers
        self._supervisors = supervisors  # the node's, then the process's
        self._gc_pauses = gc_pauses  # the process's full collections

    def pods(self) -> list[Json]:
        return self._pods.pods()

    def containers(self, uid: str) -> Sequence[cri.ObservedContainer]:
        return self._watcher.pod_containers(uid)

    def health(self) -> tuple[bool, str]:
        for supervisor in self._supervisors:  # the node's loops, then the process's
            if not supervisor.healthy:
                return False, supervisor.failure or "a loop is restarting"
        return True, ""

    def metrics(self) -> NodeSample:
        stats = self._runtime.stats
        watches = self._watches
        return NodeSample(
            running=[c for uid in self._pods.uids() for c in self._running(uid)],
            docker_calls={k: float(n) for k, n in vars(stats).items() if not k.startswith("_")},
            informers={
                "pods": watches.pods.stats,
                "node": watches.nodes.stats,
                "services": watches.services.stats,
            },
            requests=self._kube.request_counts(),
            api_host=self._kube.host,
            pod_start=self.syncer.start_duration.snapshot(),
            pod_worker=self.workers.duration.snapshot(),
            probe_attempts=self.syncer.prober.attempts,
            timers=self._timers,
            gc_pauses=self._gc_pauses.snapshot(),
        )

    def usage(self) -> tuple[NodeUsage, list[PodUsage]]:
        """One sample of the node and of every running container (a Docker call each)."""
        cpu, memory = host_usage()
        node = NodeUsage(cpu, memory, time.time())
        pods = []
        for pod in self._pods.pods():
            meta = pod.get("metadata") or {}
            uid = str(meta.get("uid", ""))
            containers, sandbox, starts = {}, None, {}
            for c in self._running(uid):
                sample = self._runtime.container_stats(c.id)
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
            c for c in self._watcher.pod_containers(uid) if c.state is cri.ContainerState.RUNNING
        ]
