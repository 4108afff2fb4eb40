"""What metrics-server and `kubectl top` read: `/metrics/resource` and `/stats/summary`.

The agent gathers the samples (the host's /proc, Docker's stats per container); this module
only writes them in the kubelet's names (pkg/kubelet/metrics/collectors/resource_metrics.go,
the Summary API). CPU is cumulative core-seconds: metrics-server computes rates from two
scrapes, so no rate is made up here (the summary's usageNanoCores is left out).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from kubelet_sim.cri import ContainerStats
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.server.metrics import Family, Sample, render


@dataclass(frozen=True)
class PodUsage:
    namespace: str
    name: str
    uid: str
    containers: dict[str, ContainerStats]  # app and init containers running now, by name
    sandbox: ContainerStats | None = None  # counted in the pod's totals, as its cgroup is
    start_times: dict[str, float] = field(default_factory=dict)  # unix seconds, by name

    def total(self) -> tuple[float, int]:
        parts = [*self.containers.values(), *([self.sandbox] if self.sandbox else [])]
        return sum(p.cpu_seconds for p in parts), sum(p.memory_working_set_bytes for p in parts)


@dataclass(frozen=True)
class NodeUsage:
    cpu_seconds: float
    memory_working_set_bytes: int
    timestamp: float


def resource_metrics(node: NodeUsage, pods: list[PodUsage]) -> str:
    ms = int(node.timestamp * 1000)
    containers_cpu, containers_mem, starts, pods_cpu, pods_mem = [], [], [], [], []
    for pod in pods:
        ref = {"namespace": pod.namespace, "pod": pod.name}
        for name, stats in sorted(pod.containers.items()):
            labels = {**ref, "container": name}
            at = int(stats.timestamp * 1000)
            containers_cpu.append(Sample(labels, stats.cpu_seconds, at))
            containers_mem.append(Sample(labels, stats.memory_working_set_bytes, at))
            if name in pod.start_times:
                starts.append(Sample(labels, pod.start_times[name], at))
        cpu, mem = pod.total()
        pods_cpu.append(Sample(ref, cpu, ms))
        pods_mem.append(Sample(ref, mem, ms))
    stable = "[STABLE] "
    return render(
        [
            Family("container_cpu_usage_seconds_total", "counter",
                   stable + "Cumulative cpu time consumed by the container in core-seconds",
                   containers_cpu),
            Family("container_memory_working_set_bytes", "gauge",
                   stable + "Current working set of the container in bytes", containers_mem),
            Family("container_start_time_seconds", "gauge",
                   stable + "Start time of the container since unix epoch in seconds", starts),
            Family("node_cpu_usage_seconds_total", "counter",
                   stable + "Cumulative cpu time consumed by the node in core-seconds",
                   [Sample({}, node.cpu_seconds, ms)]),
            Family("node_memory_working_set_bytes", "gauge",
                   stable + "Current working set of the node in bytes",
                   [Sample({}, node.memory_working_set_bytes, ms)]),
            Family("pod_cpu_usage_seconds_total", "counter",
                   stable + "Cumulative cpu time consumed by the pod in core-seconds", pods_cpu),
            Family("pod_memory_working_set_bytes", "gauge",
                   stable + "Current working set of the pod in bytes", pods_mem),
            Family("resource_scrape_error", "gauge",
                   stable + "1 if there was an error while getting container metrics, 0 otherwise",
                   [Sample({}, 0)]),
        ]
    )  # fmt: skip


def summary(node_name: str, node: NodeUsage, pods: list[PodUsage]) -> Json:
    """The Summary API's shape (stats/v1alpha1), with what Docker and /proc can tell."""

    items = []
    for pod in pods:
        total_cpu, total_mem = pod.total()
        items.append(
            {
                "podRef": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
                "containers": [
                    _container(name, stats, pod.start_times.get(name))
                    for name, stats in sorted(pod.containers.items())
                ],
                "cpu": cpu(total_cpu, node.timestamp),
                "memory": memory(total_mem, node.timestamp),
            }
        )
    return {
        "node": {
            "nodeName": node_name,
            "cpu": cpu(node.cpu_seconds, node.timestamp),
            "memory": memory(node.memory_working_set_bytes, node.timestamp),
        },
        "pods": items,
    }


def _container(name: str, stats: ContainerStats, started: float | None) -> Json:
    out: Json = {"name": name}
    if started is not None:
        out["startTime"] = _time(started)
    out["cpu"] = cpu(stats.cpu_seconds, stats.timestamp)
    out["memory"] = memory(
        stats.memory_working_set_bytes, stats.timestamp, stats.memory_usage_bytes
    )
    return out


def cpu(seconds: float, at: float) -> Json:
    return {"time": _time(at), "usageCoreNanoSeconds": int(seconds * 1e9)}


def memory(working: int, at: float, usage: int | None = None) -> Json:
    out: Json = {"time": _time(at), "workingSetBytes": working}
    if usage is not None:
        out["usageBytes"] = usage
    return out


def _time(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
