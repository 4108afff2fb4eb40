"""One thread for every node's periodic work: Lease renewals, node status, the service proxy.

A thousand nodes each with a Lease thread and a status thread spend their memory on stacks and
their CPU on wake-ups. Here one scheduler thread keeps a heap of due times and hands each due
task to a small pool; a task runs at most once at a time, and the next run is due `interval`
after the last one ended (as the kubelet's `wait.Until` loops: renewal, then sleep), jittered so
that nodes started together do not stay in step. A task made with `sliding=False` (the Lease
renewals) is due `interval` after the last one *started*, as `wait.JitterUntil` without sliding:
an API server that answers a renewal in a second does not push every node's next renewal a
second later (the renewTime is set before the call, and the node controller reads its spacing).

When more is due than the pool can run (a thousand nodes registering at once, an API server
that answers slowly), the Lease renewals go first: a task of a lower `priority` number is handed
to the pool before any other that is due, and a late node status or proxy pass costs less than a
node whose Lease expires. A quarter of the pool is theirs alone: other tasks may take the rest,
so tasks that block long (a hundred pods' proxy passes while 5,000 nodes ran) never hold every
thread while Leases fall due (they came 45 s late so).

Heartbeats must never fall behind silently: how late each run started against its due time is
a histogram per kind (`lateness`), and a run later than `LATE_AFTER` is a warning with the node
(a burst of them, one line per kind every `LATE_LOG_INTERVAL` with their count and the worst).
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from kubelet_sim.formats.histogram import Histogram
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.clock import SYSTEM_CLOCK, Clock
from kubelet_sim.loops.supervise import Supervisor

POOL_THREADS = 24  # tasks block in API calls: a thousand nodes renew 100 Leases a second, and
# at 0.2 s a call (an API server busy with registrations) that keeps 20 threads waiting
LATE_AFTER = 1.0  # seconds past its due time: a run this late is logged as a warning
LATE_LOG_INTERVAL = 10.0  # after a late-run warning, the next of its kind sums up this long
URGENT, NORMAL = 0, 1  # priorities: Lease renewals, and the rest
URGENT_SHARE = 4  # one in this many pool threads waits for urgent tasks only
LATENESS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30)
YIELD_LAG = (0.5, 5.0)  # seconds urgent and other work may lag before new work (nodes) waits
YIELD_LONGEST = 10.0  # seconds one wait_caught_up waits at most
RECENT = 1.0  # seconds: an urgent run's lateness counts this long after it started


@dataclass
class Periodic:
    """One periodic task; `wake()` runs it soon, `cancel()` ends it."""

    kind: str  # "lease", "node-status", ...: the lateness histogram's label
    node: str
    interval: float
    body: Callable[[], None]
    jitter: float
    _timers: Timers = field(repr=False)
    priority: int = NORMAL
    sliding: bool = True  # the next run counts from the last one's end; else from its start
    due: float = 0.0
    started: float = 0.0  # when the last run started
    running: bool = False
    rerun: bool = False  # woken while running: run again once it ends
    cancelled: bool = False
    version: int = 0  # heap entries of an older version are stale

    def wake(self, delay: float = 0.0) -> None:
        self._timers.wake(self, delay)

    def cancel(self, wait: float = 0.0) -> None:
        """No more runs; with `wait`, return once a run in progress ended (or `wait` passed),
        as a loop's stop joined its thread."""
        self._timers.cancel(self, wait)


