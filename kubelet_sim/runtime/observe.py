"""An in-memory view of the node's containers, kept current by Docker's events stream.

Like the kubelet's PLEG, but event-driven: one list at start (and after each reconnect), then
only the container an event names is inspected. Pod workers read the view; they never list.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubelet_sim import cri
from kubelet_sim.formats.memo import BoundedMemo
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.backoff import Backoff
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.runtime.engine import DockerEngine, EventStream
from kubelet_sim.runtime.node_runtime import NodeRuntime

# Events that change what we report; exec_*, attach, kill, stop... are followed by one of
# these or change nothing (probes exec often: inspecting on those would cost the most).
# `oom` is taken without an inspect (see _mark_oom).
INSPECT_ACTIONS = frozenset({"create", "start", "die", "pause", "unpause", "restart"})
RESTART_ACTIONS = frozenset({"start", "restart", "unpause"})
_IMPLIED_STATE = {"start": cri.ContainerState.RUNNING, "die": cri.ContainerState.EXITED}
_RANK = {
    cri.ContainerState.UNKNOWN: 0,
    cri.ContainerState.CREATED: 0,
    cri.ContainerState.RUNNING: 1,
    cri.ContainerState.EXITED: 2,
}
_GONE_REMEMBERED = 4096


@dataclass
class WatcherStats:
    lists: int = 0
    events: int = 0
    reconnects: int = 0
    inspects: int = 0


def _since_arg(ns: int) -> str:
    """Docker's `since` as seconds.nanoseconds, so resuming loses no sub-second events."""
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"


