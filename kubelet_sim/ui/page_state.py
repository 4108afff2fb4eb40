"""What the page shows, kept small and bounded, and handed to each browser as a stream.

`UiState` holds summaries, never whole objects: the nodes (Ready, lease, capacity), the pods
on them (phase, conditions, containers' states), the last `stream_limit` watch records (the
`kubelet-sim watch` records) and the last `scheduler_limit` scheduler events. Whatever is past
a limit is dropped and counted, and the page says so. Each browser is a `Subscriber` with a
bounded queue: one that falls behind is cut off and reconnects to a fresh snapshot, so a slow
tab never makes the process hold more.

Summaries carry no values from the pod's environment or volumes: what is shown cannot reveal
a Secret (the pod's spec only ever holds references to them anyway).
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.informer import DELETED

SCHEDULER_REASONS = ("Scheduled", "FailedScheduling")


@dataclass(frozen=True)
class Limits:
    stream: int = 2000  # watch records kept for a new browser
    scheduler: int = 500  # scheduler events kept
    subscriber_queue: int = 5000  # messages a browser may lag behind before it is cut off
    subscribers: int = 32  # browsers at once


def _conditions(obj: Json) -> list[Json]:
    return list((obj.get("status") or {}).get("conditions") or [])


def _condition(obj: Json, kind: str) -> Json:
    return next((c for c in _conditions(obj) if c.get("type") == kind), {})


def _container_state(status: Json) -> str:
    state = status.get("state") or {}
    if "running" in state:
        return "running"
    if "terminated" in state:
        term = state["terminated"] or {}
        return f"terminated: {term.get('reason') or 'exit'} ({term.get('exitCode')})"
    if "waiting" in state:
        return f"waiting: {(state['waiting'] or {}).get('reason') or 'waiting'}"
    return "unknown"


def pod_summary(pod: Json) -> Json:
    """What a pod's row shows; nothing from env, volumes or annotations."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    containers = []
    for init, key, statuses in (
        (True, "initContainers", status.get("initContainerStatuses") or []),
        (False, "containers", status.get("containerStatuses") or []),
    ):
        by_name = {s.get("name"): s for s in statuses}
        for c in spec.get(key) or []:
            s = by_name.get(c.get("name")) or {}
            containers.append(
                {
                    "name": c.get("name"),
                    "init": init,
                    "image": c.get("image"),
                    "state": _container_state(s) if s else "not created",
                    "ready": bool(s.get("ready")),
                    "restarts": int(s.get("restartCount") or 0),
                }
            )
    return {
        "uid": meta.get("uid"),
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "key": f"{meta.get('namespace')}/{meta.get('name')}",
        "node": spec.get("nodeName") or "",
        "phase": status.get("phase") or "Pending",
        "ready": _condition(pod, "Ready").get("status") == "True",
        "reason": status.get("reason") or "",
        "conditions": [
            {"type": c.get("type"), "status": c.get("status"), "reason": c.get("reason") or ""}
            for c in _conditions(pod)
        ],
        "containers": containers,
        "created": meta.get("creationTimestamp"),
        "deleting": bool(meta.get("deletionTimestamp")),
        "resourceVersion": meta.get("resourceVersion"),
    }


def _resources(values: Json | None) -> Json:
    values = values or {}
    return {k: values.get(k) for k in ("cpu", "memory", "pods") if values.get(k) is not None}


def node_summary(node: Json, ours: bool) -> Json:
    meta, status = node.get("metadata") or {}, node.get("status") or {}
    ready = _condition(node, "Ready")
    return {
        "name": meta.get("name"),
        "ours": ours,
        "ready": ready.get("status") == "True",
        "readyReason": ready.get("reason") or "",
        "capacity": _resources(status.get("capacity")),
        "allocatable": _resources(status.get("allocatable")),
        "taints": [
            f"{t.get('key')}{'=' + t['value'] if t.get('value') else ''}:{t.get('effect')}"
            for t in (node.get("spec") or {}).get("taints") or []
        ],
    }


def scheduler_summary(event: Json) -> Json:
    meta, involved = event.get("metadata") or {}, event.get("involvedObject") or {}
    when = (
        (event.get("series") or {}).get("lastObservedTime")
        or event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or meta.get("creationTimestamp")
    )
    return {
        "key": f"{meta.get('namespace')}/{meta.get('name')}",
        "time": when,
        "reason": event.get("reason"),
        "type": event.get("type"),
        "pod": f"{involved.get('namespace')}/{involved.get('name')}",
        "podUid": involved.get("uid"),
        "message": str(event.get("message") or "")[:1000],
        "count": (event.get("series") or {}).get("count") or event.get("count") or 1,
    }


class Subscriber:
    """One browser's queue of (event name, data); `closed` once it fell too far behind."""

    def __init__(self, limit: int) -> None:
        self.queue: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=limit)
        self.closed = False

    def put(self, name: str, data: Any) -> None:
        if self.closed:
            return
        try:
            self.queue.put_nowait((name, data))
        except queue.Full:
            self.closed = True  # it reconnects and starts again from a snapshot


