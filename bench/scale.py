"""N virtual nodes in one kubelet-sim process, no pods: what they cost and whether they keep up.

One run per N (`python -m bench.perf --nodes 10,100,1000`): start `kubelet-sim --nodes N`,
time until every Node is Ready (a Node watch), then over an idle window: the process's CPU
(% of one core) and RSS, the Leases' renewal lateness seen from the API side (bench/leases.py)
and the nodes' API requests per second per node (bench/apirate.py); on a real server also its
own figures over the window (CPU of kube-apiserver and etcd, its latency for Lease updates),
the whole machine's CPU, and the Nodes not Ready at its end: on two cores shared with the
control plane, they say whether the agent or the server is the limit. Then, if asked, pods
spread over the nodes (the scheduler places them on a real server; round-robin
`spec.nodeName` on the fake): time until all Ready and how many were lost.

`ScaleOptions.agent_args` go to the agent as they are (`--node-lease-duration-seconds 120`);
the lateness is judged against the renew interval they give.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from bench import agentlog, apirate, dockerside
from bench.kube import ObjectWatch, PodWatch, create_namespace, delete_namespace, is_ready, pod_body
from bench.leases import LeaseRecorder, lateness, renew_interval
from bench.measure import Deadline
from bench.processes import AGENT_USER_AGENT_PREFIX, FakeProcess, spawn_kubelet_sim, stop_process
from bench.procstat import MachineCpu, ProcessesCpu, cpu_seconds, memory_kib, threads
from kubelet_sim.formats.jsontypes import Json

SETTLE = 3.0  # after all Ready: registration's trailing writes land before the window


@dataclass
class Server:
    """The API server the scale runs talk to, with admin credentials."""

    api: Any  # kubernetes.client.ApiClient
    kubeconfig: str
    fake: FakeProcess | None
    scheduler: bool  # pods may be left to a scheduler
    components: dict[str, int] = field(default_factory=dict)  # real: control plane name → pid

    @property
    def core(self) -> Any:
        return client.CoreV1Api(self.api)


@dataclass
class ScaleOptions:
    idle_seconds: float = 60.0
    baseline_seconds: float = 20.0  # real server only: the rate without the nodes
    ready_timeout: float = 300.0
    pods: int = 0  # spread over the nodes after the idle window
    pods_timeout: float = 180.0
    agent_args: list[str] = field(default_factory=list)  # more options for kubelet-sim
    log_dir: Path | None = None  # the agent's log is kept here (else it goes with tmp)


@dataclass
class ScaleResult:
    nodes: int
    ready: int = 0
    all_ready_seconds: float | None = None
    idle_seconds: float | None = None
    cpu_percent_of_a_core: float | None = None
    rss_mib: float | None = None
    peak_rss_mib: float | None = None
    threads: int | None = None
    agent_args: list[str] = field(default_factory=list)
    lease_renew_interval: float | None = None  # what the lateness is measured against
    lease_lateness: dict[str, Any] | None = None  # renewTime intervals in the idle window
    lease_lateness_received: dict[str, Any] | None = None  # the same by the watch's receipt
    lease_lateness_from_start: dict[str, Any] | None = None  # registration included
    lease_lateness_pods: dict[str, Any] | None = None  # while the pods are spread and Ready
    api_per_node_per_second: float | None = None
    api_requests: dict[str, int] | None = None  # in the window, by verb and resource
    api_baseline: dict[str, int] | None = None  # real server: without the nodes
    api_baseline_seconds: float | None = None
    api_note: str = ""
    # The server's own figures and the machine's over the idle window (real server only).
    control_plane_cpu_percent: dict[str, float] | None = None  # of one core, per component
    machine_cpu_percent: float | None = None  # busy, of all cores together
    lease_updates: dict[str, Any] | None = None  # PUT leases: latency (s) and response codes
    not_ready_at_end: int | None = None  # of the run's Nodes, Ready not True at the window's end
    ready_status_at_end: dict[str, int] | None = None  # Ready status → Nodes ("missing": none)
    pods: dict[str, Any] | None = None
    agent_log: str | None = None  # where the agent's log was kept
    agent_idle: dict[str, Any] | None = None  # what it logged in the idle window (agentlog)
    idle_window: tuple[float, float] | None = None  # epoch seconds
    notes: list[str] = field(default_factory=list)


class NodeReadiness:
    """A Node watch: when each of `names` was first seen Ready."""

    def __init__(self, core: Any, names: list[str], timeout: float) -> None:
        self._wanted = set(names)
        self.ready: dict[str, float] = {}
        self._cond = threading.Condition()
        self.watch = ObjectWatch(core.list_node, self._on_event, timeout)

    def _on_event(self, kind: str, node: Json, received: float) -> None:
        name = str((node.get("metadata") or {}).get("name", ""))
        if name not in self._wanted or kind == "DELETED":
            return
        conditions = (node.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            with self._cond:
                self.ready.setdefault(name, received)
                self._cond.notify_all()

    def wait_all(self, procs: list[subprocess.Popen[bytes]], timeout: float) -> bool:
        """True once every node was Ready; False at the timeout or if a process exited."""
        end = time.monotonic() + timeout
        with self._cond:
            while len(self.ready) < len(self._wanted):
                left = end - time.monotonic()
                if left <= 0 or any(p.poll() is not None for p in procs):
                    return False
                self._cond.wait(min(left, 1.0))
        return True

    def close(self) -> None:
        self.watch.close()


def run(
    server: Server, n: int, options: ScaleOptions, deadline: Deadline, tmp: Path, owned: list[Any]
) -> ScaleResult:
    """One process with `n` nodes; `owned` gets the process (for the watchdog) while it runs."""
    prefix = f"bench-n{n}-"
    names = [f"{prefix}{i}" for i in range(1, n + 1)]
    result = ScaleResult(nodes=n, agent_args=list(options.agent_args))
    result.lease_renew_interval = renew_interval(options.agent_args, os.environ)
    core = server.core
    leases = LeaseRecorder(client.CoordinationV1Api(server.api), deadline.left())
    readiness = NodeReadiness(core, names, deadline.left())
    proc: subprocess.Popen[bytes] | None = None
    try:
        baseline = _baseline(server, options, deadline, result)
        started = time.time()
        proc = spawn_kubelet_sim(
            ["--nodes", str(n), "--node-name-prefix", prefix, *options.agent_args],
            server.kubeconfig, tmp / f"n{n}", tmp / f"n{n}.log",
        )  # fmt: skip
        owned.append(proc)
        all_ready = readiness.wait_all([proc], deadline.left(options.ready_timeout))
        result.ready = len(readiness.ready)
        if readiness.ready:
            result.all_ready_seconds = round(max(readiness.ready.values()) - started, 2)
        if not all_ready:
            exited = proc.poll() is not None
            why = "the process exited" if exited else "timeout; the idle window measured anyway"
            result.notes.append(f"{result.ready} of {n} Nodes Ready ({why})")
            result.all_ready_seconds = None
            if exited or deadline.passed:
                return result
        time.sleep(min(SETTLE, deadline.left()))
        _idle_window(server, proc, names, options, deadline, baseline, leases, result, started)
        if options.pods and (all_ready or result.not_ready_at_end == 0) and not deadline.passed:
            _pods_phase(server, proc, names, options, deadline, leases, result)
        return result
    finally:
        for what, watch in (("Node", readiness.watch), ("Lease", leases.watch)):
            if watch.restarts or watch.error:
                result.notes.append(
                    f"the bench's {what} watch was opened again {watch.restarts} time(s)"
                    f" ({watch.relists} after a new list)"
                    + (f", then ended with {watch.error!r}"[:200] if watch.error else "")
                )
        readiness.close()
        leases.close()
        if proc is not None:
            stop_process(proc, 60)
            owned.remove(proc)
            _keep_log(tmp / f"n{n}.log", options, result)
        left = _remove_nodes(server, names)
        if left:
            result.notes.append(
                "Docker did not answer the cleanup" if left < 0 else f"{left} container(s) left"
            )


def _pods_phase(
    server: Server,
    proc: subprocess.Popen[bytes],
    names: list[str],
    options: ScaleOptions,
    deadline: Deadline,
    leases: LeaseRecorder,
    result: ScaleResult,
) -> None:
    """Pods spread over the nodes, with what it cost the agent, the machine and the server,
    and the Leases meanwhile."""
    p0, m0, components = time.time(), time.monotonic(), ProcessesCpu(server.components)
    text0 = apirate.metrics_text(server.api) if server.fake is None else None
    agent0, machine = cpu_seconds(proc.pid), MachineCpu()
    result.pods = spread_pods(server, names, options, deadline)
    wall = time.monotonic() - m0
    result.pods["agent_cpu_percent"] = round(100 * (cpu_seconds(proc.pid) - agent0) / wall, 1)
    result.pods["machine_cpu_percent"] = machine.busy_percent()
    if text0 is not None:  # the server's own account of the pods phase
        text1 = apirate.metrics_text(server.api)
        grown = apirate.delta(apirate.request_totals(text0), apirate.request_totals(text1))
        result.pods["api_requests"] = dict(grown.most_common(25))
        result.pods["lease_updates"] = lease_updates(text0, text1)
        result.pods["control_plane_cpu_percent"] = components.percent(wall)
    renew, _ = leases.snapshot()
    interval = result.lease_renew_interval or renew_interval([], {})
    during = lateness(renew, names, p0, time.time(), interval)
    result.lease_lateness_pods = asdict(during)
    result.notes.append(
        f"Leases while the pods were spread: {during.late} of {during.intervals} late,"
        f" p99 {during.p99 or 0:.2f} s, max {during.max or 0:.2f} s,"
        f" {during.overdue_at_end} overdue at the end"
    )


def _keep_log(log: Path, options: ScaleOptions, result: ScaleResult) -> None:
    """The agent's own account of the idle window, and its log kept for reading later."""
    window = result.idle_window
    if window is not None and log.exists():
        said = agentlog.read(log, *window)
        result.agent_idle = asdict(said)
        result.notes.append(
            f"the agent in the idle window: late runs {said.late_runs or 'none'}"
            f" (worst {said.worst_late_seconds or '-'}), full collections over 1 s"
            f" {said.gc_pauses or 'none'}"
        )
    if options.log_dir is not None and log.exists():
        options.log_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        kept = options.log_dir / f"scale-n{result.nodes}-{stamp}.log"
        shutil.copyfile(log, kept)
        result.agent_log = str(kept)


