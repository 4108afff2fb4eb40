"""What the node remembers about a pod between syncs (lost on restart, as the kubelet's).

A pod's lifecycle is the kubelet's pod worker's (worker_states.py): syncing, then terminating
(its containers stopping), then terminated (its final status written), then deleted (the final
DELETE sent); it only moves forward, through PodState's named transitions. The state exists
from the pod's admission on: a rejected pod is terminated at once. What a hook's thread learns
reaches the pod as a report in its inbox, taken by the pod's own sync: only the pod's worker
writes its state.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TypeVar

from kubelet_sim.pod.admission import Rejection
from kubelet_sim.pod.status import WaitingReason
from kubelet_sim.podworkers.hooks import POST_START
from kubelet_sim.podworkers.worker_states import (
    Deleted,
    Lifecycle,
    LifecycleError,
    PodStop,
    PostStarts,
    Syncing,
    Terminated,
    Terminating,
)

__all__ = [
    "Deleted",
    "HookEnded",
    "Inbox",
    "LifecycleError",
    "PodState",
    "PodStop",
    "Syncing",
    "Terminated",
    "Terminating",
]

S = TypeVar("S", Syncing, Terminating, Terminated)


@dataclass(frozen=True)
class HookEnded:
    """A lifecycle hook's thread is done: its container, which hook, the failure if any."""

    container_id: str
    which: str  # "postStart" or "preStop"
    error: str | None = None


class Inbox:
    """Reports from other threads to the pod's worker; the worker takes them all at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reports: list[HookEnded] = []

    def post(self, report: HookEnded) -> None:
        with self._lock:
            self._reports.append(report)

    def take(self) -> list[HookEnded]:
        with self._lock:
            reports, self._reports = self._reports, []
        return reports


@dataclass
class PodState:
    """A pod's lifecycle state (with the data that is only its own) and what the node keeps
    about the pod whatever that state is."""

    # When this node first synced (and admitted) the pod (the clock's monotonic time): the
    # start of its start duration (set by the syncer, whose clock it is).
    first_seen: float = 0.0
    start_observed: bool = False
    lifecycle: Lifecycle = field(default_factory=Syncing)
    # Why each container is not running after the last sync (the kubelet's reasonCache).
    waiting: dict[str, WaitingReason] = field(default_factory=dict)
    # Termination messages read once per exited container id.
    messages: dict[str, str] = field(default_factory=dict)
    inbox: Inbox = field(default_factory=Inbox)
    # Steps already in the pod's journal (`kubelet-sim trace`), each written once.
    journaled: set[str] = field(default_factory=set)
    # Container ids a Killing event was recorded for, so repeats of a sync don't repeat it.
    killing: set[str] = field(default_factory=set)
    # The latest attempt of each container this node has seen: a container removed behind
    # our back is started again as the next attempt (the kubelet counts its log files).
    last_attempt: dict[str, int] = field(default_factory=dict)
    # Containers whose start waits on their postStart hook (SyncPod starts them, and a pod
    # that terminates meanwhile still tells them as starting).
    post_starts: PostStarts = field(default_factory=PostStarts)

    # -- transitions, each from the one state it leaves ------------------------------------

    def reject(self, rejection: Rejection) -> Terminated:
        """Admission refused the pod: terminated at once, its status its rejection."""
        self._leaving(Syncing)
        reason = WaitingReason(rejection.reason, rejection.message)
        self.lifecycle = terminated = Terminated(reason=reason, rejected=True)
        return terminated

    def begin_terminating(self) -> Terminating:
        """Deleted, terminal in the API or past its deadline: stop everything (a stop SyncPod
        began goes on; what SyncPod kept for its next run is dropped)."""
        syncing = self._leaving(Syncing)
        self.lifecycle = terminating = Terminating(stop=syncing.stop)
        return terminating

    def complete_terminating(self) -> Terminated:
        """Nothing runs any more: the terminal status is next."""
        terminating = self._leaving(Terminating)
        self.lifecycle = terminated = Terminated(reason=terminating.reason)
        return terminated

    def final_delete_sent(self) -> None:
        """The deleted pod is gone from the API: never synced again (only cleaned up)."""
        self._leaving(Terminated)
        self.lifecycle = Deleted()

    def deadline_exceeded(self, reason: WaitingReason) -> bool:
        """activeDeadlineSeconds has passed (the pod terminates): every status from now on
        says so. True the first time."""
        ending = self.lifecycle
        if not isinstance(ending, Terminating | Terminated):
            raise LifecycleError(f"a deadline is told while terminating, not {ending}")
        if ending.reason is not None:
            return False
        ending.reason = reason
        return True

    def _leaving(self, expected: type[S]) -> S:
        current = self.lifecycle
        if not isinstance(current, expected):
            raise LifecycleError(f"not {expected.__name__}: {current}")
        return current

    # -- the stop of the pod's containers --------------------------------------------------

    @property
    def stop(self) -> PodStop | None:
        """The stop under way (SyncPod's or SyncTerminatingPod's killPod), if any."""
        current = self.lifecycle
        return current.stop if isinstance(current, Syncing | Terminating) else None

    def begin_stop(self, now: float) -> PodStop:
        """A stop goes on, or begins now."""
        current = self._stoppable()
        if current.stop is None:
            current.stop = PodStop(began=now)
        return current.stop

    def end_stop(self) -> None:
        """Nothing runs any more: the stop is over."""
        self._stoppable().stop = None

    def _stoppable(self) -> Syncing | Terminating:
        current = self.lifecycle
        if not isinstance(current, Syncing | Terminating):
            raise LifecycleError(f"nothing is stopped once {current}")
        return current

    # -- reading it ------------------------------------------------------------------------

    @property
    def rejected(self) -> bool:
        return isinstance(self.lifecycle, Terminated) and self.lifecycle.rejected

    @property
    def deleted(self) -> bool:
        return isinstance(self.lifecycle, Deleted)

    def take_reports(self) -> None:
        """Apply what hook threads reported since the last sync (on the pod's worker)."""
        for report in self.inbox.take():
            if report.which == POST_START:
                self.post_starts.ended(report.container_id, report.error)
            elif (stop := self.stop) is not None:  # preStop: a stop that ended forgot it
                stop.pre_stop_running.discard(report.container_id)
