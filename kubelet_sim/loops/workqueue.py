"""A de-duplicating work queue, as client-go's workqueue: informers add keys, workers take them.

A key is queued at most once; a key added while a worker holds it is queued again when the
worker calls `done`, so two workers never sync the same key at once and no change is lost.
A key added with `add_idle` waits behind every other: work that may follow (the removal of a
gone pod's containers) never takes a worker from work that may not (a pod still stopping).
A pool of workers that makes its threads on demand is told of each key made ready (`serve`);
the delay thread exists only while a delayed key waits.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

from kubelet_sim.formats.durations import MAX_SECONDS, timer_wait
from kubelet_sim.loops.supervise import Supervisor

K = TypeVar("K", bound=Hashable)


class ShutDown(Exception):
    """The queue was shut down; the worker should exit."""


class WorkQueue(Generic[K]):
    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor
        self._shut = threading.Event()  # the delay thread's stop
        self._queue: deque[K] = deque()
        self._idle: deque[K] = deque()  # taken only when _queue is empty
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._shutting_down = False
        # Delayed adds (client-go's delaying queue): one thread, a heap, the earliest time per key.
        self._ready_at: dict[K, float] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._seq = itertools.count()
        self._delay_cond = threading.Condition(self._lock)
        self._delayer = self._supervisor.on_demand(
            "workqueue-delay", self._deliver_delayed, self._shut
        )
        self._delayer.start()
        self._on_ready: Callable[[], None] = lambda: None

    def serve(self, on_ready: Callable[[], None]) -> None:
        """Call `on_ready` (under the queue's lock; it must not take it) each time a key is
        made ready for `get`: the workers' on-demand threads are woken by it."""
        self._on_ready = on_ready

    def add(self, key: K) -> None:
        with self._lock:
            self._add_locked(key)

    def add_idle(self, key: K) -> None:
        """Queue `key` behind every key added with `add` (it keeps its place if queued)."""
        with self._lock:
            self._add_locked(key, self._idle)

    def _add_locked(self, key: K, lane: deque[K] | None = None) -> None:
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            (self._queue if lane is None else lane).append(key)
            self._cond.notify()
            self._on_ready()

    def add_after(self, key: K, delay: float) -> None:
        """Queue `key` after `delay` seconds (backoffs, periodic resyncs).

        A key already waiting keeps the earlier of its two times, so a pod that is resynced
        often holds one pending entry, not one per sync. A delay is at most MAX_SECONDS (and
        one that is not a number at all is none): the delay thread serves every key.
        """
        if not delay > 0:  # NaN included
            self.add(key)
            return
        ready = time.monotonic() + min(delay, MAX_SECONDS)
        with self._lock:
            if self._shutting_down:
                return
            if key in self._ready_at and self._ready_at[key] <= ready:
                return
            self._ready_at[key] = ready
            earliest = self._heap[0][0] if self._heap else None
            heapq.heappush(self._heap, (ready, next(self._seq), key))
            if earliest is None or ready < earliest:  # else it wakes in time for this one too
                self._delay_cond.notify()
            self._delayer.wake()

    def cancel_delayed(self, key: K) -> None:
        """Drop `key`'s delayed add, if any (its worker is done with it for good: a pod gone)."""
        with self._lock:
            if self._ready_at.pop(key, None) is not None:
                self._delay_cond.notify()

    def _deliver_delayed(self) -> None:
        """Add each delayed key when its time comes; return when none waits."""
        with self._lock:
            while not self._shutting_down:
                if not self._ready_at:
                    self._heap.clear()  # only entries superseded or cancelled
                    return
                ready, _, key = self._heap[0]
                wait = ready - time.monotonic()
                if wait > 0:
                    self._delay_cond.wait(timer_wait(wait))
                    continue
                heapq.heappop(self._heap)
                if self._ready_at.get(key) == ready:  # not superseded by an earlier time
                    del self._ready_at[key]
                    self._add_locked(key)

    def get(self, timeout: float | None = None) -> K | None:
        """The next key, or None after `timeout`; raises ShutDown once shut down and drained."""
        with self._lock:

            def waiting() -> bool:
                return bool(self._queue or self._idle or self._shutting_down)

            if not self._cond.wait_for(waiting, timeout):
                return None
            if not (self._queue or self._idle):
                raise ShutDown
            key = (self._queue or self._idle).popleft()
            self._processing.add(key)
            self._dirty.discard(key)
            return key

    def ready(self) -> Iterator[K]:
        """The keys ready now, one at a time (each is the caller's until `done`), until none is
        ready or the queue is shut down: the loop of a worker thread made on demand."""
        while True:
            try:
                key = self.get(timeout=0)
            except ShutDown:
                return
            if key is None:
                return
            yield key

    def done(self, key: K) -> None:
        with self._lock:
            self._processing.discard(key)
            if key in self._dirty:
                self._queue.append(key)
                self._cond.notify()
                self._on_ready()

    def shut_down(self) -> None:
        with self._lock:
            self._shutting_down = True
            self._shut.set()
            self._heap.clear()
            self._ready_at.clear()
            self._cond.notify_all()
            self._delay_cond.notify_all()
        self._delayer.stop()

    def pending_delayed(self) -> int:
        """How many keys wait for a delayed add (one per key at most)."""
        with self._lock:
            return len(self._ready_at)

    def __len__(self) -> int:
        with self._lock:
            return len(self._queue) + len(self._idle)
