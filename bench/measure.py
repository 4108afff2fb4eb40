"""One benchmark run: N pods created at once on one node, watched to Ready, then deleted.

Every timestamp is taken where it is observed (the create call's return, the agent's log line,
Docker's StartedAt, the watch event's receipt), all on this machine's clock.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import docker

from bench import dockerside
from bench.apirate import request_key
from bench.dockerproxy import DockerProxy
from bench.kube import PodWatch, create_namespace, delete_namespace, is_ready, pod_body
from bench.processes import AgentProcess, FakeProcess
from bench.procstat import EngineCpu, Usage, UsageWindow

SETTLE = 1.0  # after the last Ready / DELETED: let trailing status writes and events land


class Deadline:
    """The run's global deadline; each wait takes the smaller of its own limit and this."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def left(self, cap: float | None = None) -> float:
        left = max(0.0, self.at - time.monotonic())
        return min(left, cap) if cap is not None else left

    @property
    def passed(self) -> bool:
        return time.monotonic() >= self.at


@dataclass
class PodRecord:
    name: str
    uid: str = ""
    create_sent: float = 0.0
    created: float | None = None
    observed: float | None = None  # agent log: "pod bound to this node"
    started: float | None = None  # Docker State.StartedAt of the app container
    running: float | None = None  # watch: phase Running received
    ready: float | None = None  # watch: Ready=True received
    delete_sent: float | None = None
    deleted: float | None = None  # the delete call returned
    containers_gone: float | None = None  # Docker: last destroy event of the pod
    object_gone: float | None = None  # watch: DELETED received


@dataclass
class Target:
    """A node under test: ours (agent process known) or another one (--compare-node)."""

    node: str
    agent: AgentProcess | None
    user_agent_prefix: str


@dataclass
class Context:
    core: Any  # kubernetes.client.CoreV1Api, called with plain dicts
    dk: docker.DockerClient
    fake: FakeProcess | None
    proxy: DockerProxy | None
    deadline: Deadline
    real_cluster: bool


@dataclass
class Phase:
    """Costs during one phase: agent usage, API requests and Docker calls made by the node."""

    start: float
    end: float
    usage: Usage | None = None
    engine_cpu_seconds: float | None = None  # dockerd + containerd over the phase
    api_in_namespace: dict[str, int] | None = None  # None: not measurable (real cluster)
    api_node_level: dict[str, int] | None = None
    docker_calls: dict[str, int] | None = None
    docker_events: dict[str, int] = field(default_factory=dict)


@dataclass
class RunResult:
    node: str
    size: int
    namespace: str
    pods: list[PodRecord]
    start: Phase
    delete: Phase
    idle: Phase | None
    all_ready_seconds: float | None
    all_gone_seconds: float | None
    all_containers_gone_seconds: float | None
    notes: list[str]


class _Tracker:
    """Watch events → per-pod times; wakes the waiter when something it waits for happens."""

    def __init__(self, records: dict[str, PodRecord]) -> None:
        self.records = records
        self.cond = threading.Condition()

    def on_event(self, kind: str, pod: dict[str, Any], received: float) -> None:
        name = str((pod.get("metadata") or {}).get("name", ""))
        with self.cond:
            rec = self.records.get(name)
            if rec is None:
                return
            if kind == "DELETED":
                rec.object_gone = rec.object_gone or received
            elif kind in ("ADDED", "MODIFIED"):
                if rec.running is None and (pod.get("status") or {}).get("phase") == "Running":
                    rec.running = received
                if rec.ready is None and is_ready(pod):
                    rec.ready = received
            self.cond.notify_all()

    def wait(self, done: Any, timeout: float) -> bool:
        with self.cond:
            return bool(self.cond.wait_for(lambda: done(self.records.values()), timeout))


def _create(core: Any, ns: str, rec: PodRecord, node: str) -> None:
    rec.create_sent = time.time()
    answer = core.create_namespaced_pod(ns, pod_body(rec.name, node), _preload_content=False)
    rec.created = time.time()
    rec.uid = json.loads(answer.data)["metadata"]["uid"]


def _delete(core: Any, ns: str, rec: PodRecord) -> None:
    rec.delete_sent = time.time()
    core.delete_namespaced_pod(rec.name, ns, _preload_content=False)
    rec.deleted = time.time()


def _api_counts(
    ctx: Context, target: Target, phase: Phase, ns: str
) -> tuple[dict[str, int], dict[str, int]] | None:
    """(requests in the run's namespace, node-level requests) by "verb resource[/sub]"."""
    if ctx.fake is None:
        return None
    records = ctx.fake.requests(phase.start, target.user_agent_prefix)
    inside: Counter[str] = Counter()
    outside: Counter[str] = Counter()
    for r in records:
        if r["time"] >= phase.end:
            continue
        (inside if r["namespace"] == ns else outside)[request_key(r)] += 1
    return dict(inside), dict(outside)


