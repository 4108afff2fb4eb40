"""The kubelet API's request workers: threads made while requests wait and none is free, up to
a cap for the process, gone after a while without work (after a burst, back to none).

The listener (`listener.py`) hands each step of a connection here; a long-running request
leaves it for a thread of its own.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

WORKER_IDLE = 30.0  # a worker with nothing to do this long ends: after a burst, back to none


class WorkerPool:
    """At most `size` threads, made when work waits and none is free, gone when idle."""

    def __init__(self, size: int, name: str) -> None:
        self._size, self._name = size, name
        self._work: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = self._idle = self._pending = 0
        self._stopped = False

    def submit(self, work: Callable[[], None]) -> None:
        with self._lock:
            if self._stopped:
                raise RuntimeError("the pool is stopped")
            self._pending += 1
            self._work.put(work)  # under the lock: a worker timing out sees it pending
            spawn = self._pending > self._idle and self._threads < self._size
            if spawn:
                self._threads += 1
        if spawn:
            threading.Thread(target=self._worker, name=self._name, daemon=True).start()

    def _worker(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            try:
                work = self._work.get(timeout=WORKER_IDLE)
            except queue.Empty:
                with self._lock:
                    self._idle -= 1
                    if self._pending == 0:
                        self._threads -= 1
                        return
                continue
            with self._lock:
                self._idle -= 1
                if work is not None:
                    self._pending -= 1
                else:
                    self._threads -= 1
            if work is None:
                return
            work()

    def shutdown(self) -> None:
        with self._lock:
            self._stopped = True
            for _ in range(self._threads):
                self._work.put(None)
