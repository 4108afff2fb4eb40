"""The container garbage collector: once a minute, as the kubelet's ContainerGCPeriod.

Each pass also drops backoff entries idle for twice their maximum (the kubelet's housekeeping
calls backOff.GC()), so that the backoff maps of a long-lived node stay bounded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import InitVar, dataclass

from kubelet_sim.logs import get_logger
from kubelet_sim.loops.clock import SYSTEM_CLOCK, Clock
from kubelet_sim.loops.timers import Periodic, Timers
from kubelet_sim.pod.gc import garbage
from kubelet_sim.pod.restart_backoff import KeyedBackoff
from kubelet_sim.podworkers.ports import ContainerCache
from kubelet_sim.podworkers.stopper import ContainerStopper

GC_PERIOD = 60.0


@dataclass(eq=False)
class ContainerGC:
    """`timers`: the process's, which run the passes."""

    watcher: ContainerCache
    stopper: ContainerStopper
    node: str
    timers: InitVar[Timers]
    period: float = GC_PERIOD
    backoffs: Sequence[KeyedBackoff] = ()
    clock: Clock = SYSTEM_CLOCK

    def __post_init__(self, timers: Timers) -> None:
        self._timers = timers
        self.removed = 0
        self._timer: Periodic | None = None
        self.log = get_logger("kubelet_sim.gc", node=self.node)

    def start(self) -> None:
        self._timer = self._timers.every(
            "container-gc", self.node, self.period, self._pass, first_in=self.period
        )

    def stop(self, timeout: float = 5.0) -> None:
        if self._timer is not None:
            self._timer.cancel(wait=timeout)

    def collect(self) -> int:
        """One pass; the number of containers removed."""
        now = self.clock.time()  # the clock the pod workers give the backoffs
        for backoff in self.backoffs:
            backoff.gc(now)
        doomed = garbage(self.watcher.all_containers())
        if doomed:
            self.stopper.remove_all(doomed)
            self.removed += len(doomed)
            self.log.info("removed dead containers", count=len(doomed))
        return len(doomed)

    def _pass(self) -> None:
        try:
            self.collect()
        except Exception:  # Docker hiccup: the next pass tries again
            self.log.exception("container GC failed")
