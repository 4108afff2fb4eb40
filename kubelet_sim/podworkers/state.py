"""What the node remembers about a pod between syncs (lost on restart, as the kubelet's)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kubelet_sim.backoff import Backoff
from kubelet_sim.pod.admission import Rejection
from kubelet_sim.pod.status import WaitingReason


@dataclass
class StatusFailure:
    """A status write that keeps failing: the error, and when to try again."""

    error: str
    backoff: Backoff = field(default_factory=lambda: Backoff(initial=1.0, cap=300.0))
    attempts: int = 0
    next_attempt: float = (
        0.0  # the clock's monotonic time of the next try; earlier syncs skip the write
    )

    def retry_in(self, now: float) -> float:
        return max(self.next_attempt - now, 0.0)


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
    # Steps already in the pod's journal (`kubelet-sim trace`), each written once.
    journaled: set[str] = field(default_factory=set)
    rejection: Rejection | None = None
    # Container ids a Killing event was recorded for, so repeats of a sync don't repeat it.
    killing: set[str] = field(default_factory=set)
    deadline_reported: bool = False
    # Containers killed because their definition changed: started again once they stopped.
    replacing: set[str] = field(default_factory=set)
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

    @property
    def status_unsent(self) -> bool:
        return self.status_failure is not None
