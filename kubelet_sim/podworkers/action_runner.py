"""A SyncPod's actions carried out on the pod's containers: the pod killed, a new sandbox,
the containers a probe or a changed definition condemns killed, and the starts in order (init,
app, ephemeral), each returning when to look at the pod again.

What to do is decided before (pod/actions.py, in the sync: `sync.py`); here only the stopper
and the starter act.
"""

from __future__ import annotations

from collections.abc import Sequence

from kubelet_sim import cri
from kubelet_sim.pod.actions import PodActions
from kubelet_sim.pod.attempts import latest_attempt
from kubelet_sim.pod.spec import ContainerView, PodView
from kubelet_sim.podworkers.starter import ERROR_RETRY, ContainerStarter
from kubelet_sim.podworkers.state import PodState, Syncing
from kubelet_sim.podworkers.stopper import ContainerStopper
from kubelet_sim.volumes import VolumeSetup


class ActionRunner:
    """Acts for the syncs of one node, one pod at a time (its caller's guarantee)."""

    def __init__(self, stopper: ContainerStopper, starter: ContainerStarter) -> None:
        self.stopper = stopper
        self.starter = starter

    def kill_pod(
        self,
        view: PodView,
        state: PodState,
        observed: Sequence[cri.ObservedContainer],
        deadline: float | None,
    ) -> float | None:
        """killPodWithSyncResult, which the kubelet finishes in one sync: nothing starts (a
        sidecar that stopped is not restarted) until the sandbox is down too."""
        stopping = self.stopper.stop_all(view, observed, state, grace=view.termination_grace_period)
        if (stop := state.stop) is not None:  # goes on until the sandbox is down
            stop.kills_pod = True
        return soonest(deadline, stopping)

    def new_sandbox(
        self,
        view: PodView,
        state: PodState,
        observed: Sequence[cri.ObservedContainer],
        actions: PodActions,
        deadline: float | None,
    ) -> tuple[cri.ObservedContainer | None, float | None]:
        """The old sandbox's containers stopped first, then a new sandbox; without one, when
        to come back."""
        stopping = self.stopper.stop_all(view, observed, state, grace=view.termination_grace_period)
        if stopping is not None:
            return None, soonest(deadline, stopping)
        sandbox = self.starter.create_sandbox(view, actions.sandbox_attempt)
        if sandbox is None:
            return None, ERROR_RETRY
        return sandbox, None

    def kill_containers(
        self, view: PodView, state: PodState, syncing: Syncing, actions: PodActions
    ) -> list[float | None]:
        """The containers a probe or a changed definition condemns; when to look again."""
        retry: list[float | None] = []
        for victim, message in actions.containers_to_kill:
            grace = view.termination_grace_period
            if victim.id in actions.probe_kills:
                probe_grace = actions.probe_kills[victim.id]
                grace = grace if probe_grace is None else probe_grace
                if view.restart_policy != "Never":  # computePodActions restarts it
                    syncing.restarting[victim.name] = victim.id
            else:  # a changed definition: started again whatever the policy
                syncing.replacing.add(victim.name)
                syncing.restarting[victim.name] = victim.id
            self.stopper.stop(view, victim, state, grace, message)
            retry.append(self.stopper.recheck_in([victim.id]))
        return retry

    def start_containers(
        self,
        view: PodView,
        observed: Sequence[cri.ObservedContainer],
        state: PodState,
        syncing: Syncing,
        actions: PodActions,
        sandbox: cri.ObservedContainer,
        volumes: VolumeSetup,
    ) -> list[float | None]:
        """Init, app, then ephemeral containers, one after the other until a postStart hook
        holds the rest; each one's retry delay."""
        retry: list[float | None] = []
        for container in self._to_start(view, observed, syncing, actions):
            killed = syncing.restarting.get(container.name)
            wait = self.starter.start(view, container, sandbox, state, volumes, killed=killed)
            if wait is None:
                syncing.replacing.discard(container.name)
            retry.append(wait)
            if state.post_starts.any_running:  # its postStart runs: the next ones wait
                return retry
        for container in actions.ephemeral_to_start:
            if state.post_starts.any_running:
                break
            target = container.raw.get("targetContainerName")
            running = latest_attempt(observed, target) if target else None
            shares = running.id if running and running.state is cri.ContainerState.RUNNING else ""
            killed = syncing.restarting.get(container.name)
            retry.append(
                self.starter.start(view, container, sandbox, state, volumes, shares, killed=killed)
            )
        return retry

    def kill_failed_post_starts(
        self, view: PodView, observed: Sequence[cri.ObservedContainer], state: PodState
    ) -> None:
        """startContainer: a failed postStart hook kills its container (then the restart
        policy and the crash-loop backoff decide what follows)."""
        for container_id in state.post_starts.take_failed():
            victim = next((c for c in observed if c.id == container_id), None)
            if victim is not None and victim.state is cri.ContainerState.RUNNING:
                state.post_starts.killed(container_id)  # still starting until it stopped
                grace = view.termination_grace_period
                self.stopper.stop(view, victim, state, grace, "FailedPostStartHook")

    def _to_start(
        self,
        view: PodView,
        observed: Sequence[cri.ObservedContainer],
        syncing: Syncing,
        actions: PodActions,
    ) -> list[ContainerView]:
        """The planned starts, plus replacements of changed containers once their old attempt
        has stopped (started whatever the restart policy, as SyncPod does in one go)."""
        running = {
            c.name for c in observed if c.state is cri.ContainerState.RUNNING and not c.is_sandbox
        }
        starts = [*actions.init_to_start, *actions.containers_to_start]
        starts += [
            c
            for c in view.containers
            if c.name in syncing.replacing and c.name not in running and c not in starts
        ]
        return [c for c in starts if c.name not in running]  # a replaced one still stopping


def soonest(*delays: float | None) -> float | None:
    """The nearest of the delays after which something wants the pod back; None: nothing."""
    pending = [d for d in delays if d is not None]
    return min(pending) if pending else None
