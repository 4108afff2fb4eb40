"""A clock that moves only when a test moves it (the pod workers' Clock port)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

START = 1_750_000_000.0  # an arbitrary Unix time, so that container timestamps look real


class FakeClock:
    def __init__(self, start: float = START) -> None:
        self._lock = threading.Lock()
        self._wall = start
        self._mono = 1000.0

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def time(self) -> float:
        with self._lock:
            return self._wall

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.time(), UTC)

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._mono += seconds
            self._wall += seconds
