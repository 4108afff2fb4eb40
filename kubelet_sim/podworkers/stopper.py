"""Stopping a pod's containers: Killing events, the stop signal, SIGKILL when the grace ends.

No thread waits out a grace period. A stop sends the signal and books a SIGKILL for the end of
the grace period; one timer thread sends the SIGKILLs that are due. Docker's `die` event
brings the pod back to its worker, so a pod worker never blocks behind a container that ignores
SIGTERM, and a later, shorter grace period (a second delete) moves the SIGKILL earlier, as the
kubelet's killContainer does when its grace period is cut.

The timer serves every pod of the node, so no pod's number may stop it: grace periods arrive
bounded (PodView, kubelet_sim.formats.durations), the timer never sleeps longer than
MAX_TIMER_WAIT at once, and it runs under the node's supervisor, restarted if it ever fails.
It is a thread on demand: it lives while a SIGKILL is booked (and a few seconds more).
"""

from __future__ import annotations

import contextlib
import heapq
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import KW_ONLY, InitVar, dataclass

from kubelet_sim import cri
from kubelet_sim.formats.durations import timer_wait
from kubelet_sim.kube.events import NORMAL
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.clock import SYSTEM_CLOCK, Clock
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.pod.spec import ContainerView, PodView
from kubelet_sim.podworkers.event_refs import container_spec, event_ref
from kubelet_sim.podworkers.hooks import PRE_STOP, HookRunner, hook_of
from kubelet_sim.podworkers.ports import ContainerCache, EventSink, RuntimeService, Wake
from kubelet_sim.podworkers.state import HookEnded, PodState, PodStop

MIN_GRACE = 2.0  # killContainer's minimumGracePeriodInSeconds
RECHECK_AFTER_KILL = 1.0  # a safety net in case Docker's die event is missed