def _baseline(
    server: Server, options: ScaleOptions, deadline: Deadline, result: ScaleResult
) -> Counter[str]:
    """Requests the real server serves without the nodes (its controllers, the bench's
    scrape), by kind; nothing on the fake, whose log is filtered by user agent."""
    if server.fake is not None:
        result.api_note = f"the fake's request log, user agent {AGENT_USER_AGENT_PREFIX}*"
        return Counter()
    before, t0 = apirate.scrape(server.api), time.monotonic()
    time.sleep(deadline.left(options.baseline_seconds))
    grown = apirate.delta(before, apirate.scrape(server.api))
    result.api_baseline = dict(grown.most_common())
    result.api_baseline_seconds = round(time.monotonic() - t0, 1)
    result.api_note = (
        "kube-apiserver's apiserver_request_total, less the same kinds of request in "
        f"{result.api_baseline_seconds} s before the nodes started (controllers, the bench)"
    )
    return grown


def _idle_window(
    server: Server,
    proc: subprocess.Popen[bytes],
    names: list[str],
    options: ScaleOptions,
    deadline: Deadline,
    baseline: Counter[str],
    leases: LeaseRecorder,
    result: ScaleResult,
    started: float,
) -> None:
    text0 = apirate.metrics_text(server.api) if server.fake is None else None
    machine, components = MachineCpu(), ProcessesCpu(server.components)
    cpu0, t0, w0 = cpu_seconds(proc.pid), time.monotonic(), time.time()
    time.sleep(deadline.left(options.idle_seconds))
    cpu1, t1, w1 = cpu_seconds(proc.pid), time.monotonic(), time.time()
    result.idle_window = (w0, w1)
    busy = machine.busy_percent()
    result.machine_cpu_percent = None if busy is None else round(busy, 1)
    if server.components:
        result.control_plane_cpu_percent = components.percent(t1 - t0)
    mem = memory_kib(proc.pid)
    wall = t1 - t0
    result.idle_seconds = round(wall, 1)
    result.cpu_percent_of_a_core = round(100 * (cpu1 - cpu0) / wall, 2)
    result.rss_mib = round(mem.get("VmRSS", 0) / 1024, 1)
    result.peak_rss_mib = round(mem.get("VmHWM", 0) / 1024, 1)
    result.threads = threads(proc.pid)
    if text0 is not None:
        text1 = apirate.metrics_text(server.api)
        counts = apirate.delta(apirate.request_totals(text0), apirate.request_totals(text1))
        result.lease_updates = lease_updates(text0, text1)
    else:
        assert server.fake is not None
        counts = apirate.fake_counts(server.fake, AGENT_USER_AGENT_PREFIX, w0, w1)
    result.api_requests = dict(counts.most_common())
    if result.api_baseline_seconds:
        counts = apirate.less_baseline(counts, baseline, result.api_baseline_seconds, w1 - w0)
    rate = apirate.per_node_per_second(counts, w1 - w0, len(names))
    result.api_per_node_per_second = None if rate is None else round(rate, 4)
    renew, received = leases.snapshot()
    interval = result.lease_renew_interval or renew_interval([], {})
    result.lease_lateness = asdict(lateness(renew, names, w0, w1, interval))
    result.lease_lateness_received = asdict(lateness(received, names, w0, w1, interval))
    result.lease_lateness_from_start = asdict(lateness(renew, names, started, w1, interval))
    if w1 - w0 < 2 * interval:
        result.notes.append("idle window under two renew intervals: few lease samples")
    listed = server.core.list_node(_preload_content=False)
    statuses = ready_status(json.loads(listed.data).get("items") or [], names)
    result.ready_status_at_end = dict(statuses.most_common())
    result.not_ready_at_end = len(names) - statuses.get("True", 0)


