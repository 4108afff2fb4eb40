"""Events about pods, as the kubelet's recorder writes them: deduplicated, never blocking.

Identical events (same object, type, reason and message) are not created again: the first
one's `count` and `lastTimestamp` are patched, as client-go's event correlator does.

The queue is bounded like client-go's broadcaster (1000 events, `maxQueuedEvents`): while the
API server is down a full queue drops its oldest event (client-go drops the newest; the newest
says more about the pod now), counted in `dropped`, with one warning per burst of drops.
Its writer thread exists only while events are queued (a supervised thread on demand).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from kubernetes import client

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.rest import ApiError, request_json
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.supervise import Supervisor

NORMAL, WARNING = "Normal", "Warning"
QUEUE_SIZE = 1000
_CACHE_SIZE = 4096
_RETRIES = 3
# client-go's EventSourceObjectSpamFilter, which every kubelet's recorder runs first: each
# object (the pod) may have 25 events at once, then one per 5 minutes; the rest are dropped.
SPAM_BURST = 25
SPAM_REFILL_SECONDS = 300.0


class SpamFilter:
    """A token bucket per object (kind, namespace, name, uid, apiVersion) and, where
    `by_type()` says so (client-go v1.32 on: getSpamKey ends with the event's type), per event
    type; the oldest keys forgotten past 4096 as client-go's LRU does."""

    def __init__(
        self,
        now: Callable[[], float] = time.monotonic,
        by_type: Callable[[], bool] = lambda: False,
    ) -> None:
        self._now = now
        self._by_type = by_type
        self._buckets: OrderedDict[tuple[str, ...], tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def allow(self, ref: EventRef, event_type: str = "") -> bool:
        key: tuple[str, ...] = (ref.kind, ref.namespace, ref.name, ref.uid, ref.api_version)
        if self._by_type():
            key += (event_type,)
        now = self._now()
        with self._lock:
            tokens, last = self._buckets.pop(key, (float(SPAM_BURST), now))
            tokens = min(float(SPAM_BURST), tokens + (now - last) / SPAM_REFILL_SECONDS)
            allowed = tokens >= 1.0
            self._buckets[key] = (tokens - 1.0 if allowed else tokens, now)
            if len(self._buckets) > _CACHE_SIZE:
                self._buckets.popitem(last=False)
        return allowed


@dataclass(frozen=True)
class EventRef:
    """The object an event is about (the pod), with the container's field path if any."""

    namespace: str
    name: str
    uid: str
    resource_version: str = ""
    field_path: str = ""
    kind: str = "Pod"  # also Service and EndpointSlice, for the service proxy's warnings
    api_version: str = "v1"


@dataclass
class _Seen:
    name: str
    count: int


_Item = tuple[EventRef, str, str, str, str]


class EventRecorder:
    def __init__(
        self,
        api: client.ApiClient,
        node: str,
        *,
        queue_size: int = QUEUE_SIZE,
        supervisor: Supervisor,
        spam_by_type: Callable[[], bool] = lambda: False,
    ) -> None:
        self._api = api
        self._node = node
        self._queue: deque[_Item] = deque()
        self._queue_size = queue_size
        self._cond = threading.Condition()
        self._unfinished = 0  # queued or being written
        self._dropping = False  # in a burst of drops, warned once
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()
        self._stop = threading.Event()
        self._log = get_logger("kubelet_sim.events", node=node)
        self._writer = supervisor.on_demand("event recorder", self._run, self._stop)
        self.sent = 0
        self.dropped = 0
        self.spam = SpamFilter(by_type=spam_by_type)
        self.spam_dropped = 0  # refused by the spam filter, as the kubelet's recorder does

    def start(self) -> EventRecorder:
        self._writer.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        """A writer at work writes what is queued first (its retries end at once)."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._writer.stop(timeout)

    def threads(self) -> int:
        """The writer's threads alive now: none while nothing is queued (after a linger)."""
        return self._writer.running()

    def event(self, ref: EventRef, event_type: str, reason: str, message: str) -> None:
        """Queue an event; the caller (a pod worker) never waits for the API."""
        if not self.spam.allow(ref, event_type):
            self.spam_dropped += 1
            return
        timestamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        warn = False
        with self._cond:
            if len(self._queue) >= self._queue_size:
                self._queue.popleft()
                self._unfinished -= 1
                self.dropped += 1
                warn, self._dropping = not self._dropping, True
            self._queue.append((ref, event_type, reason, message, timestamp))
            self._unfinished += 1
            self._cond.notify_all()
        self._writer.wake()
        if warn:
            self._log.warning(
                "event queue full; dropping the oldest events until it drains",
                queue_size=self._queue_size,
                dropped_total=self.dropped,
            )

    def queued(self) -> int:
        with self._cond:
            return len(self._queue)

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until queued events are written (tests and shutdown)."""
        with self._cond:
            self._cond.wait_for(lambda: self._unfinished == 0, timeout)

    def _run(self) -> None:
        """Write events in order until none is queued (on stop too: retries end at once)."""
        while True:
            with self._cond:
                if not self._queue:
                    return
                item = self._queue.popleft()
            try:
                self._write(*item)
            finally:
                with self._cond:
                    self._unfinished -= 1
                    drained = self._dropping and not self._queue
                    if drained:
                        self._dropping = False
                    self._cond.notify_all()
            if drained:
                self._log.info("event queue drained", dropped_total=self.dropped)

    def _write(self, ref: EventRef, event_type: str, reason: str, message: str, ts: str) -> None:
        key = (ref.namespace, ref.name, ref.uid, ref.field_path, event_type, reason, message)
        for attempt in range(_RETRIES):
            try:
                seen = self._seen.get(key)
                if seen is None:
                    self._create(key, ref, event_type, reason, message, ts)
                else:
                    self._bump(key, seen, ref, ts)
                self.sent += 1
                return
            except ApiError as exc:
                if exc.not_found and key in self._seen:
                    del self._seen[key]  # the event expired (TTL): create it anew
                    continue
                if not exc.retriable or attempt == _RETRIES - 1:
                    self._log.warning("event dropped", reason=reason, error=str(exc))
                    return
            except Exception as exc:  # transport errors: retry a little, then drop
                if attempt == _RETRIES - 1:
                    self._log.warning("event dropped", reason=reason, error=str(exc)[:200])
                    return
            if self._stop.wait(0.5 * (attempt + 1)):
                return

    def _create(
        self, key: tuple[str, ...], ref: EventRef, event_type: str, reason: str, msg: str, ts: str
    ) -> None:
        involved: Json = {
            "kind": ref.kind,
            "namespace": ref.namespace,
            "name": ref.name,
            "uid": ref.uid,
            "apiVersion": ref.api_version,
        }
        if ref.resource_version:
            involved["resourceVersion"] = ref.resource_version
        if ref.field_path:
            involved["fieldPath"] = ref.field_path
        body: Json = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{ref.name}.{time.time_ns():x}", "namespace": ref.namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": msg,
            "type": event_type,
            "source": {"component": "kubelet", "host": self._node},
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
            "reportingComponent": "kubelet",
            "reportingInstance": self._node,
        }
        created = request_json(
            self._api, "POST", f"/api/v1/namespaces/{ref.namespace}/events", body
        )
        self._remember(key, _Seen(created["metadata"]["name"], 1))

    def _bump(self, key: tuple[str, ...], seen: _Seen, ref: EventRef, ts: str) -> None:
        patch = {"count": seen.count + 1, "lastTimestamp": ts}
        request_json(
            self._api,
            "PATCH",
            f"/api/v1/namespaces/{ref.namespace}/events/{seen.name}",
            patch,
            content_type="application/strategic-merge-patch+json",
        )
        seen.count += 1
        self._seen.move_to_end(key)

    def _remember(self, key: tuple[str, ...], seen: _Seen) -> None:
        self._seen[key] = seen
        while len(self._seen) > _CACHE_SIZE:
            self._seen.popitem(last=False)