class Timers:
    """The scheduler thread and its pool; `every()` adds a task, `stop()` ends them all."""

    def __init__(
        self,
        *,
        supervisor: Supervisor,
        pool_threads: int = POOL_THREADS,
        normal_threads: int | None = None,  # at most this many run other than urgent tasks
        clock: Clock = SYSTEM_CLOCK,
        late_after: float = LATE_AFTER,
    ) -> None:
        self.clock = clock
        self.late_after = late_after
        self.lateness: dict[str, Histogram] = {}
        self.late_runs: dict[str, int] = {}
        self.failures = 0
        self.log = get_logger("kubelet_sim.loops.timers")
        self._heap: list[tuple[float, int, int, Periodic]] = []
        self._ready: tuple[deque[Periodic], ...] = (deque(), deque())  # due, by priority
        # Threads other tasks than the urgent may hold at once: the rest wait for Leases.
        self._normal_limit = normal_threads or pool_threads - pool_threads // URGENT_SHARE
        self._normal_running = 0
        self._urgent_late = (float("-inf"), 0.0)  # the last urgent run: when, how late
        self._late_summary: dict[str, _LateSummary] = {}
        self._seq = itertools.count()
        lock = threading.Lock()
        # Two conditions on one lock: a new due time wakes the scheduler alone, and a due task
        # one worker (a pool of 24 woken for each renewal spent a tenth of a core on wake-ups).
        self._cond = threading.Condition(lock)
        self._work_ready = threading.Condition(lock)
        self._ended = threading.Condition(lock)  # a run ended (for a cancel that waits)
        self._stop = threading.Event()
        self._rng = random.Random()
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
            self._work_ready.notify_all()
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
        priority: int = NORMAL,
        sliding: bool = True,
    ) -> Periodic:
        """Run `body` in `first_in` seconds, then `interval` (+ up to `jitter`) after each run
        ended, or after each run started when not `sliding` (after it ended if that passed)."""
        timer = Periodic(kind, node, interval, body, jitter, self, priority, sliding)
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

    def cancel(self, timer: Periodic, wait: float = 0.0) -> None:
        deadline = self.clock.monotonic() + wait
        with self._cond:
            timer.cancelled = True
            timer.version += 1
            while timer.running and threading.current_thread() not in self._threads:
                left = deadline - self.clock.monotonic()
                if left <= 0:
                    break
                self._ended.wait(left)

    def behind(self) -> tuple[float, float]:
        """Seconds the urgent and the other work lag now, 0.0 when on time: the oldest task due
        and not started (for the urgent, also a renewal that just started late), and the
        scheduler's own backlog, which delays both."""
        with self._cond:
            now = self.clock.monotonic()
            urgent, normal = (now - q[0].due if q else 0.0 for q in self._ready)
            at, late = self._urgent_late
            if now - at < RECENT:
                urgent = max(urgent, late)
            if self._heap and self._heap[0][2] == self._heap[0][3].version:
                backlog = now - self._heap[0][0]
                urgent, normal = max(urgent, backlog), max(normal, backlog)
            return max(0.0, urgent), max(0.0, normal)

    def wait_caught_up(
        self,
        stop: threading.Event,
        lag: tuple[float, float] = YIELD_LAG,
        longest: float = YIELD_LONGEST,
    ) -> None:
        """Returns once the work due is about on time (or `stop`): a caller that makes more
        work (5,000 nodes registering on two cores) lets the Lease renewals catch up first,
        and the node statuses (due every 10 s), so the process slows its start rather than
        its heartbeats. It waits `longest` at most: work that stays behind is no reason to
        start no more nodes."""
        end = self.clock.monotonic() + longest
        while self._started and not self._stop.is_set() and self.clock.monotonic() < end:
            urgent, normal = self.behind()
            if urgent <= lag[0] and normal <= lag[1]:
                return
            if stop.wait(0.1):
                return

    def pending(self) -> int:
        with self._cond:
            return sum(1 for _, _, version, t in self._heap if version == t.version)

    # -- the threads ---------------------------------------------------------------------------

    def _push(self, timer: Periodic, due: float) -> None:
        """Under the lock."""
        timer.version += 1
        timer.due = due
        heapq.heappush(self._heap, (due, next(self._seq), timer.version, timer))
        if self._heap[0][3] is timer:  # the scheduler's wait ends earlier
            self._cond.notify()

    def _schedule(self) -> None:
        with self._cond:
            while not self._stop.is_set():
                now = self.clock.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    _, _, version, timer = heapq.heappop(self._heap)
                    if version == timer.version and not timer.cancelled:
                        self._ready[timer.priority].append(timer)
                        self._work_ready.notify()  # one worker, not the whole pool
                wait = self._heap[0][0] - now if self._heap else None
                self._cond.wait(wait)

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._takeable() and not self._stop.is_set():
                    self._work_ready.wait()
                if self._stop.is_set():
                    return
                urgent, normal = self._ready
                timer = urgent.popleft() if urgent else normal.popleft()
                self._normal_running += timer.priority != URGENT
                timer.running = True
                now = timer.started = self.clock.monotonic()
                late = now - timer.due
                if timer.priority == URGENT:
                    self._urgent_late = (now, late)
            self._observe(timer, late)
            try:
                timer.body()
            except Exception:  # a bug in a task: logged, and the task keeps its schedule
                self.failures += 1
                self.log.exception("periodic task failed", kind=timer.kind, node=timer.node)
            with self._cond:
                timer.running = False
                self._normal_running -= timer.priority != URGENT
                if timer.cancelled:
                    self._ended.notify_all()
                    continue
                if timer.rerun:
                    timer.rerun = False
                    self._push(timer, self.clock.monotonic())
                else:
                    spread = 1 + timer.jitter * self._rng.random()
                    now, wait = self.clock.monotonic(), timer.interval * spread
                    since = now if timer.sliding else timer.started
                    # a run longer than the interval (a renewal retrying) waits it out after
                    # its end, as with sliding: no second renewal straight after the first
                    self._push(timer, since + wait if since + wait > now else now + wait)

    def _takeable(self) -> bool:
        """Under the lock: an urgent task is due, or another and a thread may take it."""
        urgent, normal = self._ready
        return bool(urgent) or (bool(normal) and self._normal_running < self._normal_limit)

    def _observe(self, timer: Periodic, late: float) -> None:
        """Lateness into the histogram; late runs into the log, a burst summed up (its last
        sum is written by the first run of the kind after the quiet time, late or not)."""
        late = max(0.0, late)
        self.lateness[timer.kind].observe(late)
        now = self.clock.monotonic()
        with self._cond:
            summary = self._late_summary.setdefault(timer.kind, _LateSummary())
            if late > self.late_after:
                self.late_runs[timer.kind] += 1
                summary.add(timer.node, late)
            if not summary.runs or now < summary.quiet_until:
                return
            runs, nodes, worst = summary.take(now + LATE_LOG_INTERVAL)
        if runs == 1 and late > self.late_after:
            self.log.warning(
                "periodic task ran late", kind=timer.kind, node=timer.node, late_seconds=late
            )
            return
        self.log.warning(
            "periodic tasks ran late",
            kind=timer.kind,
            runs=runs,
            nodes=nodes,
            worst_late_seconds=round(worst, 3),
        )


@dataclass
class _LateSummary:
    """Late runs of one kind since its last warning, for the next."""

    quiet_until: float = 0.0
    runs: int = 0
    nodes: set[str] = field(default_factory=set)
    worst: float = 0.0

    def add(self, node: str, late: float) -> None:
        self.runs += 1
        self.nodes.add(node)
        self.worst = max(self.worst, late)

    def take(self, quiet_until: float) -> tuple[int, int, float]:
        taken = (self.runs, len(self.nodes), self.worst)
        self.quiet_until, self.runs, self.nodes, self.worst = quiet_until, 0, set(), 0.0
        return taken
