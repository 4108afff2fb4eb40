"""The node's pods by uid: the kubelet's pod manager, below the workers that read it.

The pod informer and the static pods' files write it; the pod workers, the admission check,
the warm pool and the kubelet API read it. It holds the API's objects as they came.
"""

from __future__ import annotations

import threading

from kubelet_sim.formats.jsontypes import Json


class PodManager:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[str, Json] = {}

    def put(self, uid: str, pod: Json) -> bool:
        """Add or replace a pod; True when it was not known."""
        with self._lock:
            new = uid not in self._pods
            self._pods[uid] = pod
        return new

    def remove(self, uid: str) -> None:
        with self._lock:
            self._pods.pop(uid, None)

    def get(self, uid: str) -> Json | None:
        with self._lock:
            return self._pods.get(uid)

    def pods(self) -> list[Json]:
        with self._lock:
            return list(self._pods.values())

    def uids(self) -> set[str]:
        with self._lock:
            return set(self._pods)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)
