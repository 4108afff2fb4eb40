"""Where a pod's time goes, read from what each party shows of it: the pod as a watch delivers
it (both nodes), our node's journal and Docker (`kubelet_sim.tools.trace`), the kubelet's
containerd events and its log. Pure, so that the rules that name each stage are tested without
a cluster (tests/unit/bench/test_bench_stages.py); bench/versus.py does the reading.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bench.times import parse_time

Json = dict[str, Any]

# What the API shows of a start, in the order it happens; each is kept at its first sighting.
CREATED = "create call returned"
BOUND = "bound (spec.nodeName)"
NODE_STATUS = "first status by the node"
READY_TO_START = "PodReadyToStartContainers"
RUNNING = "container running"
READY = "Ready"
# And of a deletion.
DELETE_RETURNED = "delete call returned"
STOPPED = "container terminated"
GONE = "gone (DELETED)"
WATCH_START = (CREATED, BOUND, NODE_STATUS, READY_TO_START, RUNNING, READY)
WATCH_DELETE = (DELETE_RETURNED, STOPPED, GONE)

# The node's own steps: `trace.timeline`'s names for ours, the same names for what containerd
# and the kubelet's log show, so that the two columns of a row are the same step.
SEEN = "seen by the node"
SANDBOX_CREATED = "sandbox created"
SANDBOX_STARTED = "sandbox started"
NODE_STEPS = (
    SEEN,
    "admitted",
    SANDBOX_CREATED,
    SANDBOX_STARTED,
    "sandbox (from pool)",
    "container {app} created",
    "container {app} started",
    "first status written",
    "Ready written",
)

SANDBOX_KIND = "sandbox"  # containerd's io.cri-containerd.kind of a pod sandbox
KLOG_ADD = re.compile(
    r'^I(\d\d)(\d\d) (\d\d:\d\d:\d\d\.\d+)\s+\d+ \S+\] "SyncLoop ADD" source="api" pods=\[(.*)\]'
)


@dataclass
class PodTimes:
    """One pod's stages, in seconds: `start` and `node` since its create call was sent, `delete`
    since its delete call was; `sent` is monotonic, `sent_wall` the same instant in epoch
    seconds, for the stamps the nodes write with their own clocks."""

    name: str
    side: str  # "ours" or "kubelet"
    batch: str  # "warm-up", "one" or "burst"
    sent: float = 0.0
    sent_wall: float = 0.0
    uid: str = ""
    start: dict[str, float] = field(default_factory=dict)
    node: dict[str, float] = field(default_factory=dict)
    delete_sent: float | None = None
    delete: dict[str, float] = field(default_factory=dict)
    last: Json = field(default_factory=dict, repr=False)  # the pod as last delivered

    def see(self, kind: str, pod: Json, now: float) -> None:
        """A watch event read at `now` (monotonic): each stage it shows first is kept."""
        if kind == "DELETED":
            self._deleting(GONE, now)
            return
        self.last = pod
        self.uid = self.uid or str((pod.get("metadata") or {}).get("uid") or "")
        for mark in watch_marks(pod):
            if mark in WATCH_DELETE:
                self._deleting(mark, now)
            else:
                self.start.setdefault(mark, now - self.sent)

    def _deleting(self, stage: str, now: float) -> None:
        if self.delete_sent is not None:
            self.delete.setdefault(stage, now - self.delete_sent)

    def as_json(self) -> Json:
        return {
            "name": self.name,
            "side": self.side,
            "batch": self.batch,
            "uid": self.uid,
            "start": self.start,
            "node": self.node,
            "delete": self.delete,
        }


def watch_marks(pod: Json) -> list[str]:
    """The stages this state of a pod shows. A pod pinned by spec.nodeName is bound from its
    creation; the node's first status is the first one with container statuses or one of the
    conditions only a node writes (PodReadyToStartContainers from v1.29, Initialized)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    status = pod.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    states = [s.get("state") or {} for s in status.get("containerStatuses") or []]
    marks = [BOUND] if spec.get("nodeName") else []
    if states or READY_TO_START in conditions or "Initialized" in conditions:
        marks.append(NODE_STATUS)
    if conditions.get(READY_TO_START) == "True":
        marks.append(READY_TO_START)
    if any("running" in s for s in states):
        marks.append(RUNNING)
    if conditions.get("Ready") == "True":
        marks.append(READY)
    if meta.get("deletionTimestamp") and states and all("terminated" in s for s in states):
        marks.append(STOPPED)
    return marks


