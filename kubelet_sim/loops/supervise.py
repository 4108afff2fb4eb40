"""Supervised loops: a thread whose body raised is logged and restarted, never left for dead.

Every long-lived thread of an agent runs its body through one `Supervisor`. Expected failures
(the API server or Docker down) stay inside the loops, which retry them themselves; what reaches
the supervisor is a bug or an input nobody foresaw. It logs the exception with its context,
waits (the project's `Backoff`, 1 s doubling to 30 s) and calls the body again. At once, before
the wait, an `on_crash` hook lets the owner drop state it can no longer trust (an informer
forgets that it was synced, so it relists before saying so again).

A loop that fails `max_failures` times in a row (a failure counts as "in a row" unless the loop
ran `healthy_after` seconds since its last restart) is given up: the supervisor marks it failed,
sets `failed` and calls `on_failure`, and the agent stops with an error and exit code 1 rather
than run on a frozen cache. With the defaults that is 10 failures within about 2.5 minutes.
`health()` is what a `/healthz` reads: each loop's state, restarts and last error.

A loop that waits for work most of its life runs `on_demand` (`OnDemand`): its thread is made
when work arrives and ends once none came for a few seconds, so an idle node holds no thread
for it (issue 22: a thousand nodes in one process). Supervision is the same while it runs.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubelet_sim.logs import get_logger
from kubelet_sim.loops.backoff import Backoff

MAX_FAILURES = 10  # in a row: then the loop is given up and the agent stops with an error
HEALTHY_AFTER = 60.0  # seconds a restarted loop must run before its failure count is reset
RESTART_DELAY = (1.0, 30.0)  # the restart backoff: first delay, cap (doubling, jittered)
LINGER = 5.0  # seconds an on-demand thread with nothing to do waits for more before it ends

RUNNING, RESTARTING, FAILED = "running", "restarting", "failed"


@dataclass
class LoopHealth:
    """One loop as `/healthz` shows it."""

    state: str = RUNNING
    restarts: int = 0
    failures_in_a_row: int = 0
    last_error: str = ""

    @property
    def healthy(self) -> bool:
        return self.state == RUNNING


class LoopFailed(Exception):
    """A supervised loop kept failing beyond the limit; the agent must not run on without it."""


class Supervisor:
    """Runs, restarts and reports the loops of one node (or of the process's shared parts)."""

    def __init__(
        self,
        *,
        max_failures: int | None = None,
        healthy_after: float | None = None,
        backoff: Callable[[], Backoff] | None = None,
        on_failure: Callable[[str], None] | None = None,
        **log_context: Any,
    ) -> None:
        # The module's values are read here, not at import: a test may lower them.
        self.max_failures = max_failures or MAX_FAILURES
        self.healthy_after = HEALTHY_AFTER if healthy_after is None else healthy_after
        initial, cap = RESTART_DELAY
        self._backoff = backoff or (lambda: Backoff(initial=initial, cap=cap))
        self.on_failure = on_failure
        self.failed = threading.Event()
        self.failure = ""
        self._loops: dict[str, LoopHealth] = {}
        self._lock = threading.Lock()
        self.log = get_logger("kubelet_sim.loops.supervise", **log_context)

    def thread(
        self,
        name: str,
        body: Callable[[], None],
        stop: threading.Event,
        *,
        on_crash: Callable[[], None] | None = None,
    ) -> threading.Thread:
        """A daemon thread (not started) running `body` under supervision until `stop`."""
        return threading.Thread(
            target=self.run, args=(name, body, stop, on_crash), name=name, daemon=True
        )

    def on_demand(
        self,
        name: str,
        body: Callable[[], None],
        stop: threading.Event,
        *,
        limit: int = 1,
        linger: float | None = None,
    ) -> OnDemand:
        """A loop with up to `limit` supervised threads while it has work, none when idle (not
        started: wakes before `start` are kept)."""
        return OnDemand(self, name, body, stop, limit=limit, linger=linger)

    def run(
        self,
        name: str,
        body: Callable[[], None],
        stop: threading.Event,
        on_crash: Callable[[], None] | None = None,
    ) -> None:
        """Call `body` until it returns; after an exception log, back off, restart, or give up.

        A body returns when its loop is done (stopped): the loop then leaves the health list.
        """
        health = LoopHealth()
        with self._lock:
            self._loops[name] = health
        backoff = self._backoff()
        log = self.log.bind(loop=name)
        try:
            while not stop.is_set():
                began = time.monotonic()
                try:
                    body()
                    return
                except Exception as exc:
                    if stop.is_set():
                        return
                    if on_crash is not None:
                        on_crash()
                    error = f"{type(exc).__name__}: {exc}"[:300]
                    if time.monotonic() - began >= self.healthy_after:
                        health.failures_in_a_row = 0
                        backoff.reset()
                    health.failures_in_a_row += 1
                    health.last_error = error
                    if health.failures_in_a_row >= self.max_failures:
                        log.exception(
                            "loop failed too often; giving up", failures=health.restarts + 1
                        )
                        self._give_up(name, health, error)
                        return
                    delay = backoff.next_delay()
                    health.state = RESTARTING
                    health.restarts += 1
                    log.exception(
                        "loop failed; restarting",
                        restarts=health.restarts,
                        retry_in_seconds=round(delay, 2),
                    )
                if stop.wait(delay):
                    return
                health.state = RUNNING
        finally:
            with self._lock:
                if self._loops.get(name) is health and health.state != FAILED:
                    del self._loops[name]

    def health(self) -> dict[str, LoopHealth]:
        """A copy of every live (or given-up) loop's health, by name."""
        with self._lock:
            return {name: LoopHealth(**vars(h)) for name, h in self._loops.items()}

    @property
    def healthy(self) -> bool:
        return not self.failed.is_set() and all(h.healthy for h in self.health().values())

    def _give_up(self, name: str, health: LoopHealth, error: str) -> None:
        health.state = FAILED
        with self._lock:
            first = not self.failed.is_set()
            if first:
                self.failure = f"loop {name!r} failed {self.max_failures} times in a row: {error}"
                self.failed.set()
        if first and self.on_failure is not None:
            self.on_failure(self.failure)


class OnDemand:
    """A supervised loop whose threads exist only while there is work: at most `limit`.

    The owner makes work visible, then calls `wake()`. `body` does the work it finds and
    returns when it finds none; its thread then waits `linger` seconds for another wake (a burst
    reuses its threads) and ends. No wake is lost: one that comes while every thread is busy is
    kept, and a thread runs `body` again for it. With `limit` > 1 a wake makes one more thread
    while none is idle (the pod workers: one per key waiting, up to their number). A body that
    raises is restarted by the supervisor as any loop, under the thread's name (`name`, or
    `name-<slot>`), and that name stays in `health()` while the thread lives.
    """

    def __init__(
        self,
        supervisor: Supervisor,
        name: str,
        body: Callable[[], None],
        stop: threading.Event,
        *,
        limit: int = 1,
        linger: float | None = None,
    ) -> None:
        self._supervisor = supervisor
        self.name = name
        self._body = body
        self._stop = stop
        self.limit = max(1, limit)
        self.linger = LINGER if linger is None else linger  # read here: a test may lower it
        self._cond = threading.Condition(threading.Lock())
        self._started = False
        self._pending = 0  # wakes no thread has taken yet (at most `limit`)
        self._idle = 0  # threads waiting for a wake
        self._threads: dict[int, threading.Thread] = {}  # by slot

    def start(self) -> None:
        """Threads may run from now on: one for each wake kept before (up to `limit`)."""
        with self._cond:
            self._started = True
            for _ in range(min(self._pending, self.limit) - len(self._threads)):
                self._spawn()
            self._pending = 0

    def wake(self) -> None:
        """There is work: a thread will run `body` after this call (may be called under the
        owner's lock; it takes only its own)."""
        with self._cond:
            if self._stop.is_set():
                return
            if self._started and self._idle <= self._pending and len(self._threads) < self.limit:
                self._spawn()
                return
            self._pending = min(self._pending + 1, self.limit)
            self._cond.notify()

    def running(self) -> int:
        """Threads alive now (busy or lingering)."""
        with self._cond:
            return len(self._threads)

    def stop(self, timeout: float = 0.0) -> None:
        """Set the loop's stop, end idle threads at once; wait `timeout` for busy ones."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
            threads = list(self._threads.values())
        deadline = time.monotonic() + timeout
        for thread in threads:
            if thread is not threading.current_thread() and thread.is_alive():
                thread.join(max(0.0, deadline - time.monotonic()))

    def _spawn(self) -> None:
        """Under the lock: a thread in the first free slot."""
        slot = next(i for i in range(self.limit) if i not in self._threads)
        name = self.name if self.limit == 1 else f"{self.name}-{slot}"
        serve = functools.partial(self._serve, slot)
        thread = self._threads[slot] = self._supervisor.thread(name, serve, self._stop)
        thread.start()

    def _serve(self, slot: int) -> None:
        """The supervised body of one thread: work, linger, and end (freeing the slot under
        the lock, so that a wake after it makes a new thread)."""
        while True:
            self._body()
            with self._cond:
                self._idle += 1
                try:
                    woken = self._cond.wait_for(
                        lambda: self._pending or self._stop.is_set(), self.linger
                    )
                finally:
                    self._idle -= 1
                if not woken or self._stop.is_set():
                    if self._threads.get(slot) is threading.current_thread():
                        del self._threads[slot]
                    return
                self._pending -= 1