class UiState:
    """Thread-safe: informers' threads write, the HTTP server's threads read and subscribe."""

    def __init__(self, our_nodes: Iterable[str], limits: Limits | None = None) -> None:
        self.our_nodes = tuple(our_nodes)
        self.limits = limits or Limits()
        self.lock = threading.Lock()
        self.nodes: dict[str, Json] = {}
        self.leases: dict[str, str] = {}  # node -> renewTime
        self.pods: dict[str, Json] = {}  # uid -> summary
        self.stream: deque[Json] = deque(maxlen=self.limits.stream)
        self.stream_dropped = 0
        self.scheduler: deque[Json] = deque(maxlen=self.limits.scheduler)
        self.scheduler_dropped = 0
        self.notes: dict[str, str] = {}  # what the page cannot show, and why
        self._seq = itertools.count(1)
        self._subscribers: set[Subscriber] = set()
        # Pod changes, for the timelines being watched: uid -> how many changes so far.
        self.changed = threading.Condition(self.lock)
        self.versions: dict[str, int] = {}
        self._woken = False

    def wake(self) -> None:
        """End every wait_change, now and from now on (the server stops)."""
        with self.lock:
            self._woken = True
            self.changed.notify_all()

    # -- subscribers -------------------------------------------------------------------------

    def subscribe(self) -> tuple[Subscriber, Json] | None:
        """A new browser's queue and the snapshot it starts from (None: too many browsers)."""
        with self.lock:
            if len(self._subscribers) >= self.limits.subscribers:
                return None
            sub = Subscriber(self.limits.subscriber_queue)
            self._subscribers.add(sub)
            return sub, self._snapshot()

    def unsubscribe(self, sub: Subscriber) -> None:
        with self.lock:
            self._subscribers.discard(sub)

    def _publish(self, name: str, data: Any) -> None:
        for sub in list(self._subscribers):
            sub.put(name, data)
            if sub.closed:
                self._subscribers.discard(sub)

    def _snapshot(self) -> Json:
        return {
            "serverTime": datetime.now(UTC).isoformat(),
            "ourNodes": list(self.our_nodes),
            "nodes": list(self.nodes.values()),
            "leases": dict(self.leases),
            "pods": list(self.pods.values()),
            "stream": list(self.stream),
            "scheduler": list(self.scheduler),
            "limits": self._limits(),
            "notes": dict(self.notes),
        }

    def _limits(self) -> Json:
        return {
            "stream": self.limits.stream,
            "streamDropped": self.stream_dropped,
            "scheduler": self.limits.scheduler,
            "schedulerDropped": self.scheduler_dropped,
        }

    def snapshot(self) -> Json:
        with self.lock:
            return self._snapshot()

    def snapshot_pods(self) -> list[Json]:
        with self.lock:
            return list(self.pods.values())

    # -- inputs (informer handlers) ----------------------------------------------------------

    def on_pod(self, kind: str, pod: Json) -> None:
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if not uid:
            return
        with self.lock:
            self.versions[uid] = self.versions.get(uid, 0) + 1
            if kind == DELETED:
                self.versions.pop(uid, None)
                if self.pods.pop(uid, None) is not None:
                    self._publish("pod-deleted", {"uid": uid})
            else:
                summary = pod_summary(pod)
                if self.pods.get(uid) != summary:
                    self.pods[uid] = summary
                    self._publish("pod", summary)
            self.changed.notify_all()

    def on_node(self, kind: str, node: Json) -> None:
        name = str((node.get("metadata") or {}).get("name") or "")
        with self.lock:
            if kind == DELETED:
                if self.nodes.pop(name, None) is not None:
                    self._publish("node-deleted", {"name": name})
                return
            summary = node_summary(node, name in self.our_nodes)
            if self.nodes.get(name) != summary:
                self.nodes[name] = summary
                self._publish("node", summary)

    def on_lease(self, node: str, renew_time: str | None) -> None:
        with self.lock:
            if renew_time is None:
                if self.leases.pop(node, None) is not None:
                    self._publish("lease", {"node": node, "renewTime": None})
            elif self.leases.get(node) != renew_time:
                self.leases[node] = renew_time
                self._publish("lease", {"node": node, "renewTime": renew_time})

    def on_stream(self, record: Json) -> None:
        """One `kubelet-sim watch` record (tools.watch.record)."""
        with self.lock:
            if len(self.stream) == self.stream.maxlen:
                self.stream_dropped += 1
            entry = {"seq": next(self._seq), **record}
            self.stream.append(entry)
            self._publish("watch", entry)
            if self.stream_dropped and self.stream_dropped % 100 == 1:
                self._publish("limits", self._limits())

    def on_scheduler_event(self, kind: str, event: Json) -> None:
        if kind == DELETED or event.get("reason") not in SCHEDULER_REASONS:
            return  # an event's expiry is not news
        summary = scheduler_summary(event)
        if summary["reason"] == "Scheduled" and not self._concerns_us(summary):
            return
        with self.lock:
            if len(self.scheduler) == self.scheduler.maxlen:
                self.scheduler_dropped += 1
            self.scheduler.append(summary)
            self._publish("scheduler", summary)

    def _concerns_us(self, summary: Json) -> bool:
        """A binding to one of the nodes shown (FailedScheduling concerns every node)."""
        message = str(summary["message"])
        with self.lock:
            shown = set(self.our_nodes) | set(self.nodes)
        return not shown or any(message.endswith(f" to {n}") for n in shown)

    def note(self, what: str, why: str) -> None:
        with self.lock:
            if self.notes.get(what) != why:
                self.notes[what] = why
                self._publish("note", {"what": what, "why": why})

    # -- for the timelines -------------------------------------------------------------------

    def pod_version_of(self, namespace: str, name: str) -> tuple[str, int]:
        """The pod's uid ("" if not known) and how many changes it had so far."""
        with self.lock:
            for uid, pod in self.pods.items():
                if pod["namespace"] == namespace and pod["name"] == name:
                    return uid, self.versions.get(uid, -1)
            return "", -1

    def wait_change(self, uid: str, seen: int, timeout: float) -> int:
        """Block until the pod's version differs from `seen`, the timeout or `wake`; its version."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while self.versions.get(uid, -1) == seen and not self._woken:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.changed.wait(left)
            return self.versions.get(uid, -1)
