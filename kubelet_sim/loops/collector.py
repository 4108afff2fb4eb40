"""Python's garbage collector in a process of thousands of nodes.

A full collection walks every object the process holds and stops every thread meanwhile, the
Lease renewals too: at 5,000 nodes (about 900 MiB) that is seconds, and it comes whenever the
objects that outlived two younger collections grew by a quarter. Most of what a process holds
is made while its nodes start and lives as long as it does: as they start (every 500 nodes)
and once they all run, `settle()` collects once and freezes what is left (`gc.freeze`, as
large Python services do), so later full collections walk only what came after. Each full
collection's pause is measured (`pauses`), and a long one is a warning: a heartbeat late for
no visible reason is then explained.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from kubelet_sim.formats.histogram import Histogram
from kubelet_sim.logs import get_logger

LONG_PAUSE = 1.0  # seconds: a full collection this long is logged
PAUSE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10)
OLDEST = 2  # the generation of a full collection


class GarbageCollector:
    """Measures full collections while `watch()`ed; `settle()` freezes what the start made."""

    def __init__(self, *, clock: Callable[[], float] = time.perf_counter) -> None:
        self.pauses = Histogram(PAUSE_BUCKETS)
        self.frozen = 0  # objects moved out of the collector's sight by `settle`
        self._clock = clock
        self._started: float | None = None
        self._log = get_logger("kubelet_sim.loops.collector")

    def watch(self) -> None:
        if self._on_collection not in gc.callbacks:
            gc.callbacks.append(self._on_collection)

    def unwatch(self) -> None:
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)

    def settle(self) -> None:
        """Nodes started: collect once, then freeze what survived (for the process's life)."""
        gc.collect()
        gc.freeze()
        self.frozen = gc.get_freeze_count()
        self._log.info("objects of the start frozen out of garbage collection", objects=self.frozen)

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        """gc's callback: on the collecting thread, with every other thread stopped."""
        if info.get("generation") != OLDEST:
            return
        if phase == "start":
            self._started = self._clock()
            return
        if self._started is None:
            return
        pause, self._started = self._clock() - self._started, None
        self.pauses.observe(pause)
        if pause >= LONG_PAUSE:
            self._log.warning(
                "a full garbage collection stopped every thread",
                seconds=round(pause, 3),
                collected=info.get("collected"),
                frozen=self.frozen,
            )
