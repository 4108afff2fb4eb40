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
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubelet_sim.backoff import Backoff
from kubelet_sim.logs import get_logger

MAX_FAILURES = 10  # in a row: then the loop is given up and the agent stops with an error
HEALTHY_AFTER = 60.0  # seconds a restarted loop must run before its failure count is reset
RESTART_DELAY = (1.0, 30.0)  # the restart backoff: first delay, cap (doubling, jittered)

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
    """Runs, restarts and reports the loops of one agent (or of one component on its own)."""

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
        self.log = get_logger("kubelet_sim.supervise", **log_context)

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
