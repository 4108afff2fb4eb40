"""A de-duplicating work queue, as client-go's workqueue: informers add keys, workers take them.

A key is queued at most once; a key added while a worker holds it is queued again when the
worker calls `done`, so two workers never sync the same key at once and no change is lost.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class ShutDown(Exception):
    """The queue was shut down; the worker should exit."""


class WorkQueue(Generic[K]):
    def __init__(self) -> None:
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._cond = threading.Condition()
        self._shutting_down = False
        self._timers: set[threading.Timer] = set()

    def add(self, key: K) -> None:
        with self._cond:
            if self._shutting_down or key in self._dirty:
                return
            self._dirty.add(key)
            if key not in self._processing:
                self._queue.append(key)
                self._cond.notify()

    def add_after(self, key: K, delay: float) -> None:
        """Queue `key` after `delay` seconds (backoffs, periodic resyncs)."""
        if delay <= 0:
            self.add(key)
            return
        timer = threading.Timer(delay, self._fire, args=(key,))
        timer.daemon = True
        with self._cond:
            if self._shutting_down:
                return
            self._timers.add(timer)
        timer.start()

    def _fire(self, key: K) -> None:
        with self._cond:
            self._timers = {
                t for t in self._timers if t.is_alive() and t is not threading.current_thread()
            }
        self.add(key)

    def get(self, timeout: float | None = None) -> K | None:
        """The next key, or None after `timeout`; raises ShutDown once shut down and drained."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._queue or self._shutting_down, timeout):
                return None
            if not self._queue:
                raise ShutDown
            key = self._queue.popleft()
            self._processing.add(key)
            self._dirty.discard(key)
            return key

    def done(self, key: K) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._queue.append(key)
                self._cond.notify()

    def shut_down(self) -> None:
        with self._cond:
            self._shutting_down = True
            for timer in self._timers:
                timer.cancel()
            self._timers.clear()
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)
