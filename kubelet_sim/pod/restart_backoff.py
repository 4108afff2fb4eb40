"""The kubelet's per-key restart backoff (client-go flowcontrol.Backoff, no jitter).

CrashLoopBackOff and ImagePullBackOff both use it: 10 s doubling to 300 s, and an entry is
forgotten once the failure it saw is more than twice the maximum (10 minutes) old. Entries are
also dropped: by `gc` (flowcontrol.Backoff.GC, which the kubelet's housekeeping calls) once idle
for twice the maximum, and by `forget_prefix`/`forget_containing` when their pod is gone.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass
class _Entry:
    backoff: float
    last_update: float


class KeyedBackoff:
    def __init__(self, initial: float = 10.0, maximum: float = 300.0) -> None:
        self.initial = initial
        self.maximum = maximum
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def in_backoff_since(self, key: str, event_time: float, now: float) -> bool:
        """Whether a retry must still wait, given the failure that happened at `event_time`."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or self._expired(event_time, entry):
                return False
            return now - event_time < entry.backoff

    def in_backoff_since_update(self, key: str, now: float) -> bool:
        """Image pulls: still waiting since the last failed attempt was recorded?"""
        with self._lock:
            entry = self._entries.get(key)
            return entry is not None and now - entry.last_update < entry.backoff

    def next(self, key: str, event_time: float, now: float) -> None:
        """Record a retry for a failure at `event_time`: the next wait doubles."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or self._expired(event_time, entry):
                self._entries[key] = _Entry(self.initial, now)
            else:
                entry.backoff = min(entry.backoff * 2, self.maximum)
                entry.last_update = now

    def get(self, key: str) -> float:
        with self._lock:
            entry = self._entries.get(key)
            return 0.0 if entry is None else entry.backoff

    def remaining(self, key: str, event_time: float, now: float) -> float:
        """Seconds until a retry is allowed (0 when it is)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or self._expired(event_time, entry):
                return 0.0
            return max(0.0, entry.backoff - (now - event_time))

    def forget_prefix(self, prefix: str) -> None:
        """Drop the entries of a pod that is gone."""
        with self._lock:
            for key in [k for k in self._entries if k.startswith(prefix)]:
                del self._entries[key]

    def forget_containing(self, part: str) -> None:
        """Drop the entries whose key holds `part` (e.g. `_<uid>_` in a crash-loop key)."""
        with self._lock:
            for key in [k for k in self._entries if part in k]:
                del self._entries[key]

    def gc(self, now: float) -> int:
        """Drop entries not updated for twice the maximum (as flowcontrol.Backoff.GC); how many."""
        with self._lock:
            idle = [k for k, e in self._entries.items() if self._expired(now, e)]
            for key in idle:
                del self._entries[key]
            return len(idle)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _expired(self, event_time: float, entry: _Entry) -> bool:
        return event_time - entry.last_update > 2 * self.maximum


def go_duration(seconds: float) -> str:
    """Go's time.Duration.String() for whole seconds, as the kubelet's messages print it."""
    total = int(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"