@dataclass(eq=False)
class ContainerStopper:
    """`wake`: sync the pod again soon (a sidecar's preStop hook ended)."""

    runtime: RuntimeService
    watcher: ContainerCache
    events: EventSink
    hooks: HookRunner | None = None
    _: KW_ONLY
    supervisor: InitVar[Supervisor]
    wake: Wake = lambda _uid: None
    clock: Clock = SYSTEM_CLOCK
    # Held while a sandbox is stopped or a container removed (network and mounts torn down):
    # the process's slot, as for a sandbox made (ContainerStarter's `pace`).
    pace: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext

    def __post_init__(self, supervisor: Supervisor) -> None:
        self._kill_at: dict[str, float] = {}  # container id → clock.monotonic() of its SIGKILL
        self._heap: list[tuple[float, str]] = []
        self._cond = threading.Condition()
        self._closed = False
        self._stopped = threading.Event()  # the timer's supervisor: stop, do not restart
        name = f"stop-timer {self.runtime.node_name}"
        self._timer = supervisor.on_demand(name, self._run, self._stopped)
        self._timer.start()
        self.log = get_logger("kubelet_sim.podworkers", node=self.runtime.node_name)

    def stop_all(
        self,
        view: PodView,
        observed: Sequence[cri.ObservedContainer],
        state: PodState,
        grace: float,
    ) -> float | None:
        """Stop the app containers, then the sandbox; None once nothing runs, else when to look
        again (Docker's die event usually comes first)."""
        running = [c for c in observed if c.state is cri.ContainerState.RUNNING]
        apps = [c for c in running if not c.is_sandbox]
        now = self.clock.monotonic()
        if not apps:
            state.end_stop()
            for sandbox in (c for c in running if c.is_sandbox):
                with self.pace():
                    self.runtime.stop_container(sandbox.id, 0)  # pause dies at once: no grace
                self.watcher.record(cri.stopped_observation(sandbox, self.clock.now()))
            return None
        stop = state.begin_stop(now)
        turn_ends = stop.began + grace
        waiting = False
        for c in apps:
            spec = container_spec(view, c.name)
            if spec is not None and spec.is_sidecar and grace > 0:
                waiting |= self._stop_in_turn(view, spec, c, apps, state, stop, grace, turn_ends)
            else:
                self.stop(view, c, state, grace, f"Stopping container {c.name}")
        recheck = self.recheck_in([c.id for c in apps])
        return min(recheck, max(turn_ends - now, 0.0) + 0.05) if waiting else recheck

    def _stop_in_turn(
        self,
        view: PodView,
        spec: ContainerView,
        container: cri.ObservedContainer,
        running: Sequence[cri.ObservedContainer],
        state: PodState,
        stop: PodStop,
        grace: float,
        turn_ends: float,
    ) -> bool:
        """A sidecar (the kubelet's terminationOrdering): its Killing event and preStop hook
        come with everyone else's, but its stop signal waits until the app containers and the
        sidecars declared after it have stopped, or the grace period is spent; what is left of
        it (at least 2 s) is its own. True while it waits."""
        cid = container.id
        if cid not in state.killing:
            state.killing.add(cid)
            message = f"Stopping container {container.name}"
            self.events.event(event_ref(view, spec), NORMAL, "Killing", message)
            if self.hooks is not None and hook_of(spec, PRE_STOP) is not None:
                self._pre_stop_only(view, spec, container, state, stop, grace)
        if cid in stop.pre_stop_running:
            return True
        if cid in stop.signalled_in_turn:
            return False
        now = self.clock.monotonic()
        if now < turn_ends and _waits_for(view, spec, {c.name for c in running}):
            return True
        stop.signalled_in_turn.add(cid)
        if self.runtime.signal_stop(cid):
            with self._cond:
                self._book(cid, now + max(turn_ends - now, MIN_GRACE))
        else:
            self.refresh(cid)
        return False

    def _pre_stop_only(
        self,
        view: PodView,
        spec: ContainerView,
        container: cri.ObservedContainer,
        state: PodState,
        stop: PodStop,
        grace: float,
    ) -> None:
        """A sidecar's preStop hook; its end brings the pod back to stop it in its turn."""
        hooks = self.hooks
        assert hooks is not None
        stop.pre_stop_running.add(container.id)
        with self._cond:
            self._book(container.id, self.clock.monotonic() + grace + MIN_GRACE)
        observed = self.watcher.pod_containers(view.uid)

        def run() -> None:
            try:
                hooks.run(view, spec, container.id, PRE_STOP, observed, grace)
            finally:  # reported to the pod's inbox: its own sync takes the report
                state.inbox.post(HookEnded(container.id, PRE_STOP))
                self.wake(view.uid)

        hooks.submit(run, view.uid, PRE_STOP)

    def stop(
        self,
        view: PodView,
        container: cri.ObservedContainer,
        state: PodState,
        grace: float,
        message: str,
    ) -> None:
        """Begin stopping (or hurry a stop in flight); returns at once."""
        if container.id not in state.killing:
            state.killing.add(container.id)
            spec = container_spec(view, container.name)
            self.events.event(event_ref(view, spec), NORMAL, "Killing", message)
            if grace > 0 and self.hooks is not None and hook_of(spec, PRE_STOP) is not None:
                assert spec is not None
                self._pre_stop(view, spec, container, grace)
                return
        self._begin(container.id, max(grace, MIN_GRACE) if grace else 0.0)

    def _pre_stop(
        self, view: PodView, spec: ContainerView, container: cri.ObservedContainer, grace: float
    ) -> None:
        """killContainer's order: the preStop hook within the grace period, then SIGTERM with
        what is left of it (at least 2 s), then SIGKILL. The SIGKILL is booked now, at the
        latest it can come, so a hook that hangs still ends in one (or a shorter grace given
        later hurries it)."""
        hooks = self.hooks
        assert hooks is not None
        began = self.clock.monotonic()
        with self._cond:
            self._book(container.id, began + grace + MIN_GRACE)
        observed = self.watcher.pod_containers(view.uid)

        def run() -> None:
            try:
                hooks.run(view, spec, container.id, PRE_STOP, observed, grace)
            finally:  # a hook that failed in any way still ends in the stop signal
                left = max(grace - (self.clock.monotonic() - began), MIN_GRACE)
                if self.runtime.signal_stop(container.id):
                    with self._cond:
                        self._book(container.id, self.clock.monotonic() + left)
                else:
                    self.refresh(container.id)

        hooks.submit(run, view.uid, PRE_STOP)

    def recheck_in(self, container_ids: Sequence[str]) -> float:
        """Seconds until the last of these containers has had its SIGKILL, plus a margin."""
        now = self.clock.monotonic()
        with self._cond:
            due = [self._kill_at[i] - now for i in container_ids if i in self._kill_at]
        return max([0.0, *due]) + RECHECK_AFTER_KILL

    def stopping(self) -> int:
        """Containers signalled whose SIGKILL is still booked."""
        with self._cond:
            return len(self._kill_at)

    def remove_all(self, observed: Sequence[cri.ObservedContainer]) -> bool:
        """Remove containers of a pod that is gone; running ones get a short stop first.
        True once all are removed; else the caller comes back after their die events."""
        removed = True
        for container in observed:
            if container.state is cri.ContainerState.RUNNING:
                self._begin(container.id, MIN_GRACE)
                removed = False
            else:
                with self.pace():
                    self.runtime.remove_container(container.id)
        return removed

    def refresh(self, container_id: str) -> None:
        """Put Docker's own view of a container we just changed into the watcher at once."""
        observed = self.runtime.inspect(container_id)
        if observed is not None:
            self.watcher.record(observed)

    def shutdown(self) -> None:
        """Forget booked SIGKILLs: running containers outlive the agent, as the kubelet's do."""
        with self._cond:
            self._closed = True
            self._stopped.set()
            self._cond.notify_all()
        self._timer.stop()

    # -- the SIGKILL timer -----------------------------------------------------------------

    def _begin(self, container_id: str, grace: float) -> None:
        kill_at = self.clock.monotonic() + grace
        with self._cond:
            booked = self._kill_at.get(container_id)
            if booked is not None and booked <= kill_at:
                return  # already stopping, as soon or sooner
        if booked is None and grace > 0 and not self.runtime.signal_stop(container_id):
            self.refresh(container_id)  # it had stopped already: let the watcher know
            return
        with self._cond:
            self._book(container_id, kill_at)

    def _book(self, container_id: str, kill_at: float) -> None:
        """Book (or move earlier) a container's SIGKILL; the caller holds the condition."""
        booked = self._kill_at.get(container_id)
        if booked is not None and booked <= kill_at:
            return
        self._kill_at[container_id] = kill_at
        heapq.heappush(self._heap, (kill_at, container_id))
        self._cond.notify()
        self._timer.wake()

    def _run(self) -> None:
        while True:
            with self._cond:
                due = self._next_due()
                if due is None:
                    return
            self._kill(due)

    def kill_due(self) -> int:
        """Send now every SIGKILL whose time has come by the clock; how many were due. The
        timer thread does this as real time passes; with a clock moved by hand (tests), the
        one who moves it calls this."""
        due: list[str] = []
        with self._cond:
            while (container_id := self._pop_due()) is not None:
                due.append(container_id)
        for container_id in due:
            self._kill(container_id)
        return len(due)

    def _kill(self, container_id: str) -> None:
        try:
            if self._still_running(container_id):
                self.runtime.kill_container(container_id)
                self.refresh(container_id)
        except Exception:  # Docker hiccup: the pod's next sync stops it again
            self.log.exception("SIGKILL failed", container=container_id[:12])

    def _next_due(self) -> str | None:
        """Wait (holding the condition) for the next SIGKILL that is due; None when closed
        or when none is booked (the timer's thread ends)."""
        while not self._closed:
            if not self._heap:
                return None
            due = self._pop_due()
            if due is not None:
                return due
            if self._heap:
                wait = self._heap[0][0] - self.clock.monotonic()
                if wait > 0:
                    self._cond.wait(timer_wait(wait))
        return None

    def _pop_due(self) -> str | None:
        """The next container whose SIGKILL is due now, taken off the books (the caller holds
        the condition); None if none is due yet."""
        while self._heap:
            kill_at, container_id = self._heap[0]
            if kill_at > self.clock.monotonic():
                return None
            heapq.heappop(self._heap)
            if self._kill_at.get(container_id) == kill_at:  # not moved earlier since
                del self._kill_at[container_id]
                return container_id
        return None

    def _still_running(self, container_id: str) -> bool:
        seen = self.watcher.get(container_id)
        return seen is None or seen.state is cri.ContainerState.RUNNING


def _waits_for(view: PodView, sidecar: ContainerView, running: set[str]) -> bool:
    """Whether an app container, or a sidecar declared after this one, still runs."""
    if any(c.name in running for c in view.containers):
        return True
    later = view.sidecars[view.sidecars.index(sidecar) + 1 :]
    return any(c.name in running for c in later)
