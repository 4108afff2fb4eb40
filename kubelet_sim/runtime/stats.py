"""Docker calls counted by kind: what a node with many pods pays (its /metrics shows them)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class RuntimeStats:
    """Engine calls made so far, by kind (thread-safe counters)."""

    lists: int = 0
    inspects: int = 0
    image_inspects: int = 0
    image_lists: int = 0
    creates: int = 0
    starts: int = 0
    stops: int = 0
    removes: int = 0
    pulls: int = 0
    execs: int = 0
    updates: int = 0  # in-place resizes (docker update)
    streams: int = 0  # exec and attach sessions of the kubelet API (probes count as execs)
    port_forwards: int = 0
    logs: int = 0
    stats: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, kind: str) -> None:
        with self._lock:
            setattr(self, kind, getattr(self, kind) + 1)