def containerd_event(line: str) -> tuple[float, str, Json] | None:
    """(epoch seconds, topic, payload) of a line of `ctr events`:
    `2026-11-29 01:41:59.222726932 +0000 UTC k8s.io /tasks/start {"container_id": ...}`."""
    parts = line.strip().split(" ", 6)
    if len(parts) < 7 or not parts[5].startswith("/"):
        return None
    day, clock, offset = parts[0], parts[1], parts[2]
    try:
        seconds = parse_time(f"{day}T{clock}")
        sign = -1 if offset.startswith("-") else 1
        seconds -= sign * (int(offset[1:3]) * 3600 + int(offset[3:5]) * 60)
        payload = json.loads(parts[6])
    except ValueError:
        return None
    return seconds, parts[5], payload if isinstance(payload, dict) else {}


def containerd_steps(
    events: Iterable[tuple[float, str, Json]], containers: Mapping[str, tuple[str, str, str]]
) -> dict[str, dict[str, float]]:
    """pod uid → step → epoch seconds, from containerd's events and each container's
    (pod uid, kind, container name) as its CRI labels say: the sandbox's and each container's
    creation (/containers/create) and its task's start (/tasks/start)."""
    found: dict[str, dict[str, float]] = {}
    for when, topic, payload in events:
        if topic == "/containers/create":
            cid, what = str(payload.get("id") or ""), "created"
        elif topic == "/tasks/start":
            cid, what = str(payload.get("container_id") or ""), "started"
        else:
            continue
        if cid not in containers:
            continue
        uid, kind, name = containers[cid]
        step = f"sandbox {what}" if kind == SANDBOX_KIND else f"container {name} {what}"
        found.setdefault(uid, {}).setdefault(step, when)
    return found


def kubelet_seen(log: str, year: int) -> dict[str, float]:
    """`namespace/name` → epoch seconds of the kubelet's first `SyncLoop ADD` of it from the
    API (its --v=2 log; klog's stamps are local time without a year)."""
    found: dict[str, float] = {}
    for line in log.splitlines():
        match = KLOG_ADD.match(line)
        if match is None:
            continue
        month, day, clock, pods = match.groups()
        head, _, frac = clock.partition(".")
        stamp = datetime.strptime(f"{year}-{month}-{day} {head}", "%Y-%m-%d %H:%M:%S")
        when = stamp.timestamp() + float(f"0.{frac}")
        for pod in re.findall(r'[^\s",]+', pods):  # v1.34: ["ns/a","ns/b"]; v1.24: [ns/a ns/b]
            found.setdefault(pod, when)
    return found


def median(values: list[float]) -> float | None:
    """The p50 as bench.perf takes it (nearest rank: the lower middle of an even count), or
    None for nothing."""
    return statistics.median_low(values) if values else None


def stage_medians(
    pods: Sequence[PodTimes], sides: Sequence[str], app: str
) -> list[tuple[str, str, dict[str, float | None]]]:
    """(part, stage, side → median seconds) for every stage some pod of `pods` reached: the
    watch's start stages and the node's steps (since the create call), then the deletion's
    (since the delete call)."""
    parts = [
        ("start", WATCH_START),
        ("node", tuple(s.format(app=app) for s in NODE_STEPS)),
        ("delete", WATCH_DELETE),
    ]
    rows = []
    for part, stages in parts:
        for stage in stages:
            by_side: dict[str, float | None] = {}
            for side in sides:
                of_side = [getattr(p, part) for p in pods if p.side == side]
                by_side[side] = median([times[stage] for times in of_side if stage in times])
            if any(v is not None for v in by_side.values()):
                rows.append((part, stage, by_side))
    return rows