class _Phases:
    """Opens and closes phase windows: agent CPU/RSS, API and Docker counts."""

    def __init__(self, ctx: Context, target: Target, ns: str, events: dockerside.DockerEvents):
        self.ctx, self.target, self.ns, self.events = ctx, target, ns, events
        self._window: UsageWindow | None = None
        self._engine: EngineCpu | None = None
        self._start = 0.0

    def open(self) -> None:
        self._start = time.time()
        agent = self.target.agent
        self._window = UsageWindow(agent.pid, time.monotonic()) if agent else None
        self._engine = EngineCpu()

    def close(self) -> Phase:
        end = time.time()
        phase = Phase(start=self._start, end=end)
        if self._window is not None:
            phase.usage = self._window.stop(time.monotonic())
        if self._engine is not None and self._engine.pids:
            phase.engine_cpu_seconds = self._engine.seconds()
        counts = _api_counts(self.ctx, self.target, phase, self.ns)
        if counts is not None:
            phase.api_in_namespace, phase.api_node_level = counts
        if self.ctx.proxy is not None and self.target.agent is not None:
            phase.docker_calls = dict(self.ctx.proxy.calls(phase.start, end))
        phase.docker_events = dict(self.events.counts(phase.start, end))
        return phase


def run(ctx: Context, target: Target, size: int, idle_seconds: float) -> RunResult:
    """Create `size` pods at once on `target.node`, wait for Ready, maybe idle, delete all."""
    core, notes = ctx.core, []
    warnings_before = target.agent.warning_count() if target.agent else 0
    ns = create_namespace(core, f"bench-{size}")
    records = {f"pod-{i:03d}": PodRecord(f"pod-{i:03d}") for i in range(size)}
    tracker = _Tracker(records)
    events = dockerside.DockerEvents(ctx.dk, target.node)
    watch = PodWatch(core, ns, tracker.on_event, timeout=ctx.deadline.left())
    phases = _Phases(ctx, target, ns, events)
    pool = ThreadPoolExecutor(max_workers=min(size, 32), thread_name_prefix="bench-api")
    idle: Phase | None = None
    try:
        phases.open()
        first = time.time()
        list(pool.map(lambda r: _create(core, ns, r, target.node), records.values()))
        limit = ctx.deadline.left(60 + 2 * size)
        if not tracker.wait(lambda rs: all(r.ready for r in rs), limit):
            notes.append(f"not all pods Ready within {limit:.0f}s")
        last_ready = max((r.ready for r in records.values() if r.ready), default=None)
        time.sleep(SETTLE)
        start = phases.close()
        _fill_agent_and_docker(ctx, target, records)
        if idle_seconds > 0 and not ctx.deadline.passed:
            phases.open()
            time.sleep(ctx.deadline.left(idle_seconds))
            idle = phases.close()
        phases.open()
        first_delete = time.time()
        list(pool.map(lambda r: _delete(core, ns, r), records.values()))
        limit = ctx.deadline.left(60 + size)
        if not tracker.wait(lambda rs: all(r.object_gone for r in rs), limit):
            notes.append(f"not all pods gone from the API within {limit:.0f}s")
        had_containers = any(r.started for r in records.values())
        if had_containers:
            _wait_containers_gone(ctx, target.node, records, notes)
        time.sleep(SETTLE)
        delete = phases.close()
        for rec in records.values():
            rec.containers_gone = events.destroyed_at(rec.uid) if had_containers else None
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        watch.close()
        events.close()
        delete_namespace(core, ns, force_pods=ctx.real_cluster)
    if target.agent is not None and target.agent.warning_count() > warnings_before:
        notes.append(
            f"the agent logged {target.agent.warning_count() - warnings_before} warning(s)"
        )
    if watch.error is not None:
        notes.append(f"watch ended with {watch.error!r}")
    gone = [r.object_gone for r in records.values() if r.object_gone]
    containers_gone = [r.containers_gone for r in records.values() if r.containers_gone]
    return RunResult(
        node=target.node,
        size=size,
        namespace=ns,
        pods=list(records.values()),
        start=start,
        delete=delete,
        idle=idle,
        all_ready_seconds=last_ready - first if last_ready else None,
        all_gone_seconds=max(gone) - first_delete if len(gone) == size else None,
        all_containers_gone_seconds=(
            max(containers_gone) - first_delete if len(containers_gone) == size else None
        ),
        notes=notes,
    )


def _fill_agent_and_docker(ctx: Context, target: Target, records: dict[str, PodRecord]) -> None:
    uids = {r.uid for r in records.values()}
    started = dockerside.app_started_at(ctx.dk, target.node, uids)
    for rec in records.values():
        rec.started = started.get(rec.uid)
        if target.agent is not None:
            rec.observed = target.agent.bound_at(rec.uid)


def _wait_containers_gone(
    ctx: Context, node: str, records: dict[str, PodRecord], notes: list[str]
) -> None:
    """Poll Docker (the bench's own calls) until no container of these pods is left."""
    uids = {r.uid for r in records.values()}
    end = time.monotonic() + ctx.deadline.left(60)
    while uids & dockerside.pod_uids_with_containers(ctx.dk, node):
        if time.monotonic() > end:
            notes.append("some pods' containers were still in Docker at the limit")
            return
        time.sleep(0.1)
