"""The node's one admission desk: pods decided one at a time, in creation order.

Pod workers sync in parallel, but the kubelet admits pods serially (HandlePodAdditions) and
counts only the pods it admitted and has not finished: a burst of pods that together overflow
the node loses the youngest, not all of them. Whichever worker first needs a decision decides
every pod the node has seen and not yet decided, oldest first, under one lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.pod.admission import Rejection, admit_in_order
from kubelet_sim.pod.spec import PodView
from kubelet_sim.podworkers.settings import SyncSettings

TERMINAL = ("Succeeded", "Failed")


class PodAdmitter:
    def __init__(
        self,
        settings: SyncSettings,
        pods: Callable[[], list[Json]],
        has_containers: Callable[[str], bool],
        has_running: Callable[[str], bool],
        node: Callable[[], Json | None],
        as_allocated: Callable[[PodView], PodView] = lambda view: view,
    ) -> None:
        self.settings = settings
        self._pods = pods  # the node's pods in the order it saw them
        self._node = node  # our Node as the watch last told (None before it did)
        self._has_containers = has_containers
        self._has_running = has_running
        # In-place resize: a pod already here counts at its allocation, not a pending spec.
        self._as_allocated = as_allocated
        self._decisions: dict[str, Rejection | None] = {}
        self._lock = threading.Lock()

    def decide(self, uid: str) -> Rejection | None:
        """None if the pod may run here; the same answer every time for one pod."""
        with self._lock:
            if uid not in self._decisions:
                self._decide_pending()
            return self._decisions.get(uid)

    def forget(self, uid: str) -> None:
        with self._lock:
            self._decisions.pop(uid, None)

    def _decide_pending(self) -> None:
        views = [self._as_allocated(PodView.from_api(p)) for p in self._pods()]
        undecided = [v for v in views if v.uid not in self._decisions]
        for view in undecided:
            if view.api_phase in TERMINAL:  # finished before we saw it: nothing to admit
                self._decisions[view.uid] = None
        admitted = [
            v
            for v in views
            if v.uid in self._decisions and self._decisions[v.uid] is None and self._active(v)
        ]
        self._decisions.update(
            admit_in_order(
                [v for v in undecided if v.uid not in self._decisions],
                admitted=admitted,
                already_here={v.uid for v in undecided if self._admitted_before(v)},
                allocatable=self.settings.allocatable,
                allow_privileged=self.settings.allow_privileged,
                allowed_unsafe_sysctls=self.settings.allowed_unsafe_sysctls,
                apparmor=self.settings.apparmor,
                node=self._node(),
            )
        )

    def _active(self, view: PodView) -> bool:
        """filterOutInactivePods: a terminal pod counts only while its containers still run."""
        return view.api_phase not in TERMINAL or self._has_running(view.uid)

    def _admitted_before(self, view: PodView) -> bool:
        """An earlier run of the agent admitted it: this node's own containers of it are here.
        Never the pod's status: whoever may write pods/status could set a startTime and pass
        the host-access gate unchecked."""
        return self._has_containers(view.uid)
