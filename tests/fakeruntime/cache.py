"""The container cache over the fake runtime: it sees what the runtime has at once, as the
Docker watcher does once an event arrived, and says which pod changed (its `on_change`)."""

from __future__ import annotations

from kubelet_sim import cri
from tests.fakeruntime.runtime import FakeRuntime


class FakeContainerCache:
    def __init__(self, runtime: FakeRuntime) -> None:
        self.runtime = runtime
        self.recorded: list[cri.ObservedContainer] = []

    def pod_containers(self, pod_uid: str) -> list[cri.ObservedContainer]:
        return [c for c in self.runtime.list_containers() if c.pod.uid == pod_uid]

    def get(self, container_id: str) -> cri.ObservedContainer | None:
        return self.runtime.inspect(container_id)

    def all_containers(self) -> list[cri.ObservedContainer]:
        return self.runtime.list_containers()

    def record(self, observed: cri.ObservedContainer) -> None:
        """The runtime is the truth here: what a caller records is only remembered."""
        self.recorded.append(observed)
