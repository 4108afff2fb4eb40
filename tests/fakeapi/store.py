"""In-memory object storage: one global resourceVersion, bounded event history, watchers."""

from __future__ import annotations

import copy
import queue
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from tests.fakeapi.errors import expired

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects


@dataclass(frozen=True)
class Event:
    """A stored change. `obj` is the new state (for DELETED the last state at the new RV)."""

    rv: int
    resource: str
    type: str
    obj: Obj
    prev: Obj | None


@dataclass(eq=False)
class Watcher:
    """A registered watch: the store pushes events, the HTTP thread drains them."""

    resource: str
    namespace: str | None
    events: queue.Queue[Event | None] = field(default_factory=queue.Queue)
    stopped: threading.Event = field(default_factory=threading.Event)

    def stop(self) -> None:
        """Wake the reader and make it end the stream."""
        self.stopped.set()
        self.events.put(None)


def with_rv(obj: Obj, rv: int) -> Obj:
    """A shallow copy of `obj` carrying another resourceVersion."""
    out = dict(obj)
    out["metadata"] = {**obj.get("metadata", {}), "resourceVersion": str(rv)}
    return out


class Store:
    """Objects per resource, like etcd plus the watch cache in front of it."""

    def __init__(self, history_size: int = 1000) -> None:
        self.lock = threading.RLock()
        self._rv = 0
        self._objects: dict[str, dict[Key, Obj]] = {}
        # One window per resource, as the watch cache keeps one per resource: busy pods do not
        # push a node watch's resume point out of the history.
        self._history: dict[str, deque[Event]] = {}
        self._history_size = history_size
        self._floor: dict[str, int] = {}  # resuming from an RV below this is "too old"
        self._watchers: set[Watcher] = set()
        self._compacted_at = 0

    # --- reads ------------------------------------------------------------------------------

    def current_rv(self) -> int:
        """The latest resourceVersion handed out."""
        with self.lock:
            return self._rv

    def get(self, resource: str, namespace: str, name: str) -> Obj | None:
        """A deep copy of the stored object, or None."""
        with self.lock:
            obj = self._objects.get(resource, {}).get((namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list_objects(self, resource: str, namespace: str | None) -> list[Obj]:
        """Deep copies of the objects, sorted by (namespace, name) like etcd keys."""
        with self.lock:
            items = self._objects.get(resource, {})
            keys = sorted(k for k in items if namespace is None or k[0] == namespace)
            return [copy.deepcopy(items[k]) for k in keys]

    def list_at(self, resource: str, namespace: str | None, rv: int) -> list[Obj]:
        """The objects as they were at `rv`, rebuilt by undoing later events (Exact reads)."""
        with self.lock:
            floor = max(self._floor.get(resource, 0), self._compacted_at)
            if rv < floor:
                raise expired(rv, floor)
            state = dict(self._objects.get(resource, {}))
            for ev in reversed(self._history.get(resource, ())):
                if ev.rv <= rv:
                    break
                key = _key(ev.obj)
                if ev.prev is None:
                    state.pop(key, None)
                else:
                    state[key] = ev.prev
            keys = sorted(k for k in state if namespace is None or k[0] == namespace)
            return [copy.deepcopy(state[k]) for k in keys]

    # --- writes -----------------------------------------------------------------------------

    def put(self, resource: str, obj: Obj, prev: Obj | None) -> Obj:
        """Store a created (prev None) or modified object at a new RV; returns a copy."""
        with self.lock:
            self._rv += 1
            stored = with_rv(copy.deepcopy(obj), self._rv)
            self._objects.setdefault(resource, {})[_key(stored)] = stored
            self._record(Event(self._rv, resource, "MODIFIED" if prev else "ADDED", stored, prev))
            return copy.deepcopy(stored)

    def remove(self, resource: str, obj: Obj) -> Obj:
        """Delete an object; the DELETED event and the return value carry a new RV."""
        with self.lock:
            key = _key(obj)
            prev = self._objects.get(resource, {}).pop(key)
            self._rv += 1
            final = with_rv(prev, self._rv)
            self._record(Event(self._rv, resource, "DELETED", final, prev))
            return copy.deepcopy(final)

    def _record(self, event: Event) -> None:
        history = self._history.setdefault(event.resource, deque())
        history.append(event)
        while len(history) > self._history_size:
            self._floor[event.resource] = history.popleft().rv
        for w in list(self._watchers):
            if w.resource == event.resource:
                w.events.put(event)

    def compact(self) -> None:
        """Forget all history: any resume from an older RV now gets 410."""
        with self.lock:
            self._history.clear()
            self._compacted_at = self._rv

    # --- watch ------------------------------------------------------------------------------

    def watch(
        self, resource: str, namespace: str | None, rv: int | None
    ) -> tuple[Watcher, list[Event]]:
        """Register a watcher and return the events it must replay first.

        rv None: a synthetic ADDED per current object; else the retained events after rv
        (410 when rv is older than the retained window).
        """
        with self.lock:
            if rv is None:
                initial = [
                    Event(self._rv, resource, "ADDED", obj, None)
                    for key, obj in sorted(self._objects.get(resource, {}).items())
                    if namespace is None or key[0] == namespace
                ]
            else:
                floor = max(self._floor.get(resource, 0), self._compacted_at)
                if rv < floor:
                    raise expired(rv, floor)
                initial = [e for e in self._history.get(resource, ()) if e.rv > rv]
            watcher = Watcher(resource, namespace)
            self._watchers.add(watcher)
            return watcher, initial

    def unwatch(self, watcher: Watcher) -> None:
        """Deregister a watcher."""
        with self.lock:
            self._watchers.discard(watcher)

    def watchers(self) -> list[Watcher]:
        """The registered watchers."""
        with self.lock:
            return list(self._watchers)


def _key(obj: Obj) -> Key:
    meta = obj.get("metadata", {})
    return (meta.get("namespace") or "", meta["name"])