class ContainerWatcher:
    """A thread watching one node's containers; `on_change(pod_uid)` after each change.

    A container's state only moves forward (created → running → exited): an older observation
    (e.g. one `record`ed by a pod worker) never overwrites a newer one.
    """

    def __init__(
        self,
        runtime: NodeRuntime,
        on_change: Callable[[str], None] | None = None,
        *,
        events: ContainerEvents,
        node_name: str | None = None,
    ) -> None:
        """`events`: the process's one Docker events stream, which tells each node's watcher
        of its own containers."""
        self.runtime = runtime
        self._buffer: list[dict[str, Any]] | None = None  # events while the stream lists
        self.node = node_name if node_name is not None else runtime.node_name
        if not self.node:
            raise ValueError("ContainerWatcher needs a node name")
        self.on_change = on_change or (lambda _uid: None)
        self.stats = WatcherStats()
        self.log = get_logger("kubelet_sim.runtime.observe", node=self.node)
        self._lock = threading.Lock()
        self._by_id: dict[str, cri.ObservedContainer] = {}
        # The same, by pod uid: every sync of every pod asks for its own, several times.
        self._by_pod: dict[str, dict[str, cri.ObservedContainer]] = {}
        self._gone: BoundedMemo[str, bool] = BoundedMemo(_GONE_REMEMBERED)  # destroyed ids
        self._oom: BoundedMemo[str, bool] = BoundedMemo(_GONE_REMEMBERED)  # had an `oom` event
        self._synced = threading.Event()
        self.events = events

    # Lifecycle

    def start(self) -> None:
        self.events.add(self)

    def stop(self, timeout: float = 1.0) -> None:
        """No more events for this node (the stream is the process's)."""
        self.events.remove(self)

    def wait_synced(self, timeout: float | None = None) -> bool:
        """True once the first list is in the view (pod workers should wait for it)."""
        return self._synced.wait(timeout)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def reconnect(self) -> None:
        """Drop the events stream; the watcher relists and resubscribes, as after an outage."""
        self.events.reconnect()

    # The view

    def pod_containers(self, pod_uid: str) -> list[cri.ObservedContainer]:
        with self._lock:
            return list(self._by_pod.get(pod_uid, {}).values())

    def pod_uids(self) -> set[str]:
        with self._lock:
            return set(self._by_pod)

    def get(self, container_id: str) -> cri.ObservedContainer | None:
        with self._lock:
            return self._by_id.get(container_id)

    def all_containers(self) -> list[cri.ObservedContainer]:
        with self._lock:
            return list(self._by_id.values())

    def record(self, observed: cri.ObservedContainer) -> None:
        """Put what a caller just learned (e.g. from run_sandbox) in the view without a call.

        Closes the gap until the event arrives, so a pod worker never creates a container twice.
        """
        if self._upsert(observed):
            self._notify(observed.pod.uid)

    # What the events stream calls

    def _relist(self) -> None:
        observed = self.runtime.list_containers(self.node)
        self.stats.lists += 1
        self.stats.inspects += len(observed)
        with self._lock:
            fresh = {c.id: self._oom_marked(c) for c in observed}
            old = self._by_id
            self._by_id = fresh
            self._by_pod = {}
            for c in fresh.values():
                self._index(c)
        changed = {c.pod.uid for c in old.values() if fresh.get(c.id) != c}
        changed |= {c.pod.uid for c in fresh.values() if old.get(c.id) != c}
        self._synced.set()
        for uid in sorted(changed):
            self._notify(uid)

    def _handle(self, event: dict[str, Any]) -> None:
        if event.get("Type", "container") != "container":
            return
        self.stats.events += 1
        action = str(event.get("Action") or event.get("status") or "").split(":")[0].strip()
        actor = event.get("Actor") or {}
        container_id = str(event.get("id") or actor.get("ID") or "")
        attributes = actor.get("Attributes") or {}
        if not container_id or not self.runtime.owns(attributes):
            return
        if str(attributes.get("name", "")).startswith(cri.POOL_NAME_PREFIX):
            return  # an unclaimed pool sandbox: no pod's (a claim is recorded by its pod worker)
        uid: str | None
        if action == "oom":
            uid = self._mark_oom(container_id)
        elif action == "destroy":
            uid = self._remove(container_id) or (actor.get("Attributes") or {}).get(
                cri.LABEL_POD_UID
            )
        elif action in INSPECT_ACTIONS and self._needs_inspect(action, container_id):
            self.stats.inspects += 1
            observed = self.runtime.inspect(container_id)
            if observed is None:
                uid = self._remove(container_id)
            else:
                restarted = action in RESTART_ACTIONS  # the one way back to running
                uid = observed.pod.uid if self._upsert(observed, force=restarted) else None
        else:
            return
        if uid:
            self._notify(uid)

    def _needs_inspect(self, action: str, container_id: str) -> bool:
        """Skip events the view already reflects: replays after a (re)list, or a `record`ed
        create. An exited container that starts again (docker start) is still inspected."""
        current = self.get(container_id)
        if current is None:
            return True
        implied = _IMPLIED_STATE.get(action)
        if action == "create":
            return False
        return implied is None or current.state != implied

    def _mark_oom(self, container_id: str) -> str | None:
        """Docker's `oom` event: the kernel's OOM killer hit the container. Docker 20.10 takes
        OOMKilled from containerd's exit event, and when containerd's OOM event comes after
        the exit, the inspect says false; the `oom` event itself is still emitted. So an
        exited container that had one is OOM-killed, as containerd's CRI reports it (it sets
        the reason on its OOM event, whenever it comes). The pod's uid if the view changed."""
        self._oom.put(container_id, True)
        current = self.get(container_id)
        if current is None or current.state is not cri.ContainerState.EXITED:
            return None  # its die event's inspect comes next and takes the mark
        return current.pod.uid if self._upsert(current) else None

    def _oom_marked(self, observed: cri.ObservedContainer) -> cri.ObservedContainer:
        """With the `oom` event's mark if it had one (the caller holds the lock)."""
        if observed.state is not cri.ContainerState.EXITED or observed.oom_killed:
            return observed
        if observed.id not in self._oom:
            return observed
        return dataclasses.replace(observed, oom_killed=True)

    def _upsert(self, observed: cri.ObservedContainer, *, force: bool = False) -> bool:
        """Store unless destroyed or older than what we have; True if the view changed."""
        with self._lock:
            if observed.id in self._gone:
                return False
            observed = self._oom_marked(observed)
            current = self._by_id.get(observed.id)
            if current is not None and (
                current == observed or (not force and _RANK[observed.state] < _RANK[current.state])
            ):
                return False
            self._by_id[observed.id] = observed
            if current is not None and current.pod.uid != observed.pod.uid:
                self._unindex(current)
            self._index(observed)
            return True

    def _remove(self, container_id: str) -> str | None:
        self._gone.put(container_id, True)
        self._oom.pop(container_id)
        with self._lock:
            removed = self._by_id.pop(container_id, None)
            if removed is not None:
                self._unindex(removed)
        return removed.pod.uid if removed else None

    def _index(self, observed: cri.ObservedContainer) -> None:
        """Into the by-pod index (the caller holds the lock)."""
        self._by_pod.setdefault(observed.pod.uid, {})[observed.id] = observed

    def _unindex(self, observed: cri.ObservedContainer) -> None:
        """Drop from the by-pod index (the caller holds the lock)."""
        containers = self._by_pod.get(observed.pod.uid)
        if containers is not None:
            containers.pop(observed.id, None)
            if not containers:
                del self._by_pod[observed.pod.uid]

    def _notify(self, pod_uid: str) -> None:
        try:
            self.on_change(pod_uid)
        except Exception:
            self.log.exception("on_change failed", pod_uid=pod_uid)


