"""Stopping a pod's containers: Killing events, SIGTERM, SIGKILL after the grace period."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from kubelet_sim import cri
from kubelet_sim.kube.events import NORMAL, EventRecorder
from kubelet_sim.pod.spec import PodView
from kubelet_sim.podworkers.event_refs import container_spec, event_ref
from kubelet_sim.podworkers.state import PodState
from kubelet_sim.runtime.docker_runtime import DockerRuntime
from kubelet_sim.runtime.observe import ContainerWatcher

MIN_GRACE = 2.0  # killContainer's minimumGracePeriodInSeconds


class ContainerStopper:
    """Stops containers in parallel, so one pod's grace period never delays another's."""

    def __init__(
        self, runtime: DockerRuntime, watcher: ContainerWatcher, events: EventRecorder
    ) -> None:
        self.runtime = runtime
        self.watcher = watcher
        self.events = events
        self.pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="stop")

    def stop_all(
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
            self.pool.submit(self.stop, view, c, state, grace, f"Stopping container {c.name}")
            for c in apps
        ]
        for future in futures:
            future.result()
        for sandbox in (c for c in running if c.is_sandbox):
            self.runtime.stop_container(sandbox.id, 0)
            self.refresh(sandbox.id)

    def stop(
        self,
        view: PodView,
        container: cri.ObservedContainer,
        state: PodState,
        grace: float,
        message: str,
    ) -> None:
        if container.id not in state.killing:
            state.killing.add(container.id)
            spec = container_spec(view, container.name)
            self.events.event(event_ref(view, spec), NORMAL, "Killing", message)
        self.runtime.stop_container(container.id, max(grace, MIN_GRACE) if grace else 0)
        self.refresh(container.id)

    def remove_all(self, observed: Sequence[cri.ObservedContainer]) -> None:
        """Stop (briefly) and remove containers of a pod that is gone, in parallel."""
        list(self.pool.map(self._remove, observed))

    def refresh(self, container_id: str) -> None:
        """Put Docker's own view of a container we just changed into the watcher at once."""
        observed = self.runtime.inspect(container_id)
        if observed is not None:
            self.watcher.record(observed)

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _remove(self, container: cri.ObservedContainer) -> None:
        if container.state is cri.ContainerState.RUNNING:
            self.runtime.stop_container(container.id, MIN_GRACE)
        self.runtime.remove_container(container.id)
