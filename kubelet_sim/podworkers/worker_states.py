"""Where a pod is in its life on this node: the pod worker's states, each with its own data.

The kubelet's pod worker (pod_workers.go's podSyncStatus) runs one of three syncs for a pod:
SyncPod while it should run, SyncTerminatingPod while its containers stop, SyncTerminatedPod
once they have. Here each is a state object carrying what only it needs; one more, `Deleted`,
says the final DELETE was sent. `PodState` (state.py) holds the current one and moves it, only
forward, through its named transitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from kubelet_sim.pod.status import WaitingReason


@dataclass
class PodStop:
    """The pod's containers being stopped together (killPod, from SyncPod or
    SyncTerminatingPod), from the first sync that found one running until none runs."""

    # When the stop began (the clock's monotonic time): sidecars wait their turn (the app
    # containers, then later sidecars, stop first) at most the grace period from here.
    began: float
    # Sidecars whose preStop hook still runs, and those sent their stop signal in their turn.
    pre_stop_running: set[str] = field(default_factory=set)
    signalled_in_turn: set[str] = field(default_factory=set)
    # SyncPod's killPod (its app containers are done), not a sandbox's replacement: until the
    # sandbox has stopped too, no container is started again.
    kills_pod: bool = False


@dataclass
class Syncing:
    """SyncPod: bring the pod to its spec. What one SyncPod leaves for the next."""

    stop: PodStop | None = None
    # Containers killed to be started again (a probe, a changed definition), by name, with the
    # killed attempt's id: until the restart is tried, the kill's SyncPod has not returned in
    # the kubelet's terms, and no status is written (the kill and restart are told together).
    restarting: dict[str, str] = field(default_factory=dict)
    # Containers killed because their definition changed: started again once they stopped.
    replacing: set[str] = field(default_factory=set)
    # This SyncPod made a sandbox before its pull: the sandbox's events are owed a sync of
    # their own once the pull's outcome is taken (the PLEG would have held them).
    acted_before_pull: bool = False

    @property
    def killing_pod(self) -> bool:
        """The pod is being killed (restartPolicy says it is done): nothing starts."""
        return self.stop is not None and self.stop.kills_pod

    def take_acted_before_pull(self) -> bool:
        acted, self.acted_before_pull = self.acted_before_pull, False
        return acted


@dataclass
class Terminating:
    """SyncTerminatingPod: stop everything; a stop SyncPod began goes on here."""

    stop: PodStop | None = None
    # Why the node ended the pod (DeadlineExceeded), told in every status from then on.
    reason: WaitingReason | None = None


@dataclass
class Terminated:
    """SyncTerminatedPod: the terminal status, written again until it is, then for a deleted
    pod the final DELETE. A pod rejected at admission comes here at once: it never ran."""

    # Why the node ended the pod (DeadlineExceeded, or its rejection), told in its status.
    reason: WaitingReason | None = None
    rejected: bool = False  # its status is its rejection (reason), and it never finished


@dataclass(frozen=True)
class Deleted:
    """The final DELETE was sent; the pod waits for the informer to drop it."""


Lifecycle = Syncing | Terminating | Terminated | Deleted


class LifecycleError(RuntimeError):
    """A transition from a state it does not leave (the lifecycle only moves forward)."""


class PostStart(Enum):
    """A container whose start has not returned because of its postStart hook."""

    RUNNING = "running"  # the hook runs: the pod's other containers wait to start
    FAILED = "failed"  # the hook failed: the next SyncPod kills the container
    KILLED = "killed"  # killed for it (killContainer inside startContainer), still stopping


@dataclass
class PostStarts:
    """Each container's postStart hook in flight, by container id. While one is, the
    container's status says waiting (ContainerCreating) whatever the pod's state: a pod that
    terminates meanwhile still tells it so."""

    _of: dict[str, PostStart] = field(default_factory=dict)

    def began(self, container_id: str) -> None:
        self._of[container_id] = PostStart.RUNNING

    def ended(self, container_id: str, error: str | None) -> None:
        """The hook's thread reported (on the pod's worker, from its inbox)."""
        if error is not None:
            self._of[container_id] = PostStart.FAILED
        elif self._of.get(container_id) is PostStart.RUNNING:
            del self._of[container_id]

    def abandoned(self, container_id: str) -> None:
        """The hook never ran (shutting down): the start returned."""
        if self._of.get(container_id) is PostStart.RUNNING:
            del self._of[container_id]

    @property
    def any_running(self) -> bool:
        return PostStart.RUNNING in self._of.values()

    def take_failed(self) -> list[str]:
        """The containers whose hook failed, forgotten here (the caller kills them)."""
        failed = [cid for cid, stage in self._of.items() if stage is PostStart.FAILED]
        for cid in failed:
            del self._of[cid]
        return failed

    def killed(self, container_id: str) -> None:
        self._of[container_id] = PostStart.KILLED

    def starting(self, running: set[str]) -> frozenset[str]:
        """Of these running containers, those whose start has not returned; those killed for
        their hook and no longer running are forgotten."""
        for cid in [c for c, s in self._of.items() if s is PostStart.KILLED and c not in running]:
            del self._of[cid]
        return frozenset(self._of.keys() & running)
