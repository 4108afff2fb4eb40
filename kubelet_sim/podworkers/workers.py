"""Pod workers: pod uids in a de-duplicating queue, each synced by one thread at a time.

As the kubelet's pod_workers.go: one sync per uid at a time, many pods in parallel, and a
change that arrives during a sync is not lost (the uid is queued again when it finishes).
The workers are threads on demand: one more for each uid made ready while none is free, up to
`workers`, each ending a few seconds after the queue ran dry, so an idle node holds none.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import KW_ONLY, InitVar, dataclass

from kubelet_sim.formats.histogram import WORKER_BUCKETS, Histogram
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.clock import SYSTEM_CLOCK, Clock
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.loops.workqueue import WorkQueue
from kubelet_sim.podworkers.ports import Wake
from kubelet_sim.podworkers.sync import PodSyncer
from kubelet_sim.podworkers.waits import observe_after

RESYNC_SECONDS = 60.0  # the kubelet's syncFrequency


def waker(queue: WorkQueue[str], after: Callable[[str], float] | None = None) -> Wake:
    """What brings a pod back to its worker (`after(uid)` seconds from now): made before the
    syncer (which is given it), so that nothing is wired after construction."""

    def wake(uid: str) -> None:
        if uid:
            delay = after(uid) if after is not None else 0.0
            if delay > 0:
                queue.add_after(uid, delay)
            else:
                queue.add(uid)

    return wake


@dataclass(eq=False)
class PodWorkers:
    """`queue` is the one the syncer's `wake` feeds (see `waker`)."""

    syncer: PodSyncer
    queue: WorkQueue[str]
    workers: int = 8
    resync: float = RESYNC_SECONDS
    _: KW_ONLY
    supervisor: InitVar[Supervisor]
    clock: Clock = SYSTEM_CLOCK

    def __post_init__(self, supervisor: Supervisor) -> None:
        self.enqueue = waker(self.queue)
        self.syncs = 0
        self.duration = Histogram(WORKER_BUCKETS)  # kubelet_pod_worker_duration_seconds
        self.started = threading.Event()
        self._ended: dict[str, float] = {}  # uid → the clock's monotonic time its sync ended
        self._halt = threading.Event()
        self._workers = supervisor.on_demand(
            "pod-worker", self._work, self._halt, limit=self.workers
        )
        self.queue.serve(self._workers.wake)
        self.log = get_logger("kubelet_sim.podworkers", node=self.syncer.settings.node_name)

    def start(self) -> None:
        self.syncer.start()
        self._workers.start()  # a thread for each uid queued before, up to `workers`
        self.started.set()

    def enqueue_gone(self, uid: str) -> None:
        """A pod gone from the API: removing what it left waits behind every pod with work
        before its final DELETE (the kubelet removes them off its pod workers, too)."""
        self.queue.add_idle(uid)

    def stop(self, timeout: float = 5.0) -> None:
        """Waits `timeout` in all for the workers; one in a Docker call may outlive it."""
        self.queue.shut_down()
        self._workers.stop(timeout)
        self.syncer.shutdown()

    def threads(self) -> int:
        """Worker threads alive now (none on an idle node)."""
        return self._workers.running()

    def _work(self) -> None:
        """Sync uids until none is ready (the thread lingers, then ends)."""
        for uid in self.queue.ready():
            too_soon = self._too_soon(uid)
            if too_soon > 0:  # its next observation is not in yet: it comes back then
                self.queue.done(uid)
                self.queue.add_after(uid, too_soon)
                continue
            try:
                delay = self._sync(uid)
                # Booked before the uid is let go: a wake that came during the sync hands it
                # to another worker at `done`, and what that worker books must stand.
                self._ended[uid] = self.clock.monotonic()
                if delay is not None:
                    self.queue.add_after(uid, delay)
                else:  # the pod is gone and cleaned up: no resync of it is left waiting
                    self.queue.cancel_delayed(uid)
                    if self.syncer.pods.get(uid) is None:
                        self._ended.pop(uid, None)
            finally:
                self.queue.done(uid)

    def _too_soon(self, uid: str) -> float:
        """How long before the pod may sync again (waits.OBSERVE_AFTER); 0: now."""
        ended = self._ended.get(uid)
        if ended is None:
            return 0.0
        wait = observe_after(self.syncer.runs(uid))
        return max(0.0, ended + wait - self.clock.monotonic())

    def _sync(self, uid: str) -> float | None:
        self.syncs += 1
        began = self.clock.monotonic()
        try:
            delay = self.syncer.sync(uid)
        except Exception:
            self.log.exception("pod sync failed", uid=uid)
            return 10.0
        finally:
            self.duration.observe(self.clock.monotonic() - began)
        if delay is None and self.syncer.pods.get(uid) is not None:
            return self.resync
        return delay