def lease_updates(before: str, after: str) -> dict[str, Any]:
    """The API server's own account of the Lease renewals between two /metrics texts: how
    many, their latency (p50 / p99 from the buckets, mean) and response codes."""
    durations = apirate.request_durations(after, "PUT", "leases").minus(
        apirate.request_durations(before, "PUT", "leases")
    )
    codes = apirate.delta(
        apirate.request_codes(before, "PUT", "leases"),
        apirate.request_codes(after, "PUT", "leases"),
    )

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 4)

    return {
        "count": int(durations.count),
        "p50_seconds": rounded(durations.quantile(0.5)),
        "p99_seconds": rounded(durations.quantile(0.99)),
        "mean_seconds": rounded(durations.mean),
        "codes": dict(codes.most_common()),
    }


def ready_status(items: list[Json], names: list[str]) -> Counter[str]:
    """Of `names`, how many Nodes have each status of their Ready condition ("True",
    "Unknown", ...); "none" without the condition, "missing" when the Node is not listed."""
    by_name = {str((i.get("metadata") or {}).get("name", "")): i for i in items}
    out: Counter[str] = Counter()
    for name in names:
        node = by_name.get(name)
        if node is None:
            out["missing"] += 1
            continue
        conditions = (node.get("status") or {}).get("conditions") or []
        found = [c for c in conditions if c.get("type") == "Ready"]
        out[str(found[0].get("status")) if found else "none"] += 1
    return out


