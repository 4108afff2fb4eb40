"""The one bounded memo: what the node remembers of containers it may never hear of again
(destroyed ids, Docker's `oom` events, stop signals) holds at most `limit` entries, the oldest
dropped first, so that a container removed behind the agent's back costs nothing for ever."""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class BoundedMemo(Generic[K, V]):
    """A thread-safe map of at most `limit` entries, in the order they were first put."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: dict[K, V] = {}
        self._lock = threading.Lock()

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            if len(self._items) > self.limit:
                del self._items[next(iter(self._items))]

    def get(self, key: K) -> V | None:
        with self._lock:
            return self._items.get(key)

    def pop(self, key: K) -> None:
        with self._lock:
            self._items.pop(key, None)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
