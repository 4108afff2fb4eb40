"""`kubelet-sim trace POD`: the scheduler-to-kubelet handoff of one pod, step by step.

The timeline joins what each party recorded: the API server (creation, the scheduler's
`Scheduled` event, the `PodScheduled` condition), the node agent (its journal: when its watch
delivered the pod and at which resourceVersion, admission, its first status write and the one
that said Ready) and Docker (when the sandbox and each container were created and started).
API timestamps have one-second resolution; the others microseconds.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kubelet_sim import cri
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.client import KubeConnection
from kubelet_sim.kube.informer import DELETED, Informer
from kubelet_sim.kube.rest import request_json
from kubelet_sim.kube.watches import pods_on_node
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.pod.status import format_time_precise
from kubelet_sim.runtime.node_runtime import NodeRuntime

SCHEDULED = "Scheduled"


@dataclass(frozen=True)
class Step:
    step: str
    time: datetime | None
    source: str  # api, agent, docker
    detail: str = ""
    precise: bool = True  # sub-second resolution

    def as_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "time": format_time_precise(self.time) if self.time else None,
            "source": self.source,
            "detail": self.detail,
            "precise": self.precise,
        }


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _condition(pod: Json, kind: str) -> Json:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def _first(journal: Sequence[Json], step: str) -> Json | None:
    return next((e for e in journal if e.get("step") == step), None)


def timeline(
    pod: Json,
    events: Sequence[Json],
    journal: Sequence[Json],
    containers: Sequence[cri.ObservedContainer],
) -> list[Step]:
    """The steps in the order they must happen; a step nobody recorded has no time. The first
    status write is the status manager's, beside the runtime (podworkers/status_manager.py):
    it is placed where its time puts it among the sandbox's and containers' steps."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    steps = [Step("created", _time(meta.get("creationTimestamp")), "api", precise=False)]
    scheduled = next((e for e in events if e.get("reason") == SCHEDULED), None)
    if scheduled is not None:
        by = scheduled.get("reportingComponent") or (scheduled.get("source") or {}).get(
            "component", ""
        )
        when = scheduled.get("eventTime") or scheduled.get("firstTimestamp")
        steps.append(
            Step(
                "scheduled",
                _time(when),
                "api",
                f"by {by}",
                precise=bool(scheduled.get("eventTime")),
            )
        )
    bound = _condition(pod, "PodScheduled")
    if scheduled is not None and bound.get("status") == "True":
        when = _time(bound.get("lastTransitionTime"))
        steps.append(Step("bound", when, "api", "PodScheduled=True", precise=False))
    elif spec.get("nodeName"):  # the kubelet writes PodScheduled=True itself: not a binding
        detail = f"spec.nodeName={spec['nodeName']} at creation: no scheduler"
        steps.append(Step("bound", None, "api", detail))
    else:
        reason = bound.get("reason") or "not scheduled yet"
        steps.append(Step("bound", None, "api", f"not bound: {reason} {bound.get('message', '')}"))
    for name, label in (
        ("seen", "seen by the node"),
        ("admitted", "admitted"),
        ("rejected", "rejected"),
        ("status-written", "first status written"),
    ):
        entry = _first(journal, name)
        if entry is None:
            if name != "rejected":
                steps.append(Step(label, None, "agent"))
            continue
        steps.append(Step(label, _time(entry.get("time")), "agent", _journal_detail(entry)))
    ours = [c for c in containers if c.pod.uid == meta.get("uid")]
    order = [cri.SANDBOX_CONTAINER_NAME]
    order += [c.get("name", "") for c in spec.get("initContainers") or []]
    order += [c.get("name", "") for c in spec.get("containers") or []]
    init_names = {c.get("name") for c in spec.get("initContainers") or []}
    for name in order:
        attempts = sorted((c for c in ours if c.name == name), key=lambda c: c.attempt)
        first = attempts[0] if attempts else None
        what = (
            "sandbox"
            if name == cri.SANDBOX_CONTAINER_NAME
            else (f"init container {name}" if name in init_names else f"container {name}")
        )
        pooled = _first(journal, "sandbox-from-pool") if what == "sandbox" else None
        if first is not None and pooled is not None and first.id.startswith(pooled["id"]):
            # Made and started before the pod, for the node's pool: the claim is its step.
            made = format_time_precise(first.started_at) if first.started_at else "?"
            claimed = _time(pooled.get("time"))
            steps.append(Step("sandbox (from pool)", claimed, "agent", f"made {made}"))
            continue
        steps.append(Step(f"{what} created", first.created_at if first else None, "docker"))
        steps.append(Step(f"{what} started", first.started_at if first else None, "docker"))
    ready = _first(journal, "ready-written")
    detail = _journal_detail(ready) if ready else ""
    steps.append(
        Step("Ready written", _time(ready.get("time")) if ready else None, "agent", detail)
    )
    return _first_write_in_time(steps)


def _first_write_in_time(steps: list[Step]) -> list[Step]:
    """Move the first status write after the runtime steps that came before it."""
    first = next((s for s in steps if s.step == "first status written"), None)
    if first is None or first.time is None:
        return steps
    written = first.time
    rest = [s for s in steps if s is not first]
    names = [s.step for s in rest]
    at = names.index("admitted") + 1 if "admitted" in names else len(rest)

    def before(step: Step) -> bool:
        return step.time is not None and step.time < written

    while at < len(rest) - 1 and before(rest[at]):
        at += 1
    return [*rest[:at], first, *rest[at:]]


def _journal_detail(entry: Json) -> str:
    if entry.get("step") == "seen":
        return f"{entry.get('event')} via {entry.get('via')}, rv {entry.get('resourceVersion')}"
    if entry.get("step") == "rejected":
        return str(entry.get("reason") or "")
    return f"phase {entry['phase']}" if entry.get("phase") else ""


