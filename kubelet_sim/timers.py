"""One thread for every node's periodic work: Lease renewals, node status, the service proxy.

A thousand nodes each with a Lease thread and a status thread spend their memory on stacks and
their CPU on wake-ups. Here one scheduler thread keeps a heap of due times and hands each due
task to a small pool; a task runs at most once at a time, and the next run is due `interval`
after the last one ended (as the kubelet's `wait.Until` loops: renewal, then sleep), jittered so
that nodes started together do not stay in step.

Heartbeats must never fall behind silently: how late each run started against its due time is
a histogram per kind (`lateness`), and a run later than `LATE_AFTER` is a warning with the node.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from kubelet_sim.clock import SYSTEM_CLOCK, Clock
from kubelet_sim.histogram import Histogram
from kubelet_sim.logs import get_logger
from kubelet_sim.supervise import Supervisor

POOL_THREADS = 8  # tasks block in API calls; enough that one slow call delays no other node
LATE_AFTER = 1.0  # seconds past its due time: a run this late is logged as a warning
LATENESS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30)


@dataclass
class Periodic:
    """One periodic task; `wake()` runs it soon, `cancel()` ends it."""

    kind: str  # "lease", "node-status", ...: the lateness histogram's label
    node: str
    interval: float
    body: Callable[[], None]
    jitter: float
    _timers: Timers = field(repr=False)
    due: float = 0.0
    running: bool = False
    rerun: bool = False  # woken while running: run again once it ends
    cancelled: bool = False
    version: int = 0  # heap entries of an older version are stale

    def wake(self, delay: float = 0.0) -> None:
        self._timers.wake(self, delay)

    def cancel(self) -> None:
        self._timers.cancel(self)


class Timers:
    """The scheduler thread and its pool; `every()` adds a task, `stop()` ends them all."""

    def __init__(
        self,
        *,
        pool_threads: int = POOL_THREADS,
        clock: Clock = SYSTEM_CLOCK,
        supervisor: Supervisor | None = None,
        late_after: float = LATE_AFTER,
    ) -> None:
        self.clock = clock
        self.late_after = late_after
        self.lateness: dict[str, Histogram] = {}
        self.late_runs: dict[str, int] = {}
        self.failures = 0
        self.log = get_logger("kubelet_sim.timers")
        self._heap: list[tuple[float, int, int, Periodic]] = []
        self._ready: deque[Periodic] = deque()  # due now, waiting for a pool thread
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._rng = random.Random()
        supervisor = supervisor or Supervisor()
        self._threads = [supervisor.thread("timers", self._schedule, self._stop)] + [
            supervisor.thread(f"timers pool {i}", self._work, self._stop)
            for i in range(pool_threads)
        ]
        self._started = False

    def start(self) -> Timers:
        with self._cond:
            if self._started:
                return self
            self._started = True
        for thread in self._threads:
            thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        for thread in self._threads:
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(timeout)

    def every(
        self,
        kind: str,
        node: str,
        interval: float,
        body: Callable[[], None],
        *,
        jitter: float = 0.04,
        first_in: float = 0.0,
    ) -> Periodic:
        """Run `body` in `first_in` seconds, then `interval` (+ up to `jitter`) after each run."""
        timer = Periodic(kind, node, interval, body, jitter, self)
        with self._cond:
            self.lateness.setdefault(kind, Histogram(LATENESS_BUCKETS))
            self.late_runs.setdefault(kind, 0)
            self._push(timer, self.clock.monotonic() + first_in)
        return timer

    def wake(self, timer: Periodic, delay: float = 0.0) -> None:
        with self._cond:
            if timer.cancelled:
                return
            if timer.running:
                timer.rerun = True
                return
            due = self.clock.monotonic() + delay
            if due < timer.due:
                self._push(timer, due)

    def cancel(self, timer: Periodic) -> None:
        with self._cond:
            timer.cancelled = True
            timer.version += 1

    def pending(self) -> int:
        with self._cond:
            return sum(1 for _, _, version, t in self._heap if version == t.version)

    # -- the threads ---------------------------------------------------------------------------

    def _push(self, timer: Periodic, due: float) -> None:
        """Under the lock."""
        timer.version += 1
        timer.due = due
        heapq.heappush(self._heap, (due, next(self._seq), timer.version, timer))
        self._cond.notify_all()

    def _schedule(self) -> None:
        with self._cond:
            while not self._stop.is_set():
                now = self.clock.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    _, _, version, timer = heapq.heappop(self._heap)
                    if version == timer.version and not timer.cancelled:
                        self._ready.append(timer)
                        self._cond.notify_all()
                wait = self._heap[0][0] - now if self._heap else None
                self._cond.wait(wait)

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._ready and not self._stop.is_set():
                    self._cond.wait()
                if self._stop.is_set():
                    return
                timer = self._ready.popleft()
                timer.running = True
                late = self.clock.monotonic() - timer.due
            self._observe(timer, late)
            try:
                timer.body()
            except Exception:  # a bug in a task: logged, and the task keeps its schedule
                self.failures += 1
                self.log.exception("periodic task failed", kind=timer.kind, node=timer.node)
            with self._cond:
                timer.running = False
                if timer.cancelled:
                    continue
                if timer.rerun:
                    timer.rerun = False
                    self._push(timer, self.clock.monotonic())
                else:
                    spread = 1 + timer.jitter * self._rng.random()
                    self._push(timer, self.clock.monotonic() + timer.interval * spread)

    def _observe(self, timer: Periodic, late: float) -> None:
        late = max(0.0, late)
        self.lateness[timer.kind].observe(late)
        if late > self.late_after:
            with self._cond:
                self.late_runs[timer.kind] += 1
            self.log.warning(
                "periodic task ran late", kind=timer.kind, node=timer.node, late_seconds=late
            )
