"""One pod sync: observe, decide with the pure pod logic, act on Docker, write status.

Like the kubelet's SyncPod / SyncTerminatingPod, but in one place: a pod that is deleted, past
its deadline or terminal is killed and finished; otherwise the next actions are applied
(carried out by `action_runner.py`: starting is `starter.py`, stopping `stopper.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from kubelet_sim import cri
from kubelet_sim.formats.histogram import POD_START_BUCKETS, Histogram
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.events import WARNING
from kubelet_sim.kube.tokens import TokenRequest
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.backoff import Backoff
from kubelet_sim.loops.clock import SYSTEM_CLOCK, Clock
from kubelet_sim.pod.actions import compute_actions
from kubelet_sim.pod.admission import rejected_status
from kubelet_sim.pod.attempts import latest_attempt, latest_sandbox, pod_address
from kubelet_sim.pod.container_config import spec_hash, with_current_hashes
from kubelet_sim.pod.generation import CURRENT, KubeletGeneration
from kubelet_sim.pod.phase import TERMINAL_PHASES, hold_terminal_phase
from kubelet_sim.pod.references import referenced_objects
from kubelet_sim.pod.restart_backoff import KeyedBackoff
from kubelet_sim.pod.spec import PodView
from kubelet_sim.pod.status import StatusInput, WaitingReason, format_time_precise, generate_status
from kubelet_sim.podworkers.action_runner import ActionRunner, soonest
from kubelet_sim.podworkers.admission import PodAdmitter
from kubelet_sim.podworkers.event_refs import container_spec, event_ref, pod_name
from kubelet_sim.podworkers.hooks import HookRunner
from kubelet_sim.podworkers.ports import (
    ContainerCache,
    EventSink,
    ObjectSource,
    PodIndex,
    PodRuntime,
    PodVolumes,
    TokenIssuer,
    object_lookup,
)
from kubelet_sim.podworkers.resizer import PodResizer
from kubelet_sim.podworkers.settings import SyncSettings
from kubelet_sim.podworkers.starter import ERROR_RETRY, ContainerStarter
from kubelet_sim.podworkers.state import (
    PodState,
    Syncing,
    Terminated,
    Terminating,
)
from kubelet_sim.podworkers.status_manager import StatusManager
from kubelet_sim.podworkers.stopper import ContainerStopper
from kubelet_sim.podworkers.waits import NEXT_RELIST
from kubelet_sim.prober.manager import ProbeManager
from kubelet_sim.volumes import VolumeSetup

__all__ = ["PodSyncer", "SyncSettings"]

DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"
# A container observed running that started this recently is looked at again at the start of a
# sync: Docker's events may lag its death, and the kubelet's relist reads the runtime itself.
YOUNG_CONTAINER = 10.0


class PodSyncer:
    """Syncs one pod at a time (the caller guarantees it); safe to use from many workers.

    Every collaborator is given here, once, made by `podworkers/assemble.py`: what it acts on
    or reads through the ports (podworkers/ports.py), and the parts that start, stop, probe
    and admit containers."""

    def __init__(
        self,
        settings: SyncSettings,
        runtime: PodRuntime,
        watcher: ContainerCache,
        status: StatusManager,
        events: EventSink,
        objects: ObjectSource,
        pods: PodIndex,
        volumes: PodVolumes,
        tokens: TokenIssuer,
        *,
        admitter: PodAdmitter,
        hooks: HookRunner,
        stopper: ContainerStopper,
        starter: ContainerStarter,
        prober: ProbeManager,
        resizer: PodResizer,
        runner: ActionRunner,
        clock: Clock = SYSTEM_CLOCK,
        generation: Callable[[], KubeletGeneration] = lambda: CURRENT,
    ) -> None:
        self.settings = settings
        self.generation = generation  # whose status rules: the server's version's kubelet
        self.clock = clock
        self.runtime = runtime
        self.watcher = watcher
        self.status = status
        self.events = events
        self.objects = objects
        self.pods = pods
        self.volumes = volumes
        self.tokens = tokens
        # The pod worker's requeue after a failed sync: 10 s with up to half again of jitter
        # (pod_workers.go: wait.Jitter(backOffPeriod, 0.5)).
        self.error_retry = Backoff(initial=ERROR_RETRY, cap=ERROR_RETRY, factor=1.0, jitter=0.5)
        # The volume manager's retry: 2 s doubling to about 2 minutes per pod.
        self.mount_backoff = KeyedBackoff(initial=2.0, maximum=122.0)
        self.states: dict[str, PodState] = {}
        self.admitter = admitter
        self.hooks = hooks
        self.stopper = stopper
        self.starter = starter
        self.start_duration = Histogram(POD_START_BUCKETS)
        self.prober = prober
        self.resizer = resizer  # in-place resize: the allocation the pod runs at
        self.runner = runner  # carries out what sync_pod decided
        self.log = get_logger("kubelet_sim.podworkers", node=settings.node_name)

    # -- entry point -----------------------------------------------------------------------

    def sync(self, uid: str) -> float | None:
        """Bring one pod closer to its spec; the answer is when to sync it again, if ever."""
        pod = self.pods.get(uid)
        if pod is None:
            return self._cleanup(uid)
        view = PodView.from_api(pod)
        state = self.states.get(uid)
        if state is None:  # a pod's state begins with its admission
            state = self.states[uid] = PodState(first_seen=self.clock.monotonic())
            self._admit(view, state)  # a rejected pod is terminated at once: nothing ran
        if state.deleted:
            return None
        state.take_reports()
        deadline_left = None if state.rejected else self._deadline_left(view)
        if isinstance(state.lifecycle, Syncing) and (
            view.being_deleted or view.api_phase in ("Succeeded", "Failed") or deadline_left == 0
        ):
            state.begin_terminating()  # never back: the kubelet's too
        if deadline_left == 0:
            self._deadline_exceeded(view, state)
        runs = isinstance(state.lifecycle, Syncing) and not state.rejected
        view = self.resizer.resolve(view, syncing=runs)  # the spec at its allocation
        match state.lifecycle:
            case Syncing() as syncing:
                delay = self.sync_pod(pod, view, state, syncing, deadline_left)
            case Terminating() as terminating:
                delay = self.sync_terminating_pod(pod, view, state, terminating)
            case Terminated() as terminated:
                delay = self.sync_terminated_pod(pod, view, state, terminated)
            case _:  # deleted: not synced again
                return None
        return delay

    def runs(self, uid: str) -> bool:
        """Whether the pod is to run (admitted or about to be), not being terminated: only
        such a pod's syncs wait as the kubelet's relist makes them (podworkers/waits.py)."""
        state = self.states.get(uid)
        return state is None or (isinstance(state.lifecycle, Syncing) and not state.rejected)

    def backoffs(self) -> tuple[KeyedBackoff, ...]:
        """Its per-pod and per-container backoffs (mounts, crash loops, pulls): the GC forgets
        their old entries."""
        return (self.mount_backoff, self.starter.crash_backoff, self.starter.puller.backoff)

    def start(self) -> None:
        self.status.start()
        self.prober.start()

    def shutdown(self) -> None:
        self.status.stop()
        self.prober.shutdown()
        self.hooks.shutdown()
        self.stopper.shutdown()
        self.starter.puller.shutdown()

    # -- admission and deadlines ---------------------------------------------------------

    def _admit(self, view: PodView, state: PodState) -> None:
        rejection = self.admitter.decide(view.uid)
        self.journal(
            view.uid,
            "admitted" if rejection is None else "rejected",
            reason=rejection.reason if rejection else None,
        )
        if rejection is not None:
            state.reject(rejection)
            self.events.event(event_ref(view), WARNING, rejection.reason, rejection.event_message)
            self.log.warning("pod rejected", pod=pod_name(view), reason=rejection.reason)

    def _deadline_exceeded(self, view: PodView, state: PodState) -> None:
        """activeDeadlineSeconds has passed: every status from now on says so (once told)."""
        if state.deadline_exceeded(WaitingReason("DeadlineExceeded", DEADLINE_MESSAGE)):
            self.events.event(event_ref(view), WARNING, "DeadlineExceeded", DEADLINE_MESSAGE)

    def _deadline_left(self, view: PodView) -> float | None:
        start = view.status.get("startTime")
        if view.active_deadline_seconds is None or not start:
            return None
        started = datetime.fromisoformat(str(start)).timestamp()
        return max(0.0, started + view.active_deadline_seconds - self.clock.time())

    # -- a running pod ---------------------------------------------------------------------

    def sync_pod(
        self, pod: Json, view: PodView, state: PodState, syncing: Syncing, deadline: float | None
    ) -> float | None:
        """SyncPod: bring a pod that should run closer to its spec.

        As the kubelet's, a sync writes the status of the runtime state it started from (its
        `podStatus`) before it acts, and only then creates, kills and starts: what its actions
        did is told by the next sync, which what they changed wakes (Docker's events, as the
        PLEG's relist). So a container that dies as it starts is never told running, and a
        kill and the restart that follows it are told in one write."""
        refs = referenced_objects(pod)
        if refs and not all(self.objects.is_synced(ref) for ref in refs):
            return None  # the first list's end queues the pod again (ReferencedObjectWatches)
        observed = self._observe(view.uid, state)
        self.resizer.check_in_progress(view, observed)
        if not self.status.has_set(view.uid):
            self._write(pod, view, state, observed)  # the first word: Pending, ContainerCreating
        # The write goes with the reasons the sync before left (the reasonCache). A sync that
        # continues one which has not returned in the kubelet's terms writes nothing first: a
        # pull in flight, or a kill whose restart follows (killContainer blocks its SyncPod).
        reasons = dict(state.waiting)
        images = [c.image for c in (*view.init_containers, *view.containers)]
        restarting = self._restarts_pending(observed, syncing)
        continues_pull = self.starter.puller.pulling(view.uid, images)
        # Nor does one whose killPod goes on (sidecars stopping after the app): the kubelet's
        # killPodWithSyncResult stops the containers and then the sandbox in one SyncPod, so
        # its next status tells both (a sidecar's end with PodReadyToStartContainers False).
        if not continues_pull and not restarting and not syncing.killing_pod:
            phase = self._write(pod, view, state, observed)
            if phase in TERMINAL_PHASES and self.generation().terminal_phase_after_termination:
                # SyncPod returns isTerminal once its status says a terminal phase (written
                # as the API's until the pod is terminated): the pod worker terminates the
                # pod at once (kubelet.go SyncPod, pod_workers.go).
                return self.sync_terminating_pod(pod, view, state, state.begin_terminating())
        sandbox = latest_sandbox(observed)
        address = pod_address(view.host_network, observed, self.settings.node_ip)
        starting = _starting(state, observed)  # not probed until started, as the kubelet's
        self.prober.sync_pod(view, [c for c in observed if c.id not in starting], address)
        hashed = with_current_hashes(view, observed)  # labels of agents before v1.31's hash
        actions = compute_actions(view, hashed, spec_hash, self.prober.results(view.uid))
        retry: list[float | None] = [deadline, self.resizer.act(view, observed, actions)]
        volumes = self._setup_volumes(view)
        wants_to_start = (
            actions.create_sandbox or actions.init_to_start or actions.containers_to_start
        )
        if not volumes.ok and wants_to_start and not (actions.kill_pod or syncing.killing_pod):
            return self.mount_backoff.get(view.uid)
        if syncing.killing_pod or (actions.kill_pod and not actions.create_sandbox):
            return self.runner.kill_pod(view, state, observed, deadline)
        if actions.create_sandbox:
            sandbox, wait = self.runner.new_sandbox(view, state, observed, actions, deadline)
            if sandbox is None:
                return wait
            syncing.acted_before_pull = True
        assert sandbox is not None
        self.starter.sandbox_config_warnings(view)  # SyncPod's generatePodSandboxConfig
        self.runner.kill_failed_post_starts(view, observed, state)
        retry.extend(self.runner.kill_containers(view, state, syncing, actions))
        if state.post_starts.any_running:  # SyncPod starts containers one after the other,
            return soonest(*retry)  # each with its hook: the hook's end brings the pod back
        started = self.runner.start_containers(
            view, observed, state, syncing, actions, sandbox, volumes
        )
        retry.extend(started)
        # A restart was tried: the next sync tells the kill and the start together.
        for name, killed_id in list(syncing.restarting.items()):
            killed = next((c for c in observed if c.id == killed_id), None)
            if killed is None or killed.state is cri.ContainerState.EXITED:
                del syncing.restarting[name]
        if self.starter.puller.pulling(view.uid, images):
            return soonest(*retry)  # the pull's end wakes the pod
        error_retry = self.error_retry.next_delay()
        return soonest(*retry, _next_sync(state, syncing, reasons, continues_pull, error_retry))

    def _observe(self, uid: str, state: PodState) -> list[cri.ObservedContainer]:
        """The pod's containers as this sync starts from (the kubelet's pod cache entry): the
        view, with a young running container looked at again, since its death may not have
        reached the view yet (the kubelet's relist reads the runtime, not a stream)."""
        observed = self._look_again(uid)
        for c in observed:
            if not c.is_sandbox and c.attempt >= state.last_attempt.get(c.name, -1):
                state.last_attempt[c.name] = c.attempt
        return observed

    def _look_again(self, uid: str) -> list[cri.ObservedContainer]:
        observed = self.watcher.pod_containers(uid)
        now = self.clock.now()
        fresh = False
        for c in observed:
            if c.state is not cri.ContainerState.RUNNING or c.is_sandbox or c.started_at is None:
                continue
            if (now - c.started_at).total_seconds() > YOUNG_CONTAINER:
                continue
            seen = self.runtime.inspect(c.id)
            if seen is not None and seen != c:
                self.watcher.record(seen)
                fresh = True
        return self.watcher.pod_containers(uid) if fresh else observed

    def _restarts_pending(
        self, observed: Sequence[cri.ObservedContainer], syncing: Syncing
    ) -> bool:
        """Whether a container this node killed to restart it (a failed liveness or startup
        probe, a changed definition) has not been started again yet. Forgotten once its kill
        has ended and a newer attempt exists, or it is no longer the latest."""
        for name, killed_id in list(syncing.restarting.items()):
            latest = latest_attempt(observed, name)
            if latest is None or latest.id != killed_id:
                del syncing.restarting[name]
        return bool(syncing.restarting)

    def _setup_volumes(self, view: PodView) -> VolumeSetup:
        """Set up (or refresh) the pod's volumes; FailedMount events while any fails."""

        def token(namespace: str, account: str, seconds: int, audiences: list[str]) -> str:
            request = TokenRequest(
                namespace, account, seconds, tuple(audiences), view.name, view.uid
            )
            return self.tokens.token(request)

        setup = self.volumes.setup(view, object_lookup(self.objects), token)
        if setup.ok:
            return setup
        now = self.clock.time()
        self.mount_backoff.next(view.uid, now, now)
        for error in setup.errors:
            self.events.event(event_ref(view), WARNING, "FailedMount", error)
        return setup

    # -- stopping --------------------------------------------------------------------------

    def sync_terminating_pod(
        self, pod: Json, view: PodView, state: PodState, terminating: Terminating
    ) -> float | None:
        """SyncTerminatingPod: stop everything (a deletion's grace period if shorter); once
        nothing runs the pod is terminated. Its status is written once, from the state it
        starts from, before the kill: the kubelet's killPod blocks until every container has
        stopped, so nothing is told in between (the terminated sync tells the end)."""
        grace = view.termination_grace_period
        if view.being_deleted and view.deletion_grace_period is not None:
            grace = view.deletion_grace_period
        observed = self._observe(view.uid, state)
        self.prober.forget_pod(view.uid)  # the kubelet stops probing a terminating pod
        if "terminating" not in state.journaled:
            self._write(pod, view, state, observed, evicted=terminating.reason)
        self._journal_once(state, view.uid, "terminating", grace=grace)
        stopping = self.stopper.stop_all(view, observed, state, grace)
        if stopping is not None:  # phase stays as it is until the containers have stopped
            self._journal_once(state, view.uid, "stop-signalled")
            return stopping
        self._journal_once(state, view.uid, "containers-stopped")
        return self.sync_terminated_pod(pod, view, state, state.complete_terminating())

    def sync_terminated_pod(
        self, pod: Json, view: PodView, state: PodState, terminated: Terminated
    ) -> float | None:
        """SyncTerminatedPod: the terminal status (written again until it is), then, for a
        deleted pod, the final DELETE. A rejected pod never ran: its status is its rejection."""
        observed = self._observe(view.uid, state)
        self._write(
            pod,
            view,
            state,
            observed,
            is_terminal=True,
            evicted=terminated.reason,
            finished=not terminated.rejected,
            rejected=terminated.rejected,
        )
        self._journal_once(state, view.uid, "terminal-status-set")
        return self._finish_if_deleted(pod, view, state)

    def _finish_if_deleted(self, pod: Json, view: PodView, state: PodState) -> float | None:
        """A deleted pod whose containers have all stopped is handed to the status manager,
        which sends the final DELETE once its terminal status is in (canBeDeleted)."""
        if not view.being_deleted:
            return None
        running = [
            c
            for c in self.watcher.pod_containers(view.uid)
            if c.state is cri.ContainerState.RUNNING
        ]
        if running:
            return 0.5
        self.status.delete_when_written(pod)
        state.final_delete_sent()
        return None

    def _cleanup(self, uid: str) -> float | None:
        """The pod is gone from the API: remove everything it left on the node."""
        observed = self.watcher.pod_containers(uid)
        if not self.stopper.remove_all(observed):
            return self.stopper.recheck_in([c.id for c in observed])
        if self.volumes.teardown(uid):  # never through a mount left behind
            self.runtime.remove_pod_dir(uid)
        self.tokens.forget_pod(uid)
        self.prober.forget_pod(uid)
        self.resizer.forget(uid)
        self.mount_backoff.forget_prefix(uid)
        self.states.pop(uid, None)
        self.admitter.forget(uid)
        self.status.forget(uid)
        self.starter.forget_pod(uid)
        if observed:
            self.log.info("removed containers of a pod gone from the API", uid=uid)
        return None

    # -- status --------------------------------------------------------------------------

    def _write(
        self,
        pod: Json,
        view: PodView,
        state: PodState,
        observed: Sequence[cri.ObservedContainer],
        *,
        is_terminal: bool = False,
        evicted: WaitingReason | None = None,
        finished: bool = False,
        rejected: bool = False,
    ) -> str:
        """Write the status of `observed`, the runtime state the sync started from; the
        answer is the phase generated (which a terminal phase held back does not change)."""
        self._read_messages(view, observed, state)
        previous, generation = self.status.base(pod), self.generation()
        given, resizing = self.resizer.status_inputs(view, observed, terminal=is_terminal)
        status = generate_status(
            StatusInput(
                pod=view,
                containers=observed,
                host_ip=self.settings.node_ip,
                now=self.clock.now(),
                waiting=state.waiting,
                messages=state.messages,
                is_terminal=is_terminal,
                previous=previous,
                evicted=evicted,
                finished=finished,
                probes=self.prober.results(view.uid),
                starting=_starting(state, observed),
                generation=generation,
                resources=given,
                resize_conditions=resizing,
            )
        )
        if rejected:  # rejectPod's status: nothing ran, so nothing of containers is told
            status = rejected_status(status, previous, generation.minor)
        phase = str(status.get("phase"))
        if (
            generation.terminal_phase_after_termination
            and not rejected  # a pod never admitted could have no running containers
            and not isinstance(state.lifecycle, Terminated)
        ):  # the pod worker could still have running containers (mergePodStatus)
            status = hold_terminal_phase(status, previous)
        self.status.set(pod, status)
        if phase == "Running" and not state.start_observed:
            # kubelet_pod_start_duration_seconds: from first seen to running, as SyncPod
            # observes it (the status generated, not its write)
            state.start_observed = True
            self.start_duration.observe(self.clock.monotonic() - state.first_seen)
        return phase

    def _journal_once(self, state: PodState, uid: str, step: str, **fields: Any) -> None:
        """A step of the pod's ending, journaled the first time it is reached."""
        if step not in state.journaled:
            state.journaled.add(step)
            self.journal(uid, step, **fields)

    def journal(self, uid: str, step: str, **fields: Any) -> None:
        """Append to the pod's journal; a full disk costs the trace, never the pod."""
        entry = {"step": step, "time": format_time_precise(self.clock.now()), **fields}
        try:
            self.runtime.files.append_journal(uid, entry)
        except (OSError, ValueError) as exc:
            self.log.debug("journal not written", uid=uid, step=step, error=str(exc))

    def _read_messages(
        self, view: PodView, observed: Sequence[cri.ObservedContainer], state: PodState
    ) -> None:
        for c in observed:
            if c.is_sandbox or c.state is not cri.ContainerState.EXITED or c.id in state.messages:
                continue
            message = self.runtime.termination_message(c)
            spec = container_spec(view, c.name)
            fallback = spec is not None and spec.termination_message_policy == (
                "FallbackToLogsOnError"
            )
            if not message and fallback and c.exit_code and not c.error:
                message = self.runtime.logs_tail(c.id)
            state.messages[c.id] = message

    # -- small helpers ---------------------------------------------------------------------


def _next_sync(
    state: PodState,
    syncing: Syncing,
    reasons: dict[str, WaitingReason],
    continues_pull: bool,
    error_retry: float,
) -> float | None:
    """When a SyncPod that ended here wants the pod back, besides what it waits for."""
    if syncing.take_acted_before_pull() and continues_pull:
        # It made a sandbox and then pulled: the sandbox's events were taken by this sync,
        # where the kubelet's PLEG holds them for a sync of their own after the SyncPod
        # returned (which tells the pull's outcome).
        return NEXT_RELIST
    if any(state.waiting.get(name) != reasons.get(name) for name in state.waiting):
        # A start failed (SyncPod returned an error): the pod worker's backoff brings the pod
        # back, unless a change in the runtime does first, and that sync tells it.
        return error_retry
    return None


def _starting(state: PodState, observed: Sequence[cri.ObservedContainer]) -> frozenset[str]:
    """The running containers whose start has not returned in the kubelet's terms: their
    postStart hook runs, or failed and they are to be or being killed for it (killContainer
    runs inside startContainer). Those killed and stopped are forgotten."""
    return state.post_starts.starting(
        {c.id for c in observed if c.state is cri.ContainerState.RUNNING}
    )