@dataclass(frozen=True)
class Latency:
    """A step's latencies as `render` prints them: `since_previous` runs from the previous
    step with a sub-second time (`~` for a step with a one-second API time), `since_created`
    from the creation; both `""` for a step nobody recorded."""

    since_previous: str
    since_created: str


def latencies(steps: Sequence[Step]) -> list[Latency]:
    """One `Latency` per step: the one rule for the table here and for the web view."""
    out: list[Latency] = []
    created = steps[0].time if steps else None
    previous: datetime | None = None
    for s in steps:
        if s.time is None:
            out.append(Latency("", ""))
            continue
        if s.precise:
            since_prev = _seconds(s.time, previous)
            previous = s.time  # latencies run between the steps with sub-second times
        else:
            since_prev = "~"
        out.append(Latency(since_prev, _seconds(s.time, created)))
    return out


def render(pod: Json, steps: Sequence[Step]) -> str:
    """A table: each step's time, the latency since the step before and since creation."""
    meta = pod.get("metadata") or {}
    lines = [
        f"pod {meta.get('namespace')}/{meta.get('name')} (uid {meta.get('uid')}) on "
        f"{(pod.get('spec') or {}).get('nodeName') or 'no node yet'}",
        f"{'step':<32} {'time (UTC)':<15} {'+prev':>8} {'+created':>9}  {'source':<6} detail",
    ]
    for s, latency in zip(steps, latencies(steps), strict=True):
        if s.time is None:
            row = f"{s.step:<32} {'-':<15} {'':>8} {'':>9}  {s.source:<6} {s.detail}"
            lines.append(row.rstrip())
            continue
        if s.precise:
            stamp = s.time.strftime("%H:%M:%S.%f")[:12]
        else:
            stamp = s.time.strftime("%H:%M:%S") + "~"
        row = (
            f"{s.step:<32} {stamp:<15} {latency.since_previous:>8} {latency.since_created:>9}"
            f"  {s.source:<6} {s.detail}"
        )
        lines.append(row.rstrip())
    lines.append("~: the API server's one-second resolution")
    return "\n".join(lines)


def _seconds(now: datetime, before: datetime | None) -> str:
    return "" if before is None else f"{(now - before).total_seconds():.3f}s"


def as_json(pod: Json, steps: Sequence[Step]) -> str:
    meta = pod.get("metadata") or {}
    return json.dumps(
        {
            "pod": f"{meta.get('namespace')}/{meta.get('name')}",
            "uid": meta.get("uid"),
            "node": (pod.get("spec") or {}).get("nodeName"),
            "steps": [s.as_json() for s in steps],
        }
    )


def collect(
    kube: KubeConnection, runtime: NodeRuntime | None, namespace: str, name: str
) -> tuple[Json, list[Step]]:
    """Read the pod and its events from the API, the agent's journal and Docker's containers
    (with no runtime, for a node on another machine: the API's steps only)."""
    pod = request_json(kube.api, "GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    uid = str(pod["metadata"]["uid"])
    events = (
        request_json(
            kube.api,
            "GET",
            f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.uid%3D{uid}",
        ).get("items")
        or []
    )
    if runtime is None:
        return pod, timeline(pod, events, [], [])
    node = (pod.get("spec") or {}).get("nodeName")
    containers = runtime.list_containers(node) if node else []
    return pod, timeline(pod, events, runtime.files.read_journal(uid), containers)


def _is_ready(pod: Json) -> bool:
    return _condition(pod, "Ready").get("status") == "True"


def follow(
    kube: KubeConnection,
    runtime: NodeRuntime,
    node_name: str,
    write: Callable[[str], None],
    stop: threading.Event,
    *,
    output: str = "text",
    journal_wait: float = 2.0,
    listening: threading.Event | None = None,
) -> None:
    """Print the timeline of each pod that lands on the node from now on, once it is Ready.

    `listening` is set once the pods already there are known (those are not followed).
    """
    ready: queue.Queue[tuple[str, str]] = queue.Queue()
    existing: set[str] = set()
    done: set[str] = set()
    informer: Informer

    def on_event(kind: str, pod: Json) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid"))
        if not informer.synced.is_set():
            existing.add(uid)  # there before we started: not followed
        elif kind != DELETED and uid not in existing and uid not in done and _is_ready(pod):
            done.add(uid)
            ready.put((str(meta.get("namespace")), str(meta.get("name"))))

    supervisor = Supervisor(tool="trace", node=node_name)  # the command's own watch
    informer = Informer(
        pods_on_node(kube.api, node_name), on_event, supervisor=supervisor, node=node_name
    )
    informer.start()
    try:
        while not stop.is_set() and not informer.synced.wait(0.2):
            pass
        if listening is not None:
            listening.set()
        while not stop.is_set():
            try:
                namespace, name = ready.get(timeout=0.2)
            except queue.Empty:
                continue
            write(_follow_one(kube, runtime, namespace, name, output, journal_wait))
    finally:
        informer.stop()


def _follow_one(
    kube: KubeConnection,
    runtime: NodeRuntime,
    namespace: str,
    name: str,
    output: str,
    journal_wait: float,
) -> str:
    """The pod's trace; the node journals `Ready written` just after the write we saw."""
    deadline = time.monotonic() + journal_wait
    while True:
        pod, steps = collect(kube, runtime, namespace, name)
        written = next((s for s in steps if s.step == "Ready written"), None)
        if (written is not None and written.time is not None) or time.monotonic() > deadline:
            return as_json(pod, steps) if output == "json" else render(pod, steps)
        time.sleep(0.1)
