"""What the node remembers about a pod between syncs (lost on restart, as the kubelet's).

A pod's lifecycle is the kubelet's pod worker's: syncing, then terminating (its containers
stopping), then terminated (its final status written); it only moves forward. What a hook's
thread learns reaches the pod as a report in its inbox, taken by the pod's own sync: only the
pod's worker writes its state.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from enum import StrEnum

from kubelet_sim.backoff import Backoff
from kubelet_sim.pod.admission import Rejection
from kubelet_sim.pod.status import WaitingReason
from kubelet_sim.podworkers.hooks import POST_START


@dataclass
class StatusFailure:
    """A status write that keeps failing: the error, and when to try again."""

    error: str
    backoff: Backoff = field(default_factory=lambda: Backoff(initial=1.0, cap=300.0))
    attempts: int = 0
    # The clock's monotonic time of the next try; earlier syncs skip the write.
    next_attempt: float = 0.0

    def retry_in(self, now: float) -> float:
        return max(self.next_attempt - now, 0.0)


class PodLifecycle(StrEnum):
    """Which of the kubelet's three syncs the pod gets (pod_workers.go's podSyncStatus)."""

    SYNCING = "syncing"  # SyncPod: bring it to its spec
    TERMINATING = "terminating"  # SyncTerminatingPod: stop everything
    TERMINATED = "terminated"  # SyncTerminatedPod: the final status, the final DELETE


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
    # When this node first synced the pod (the clock's monotonic time): the start of its start
    # duration (set by the syncer, whose clock it is).
    first_seen: float = 0.0
    start_observed: bool = False
    # Why each container is not running after the last sync (the kubelet's reasonCache).
    waiting: dict[str, WaitingReason] = field(default_factory=dict)
    # Termination messages read once per exited container id.
    messages: dict[str, str] = field(default_factory=dict)
    admitted: bool = False
    lifecycle: PodLifecycle = PodLifecycle.SYNCING
    # Why the node ended the pod (DeadlineExceeded), told in every status from then on.
    evicted: WaitingReason | None = None
    inbox: Inbox = field(default_factory=Inbox)
    # Steps already in the pod's journal (`kubelet-sim trace`), each written once.
    journaled: set[str] = field(default_factory=set)
    rejection: Rejection | None = None
    # Container ids a Killing event was recorded for, so repeats of a sync don't repeat it.
    killing: set[str] = field(default_factory=set)
    # Containers killed because their definition changed: started again once they stopped.
    replacing: set[str] = field(default_factory=set)
    # Containers killed to be started again (a probe, a changed definition), by name, with the
    # killed attempt's id: until the restart is tried, the kill's SyncPod has not returned in
    # the kubelet's terms, and no status is written (the kill and restart are told together).
    restarting: dict[str, str] = field(default_factory=dict)
    # This SyncPod made a sandbox before its pull: the sandbox's events are owed a sync of
    # their own once the pull's outcome is taken (the PLEG would have held them).
    acted_before_pull: bool = False
    # The latest attempt of each container this node has seen: a container removed behind
    # our back is started again as the next attempt (the kubelet counts its log files).
    last_attempt: dict[str, int] = field(default_factory=dict)
    # The final DELETE was sent; wait for the informer to drop the pod.
    finally_deleted: bool = False
    # Containers whose postStart hook failed (by id, with the hook's message): killed next sync.
    post_start_failed: dict[str, str] = field(default_factory=dict)
    # Containers whose postStart hook runs (by id, with the container's name), and those killed
    # because it failed: the kubelet's start has not returned, so while they run their status
    # says waiting (ContainerCreating) and no other container of the pod starts.
    post_start_running: dict[str, str] = field(default_factory=dict)
    post_start_killed: set[str] = field(default_factory=set)
    # The pod is being killed (its app containers are done): until its sandbox has stopped,
    # no container is started again.
    killing_pod: bool = False
    # Stopping the pod's containers began (the clock's monotonic time): sidecars wait their
    # turn (the app containers, then later sidecars, stop first) at most the grace period from
    # here.
    stop_began: float | None = None
    # Sidecars whose preStop hook still runs, and those sent their stop signal in their turn.
    pre_stop_running: set[str] = field(default_factory=set)
    signalled_in_turn: set[str] = field(default_factory=set)
    # The last status write failed; retried with backoff, said once per distinct error.
    status_failure: StatusFailure | None = None

    def take_reports(self) -> None:
        """Apply what hook threads reported since the last sync (on the pod's worker)."""
        for report in self.inbox.take():
            if report.which == POST_START:
                self.post_start_running.pop(report.container_id, None)
                if report.error is not None:
                    self.post_start_failed[report.container_id] = report.error
            else:
                self.pre_stop_running.discard(report.container_id)

    @property
    def status_unsent(self) -> bool:
        return self.status_failure is not None