def spread_pods(
    server: Server, names: list[str], options: ScaleOptions, deadline: Deadline
) -> dict[str, Any]:
    """`options.pods` pods over the nodes at once: until all Ready, then lost ones, then all
    deleted (graceful) until gone from the API."""
    core, count = server.core, options.pods
    ns = create_namespace(core, "bench-spread")
    ready: dict[str, float] = {}
    gone: dict[str, float] = {}
    cond = threading.Condition()

    def on_event(kind: str, pod: Json, received: float) -> None:
        name = str((pod.get("metadata") or {}).get("name", ""))
        with cond:
            if kind == "DELETED":
                gone.setdefault(name, received)
            elif is_ready(pod):
                ready.setdefault(name, received)
            cond.notify_all()

    pods = [f"pod-{i:03d}" for i in range(count)]
    placed_by = "scheduler" if server.scheduler else "spec.nodeName, round-robin"
    out: dict[str, Any] = {"pods": count, "placed_by": placed_by, "namespace": ns}
    watch = PodWatch(core, ns, on_event, timeout=deadline.left())
    try:
        first = time.time()
        with ThreadPoolExecutor(max_workers=32, thread_name_prefix="bench-spread") as pool:
            list(pool.map(lambda i: core.create_namespaced_pod(
                ns, pod_body(pods[i], None if server.scheduler else names[i % len(names)]),
                _preload_content=False), range(count)))  # fmt: skip
        with cond:
            cond.wait_for(lambda: len(ready) >= count, deadline.left(options.pods_timeout))
        out["ready"] = len(ready)
        out["all_ready_seconds"] = round(max(ready.values()) - first, 2) if ready else None
        if len(ready) < count:
            out["all_ready_seconds"] = None
        listed = core.list_namespaced_pod(ns, _preload_content=False)
        out.update(_placement(listed, set(names), count))
        first_delete = time.time()
        core.delete_collection_namespaced_pod(ns, _preload_content=False)
        with cond:
            cond.wait_for(lambda: len(gone) >= count, deadline.left(options.pods_timeout))
        out["all_gone_seconds"] = (
            round(max(gone.values()) - first_delete, 2) if len(gone) >= count else None
        )
    finally:
        watch.close()
        delete_namespace(core, ns, force_pods=server.fake is None)
    return out


