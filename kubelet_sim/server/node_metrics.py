"""A node's `/metrics`: the kubelet's own families and ours, from a sample the node gives."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kubelet_sim import cri
from kubelet_sim.formats.histogram import Histogram
from kubelet_sim.kube.informer import InformerStats
from kubelet_sim.loops.timers import Timers
from kubelet_sim.server.metrics import Family, Sample, histogram_family, render

Snapshot = tuple[list[tuple[float, int]], float, int]


@dataclass(frozen=True)
class NodeSample:
    """What the node reads for one scrape: its running containers and its counters."""

    running: Sequence[cri.ObservedContainer]
    docker_calls: Mapping[str, float]  # by kind
    informers: Mapping[str, InformerStats]  # by resource: pods, node, services
    requests: Mapping[tuple[str, str], int]  # by (method, code)
    api_host: str
    pod_start: Snapshot
    pod_worker: Snapshot
    probe_attempts: int
    timers: Timers
    gc_pauses: Snapshot  # the process's full garbage collections (loops/collector)


def render_node_metrics(s: NodeSample) -> str:
    sandboxes = sum(1 for c in s.running if c.is_sandbox)
    histograms = histogram_family(
        "kubelet_pod_start_duration_seconds",
        "Duration in seconds from kubelet seeing a pod for the first time to the pod starting"
        " to run",
        s.pod_start,
    ) + histogram_family(
        "kubelet_pod_worker_duration_seconds",
        "Duration in seconds to sync a single pod.",
        s.pod_worker,
        {"operation": "sync"},
    )
    lateness: Mapping[str, Histogram] = s.timers.lateness
    if "lease" in lateness:  # the process's: every node's renewals, as seen by each node
        histograms += histogram_family(
            "kubelet_sim_lease_renewal_lateness_seconds",
            "How long after its due time each Lease renewal of the process started",
            lateness["lease"].snapshot(),
        )
    histograms += histogram_family(
        "kubelet_sim_gc_full_collection_seconds",
        "How long each full garbage collection of the process stopped every thread",
        s.gc_pauses,
    )
    late = Family(
        "kubelet_sim_periodic_runs_late_total",
        "counter",
        "Periodic runs (Lease, node status, proxy, GC) started over 1 s late",
        [Sample({"kind": k}, n) for k, n in sorted(s.timers.late_runs.items())],
    )
    docker = [Sample({"kind": kind}, value) for kind, value in sorted(s.docker_calls.items())]
    relists = [Sample({"resource": n}, i.relists) for n, i in s.informers.items()]
    restarts = [Sample({"resource": n}, i.reconnects) for n, i in s.informers.items()]
    requests = [
        Sample({"code": code, "host": s.api_host, "method": method}, n)
        for (method, code), n in sorted(s.requests.items())
    ]
    return histograms + render(
        [
            late,
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
                [Sample({"container_state": "running"}, len(s.running) - sandboxes)],
            ),
            Family(
                "kubelet_sim_probe_attempts_total",
                "counter",
                "Probe attempts run (every kind)",
                [Sample({}, s.probe_attempts)],
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
