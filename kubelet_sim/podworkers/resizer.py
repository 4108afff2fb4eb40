"""In-place resize on the node: the kubelet's allocation manager and its resize conditions.

Per pod it keeps what the node allocated (each resizable container's resources, the pod's
admission or its last accepted resize) and what each running container was actually given
(by container id, once it was updated in place), in a checkpoint file in the pod's directory
(`<root>/pods/<uid>/resources.json`, the kubelet's allocated/actuated checkpoints in one). An
agent restarted finds both there, and takes the resize conditions back from the pod's status
(BackfillPodResizeConditions); a pod whose file is gone is allocated at its spec again.

The decisions are pod/resize.py's; this part remembers, acts through the runtime port and
says what happened (conditions, the ResizeCompleted event). Called by the pod's sync only,
one sync at a time per pod; the lock guards the records between pods (Deferred reads them all).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field

from kubelet_sim import cri
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.events import NORMAL
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.clock import Clock
from kubelet_sim.pod import resize
from kubelet_sim.pod.actions import PodActions
from kubelet_sim.pod.admission import Allocatable
from kubelet_sim.pod.attempts import latest_attempt
from kubelet_sim.pod.conditions import RESIZE_CONDITIONS
from kubelet_sim.pod.container_config import container_resources
from kubelet_sim.pod.spec import PodView
from kubelet_sim.pod.status import format_time
from kubelet_sim.podworkers.event_refs import event_ref
from kubelet_sim.podworkers.ports import ContainerCache, EventSink, PodIndex, PodRuntime

CHECKPOINT = "resources.json"
TERMINAL = ("Succeeded", "Failed")
# After an update in place, the next sync tells it (the PLEG's next relist).
RESIZED_RECHECK = 1.0


@dataclass
class _Record:
    allocated: dict[str, resize.Requirements]
    actuated: dict[str, resize.Requirements] = field(default_factory=dict)  # by container id
    conditions: dict[str, Json] = field(default_factory=dict)  # PodResizePending/InProgress
    decided: Json | None = None  # the spec resources last decided on
    retry_at: float | None = None  # a deferred resize is tried again then (monotonic)
    restarting: set[str] = field(default_factory=set)  # ids killed for a resize


@dataclass(eq=False)
class PodResizer:
    runtime: PodRuntime
    watcher: ContainerCache
    events: EventSink
    pods: PodIndex
    allocatable: Allocatable
    _: KW_ONLY
    clock: Clock
    enabled: Callable[[], bool]  # InPlacePodVerticalScaling: a v1.33+ server's kubelet

    def __post_init__(self) -> None:
        self._records: dict[str, _Record] = {}
        self._lock = threading.Lock()
        self.log = get_logger("kubelet_sim.podworkers.resizer", node=self.runtime.node_name)

    # -- what the sync asks --------------------------------------------------------------

    def resolve(self, view: PodView, *, syncing: bool) -> PodView:
        """The pod as the node runs it: the spec with its allocation in it. For a pod that
        should run, a changed spec is decided first (handlePodResourcesResize)."""
        if not self.enabled():
            return view
        with self._lock:
            record = self._record(view, create=syncing)  # a rejected pod never had one
            if record is None:
                return view
            if syncing:
                self._handle(view, record)
            return resize.with_allocation(view, record.allocated)

    def as_allocated(self, view: PodView) -> PodView:
        """A pod at its allocation as known so far (the spec for a pod not yet synced): what
        admission counts of the pods already here (getAllocatedPods)."""
        with self._lock:
            record = self._records.get(view.uid)
        return resize.with_allocation(view, record.allocated) if record else view

    def act(
        self, view: PodView, observed: Sequence[cri.ObservedContainer], actions: PodActions
    ) -> float | None:
        """The resize half of SyncPod: running containers given their allocation in place, or
        killed and started again where their resizePolicy says RestartContainer. When to look
        again: soon after an update (the next sync tells it), or a deferred resize's retry."""
        if not self.enabled():
            return None
        with self._lock:
            record = self._records.get(view.uid)
            if record is None:
                return None
            wait = self._retry_in(record)
            killing = {victim.id for victim, _ in actions.containers_to_kill}
            for change in resize.container_resizes(view, observed, record.actuated):
                if change.observed.id in record.restarting | killing:
                    continue
                if change.restart:
                    self._restart(view, record, change, actions)
                    continue
                if self._update(view, record, change):
                    wait = RESIZED_RECHECK if wait is None else min(wait, RESIZED_RECHECK)
            return wait

    def check_in_progress(self, view: PodView, observed: Sequence[cri.ObservedContainer]) -> None:
        """CheckPodResizeInProgress, before the sync writes status: the condition stays while a
        running container lacks its allocation; once none does, it goes and ResizeCompleted
        is told."""
        if not self.enabled():
            return
        with self._lock:
            record = self._records.get(view.uid)
            if record is None:
                return
            record.restarting &= {c.id for c in observed if c.state is cri.ContainerState.RUNNING}
            if resize.in_progress(view, observed, record.actuated):
                if resize.IN_PROGRESS not in record.conditions:  # e.g. after an agent restart
                    self._set(record, view, resize.IN_PROGRESS, "", "")
                return
            if record.conditions.pop(resize.IN_PROGRESS, None) is not None:
                message = resize.completed_message(view)
                self.events.event(event_ref(view), NORMAL, "ResizeCompleted", message)
                self.log.info("pod resize completed", pod=f"{view.namespace}/{view.name}")

    def status_inputs(
        self, view: PodView, observed: Sequence[cri.ObservedContainer], *, terminal: bool
    ) -> tuple[dict[str, resize.Requirements] | None, list[Json]]:
        """What the status says of resizes: each container's resources as given (by name), and
        the resize conditions (none for a terminal pod: determinePodResizeStatus clears them)."""
        if not self.enabled():
            return None, []
        with self._lock:
            record = self._records.get(view.uid)
            if record is None:
                return None, []
            if terminal:
                record.conditions.clear()
                return None, []
            given: dict[str, resize.Requirements] = {}
            for container in resize.resizable_containers(view):
                allocated = container.raw.get("resources") or {}
                latest = latest_attempt(observed, container.name)
                actuated = record.actuated.get(latest.id) if latest is not None else None
                given[container.name] = resize.status_resources(allocated, actuated)
            kinds = [k for k in RESIZE_CONDITIONS if k in record.conditions]
            return given, [record.conditions[k] for k in kinds]

    def forget(self, uid: str) -> None:
        """The pod is gone (its directory, and the checkpoint with it, goes too)."""
        with self._lock:
            self._records.pop(uid, None)

    # -- deciding -------------------------------------------------------------------------

    def _handle(self, desired: PodView, record: _Record) -> None:
        wanted = resize.allocation_of(desired)
        due = record.retry_at is not None and self.clock.monotonic() >= record.retry_at
        if wanted == record.decided and not due:
            return  # decided for these resources already (the kubelet decides on updates)
        record.decided, record.retry_at = wanted, None
        verdict = resize.decide(
            desired, self._others(desired.uid), self.allocatable, allocated=record.allocated
        )
        if verdict.outcome is resize.Outcome.NONE:
            record.conditions.pop(resize.PENDING, None)
            return
        if verdict.outcome is not resize.Outcome.ACCEPTED:
            self._set(record, desired, resize.PENDING, verdict.outcome.value, verdict.message)
            if verdict.outcome is resize.Outcome.DEFERRED:
                record.retry_at = self.clock.monotonic() + resize.DEFERRED_RETRY
            self.log.info(
                "pod resize pending",
                pod=f"{desired.namespace}/{desired.name}",
                reason=verdict.outcome.value,
                message=verdict.message,
            )
            return
        # Containers made under the old allocation keep a record of what they were given.
        for c in self.watcher.pod_containers(desired.uid):
            if not c.is_sandbox and c.id not in record.actuated and c.name in record.allocated:
                record.actuated[c.id] = record.allocated[c.name]
        record.allocated = {**record.allocated, **wanted}
        record.conditions.pop(resize.PENDING, None)
        record.conditions.pop(resize.IN_PROGRESS, None)  # a new generation's resize begins
        self._set(record, desired, resize.IN_PROGRESS, "", "")
        self._save(desired.uid, record)

    def _others(self, uid: str) -> list[PodView]:
        """The node's other active pods as allocated (getAllocatedPods)."""
        out = []
        for pod in self.pods.pods():
            view = PodView.from_api(pod)
            if view.uid == uid or view.api_phase in TERMINAL:
                continue
            record = self._records.get(view.uid)
            out.append(resize.with_allocation(view, record.allocated) if record else view)
        return out

    # -- acting ---------------------------------------------------------------------------

    def _update(self, view: PodView, record: _Record, change: resize.ContainerResize) -> bool:
        """UpdateContainerResources; a failure is the InProgress condition's Error."""
        try:
            self.runtime.update_container_resources(
                change.observed.id, container_resources(change.container)
            )
        except Exception as exc:  # the runtime refused (e.g. memory below what is in use)
            message = str(exc)[:300]
            self._set(record, view, resize.IN_PROGRESS, "Error", message, keep=False)
            self.log.warning("resize failed", pod=f"{view.namespace}/{view.name}", error=message)
            return False
        record.actuated[change.observed.id] = change.container.raw.get("resources") or {}
        self._save(view.uid, record)
        return True

    def _restart(
        self,
        view: PodView,
        record: _Record,
        change: resize.ContainerResize,
        actions: PodActions,
    ) -> None:
        """resizePolicy RestartContainer: killed and started again at its allocation."""
        record.restarting.add(change.observed.id)
        message = f"Container {change.container.name} resize requires restart"
        actions.containers_to_kill.append((change.observed, message))
        if change.container.is_sidecar:
            actions.init_to_start.append(change.container)
        else:
            actions.containers_to_start.append(change.container)

    # -- records --------------------------------------------------------------------------

    def _set(
        self,
        record: _Record,
        view: PodView,
        kind: str,
        reason: str,
        message: str,
        keep: bool = True,
    ) -> None:
        """SetPodResizePendingCondition / SetPodResizeInProgressCondition (which keeps its
        generation, reason and message once set, unless told otherwise)."""
        previous = record.conditions.get(kind)
        generation = (view.raw.get("metadata") or {}).get("generation")
        if kind == resize.IN_PROGRESS and previous is not None and keep:
            reason = reason or previous.get("reason", "")
            message = message or previous.get("message", "")
            generation = previous.get("observedGeneration")
        now = format_time(self.clock.now()) or ""
        record.conditions[kind] = resize.condition(
            kind, reason, message, now=now, generation=generation, previous=previous
        )

    def _retry_in(self, record: _Record) -> float | None:
        if record.retry_at is None:
            return None
        return max(0.0, record.retry_at - self.clock.monotonic())

    def _record(self, view: PodView, *, create: bool) -> _Record | None:
        """The pod's record: in memory, else its checkpoint, else its spec (AddPod)."""
        record = self._records.get(view.uid)
        if record is not None:
            return record
        record = self._load(view)
        if record is None and not create:
            return None
        if record is None:
            record = _Record(allocated=resize.allocation_of(view))
            record.decided = dict(record.allocated)
            self._save(view.uid, record)
        for condition in view.status.get("conditions") or []:
            if condition.get("type") in RESIZE_CONDITIONS:
                record.conditions[condition["type"]] = dict(condition)
        self._records[view.uid] = record
        return record

    def _load(self, view: PodView) -> _Record | None:
        path = self.runtime.files.pod_dir(view.uid) / CHECKPOINT
        try:
            saved = json.loads(path.read_text())
            return _Record(allocated=dict(saved["allocated"]), actuated=dict(saved["actuated"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.log.warning("resize checkpoint unreadable; allocating at the spec", error=str(exc))
            return None

    def _save(self, uid: str, record: _Record) -> None:
        text = json.dumps({"allocated": record.allocated, "actuated": record.actuated})
        try:
            self.runtime.files.write_managed(uid, CHECKPOINT, text)
        except OSError as exc:  # kept in memory; lost only if the agent restarts too
            self.log.warning("resize checkpoint not written", uid=uid, error=str(exc))