class ContainerEvents:
    """One Docker events stream for every node of a set, each event handed to the watcher of
    the node its container is labelled with (a thread for all, not one per node).

    A watcher added while the stream runs lists its node's containers first; events for it
    that arrive meanwhile wait and follow the list. After a reconnect every watcher relists,
    as a watcher of its own does."""

    def __init__(
        self,
        engine: DockerEngine,
        *,
        supervisor: Supervisor,
        backoff: Backoff | None = None,
        since_margin: float = 1.0,
        label: str = cri.LABEL_NODE,
        thread_name: str = "container events",
    ) -> None:
        """`label`: Docker's filter (every node's containers, or one node's: `key=value`)."""
        self.engine = engine
        self.label = label
        self.backoff = backoff or Backoff(initial=0.2, cap=5.0)
        self.since_margin = since_margin
        self.log = get_logger("kubelet_sim.runtime.observe")
        self.stats = WatcherStats()
        self._watchers: dict[str, ContainerWatcher] = {}
        self._lock = threading.Lock()
        self._stream: EventStream | None = None
        self._last_event_ns: int | None = None
        self._stopping = threading.Event()
        self._thread = supervisor.thread(
            thread_name, self._run, self._stopping, on_crash=self._relisting
        )

    def start(self) -> ContainerEvents:
        self._thread.start()
        return self

    def stop(self, timeout: float = 1.0) -> None:
        self._stopping.set()
        self.reconnect()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def add(self, watcher: ContainerWatcher) -> None:
        """Follow `watcher`'s node: listed now if the stream runs, else by its first session."""
        with self._lock:
            self._watchers[watcher.node] = watcher
            if not self._thread.is_alive():
                return
            watcher._buffer = []
        try:
            watcher._relist()
        except Exception as exc:  # Docker down: the next session lists it (not synced till then)
            watcher.log.warning("listing containers failed", error=str(exc) or type(exc).__name__)
            self.reconnect()
        finally:
            with self._lock:
                buffered, watcher._buffer = watcher._buffer or [], None
            for event in buffered:
                watcher._handle(event)

    def remove(self, watcher: ContainerWatcher) -> None:
        with self._lock:
            if self._watchers.get(watcher.node) is watcher:
                del self._watchers[watcher.node]

    def reconnect(self) -> None:
        with self._lock:
            stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.close()
            except Exception as exc:
                self.log.debug("closing the events stream", error=str(exc))

    def _watchers_now(self) -> list[ContainerWatcher]:
        with self._lock:
            return list(self._watchers.values())

    def _relisting(self) -> None:
        """After a crash the views are suspect: not synced until the next session relists."""
        for watcher in self._watchers_now():
            watcher._synced.clear()

    def _run(self) -> None:
        while not self._stopping.is_set():
            began = time.monotonic()
            failed = False
            try:
                self._session()
            except Exception as exc:
                failed = True
                self.log.warning("docker events failed", error=str(exc) or type(exc).__name__)
            if self._stopping.is_set():
                break
            if failed or time.monotonic() - began < 1.0:
                self._stopping.wait(self.backoff.next_delay())
            else:
                self.backoff.reset()
            self.stats.reconnects += 1
            for watcher in self._watchers_now():
                watcher.stats.reconnects += 1

    def _session(self) -> None:
        """List, subscribe from where we left off (or just before the list), follow events."""
        resume_ns = self._last_event_ns
        listed_at = time.time()
        for watcher in self._watchers_now():  # what happened while no stream ran
            watcher._relist()
        since = (
            _since_arg(resume_ns)
            if resume_ns is not None
            else _since_arg(int((listed_at - self.since_margin) * 1e9))
        )
        stream = self.engine.events(self.label, since)
        with self._lock:
            self._stream = stream
        if self._stopping.is_set():
            stream.close()
            return
        for event in stream:
            if self._stopping.is_set():
                return
            self._dispatch(event)
        if not self._stopping.is_set():
            self.log.info("docker events stream ended; resubscribing")

    def _dispatch(self, event: dict[str, Any]) -> None:
        self.stats.events += 1
        if event.get("timeNano"):
            self._last_event_ns = max(self._last_event_ns or 0, int(event["timeNano"]))
        node = ((event.get("Actor") or {}).get("Attributes") or {}).get(cri.LABEL_NODE)
        with self._lock:
            watcher = self._watchers.get(str(node))
            if watcher is None:
                return
            if watcher._buffer is not None:
                watcher._buffer.append(event)
                return
        try:
            watcher._handle(event)
        except Exception:  # one node's bad event must not end the stream for all
            watcher.log.exception("handling a docker event failed")
