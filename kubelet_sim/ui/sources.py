"""Where the page's data comes from: the package's own watches and tools, never a copy of them.

- nodes and pods: `Informer`s (all pods where the credentials may list them, else each node's
  own `spec.nodeName` watch, as the agent holds it);
- the watch stream: `kubelet-sim watch` itself (`tools.watch.stream`, JSON records) per node of
  this process;
- the scheduler's decisions: `Scheduled` and `FailedScheduling` events (the watches
  `tools.handoff` uses);
- a pod's timeline: `kubelet-sim trace`'s `collect` and `latencies` (`tools.trace`);
- lease ages: the nodes' Leases, read once a second.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.client import KubeConnection
from kubelet_sim.kube.informer import Informer, WatchTimeouts
from kubelet_sim.kube.rest import ApiError, read_json, request_json
from kubelet_sim.kube.watches import (
    all_nodes,
    events_with_reason,
    own_node,
    pods_in_namespace,
    pods_on_node,
)
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.backoff import Backoff
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.runtime.node_runtime import NodeRuntime
from kubelet_sim.tools import trace
from kubelet_sim.tools import watch as watch_tool
from kubelet_sim.ui.page_state import SCHEDULER_REASONS, UiState

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
TERMINAL_PHASES = ("Succeeded", "Failed")

log = get_logger("kubelet_sim.ui")


def _allowed(kube: KubeConnection, path: str) -> ApiError | None:
    """None if these credentials may list `path`, else the refusal."""
    try:
        request_json(kube.api, "GET", f"{path}?limit=1")
    except ApiError as exc:
        if exc.status in (401, 403):
            return exc
        raise
    return None


class Sources:
    """Feeds a UiState until stopped. `runtimes`: the nodes of this process (or of this
    machine, for `kubelet-sim ui`) by name, for their journal and their containers."""

    def __init__(
        self,
        state: UiState,
        kube: KubeConnection,
        runtimes: Mapping[str, NodeRuntime],
        *,
        timeouts: WatchTimeouts | None = None,
        lease_interval: float = 1.0,
    ) -> None:
        self.state = state
        self.kube = kube
        self.runtimes = dict(runtimes)
        self.timeouts = timeouts
        self.lease_interval = lease_interval
        self.stop_event = threading.Event()
        self._informers: list[Informer] = []
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        kube, state = self.kube, self.state
        # The web view's own watches: a display beside the nodes, whose failure fails none.
        supervisor = Supervisor(tool="ui")
        refused = _allowed(kube, "/api/v1/nodes")
        if refused is None:
            self._informers.append(
                Informer(all_nodes(kube.api), state.on_node, supervisor=supervisor, tool="ui")
            )
        else:  # v1.32+ (AuthorizeNodeWithSelectors): a kubelet may read only its own Node
            state.note("nodes", f"only this process's nodes: listing all nodes: {refused}")
            self._informers += [
                Informer(own_node(kube.api, node), state.on_node, supervisor=supervisor, tool="ui")
                for node in state.our_nodes
            ]
        refused = _allowed(kube, "/api/v1/pods")
        if refused is None:
            self._informers.append(
                Informer(
                    pods_in_namespace(kube.api, None),
                    state.on_pod,
                    supervisor=supervisor,
                    tool="ui",
                )
            )
        else:
            state.note("pods", f"only this process's nodes' pods: listing all pods: {refused}")
            self._informers += [
                Informer(
                    pods_on_node(kube.api, node), state.on_pod, supervisor=supervisor, tool="ui"
                )
                for node in state.our_nodes
            ]
        refused = _allowed(kube, "/api/v1/events")
        if refused is None:
            self._informers += [
                Informer(
                    events_with_reason(kube.api, reason, None),
                    state.on_scheduler_event,
                    supervisor=supervisor,
                    tool="ui",
                )
                for reason in SCHEDULER_REASONS
            ]
        else:
            state.note("scheduler", f"the scheduler's events are not readable: {refused}")
        for informer in self._informers:
            informer.start()
        for node in state.our_nodes:
            self._thread(f"ui watch {node}", self._watch, node)
        if not state.our_nodes:
            state.note("watch", "no node of this process: give --node-name to see its stream")
        self._thread("ui leases", self._leases)

    def _thread(self, name: str, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _watch(self, node: str) -> None:
        """`kubelet-sim watch --node-name NODE --output json`, into the state."""

        def write(line: str) -> None:
            self.state.on_stream(json.loads(line))

        backoff = Backoff()
        while not self.stop_event.is_set():
            try:
                watch_tool.stream(
                    self.kube, node, write, self.stop_event, output="json", timeouts=self.timeouts
                )
                return
            except Exception:
                # A view left open for hours outlives any one connection: start the stream
                # again, as `kubelet-sim watch` run again would, after the one backoff.
                log.exception("the watch stream failed; starting it again", node=node)
            self.stop_event.wait(backoff.next_delay())

    def _leases(self) -> None:
        listed = True
        while not self.stop_event.is_set():
            try:
                if listed:
                    items = request_json(self.kube.api, "GET", LEASES).get("items") or []
                else:
                    items = []
                    for node in self.state.our_nodes:
                        lease = read_json(self.kube.api, f"{LEASES}/{node}")
                        if lease is not None:
                            items.append(lease)
                renewed = {
                    str((i.get("metadata") or {}).get("name")): (i.get("spec") or {}).get(
                        "renewTime"
                    )
                    for i in items
                }
                for node in set(renewed) | set(self.state.leases):
                    self.state.on_lease(node, renewed.get(node))
            except ApiError as exc:
                if exc.status == 403 and listed:
                    listed = False  # node credentials: each node's own Lease only
                    continue
                log.warning("cannot read the leases", error=str(exc)[:300])
            except Exception as exc:
                log.warning("cannot read the leases", error=str(exc)[:300])
            self.stop_event.wait(self.lease_interval)

    def stop(self) -> None:
        self.stop_event.set()
        for informer in self._informers:
            informer.stop()
        for thread in self._threads:
            thread.join(5)

    # -- timelines ---------------------------------------------------------------------------

    def timeline(self, namespace: str, name: str) -> Json:
        """The pod's handoff as `kubelet-sim trace --output json` gives it, plus each step's
        latencies as `trace` prints them and its offset from the creation (for the chart)."""
        summary = next(
            (
                p
                for p in self.state.snapshot_pods()
                if p["namespace"] == namespace and p["name"] == name
            ),
            None,
        )
        runtime = self.runtimes.get(summary["node"]) if summary else None
        note = ""
        try:
            pod, steps = trace.collect(self.kube, runtime, namespace, name)
        except ApiError as exc:
            if exc.not_found:
                return {"pod": f"{namespace}/{name}", "gone": True, "steps": []}
            if exc.status != 403:
                raise
            # Node credentials read the pod but not its events: the scheduler's step is missing.
            pod = request_json(self.kube.api, "GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
            uid, node = str(pod["metadata"]["uid"]), (pod.get("spec") or {}).get("nodeName")
            journal = runtime.files.read_journal(uid) if runtime else []
            containers = runtime.list_containers(node) if runtime and node else []
            steps = trace.timeline(pod, [], journal, containers)
            note = f"the pod's events are not readable with these credentials ({exc.status})"
        out: Json = json.loads(trace.as_json(pod, steps))
        created = steps[0].time if steps else None
        for entry, step, latency in zip(out["steps"], steps, trace.latencies(steps), strict=True):
            entry["sincePrevious"] = latency.since_previous
            entry["sinceCreated"] = latency.since_created
            entry["offset"] = _offset(step.time, created)
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        ready = next((s for s in steps if s.step == "Ready written"), None)
        out["settled"] = bool(
            (ready is not None and ready.time is not None)
            or meta.get("deletionTimestamp")
            or status.get("phase") in TERMINAL_PHASES
        )
        out["local"] = runtime is not None
        out["note"] = note or (
            ""
            if runtime is not None
            else "the node is not on this machine: the API server's steps only"
        )
        return out


def _offset(when: datetime | None, created: datetime | None) -> float | None:
    if when is None or created is None:
        return None
    return round((when - created).total_seconds(), 6)