def _placement(listed: Any, nodes: set[str], count: int) -> dict[str, Any]:
    """How many pods are Running and Ready on one of the run's nodes, and on how many nodes."""
    items = json.loads(listed.data).get("items") or []
    fine = [
        p
        for p in items
        if (p.get("spec") or {}).get("nodeName") in nodes
        and (p.get("status") or {}).get("phase") == "Running"
        and is_ready(p)
    ]
    per_node = Counter(str(p["spec"]["nodeName"]) for p in fine)
    return {
        "running_ready": len(fine),
        "lost": count - len(fine),
        "nodes_used": len(per_node),
        "most_on_one_node": max(per_node.values(), default=0),
    }


def _remove_nodes(server: Server, names: list[str]) -> int:
    """The run's Nodes and Leases from the API, their containers from Docker; how many
    containers are left."""
    core = server.core
    coordination = client.CoordinationV1Api(server.api)

    def remove(name: str) -> None:
        with contextlib.suppress(Exception):
            core.delete_node(name, _preload_content=False)
        with contextlib.suppress(Exception):
            coordination.delete_namespaced_lease(name, "kube-node-lease", _preload_content=False)

    with ThreadPoolExecutor(max_workers=16, thread_name_prefix="bench-cleanup") as pool:
        list(pool.map(remove, names))
    dk = dockerside.connect()
    try:
        dockerside.remove_containers_of(dk, set(names))
        return len(dockerside.containers_of(dk, set(names)))
    except dockerside.REMOVE_FAILED:
        return -1
    finally:
        dk.close()
