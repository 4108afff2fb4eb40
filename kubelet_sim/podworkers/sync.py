"""One pod sync: observe, decide with the pure pod logic, act on Docker, write status.

Like the kubelet's SyncPod / SyncTerminatingPod, but in one place: a pod that is deleted, past
its deadline or terminal is killed and finished; otherwise the next actions are applied.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

from kubelet_sim import cri
from kubelet_sim.kube.events import NORMAL, WARNING, EventRecorder, EventRef
from kubelet_sim.kube.object_watches import ReferencedObjectWatches
from kubelet_sim.kube.pod_api import PodStatusWriter
from kubelet_sim.kube.rest import ApiError, Json
from kubelet_sim.kube.tokens import TokenManager
from kubelet_sim.logs import get_logger
from kubelet_sim.pod.actions import compute_actions, latest_sandbox
from kubelet_sim.pod.admission import Allocatable, admit
from kubelet_sim.pod.container_config import (
    ContainerConfigError,
    container_config,
    sandbox_config,
    spec_hash,
)
from kubelet_sim.pod.pull_secrets import auths_for
from kubelet_sim.pod.references import referenced_objects
from kubelet_sim.pod.restart_backoff import KeyedBackoff, go_duration
from kubelet_sim.pod.spec import ContainerView, PodView
from kubelet_sim.pod.status import StatusInput, WaitingReason, attempts_of, generate_status
from kubelet_sim.podworkers.images import ImagePuller
from kubelet_sim.podworkers.state import PodState
from kubelet_sim.runtime.docker_runtime import DockerRuntime
from kubelet_sim.runtime.observe import ContainerWatcher
from kubelet_sim.runtime.translate import created_observation
from kubelet_sim.volumes import VolumeError, VolumeManager, VolumeSetup, mounts_for

DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"
ERROR_RETRY = 10.0  # the kubelet's pod worker backoff after a failed sync
MIN_GRACE = 2.0  # killContainer's minimumGracePeriodInSeconds
STATUS_RETRY = 10.0  # the status manager's sync period


@dataclass(frozen=True)
class SyncSettings:
    node_name: str
    node_ip: str
    pause_image: str
    allow_privileged: bool
    allocatable: Allocatable


class PodSyncer:
    """Syncs one pod at a time (the caller guarantees it); safe to use from many workers."""

    def __init__(
        self,
        settings: SyncSettings,
        runtime: DockerRuntime,
        watcher: ContainerWatcher,
        status: PodStatusWriter,
        events: EventRecorder,
        objects: ReferencedObjectWatches,
        final_delete: Callable[[str, str, str], None],
        pod_of: Callable[[str], Json | None],
        active_pods: Callable[[], list[Json]],
        volumes: VolumeManager,
        tokens: TokenManager,
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.watcher = watcher
        self.status = status
        self.events = events
        self.objects = objects
        self.final_delete = final_delete
        self.pod_of = pod_of
        self.active_pods = active_pods
        self.puller = ImagePuller(runtime, events)
        self.crash_backoff = KeyedBackoff(initial=10.0, maximum=300.0)
        self.volumes = volumes
        self.tokens = tokens
        # The volume manager's retry: 2 s doubling to about 2 minutes per pod.
        self.mount_backoff = KeyedBackoff(initial=2.0, maximum=122.0)
        self.states: dict[str, PodState] = {}
        self.sandbox_images: set[str] = set()
        self.stoppers = ThreadPoolExecutor(max_workers=16, thread_name_prefix="stop")
        self.log = get_logger("kubelet_sim.podworkers", node=settings.node_name)

    # -- entry point -----------------------------------------------------------------------

    def sync(self, uid: str) -> float | None:
        """Bring one pod closer to its spec; the answer is when to sync it again, if ever."""
        pod = self.pod_of(uid)
        if pod is None:
            self._cleanup(uid)
            return None
        view = PodView.from_api(pod)
        state = self.states.setdefault(uid, PodState())
        if state.finally_deleted:
            return None
        if not state.admitted:
            self._admit(view, state)
        if state.rejection is not None:
            self._write(pod, view, state, is_terminal=True)
            return self._finish_if_deleted(view, state)
        deadline_left = self._deadline_left(view)
        if view.being_deleted or view.api_phase in ("Succeeded", "Failed") or deadline_left == 0:
            delay = self._terminate(pod, view, state, deadline=deadline_left == 0)
        else:
            delay = self._run(pod, view, state, deadline_left)
        if state.status_unsent:  # the status manager's retry: within 10 s
            return min(delay, STATUS_RETRY) if delay is not None else STATUS_RETRY
        return delay

    def shutdown(self) -> None:
        self.stoppers.shutdown(wait=False, cancel_futures=True)

    # -- admission and deadlines ---------------------------------------------------------

    def _admit(self, view: PodView, state: PodState) -> None:
        state.admitted = True
        others = [
            PodView.from_api(p)
            for p in self.active_pods()
            if p["metadata"]["uid"] != view.uid
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        rejection = admit(
            view,
            active_pods=others,
            allocatable=self.settings.allocatable,
            allow_privileged=self.settings.allow_privileged,
        )
        if rejection is not None:
            state.rejection = rejection
            self.events.event(self._ref(view), WARNING, rejection.reason, rejection.message)
            self.log.warning("pod rejected", pod=self._name(view), reason=rejection.reason)

    def _deadline_left(self, view: PodView) -> float | None:
        start = view.status.get("startTime")
        if view.active_deadline_seconds is None or not start:
            return None
        started = datetime.fromisoformat(str(start)).timestamp()
        return max(0.0, started + view.active_deadline_seconds - time.time())

    # -- a running pod ---------------------------------------------------------------------

    def _run(
        self, pod: Json, view: PodView, state: PodState, deadline: float | None
    ) -> float | None:
        refs = referenced_objects(pod)
        if refs and not self.objects.wait_synced(refs, timeout=5.0):
            return 0.5
        if not self.status.has_written(view.uid):
            self._write(pod, view, state)  # the kubelet's first word: Pending, ContainerCreating
        observed = self.watcher.pod_containers(view.uid)
        actions = compute_actions(view, observed, spec_hash)
        retry: list[float | None] = [deadline]
        volumes = self._setup_volumes(view, observed)
        wants_to_start = (
            actions.create_sandbox or actions.init_to_start or actions.containers_to_start
        )
        if not volumes.ok and wants_to_start and not actions.kill_pod:
            return self.mount_backoff.get(view.uid)
        if actions.kill_pod and not actions.create_sandbox:
            self._stop_all(view, observed, state, grace=view.termination_grace_period)
            self._write(pod, view, state)
            return deadline
        sandbox = latest_sandbox(observed)
        if actions.create_sandbox:
            self._stop_all(view, observed, state, grace=view.termination_grace_period)
            sandbox = self._create_sandbox(view, actions.sandbox_attempt)
            if sandbox is None:
                self._write(pod, view, state)
                return ERROR_RETRY
        assert sandbox is not None
        for victim, message in actions.containers_to_kill:
            self._stop(view, victim, state, view.termination_grace_period, message)
        starts = [actions.init_to_start] if actions.init_to_start else actions.containers_to_start
        for container in starts:
            retry.append(self._start(view, container, sandbox, state, volumes))
        self._write(pod, view, state)
        pending = [r for r in retry if r is not None]
        return min(pending) if pending else None

    def _setup_volumes(
        self, view: PodView, observed: Sequence[cri.ObservedContainer]
    ) -> VolumeSetup:
        """Set up (or refresh) the pod's volumes; FailedMount events while any fails."""
        sandbox = latest_sandbox(observed)

        def token(namespace: str, account: str, seconds: int, audiences: list[str]) -> str:
            return self.tokens.token(namespace, account, seconds, audiences, view.name, view.uid)

        setup = self.volumes.setup(
            view,
            self._lookup,
            token,
            host_ip=self.settings.node_ip,
            pod_ip=sandbox.ip if sandbox else "",
        )
        if setup.ok:
            return setup
        now = time.time()
        self.mount_backoff.next(view.uid, now, now)
        for error in setup.errors:
            self.events.event(self._ref(view), WARNING, "FailedMount", error)
        return setup

    def _create_sandbox(self, view: PodView, attempt: int) -> cri.ObservedContainer | None:
        cfg = sandbox_config(
            view,
            node=self.settings.node_name,
            attempt=attempt,
            pause_image=self.settings.pause_image,
        )
        try:
            if cfg.image not in self.sandbox_images:  # ensureSandboxImageExists, once
                if self.runtime.image_status(cfg.image) is None:
                    self.runtime.pull_image(cfg.image)
                self.sandbox_images.add(cfg.image)
            sandbox = self.runtime.run_sandbox(cfg)
        except Exception as exc:  # any runtime failure: report it the kubelet's way, retry
            message = f"Failed to create pod sandbox: {exc}"
            self.events.event(self._ref(view), WARNING, "FailedCreatePodSandBox", message)
            self.log.warning("sandbox failed", pod=self._name(view), error=str(exc)[:300])
            return None
        self.watcher.record(sandbox)
        return sandbox

    def _start(
        self,
        view: PodView,
        container: ContainerView,
        sandbox: cri.ObservedContainer,
        state: PodState,
        volumes: VolumeSetup,
    ) -> float | None:
        """startContainer: backoff, image, config, create, start; the retry delay if waiting."""
        observed = self.watcher.pod_containers(view.uid)
        attempts = attempts_of(observed, container.name)
        latest = attempts[0] if attempts else None
        ref = self._ref(view, container)
        if latest is not None and latest.state is cri.ContainerState.EXITED:
            waiting = self._crash_loop_wait(view, container, latest, state, ref)
            if waiting is not None:
                return waiting
        auths = auths_for(container.image, self._pull_secrets(view))
        image = self.puller.ensure(view, container, ref, auths)
        if not image.ready:
            assert image.waiting is not None
            state.waiting[container.name] = image.waiting
            return image.retry_in
        attempt = self._next_attempt(view, container, latest)
        try:
            mounts = mounts_for(container, volumes)
            cfg = container_config(
                view,
                container,
                node=self.settings.node_name,
                attempt=attempt,
                host_ip=self.settings.node_ip,
                pod_ip=sandbox.ip,
                lookup=self._lookup,
                mounts=mounts,
            )
        except (ContainerConfigError, VolumeError) as exc:
            return self._failed(state, container, ref, "CreateContainerConfigError", str(exc))
        try:
            container_id = self.runtime.create_container(cfg, sandbox.id)
        except cri.ContainerStartError as exc:
            return self._failed(state, container, ref, "CreateContainerError", str(exc))
        self.watcher.record(created_observation(cfg, container_id))
        self.events.event(ref, NORMAL, "Created", f"Created container: {container.name}")
        try:
            self.runtime.start_container(container_id)
        except cri.ContainerStartError as exc:
            self._refresh(container_id)
            return self._failed(state, container, ref, "RunContainerError", str(exc))
        self.events.event(ref, NORMAL, "Started", f"Started container {container.name}")
        self._refresh(container_id)
        state.waiting.pop(container.name, None)
        return None

    def _crash_loop_wait(
        self,
        view: PodView,
        container: ContainerView,
        latest: cri.ObservedContainer,
        state: PodState,
        ref: EventRef,
    ) -> float | None:
        key = f"{view.name}_{view.namespace}_{view.uid}_{container.name}"
        finished = latest.finished_at or latest.created_at
        event_time = finished.timestamp() if finished else time.time()
        now = time.time()
        if self.crash_backoff.in_backoff_since(key, event_time, now):
            wait = self.crash_backoff.get(key)
            message = (
                f"back-off {go_duration(wait)} restarting failed container={container.name}"
                f" pod={view.full_name}"
            )
            if state.waiting.get(container.name) != WaitingReason("CrashLoopBackOff", message):
                self.events.event(
                    ref,
                    WARNING,
                    "BackOff",
                    f"Back-off restarting failed container {container.name} in pod"
                    f" {view.full_name}",
                )
            state.waiting[container.name] = WaitingReason("CrashLoopBackOff", message)
            return max(0.05, self.crash_backoff.remaining(key, event_time, now))
        self.crash_backoff.next(key, event_time, now)
        return None

    def _next_attempt(
        self, view: PodView, container: ContainerView, latest: cri.ObservedContainer | None
    ) -> int:
        """One more than the last attempt; if Docker lost it, one more than the API's count."""
        if latest is not None:
            return latest.attempt + 1
        for key in ("containerStatuses", "initContainerStatuses"):
            for st in self.status.base(view.raw).get(key) or []:
                if st.get("name") == container.name and st.get("containerID"):
                    return int(st.get("restartCount", 0)) + 1
        return 0

    def _failed(
        self, state: PodState, container: ContainerView, ref: EventRef, reason: str, message: str
    ) -> float:
        state.waiting[container.name] = WaitingReason(reason, message)
        self.events.event(ref, WARNING, "Failed", f"Error: {message}")
        return ERROR_RETRY

    def _refresh(self, container_id: str) -> None:
        observed = self.runtime.inspect(container_id)
        if observed is not None:
            self.watcher.record(observed)

    # -- stopping --------------------------------------------------------------------------

    def _terminate(self, pod: Json, view: PodView, state: PodState, deadline: bool) -> float | None:
        """SyncTerminatingPod: kill everything, write the terminal status, then let go."""
        evicted = None
        if deadline:
            evicted = WaitingReason("DeadlineExceeded", DEADLINE_MESSAGE)
            if not state.deadline_reported:
                state.deadline_reported = True
                self.events.event(self._ref(view), WARNING, "DeadlineExceeded", DEADLINE_MESSAGE)
        grace = view.termination_grace_period
        if view.being_deleted and view.deletion_grace_period is not None:
            grace = view.deletion_grace_period
        observed = self.watcher.pod_containers(view.uid)
        self._stop_all(view, observed, state, grace)
        self._write(pod, view, state, is_terminal=True, evicted=evicted)
        return self._finish_if_deleted(view, state)

    def _finish_if_deleted(self, view: PodView, state: PodState) -> float | None:
        if not view.being_deleted:
            return None
        running = [
            c
            for c in self.watcher.pod_containers(view.uid)
            if c.state is cri.ContainerState.RUNNING
        ]
        if running:
            return 0.5
        try:
            self.final_delete(view.namespace, view.name, view.uid)
        except ApiError as exc:
            if not (exc.not_found or exc.conflict):
                self.log.warning("final delete failed", pod=self._name(view), error=str(exc))
                return 1.0
        state.finally_deleted = True
        self.log.info("pod deleted from the API", pod=self._name(view), uid=view.uid)
        return None

    def _stop_all(
        self,
        view: PodView,
        observed: Sequence[cri.ObservedContainer],
        state: PodState,
        grace: float,
    ) -> None:
        """Stop app containers in parallel with the grace period, then the sandbox."""
        running = [c for c in observed if c.state is cri.ContainerState.RUNNING]
        apps = [c for c in running if not c.is_sandbox]
        futures = [
            self.stoppers.submit(self._stop, view, c, state, grace, f"Stopping container {c.name}")
            for c in apps
        ]
        for future in futures:
            future.result()
        for sandbox in (c for c in running if c.is_sandbox):
            self.runtime.stop_container(sandbox.id, 0)
            self._refresh(sandbox.id)

    def _stop(
        self,
        view: PodView,
        container: cri.ObservedContainer,
        state: PodState,
        grace: float,
        message: str,
    ) -> None:
        if container.id not in state.killing:
            state.killing.add(container.id)
            spec = self._container_spec(view, container.name)
            ref = self._ref(view, spec) if spec else self._ref(view)
            self.events.event(ref, NORMAL, "Killing", message)
        self.runtime.stop_container(container.id, max(grace, MIN_GRACE) if grace else 0)
        self._refresh(container.id)

    def _cleanup(self, uid: str) -> None:
        """The pod is gone from the API: remove everything it left on the node."""
        observed = self.watcher.pod_containers(uid)
        list(self.stoppers.map(self._remove, observed))
        self.volumes.teardown(uid)
        self.runtime.remove_pod_dir(uid)
        self.tokens.forget_pod(uid)
        self.mount_backoff.forget_prefix(uid)
        self.states.pop(uid, None)
        self.status.forget(uid)
        self.puller.forget_pod(uid)
        if observed:
            self.log.info("removed containers of a pod gone from the API", uid=uid)

    def _remove(self, container: cri.ObservedContainer) -> None:
        if container.state is cri.ContainerState.RUNNING:
            self.runtime.stop_container(container.id, MIN_GRACE)
        self.runtime.remove_container(container.id)

    # -- status --------------------------------------------------------------------------

    def _write(
        self,
        pod: Json,
        view: PodView,
        state: PodState,
        *,
        is_terminal: bool = False,
        evicted: WaitingReason | None = None,
    ) -> None:
        observed = self.watcher.pod_containers(view.uid)
        self._read_messages(view, observed, state)
        if state.rejection is not None:
            evicted = WaitingReason(state.rejection.reason, state.rejection.message)
        status = generate_status(
            StatusInput(
                pod=view,
                containers=observed,
                host_ip=self.settings.node_ip,
                now=datetime.now(UTC),
                waiting=state.waiting,
                messages=state.messages,
                is_terminal=is_terminal,
                previous=self.status.base(pod),
                evicted=evicted,
            )
        )
        state.status_unsent = False
        try:
            self.status.write(pod, status)
        except ApiError as exc:
            if not (exc.not_found or exc.conflict):
                state.status_unsent = True
                self.log.warning("status write failed", pod=self._name(view), error=str(exc))
        except Exception as exc:  # API unreachable: retried soon (sync returns STATUS_RETRY)
            state.status_unsent = True
            self.log.warning("status write failed", pod=self._name(view), error=str(exc)[:200])

    def _read_messages(
        self, view: PodView, observed: Sequence[cri.ObservedContainer], state: PodState
    ) -> None:
        for c in observed:
            if c.is_sandbox or c.state is not cri.ContainerState.EXITED or c.id in state.messages:
                continue
            message = self.runtime.termination_message(c)
            spec = self._container_spec(view, c.name)
            fallback = spec is not None and spec.termination_message_policy == (
                "FallbackToLogsOnError"
            )
            if not message and fallback and c.exit_code and not c.error:
                message = self.runtime.logs_tail(c.id)
            state.messages[c.id] = message

    # -- small helpers ---------------------------------------------------------------------

    def _lookup(self, kind: str, namespace: str, name: str) -> Json | None:
        return self.objects.get((kind, namespace, name))

    def _pull_secrets(self, view: PodView) -> list[Json]:
        names = [s.get("name", "") for s in view.spec.get("imagePullSecrets") or []]
        found = [self._lookup("Secret", view.namespace, n) for n in names if n]
        return [s for s in found if s is not None]

    @staticmethod
    def _container_spec(view: PodView, name: str) -> ContainerView | None:
        for c in (*view.init_containers, *view.containers):
            if c.name == name:
                return c
        return None

    @staticmethod
    def _name(view: PodView) -> str:
        return f"{view.namespace}/{view.name}"

    @staticmethod
    def _ref(view: PodView, container: ContainerView | None = None) -> EventRef:
        field_path = ""
        if container is not None:
            group = "initContainers" if container in view.init_containers else "containers"
            field_path = f"spec.{group}{{{container.name}}}"
        rv = str((view.raw.get("metadata") or {}).get("resourceVersion") or "")
        return EventRef(view.namespace, view.name, view.uid, rv, field_path)
