"""The node's warm sandbox pool: started, network-ready sandboxes, so that a pod's critical
path is only its own containers.

A pod that may use one (pod/sandbox_pool.pool_refusal) claims the oldest. By default the pool
holds as many as the node started such pods lately (pod/sandbox_pool.pool_target): none on a
node that starts none, so that an idle node, or a thousand idle nodes in one process, hold no
pause container and no thread for it. A thread of its own, under the node's Supervisor and
only while the pool holds or wants a sandbox, makes them one at a time and removes those no
longer wanted. Unclaimed sandboxes are no pod's (the runtime reports none for them), so
nothing counts them as pods; they are removed when the agent stops, and adopted (or removed)
by the next start after a crash.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import KW_ONLY, InitVar, dataclass, field

from kubelet_sim import cri
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.backoff import Backoff
from kubelet_sim.loops.clock import SYSTEM_CLOCK, Clock
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.pod.sandbox_pool import RECENT_SECONDS, adoption, pool_target
from kubelet_sim.podworkers.ports import RuntimeService

RECHECK_SECONDS = 5.0  # how often a pool that holds or wants sandboxes looks again
# A refill waits this long after the last claim: making a sandbox while the claiming pod's
# containers are created and started slowed them down (Docker does much of both one at a
# time), and took back most of what the claim had saved (0.41 s against 0.22 s a pod).
REFILL_AFTER_CLAIM = 0.5


@dataclass(eq=False)
class SandboxPool:
    """`size`: a fixed number kept ready (0: none, only what an earlier run left is removed);
    None: sized to the recent starts (the default)."""

    runtime: RuntimeService
    _: KW_ONLY
    size: int | None
    image: str
    pods_in_use: Callable[[], int]
    max_pods: int
    supervisor: InitVar[Supervisor]
    backoff: Backoff = field(default_factory=lambda: Backoff(initial=1.0, cap=30.0))
    clock: Clock = SYSTEM_CLOCK

    def __post_init__(self, supervisor: Supervisor) -> None:
        self.log = get_logger("kubelet_sim.podworkers.pool", node=self.runtime.node_name)
        self._ready: deque[str] = deque()  # ids, oldest first: the claim order
        self._failed: list[str] = []  # claims that failed: removed on the pool's thread
        self._starts: deque[float] = deque()  # clock.monotonic() of recent claims, oldest first
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._adopted = False
        self._last_claim = float("-inf")  # time.monotonic() of the last claim
        self._loop = supervisor.on_demand(
            f"sandbox-pool-{self.runtime.node_name}", self._run, self._stopping
        )

    @property
    def enabled(self) -> bool:
        """Whether pods may claim from it (not with a fixed size of 0)."""
        return self.size != 0

    def start(self) -> None:
        """Adopt what an earlier run left (on the pool's thread), then keep the pool sized."""
        self._loop.start()
        self.wake()

    def stop(self, timeout: float) -> None:
        """Stop making sandboxes; the pool's thread removes the unclaimed ones as it ends."""
        self._stopping.set()
        self._wake.set()
        self._loop.stop(timeout)

    def wake(self) -> None:
        """Look at the pool's size again now (a claim, a start, a test's moved clock)."""
        self._wake.set()
        self._loop.wake()

    def running(self) -> bool:
        """Whether the pool's thread is alive: after a stop, until a sandbox it was making
        when the node's stop deadline passed is made and removed."""
        return self._loop.running() > 0

    def ready(self) -> list[str]:
        with self._lock:
            return list(self._ready)

    def target(self) -> int:
        """How many sandboxes the pool wants now (pod/sandbox_pool.pool_target)."""
        with self._lock:
            horizon = self.clock.monotonic() - RECENT_SECONDS
            while self._starts and self._starts[0] < horizon:
                self._starts.popleft()
            recent = len(self._starts)
        return pool_target(self.size, recent, self.pods_in_use(), self.max_pods)

    def claim(self, cfg: cri.SandboxConfig) -> cri.ObservedContainer | None:
        """The oldest pool sandbox, made the pod's; None if the pool is empty or the claim
        failed (the caller makes a sandbox then). Every call counts as a start that a pooled
        sandbox would have served. A failed one is removed off this path."""
        with self._lock:
            sandbox_id = self._ready.popleft() if self._ready else None
            self._last_claim = time.monotonic()
            self._starts.append(self.clock.monotonic())
        self.wake()  # refill, or remove the one that failed
        if sandbox_id is None:
            return None
        try:
            return self.runtime.claim_sandbox(sandbox_id, cfg)
        except cri.ContainerStartError as exc:
            self.log.warning("pool sandbox not claimed", id=sandbox_id[:12], error=str(exc))
            with self._lock:
                self._failed.append(sandbox_id)
            self.wake()
            return None
        finally:
            with self._lock:  # the pod's containers start from here: the refill waits on this
                self._last_claim = time.monotonic()

    # -- the pool's thread (on demand: it ends when the pool holds and wants none) -----------

    def _run(self) -> None:
        if not self._adopted:
            self._adopt()
            self._adopted = True
        while not self._stopping.is_set():
            self._wake.clear()
            self._remove_failed()
            with self._lock:
                pooled = len(self._ready)
            wanted = self.target()
            if pooled > wanted:
                self._trim(pooled - wanted)
                continue
            if pooled < wanted:
                with self._lock:
                    quiet = time.monotonic() - self._last_claim
                if quiet < REFILL_AFTER_CLAIM:  # the claiming pod's containers go first
                    self._stopping.wait(REFILL_AFTER_CLAIM - quiet)
                    continue
                if self._make_one():
                    self.backoff.reset()
                    continue
                self._stopping.wait(self.backoff.next_delay())
                continue
            if pooled == 0 and wanted == 0:
                return  # nothing held, nothing wanted: the thread may end (a claim wakes it)
            self._wake.wait(RECHECK_SECONDS)
        self._remove_all()

    def _adopt(self) -> None:
        keep, remove = adoption(self.runtime.pool_sandboxes(), self.size or 0)
        for stale in remove:
            self._remove(stale.id)
        with self._lock:
            self._ready.extend(s.id for s in keep)
        if keep or remove:
            self.log.info("pool adopted", kept=len(keep), removed=len(remove))

    def _make_one(self) -> bool:
        try:
            sandbox_id = self.runtime.run_pool_sandbox(self.image)
        except Exception as exc:  # any runtime failure: retried with backoff
            self.log.warning("pool sandbox not made", error=str(exc)[:300])
            return False
        with self._lock:
            self._ready.append(sandbox_id)
        self.log.debug("pool sandbox ready", id=sandbox_id[:12])
        return True

    def _trim(self, surplus: int) -> None:
        """Remove the newest `surplus` sandboxes: no longer wanted (the node went quiet)."""
        with self._lock:
            extra = [self._ready.pop() for _ in range(min(surplus, len(self._ready)))]
        for sandbox_id in extra:
            self._remove(sandbox_id)
        self.log.debug("pool trimmed", removed=len(extra))

    def _remove_failed(self) -> None:
        with self._lock:
            failed, self._failed = self._failed, []
        for sandbox_id in failed:
            self._remove(sandbox_id)

    def _remove_all(self) -> None:
        with self._lock:
            left = [*self._ready, *self._failed]
            self._ready.clear()
            self._failed = []
        for sandbox_id in left:
            self._remove(sandbox_id)
        if left:
            self.log.info("pool removed", sandboxes=len(left))

    def _remove(self, sandbox_id: str) -> None:
        try:
            self.runtime.remove_container(sandbox_id)
        except Exception as exc:  # left for the next start's adoption
            self.log.warning("pool sandbox not removed", id=sandbox_id[:12], error=str(exc))
