"""Events about pods, as the kubelet's recorder writes them: deduplicated, never blocking.

Identical events (same object, type, reason and message) are not created again: the first
one's `count` and `lastTimestamp` are patched, as client-go's event correlator does.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime

from kubernetes import client

from kubelet_sim.kube.rest import ApiError, Json, call_json, request_json
from kubelet_sim.logs import get_logger

NORMAL, WARNING = "Normal", "Warning"
_CACHE_SIZE = 4096
_RETRIES = 3


@dataclass(frozen=True)
class EventRef:
    """The object an event is about (the pod), with the container's field path if any."""

    namespace: str
    name: str
    uid: str
    resource_version: str = ""
    field_path: str = ""


@dataclass
class _Seen:
    name: str
    count: int


class EventRecorder:
    def __init__(self, api: client.ApiClient, node: str) -> None:
        self._api = api
        self._core = client.CoreV1Api(api)
        self._node = node
        self._queue: queue.Queue[tuple[EventRef, str, str, str, str] | None] = queue.Queue()
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="event recorder", daemon=True)
        self._log = get_logger("kubelet_sim.events", node=node)
        self.sent = 0

    def start(self) -> EventRecorder:
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._queue.put(None)
        self._thread.join(timeout)

    def event(self, ref: EventRef, event_type: str, reason: str, message: str) -> None:
        """Queue an event; the caller (a pod worker) never waits for the API."""
        timestamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._queue.put((ref, event_type, reason, message, timestamp))

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until queued events are written (tests and shutdown)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._write(*item)
            finally:
                self._queue.task_done()

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
            "kind": "Pod",
            "namespace": ref.namespace,
            "name": ref.name,
            "uid": ref.uid,
            "apiVersion": "v1",
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
        call_json(
            self._core.patch_namespaced_event,
            seen.name,
            ref.namespace,
            patch,
            _content_type="application/strategic-merge-patch+json",
        )
        seen.count += 1
        self._seen.move_to_end(key)

    def _remember(self, key: tuple[str, ...], seen: _Seen) -> None:
        self._seen[key] = seen
        while len(self._seen) > _CACHE_SIZE:
            self._seen.popitem(last=False)
