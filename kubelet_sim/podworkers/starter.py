"""Starting a pod's sandbox and containers, as the kubelet's startContainer does.

The host-access gate first (--allow-privileged), then crash-loop backoff, the image, the
container's plan (pod/container_plan.py: its config and pod files, pure), create and start,
each failure ending in the kubelet's waiting reason and event (CreateContainerConfigError,
CrashLoopBackOff, ErrImagePull, CreateContainerError, RunContainerError).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path

from kubelet_sim import cri
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.events import NORMAL, WARNING, EventRef
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.clock import SYSTEM_CLOCK, Clock
from kubelet_sim.pod.attempts import latest_attempt
from kubelet_sim.pod.container_config import (
    ContainerConfigError,
    ObjectLookup,
    sandbox_config,
    spec_hash,
)
from kubelet_sim.pod.container_plan import RESOLV_CONF, NodeFacts, StartFacts, plan_container
from kubelet_sim.pod.dns import ResolvConf, pod_dns, sandbox_hostname
from kubelet_sim.pod.host_access import container_refusal
from kubelet_sim.pod.pull_secrets import auths_for
from kubelet_sim.pod.restart_backoff import KeyedBackoff, go_duration
from kubelet_sim.pod.sandbox_pool import pool_refusal
from kubelet_sim.pod.security import (
    checks_image_user,
    user_namespace_problem,
)
from kubelet_sim.pod.spec import ContainerView, PodView
from kubelet_sim.pod.status import WaitingReason, format_time_precise
from kubelet_sim.podworkers.event_refs import event_ref, pod_name
from kubelet_sim.podworkers.hooks import POST_START, POST_START_LIMIT, HookRunner, hook_of
from kubelet_sim.podworkers.image_manager import ImagePuller
from kubelet_sim.podworkers.pool import SandboxPool
from kubelet_sim.podworkers.ports import (
    ContainerCache,
    EventSink,
    PodRuntime,
    Wake,
)
from kubelet_sim.podworkers.settings import SyncSettings
from kubelet_sim.podworkers.state import HookEnded, PodState
from kubelet_sim.podworkers.status_manager import StatusManager
from kubelet_sim.podworkers.stopper import ContainerStopper
from kubelet_sim.volumes import VolumeError, VolumeSetup, mounts_for

ERROR_RETRY = 10.0  # the kubelet's pod worker backoff after a failed sync


class ContainerStarter:
    def __init__(
        self,
        settings: SyncSettings,
        runtime: PodRuntime,
        watcher: ContainerCache,
        events: EventSink,
        status: StatusManager,
        stopper: ContainerStopper,
        lookup: ObjectLookup,
        hooks: HookRunner | None = None,
        *,
        network: Callable[[cri.ObservedContainer], None] | None = None,
        wake: Wake = lambda _uid: None,
        services: Callable[[], list[Json] | None] = lambda: [],
        clock: Clock = SYSTEM_CLOCK,
        pool: SandboxPool | None = None,
        pace: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
    ) -> None:
        """`pace`: held while a sandbox and its network are made and while a container starts
        (runc), a slot of the process's
        few, taken once its heartbeats are on time (at 5,000 nodes on two cores, 100
        sandboxes made at once left kube-apiserver no CPU for the Lease renewals); `wake`:
        queue the pod again (a postStart hook's or a pull's end); `services`: the Services for
        service-link variables, None until first listed (without a lister there are none, as
        for a kubelet without one)."""
        self.settings = settings
        # The node's network set-up for a new sandbox (the service proxy's rules and routes),
        # done before any container of the pod starts, as a CNI ADD.
        self.network = network
        self.runtime = runtime
        self.watcher = watcher
        self.events = events
        self.status = status
        self.stopper = stopper
        self.lookup = lookup
        self.hooks = hooks
        self.wake = wake
        self.services = services
        self.clock = clock
        self.pool = pool  # warm sandboxes, for pods that may use one
        self.pace = pace
        self.node_facts = NodeFacts(
            settings.node_name, settings.node_ip, settings.allocatable, settings.dns
        )
        self.puller = ImagePuller(runtime, events, wake, clock)
        self.crash_backoff = KeyedBackoff(initial=10.0, maximum=300.0)
        self.sandbox_images: set[str] = set()
        self.log = get_logger("kubelet_sim.podworkers", node=settings.node_name)

    def create_sandbox(self, view: PodView, attempt: int) -> cri.ObservedContainer | None:
        cfg = sandbox_config(
            view,
            node=self.settings.node_name,
            attempt=attempt,
            pause_image=self.settings.pause_image,
        )
        try:
            cfg = replace(cfg, hostname=sandbox_hostname(view, cfg.hostname, self._domain))
            resolver = self.sandbox_config_warnings(view)  # GetPodDNS, as the sandbox is made
            userns = user_namespace_problem(view)  # generatePodSandboxLinuxConfig, after DNS
            if userns:
                raise ValueError(userns)
            self.runtime.files.write_managed(view.uid, RESOLV_CONF, resolver.render())
            if cfg.image not in self.sandbox_images:  # ensureSandboxImageExists, once
                if self.runtime.image_status(cfg.image) is None:
                    self.runtime.pull_image(cfg.image)
                self.sandbox_images.add(cfg.image)
            with self.pace():  # a slot of the process's, once its heartbeats are on time
                sandbox = self._from_pool(view, cfg) or self.runtime.run_sandbox(cfg)
                if self.network is not None and not view.host_network:
                    self.network(sandbox)
        except Exception as exc:  # any runtime failure: report it the kubelet's way, retry
            message = f"Failed to create pod sandbox: {exc}"
            self.events.event(event_ref(view), WARNING, "FailedCreatePodSandBox", message)
            self.log.warning("sandbox failed", pod=pod_name(view), error=str(exc)[:300])
            return None
        self.watcher.record(sandbox)
        return sandbox

    def sandbox_config_warnings(self, view: PodView) -> ResolvConf:
        """generatePodSandboxConfig's GetPodDNS, which says what it falls back to as events
        (MissingClusterDNS, DNSConfigForming) each time it runs: as a sandbox is made, and in
        every SyncPod that goes on to start containers (the kubelet's runs it in each)."""
        resolver, warnings = pod_dns(view, self.settings.dns)
        for warning in warnings:
            self.events.event(event_ref(view), WARNING, warning.reason, warning.message)
        return resolver

    def _from_pool(self, view: PodView, cfg: cri.SandboxConfig) -> cri.ObservedContainer | None:
        """A warm sandbox made the pod's, if it may have one and the pool has one; the pod's
        journal says so (the trace's "sandbox (from pool)")."""
        if self.pool is None or pool_refusal(view) is not None:
            return None
        sandbox = self.pool.claim(cfg)
        if sandbox is not None:
            entry = {"step": "sandbox-from-pool", "time": format_time_precise(self.clock.now())}
            try:
                self.runtime.files.append_journal(view.uid, {**entry, "id": sandbox.id[:12]})
            except (OSError, ValueError) as exc:
                self.log.debug("journal not written", uid=view.uid, error=str(exc))
        return sandbox

    def start(
        self,
        view: PodView,
        container: ContainerView,
        sandbox: cri.ObservedContainer,
        state: PodState,
        volumes: VolumeSetup,
        pid_of: str = "",
        *,
        killed: str | None = None,
    ) -> float | None:
        """startContainer: backoff, image, config, create, start; the retry delay if waiting.
        `pid_of`: an ephemeral container's target, whose process namespace it joins; `killed`:
        the id of the attempt this node killed to start it again (SyncPod's restart), if any.

        The host-access gate comes first, for every kind of container: an ephemeral one is
        never admitted with its pod, and an init or app container is checked here again. A
        refusal is generateContainerConfig's: CreateContainerConfigError and a Failed event."""
        ref = event_ref(view, container)
        refused = container_refusal(
            view, container, allow_privileged=self.settings.allow_privileged
        )
        if refused is not None:  # before anything else: not even its image is pulled
            return self._failed(state, container, ref, "CreateContainerConfigError", refused)
        observed = self.watcher.pod_containers(view.uid)
        latest = latest_attempt(observed, container.name)
        basis = _backoff_basis(observed, container.name, latest, killed)
        if basis is not None:
            waiting = self._crash_loop_wait(view, container, basis, state, ref)
            if waiting is not None:
                return waiting
        auths = auths_for(container.image, self._pull_secrets(view))
        image = self.puller.ensure(view, container, ref, auths)
        if not image.ready:
            if image.waiting is not None:
                state.waiting[container.name] = image.waiting
            return image.retry_in
        pod_dir = self.runtime.files.pod_dir(view.uid)
        try:
            plan = plan_container(
                view,
                container,
                self.node_facts,
                StartFacts(
                    pod_dir=pod_dir,
                    attempt=self._next_attempt(view, container, latest, state),
                    sandbox_ip=sandbox.ip,
                    services=self.services(),
                    volume_mounts=mounts_for(container, volumes),
                    image_user=self._image_user(view, container),
                    node_hosts=self._node_hosts(view),
                    resolv_conf_written=(pod_dir / RESOLV_CONF).exists(),
                    pid_of=pid_of,
                ),
                self.lookup,
            )
        except (ContainerConfigError, VolumeError) as exc:
            return self._failed(state, container, ref, "CreateContainerConfigError", str(exc))
        for file in plan.files:
            self.runtime.files.write_managed(view.uid, file.name, file.text)
        cfg = plan.config
        try:
            container_id = self.runtime.create_container(cfg, sandbox.id)
        except cri.ContainerStartError as exc:
            return self._failed(state, container, ref, "CreateContainerError", str(exc))
        self.watcher.record(cri.created_observation(cfg, container_id))
        self.events.event(ref, NORMAL, "Created", f"Created container: {container.name}")
        try:
            with self.pace():
                self.runtime.start_container(container_id)
        except cri.ContainerStartError as exc:
            self.stopper.refresh(container_id)
            return self._failed(state, container, ref, "RunContainerError", str(exc))
        self.events.event(ref, NORMAL, "Started", f"Started container {container.name}")
        self.stopper.refresh(container_id)
        state.waiting.pop(container.name, None)
        if self.hooks is not None and hook_of(container, POST_START) is not None:
            self._post_start(self.hooks, view, container, container_id, sandbox, state)
        return None

    def _image_user(self, view: PodView, container: ContainerView) -> str:
        """The image's USER, inspected only where runAsNonRoot needs it."""
        if not checks_image_user(view, container):
            return ""
        image = self.runtime.image_status(container.image)
        return image.user if image else ""

    def _node_hosts(self, view: PodView) -> str:
        if not view.host_network:
            return ""
        try:
            return Path(self.settings.hosts_file).read_text()
        except OSError:
            return ""

    @property
    def _domain(self) -> str:
        return self.settings.dns.cluster_domain

    def _post_start(
        self,
        hooks: HookRunner,
        view: PodView,
        container: ContainerView,
        container_id: str,
        sandbox: cri.ObservedContainer,
        state: PodState,
    ) -> None:
        """The postStart hook, off the pod worker, on a thread of its own. Until it ends the
        container's start has not returned (state.post_starts): its status says
        waiting and the pod's other containers wait to start. Its end brings the pod back; a
        failure is killed there (startContainer's FailedPostStartHook). The hook's thread
        only reports to the pod's inbox: the pod's own sync takes the report."""
        state.post_starts.began(container_id)

        def run() -> None:
            error: str | None = None
            try:
                error = hooks.run(
                    view, container, container_id, POST_START, [sandbox], POST_START_LIMIT
                )
            finally:
                state.inbox.post(HookEnded(container_id, POST_START, error))
                self.wake(view.uid)

        if not hooks.submit(run, view.uid, POST_START):  # shutting down: nothing runs
            state.post_starts.abandoned(container_id)

    def forget_pod(self, uid: str) -> None:
        self.puller.forget_pod(uid)
        self.crash_backoff.forget_prefix(f"{uid}_")

    def _crash_loop_wait(
        self,
        view: PodView,
        container: ContainerView,
        latest: cri.ObservedContainer,
        state: PodState,
        ref: EventRef,
    ) -> float | None:
        # getStableKey: the spec hash too, so a new image starts without the old one's wait;
        # forgotten with the pod (forget_pod)
        key = f"{view.uid}_{container.name}_{spec_hash(container)}"
        finished = latest.finished_at or latest.created_at
        now = self.clock.time()
        event_time = finished.timestamp() if finished else now
        if not self.crash_backoff.in_backoff_since(key, event_time, now):
            self.crash_backoff.next(key, event_time, now)
            return None
        wait = self.crash_backoff.get(key)
        message = (
            f"back-off {go_duration(wait)} restarting failed container={container.name}"
            f" pod={view.full_name}"
        )
        waiting = WaitingReason("CrashLoopBackOff", message)
        if state.waiting.get(container.name) != waiting:
            self.events.event(
                ref,
                WARNING,
                "BackOff",
                f"Back-off restarting failed container {container.name} in pod {view.full_name}",
            )
        state.waiting[container.name] = waiting
        return max(0.05, self.crash_backoff.remaining(key, event_time, now))

    def _next_attempt(
        self,
        view: PodView,
        container: ContainerView,
        latest: cri.ObservedContainer | None,
        state: PodState,
    ) -> int:
        """One more than the last attempt; if Docker lost it, one more than the last this node
        saw (the kubelet counts the container's log files), or than the API's count."""
        if latest is not None:
            return latest.attempt + 1
        if container.name in state.last_attempt:
            return state.last_attempt[container.name] + 1
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

    def _pull_secrets(self, view: PodView) -> list[dict[str, object]]:
        names = [s.get("name", "") for s in view.spec.get("imagePullSecrets") or []]
        found = [self.lookup("Secret", view.namespace, n) for n in names if n]
        return [s for s in found if s is not None]


def _backoff_basis(
    observed: list[cri.ObservedContainer],
    name: str,
    latest: cri.ObservedContainer | None,
    killed: str | None,
) -> cri.ObservedContainer | None:
    """The ended attempt whose end the crash-loop backoff is counted from (doBackOff). A
    container this node killed to restart it is restarted by the SyncPod that killed it, which
    judged from the state it started from, where that attempt still ran: its backoff counts from
    the attempt that ended before it, if the node still has it."""
    if latest is None or latest.state is not cri.ContainerState.EXITED:
        return None
    if killed != latest.id:
        return latest
    earlier = [
        c
        for c in observed
        if c.name == name and c.attempt < latest.attempt and c.state is cri.ContainerState.EXITED
    ]
    return max(earlier, key=lambda c: c.attempt, default=None)
