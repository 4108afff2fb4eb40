"""The live handoff stream (`kubelet-sim demo`): every pod's steps, printed as they happen.

One code path with `kubelet-sim trace`: the steps are `trace.timeline()`'s, built from the same
four inputs (the pod, its events, the node's journal, Docker's containers). This module only
decides when a step's time first becomes known and prints it then, once, in the timeline's
order. `PodHandoff` is that decision and is pure; `stream()` feeds it from the package's own
Informers (pods; the scheduler's `Scheduled` and `FailedScheduling` events) and, for the steps
no watch announces (the journal's and Docker's), by polling the pods that are not finished.

A line: `12:00:01.234  default/web-1  n2  scheduled  by default-scheduler  +0.016s`, i.e. the
step's time (UTC; `~` marks the API's one-second timestamps), pod, node, step, detail, and the
latency since the pod's previous printed step.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from kubelet_sim import cri
from kubelet_sim.formats.durations import grace_seconds
from kubelet_sim.formats.jsontypes import Json
from kubelet_sim.kube.client import KubeConnection
from kubelet_sim.kube.informer import DELETED, Informer, object_key
from kubelet_sim.kube.watches import events_with_reason, pods_in_namespace
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.runtime.node_runtime import NodeRuntime
from kubelet_sim.tools.trace import SCHEDULED, Step, timeline

FAILED_SCHEDULING = "FailedScheduling"
READY_STEP = "Ready written"
# How long a known step waits for an earlier one still unknown. The parties record on their
# own channels (the scheduler's event comes on its own watch; Docker and the journal are read
# one after the other), so a later step can be seen a moment before an earlier one.
# KUBELET_SIM_HANDOFF_HOLD sets another (a loaded machine whose Docker lags, a test of order).
HOLD_SECONDS = 3.0
HOLD_ENV = "KUBELET_SIM_HANDOFF_HOLD"
TERMINAL_PHASES = ("Succeeded", "Failed")

log = get_logger("kubelet_sim.handoff")


def hold_seconds() -> float:
    """HOLD_SECONDS, or what KUBELET_SIM_HANDOFF_HOLD says (a number of seconds, at least 0)."""
    try:
        return max(0.0, float(os.environ.get(HOLD_ENV) or HOLD_SECONDS))
    except ValueError:
        log.warning("not a number of seconds: the default hold", variable=HOLD_ENV)
        return HOLD_SECONDS


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _stamp(when: datetime, precise: bool) -> str:
    when = when.astimezone(UTC)
    if precise:
        return when.strftime("%H:%M:%S.%f")[:12]
    return (when.strftime("%H:%M:%S") + "~").ljust(12)


def _seconds(delta: timedelta) -> str:
    return f"{delta.total_seconds():.3f}s"


def _condition(pod: Json, kind: str) -> Json:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def _event_time(event: Json) -> tuple[datetime | None, bool]:
    """When an event last happened, and whether that time has sub-second resolution."""
    series = event.get("series") or {}
    for value, precise in (
        (series.get("lastObservedTime"), True),
        (event.get("lastTimestamp"), False),
        (event.get("eventTime"), True),
        (event.get("firstTimestamp"), False),
        ((event.get("metadata") or {}).get("creationTimestamp"), False),
    ):
        when = _time(value)
        if when is not None:
            return when, precise
    return None, False


class PodHandoff:
    """What has been printed of one pod, and which lines fresh snapshots of it add.

    Pure (no I/O, no clock: the caller passes monotonic `now`), so each rule is tested without
    Docker or an API server. A step is printed once, when its time first becomes known, in the
    timeline's order; a known step waits at most `hold` seconds for an earlier unknown one,
    and after that the earlier one is passed over (printed late, if it ever comes).
    """

    def __init__(self, pod: Json, *, hold: float = HOLD_SECONDS) -> None:
        meta = pod.get("metadata") or {}
        self.uid = str(meta.get("uid") or "")
        self.name = f"{meta.get('namespace')}/{meta.get('name')}"
        self.node = ""
        self.hold = hold
        self.printed: dict[str, Step] = {}
        self._passed: set[str] = set()
        self._held_since: float | None = None
        self._last: Step | None = None  # the previous printed step
        self._last_precise: Step | None = None  # the previous one with a sub-second time
        self._scheduler_message = ""
        # Seen without spec.nodeName: a scheduler binds it, and its Scheduled event is due.
        self.seen_unbound = False
        self._deletion_began: datetime | None = None
        self.ready = False  # the summary line is out
        self.settled = False  # nothing more to poll for: Ready, ended, being deleted, or gone

    @property
    def waiting(self) -> bool:
        """A known step is held for an earlier one: evaluate again even without a change."""
        return self._held_since is not None

    # -- inputs ------------------------------------------------------------------------------

    def update(
        self,
        pod: Json,
        events: Sequence[Json],
        journal: Sequence[Json],
        containers: Sequence[cri.ObservedContainer],
        *,
        now: float,
        deleting: Json | None = None,
    ) -> list[str]:
        """The lines that this snapshot of the pod, its events, the node's journal and the
        node's containers adds to what was printed before."""
        node = (pod.get("spec") or {}).get("nodeName") or ""
        if not node:
            self.seen_unbound = True
        self.node = node or self.node
        lines: list[str] = []
        if not self.settled:
            meta, phase = pod.get("metadata") or {}, (pod.get("status") or {}).get("phase")
            ending = bool(meta.get("deletionTimestamp")) or phase in TERMINAL_PHASES
            steps = timeline(pod, events, journal, containers)
            lines += self._steps(pod, steps, now, flush=ending)
            if not node:  # a bound pod is never scheduled again: a failure seen now is history
                lines += self._failed_scheduling(events)
            if ending:  # the start is over: what it reached is out, what it did not never comes
                self.settled = True
                self._held_since = None
        lines += self._deletion(deleting or pod)
        return lines

    def already(self, pod: Json) -> list[str]:
        """A pod Ready (or ended) before the stream started: its start is history, so one line
        rather than the whole timeline, then only its deletion."""
        self.node = (pod.get("spec") or {}).get("nodeName") or ""
        self.settled = True
        ready = _condition(pod, "Ready")
        state = "Ready" if ready.get("status") == "True" else (pod.get("status") or {}).get("phase")
        when = _time(ready.get("lastTransitionTime")) or _time(
            (pod.get("metadata") or {}).get("creationTimestamp")
        )
        if when is None:
            return []
        return [self._line(when, False, f"already {state}", "before the stream started", "")]

    def gone(self, pod: Json, at: datetime, deleting: Json | None = None) -> list[str]:
        """The pod left the API at `at` (when its watch said so); `pod` is its last state,
        `deleting` the first one with a deletionTimestamp, if seen."""
        self.settled = True
        lines = self._deletion(deleting or pod)
        if self._deletion_began is None:
            return [*lines, self._line(at, True, "gone", "", "")]
        since = _seconds(at - self._deletion_began)
        return [*lines, self._line(at, True, "gone", "since deletion began", f"+{since}~")]

    # -- the rules ---------------------------------------------------------------------------

    def _steps(self, pod: Json, steps: Sequence[Step], now: float, *, flush: bool) -> list[str]:
        lines: list[str] = []
        blockers: list[str] = []
        held = False
        for s in steps:
            if s.step in self.printed:
                continue
            if s.time is None:
                if s.step not in self._passed and not self._never(s, steps, pod):
                    blockers.append(s.step)
                continue
            if blockers and not flush:
                if self._held_since is None:
                    self._held_since = now
                if now - self._held_since < self.hold:
                    held = True
                    break
                self._passed.update(blockers)  # waited long enough: print what is known
                blockers = []
            lines += self._print(s)
        if not held:
            self._held_since = None
        if self.ready and not self._late():
            self.settled = True
        return lines

    def _late(self) -> set[str]:
        """Steps passed over that are still to be printed, when their time comes."""
        return self._passed - self.printed.keys()

    def _never(self, step: Step, steps: Sequence[Step], pod: Json) -> bool:
        """Unknown steps that will stay unknown, or that go beside the others (the first status
        write is the status manager's, beside the runtime): nothing waits for them."""
        if step.step == "first status written":
            return True
        if step.step == "admitted":
            return any(s.step == "rejected" and s.time is not None for s in steps)
        if step.step == "bound":
            # Bound at creation (spec.nodeName), as far as we saw: no scheduler, no binding.
            return bool((pod.get("spec") or {}).get("nodeName")) and not self.seen_unbound
        return False

    def _print(self, s: Step) -> list[str]:
        assert s.time is not None
        if not s.precise:
            latency = "~" if self._last is not None else ""
        else:
            # As trace.render: latencies run between steps with sub-second times; from an
            # API timestamp (the creation) only roughly.
            base = self._last_precise or self._last
            latency = ""
            if base is not None and base.time is not None:
                mark = "" if base.precise else "~"
                latency = f"{(s.time - base.time).total_seconds():+.3f}s{mark}"
            self._last_precise = s
        self._last = s
        self.printed[s.step] = s
        lines = [self._line(s.time, s.precise, s.step, s.detail, latency)]
        if s.step == READY_STEP:
            self.ready = True  # settled by _steps once no passed-over step is still to come
            created = self.printed.get("created")
            if created is not None and created.time is not None:
                total = _seconds(s.time - created.time) + ("" if created.precise else "~")
                lines.append(self._line(s.time, True, "total", "created → Ready written", total))
        return lines

    def _failed_scheduling(self, events: Sequence[Json]) -> list[str]:
        """The scheduler's latest reason for not placing the pod, once per new message."""
        failed = [e for e in events if e.get("reason") == FAILED_SCHEDULING]
        if not failed:
            return []
        latest = max(failed, key=lambda e: _event_time(e)[0] or datetime.min.replace(tzinfo=UTC))
        message = str(latest.get("message") or "")
        when, precise = _event_time(latest)
        if message == self._scheduler_message or when is None:
            return []
        self._scheduler_message = message
        return [self._line(when, precise, FAILED_SCHEDULING, message, "")]

    def _deletion(self, pod: Json) -> list[str]:
        """Once: the deletion was asked for (deletionTimestamp is its start plus the grace)."""
        meta = pod.get("metadata") or {}
        deadline = _time(meta.get("deletionTimestamp"))
        if self._deletion_began is not None or deadline is None:
            return []
        self.settled = True
        grace = grace_seconds(meta.get("deletionGracePeriodSeconds"), 0)
        try:
            self._deletion_began = deadline - timedelta(seconds=grace)
        except OverflowError:  # a server's own overflow can put the deadline near year 1
            self._deletion_began = deadline
        return [self._line(self._deletion_began, False, "deleting", f"grace period {grace}s", "")]

    def _line(self, when: datetime, precise: bool, step: str, detail: str, latency: str) -> str:
        parts = [_stamp(when, precise), self.name, self.node or "-", step, detail, latency]
        return "  ".join(p for p in parts if p)


# -- the stream ------------------------------------------------------------------------------


def _uid(obj: Json) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _history(pod: Json) -> bool:
    """Its start is over: Ready, or ended."""
    phase = (pod.get("status") or {}).get("phase")
    return _condition(pod, "Ready").get("status") == "True" or phase in TERMINAL_PHASES


class _Watched:
    """What the watches delivered, shared between the informers' threads and the stream's."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pods: dict[str, Json] = {}
        self.events: dict[str, dict[str, Json]] = {}  # pod uid -> event key -> event
        self.changed: set[str] = set()
        self.gone: list[tuple[Json, datetime]] = []
        self.existing: set[str] = set()  # there when the pod list came in
        self.unbound: set[str] = set()  # some version had no spec.nodeName (maybe not the last)
        # The first version with a deletionTimestamp: a tick may see only a later one (the
        # node's final DELETE sets the grace period to 0), and the deletion began with this.
        self.deletions: dict[str, Json] = {}

    def on_pod(self, kind: str, pod: Json, synced: bool) -> None:
        uid = _uid(pod)
        with self.lock:
            if (pod.get("metadata") or {}).get("deletionTimestamp"):
                self.deletions.setdefault(uid, pod)
            if kind == DELETED:
                self.pods.pop(uid, None)
                self.events.pop(uid, None)
                self.existing.discard(uid)
                self.unbound.discard(uid)
                self.gone.append((pod, datetime.now(UTC)))
                return
            if not synced:
                self.existing.add(uid)
            if not (pod.get("spec") or {}).get("nodeName"):
                self.unbound.add(uid)
            self.pods[uid] = pod
            self.changed.add(uid)

    def on_event(self, kind: str, event: Json) -> None:
        uid = str((event.get("involvedObject") or {}).get("uid") or "")
        if not uid:
            return
        with self.lock:
            ours = self.events.setdefault(uid, {})
            if kind == DELETED:
                ours.pop(object_key(event), None)
                if not ours:
                    del self.events[uid]
            else:
                ours[object_key(event)] = event
            self.changed.add(uid)

    def take(self, also: set[str]) -> tuple[list[Json], list[tuple[Json, datetime]]]:
        """The pods to evaluate (changed ones and `also`) in the order they first came, and
        those gone."""
        with self.lock:
            uids, self.changed = self.changed | also, set()
            gone, self.gone = self.gone, []
            pods = [pod for uid, pod in self.pods.items() if uid in uids]
        return pods, gone

    def events_of(self, uid: str) -> list[Json]:
        with self.lock:
            return list((self.events.get(uid) or {}).values())

    def deletion_of(self, uid: str, *, forget: bool = False) -> Json | None:
        with self.lock:
            return self.deletions.pop(uid, None) if forget else self.deletions.get(uid)


class _Stream:
    def __init__(
        self, runtimes: Mapping[str, NodeRuntime], write: Callable[[str], None], hold: float
    ) -> None:
        self.runtimes = runtimes
        self.write = write
        self.hold = hold
        self.watched = _Watched()
        self.handoffs: dict[str, PodHandoff] = {}

    def tick(self) -> None:
        """Evaluate the pods that changed and those still starting; say which are gone."""
        polled = {
            uid
            for uid, h in self.handoffs.items()
            if h.waiting or (not h.settled and h.node in self.runtimes)
        }
        pods, gone = self.watched.take(polled)
        now = time.monotonic()
        containers: dict[str, list[cri.ObservedContainer]] = {}  # Docker once per node a tick
        for pod in pods:
            self._emit(self._evaluate, pod, now, containers)
        for pod, at in gone:
            self._emit(self._gone, pod, now, at)

    def _emit(self, evaluate: Callable[..., list[str]], pod: Json, *args: Any) -> None:
        try:
            lines = evaluate(pod, *args)
        except Exception:  # one odd pod must not end everyone's stream
            meta = pod.get("metadata") or {}
            name = f"{meta.get('namespace')}/{meta.get('name')}"
            log.exception("handoff evaluation failed", pod=name, uid=_uid(pod))
            return
        for line in lines:
            self.write(line)

    def _evaluate(
        self, pod: Json, now: float, containers: dict[str, list[cri.ObservedContainer]]
    ) -> list[str]:
        uid = _uid(pod)
        handoff = self.handoffs.get(uid)
        if handoff is None:
            handoff = self.handoffs[uid] = PodHandoff(pod, hold=self.hold)
            if uid in self.watched.existing and _history(pod):
                return handoff.already(pod)
        handoff.seen_unbound |= uid in self.watched.unbound  # created and bound within a tick
        node = (pod.get("spec") or {}).get("nodeName") or ""
        runtime = self.runtimes.get(node)
        journal: list[Json] = []
        observed: list[cri.ObservedContainer] = []
        if runtime is not None and not handoff.settled:
            if node not in containers:
                containers[node] = self._containers(runtime, node)
            observed = containers[node]
            journal = runtime.files.read_journal(uid)
        events, deleting = self.watched.events_of(uid), self.watched.deletion_of(uid)
        return handoff.update(pod, events, journal, observed, now=now, deleting=deleting)

    def _containers(self, runtime: NodeRuntime, node: str) -> list[cri.ObservedContainer]:
        try:
            return runtime.list_containers(node)
        except Exception as exc:  # Docker away: the API's and the journal's steps still show
            log.warning("cannot list the node's containers", node=node, error=str(exc)[:300])
            return []

    def _gone(self, pod: Json, now: float, at: datetime) -> list[str]:
        handoff = self.handoffs.pop(_uid(pod), None) or PodHandoff(pod, hold=self.hold)
        events = self.watched.events_of(_uid(pod))
        deleting = self.watched.deletion_of(_uid(pod), forget=True)
        lines = (
            []
            if handoff.settled
            else handoff.update(pod, events, [], [], now=now, deleting=deleting)
        )
        return lines + handoff.gone(pod, at, deleting)


def stream(
    kube: KubeConnection,
    runtimes: Mapping[str, NodeRuntime],
    write: Callable[[str], None],
    stop: threading.Event,
    *,
    namespace: str | None = None,
    listening: threading.Event | None = None,
    poll: float = 0.25,
    hold: float | None = None,
) -> None:
    """Until stop: print each pod's handoff steps as they happen (one line per step).

    runtimes maps node name -> that node's NodeRuntime (its journal and its containers); a
    pod on another node shows the API's steps only. kube has admin credentials. namespace None
    = all namespaces. listening is set once the watches are synced. Pods not finished are
    evaluated again every `poll` seconds, for the steps no watch announces.
    """
    state = _Stream(runtimes, write, hold_seconds() if hold is None else hold)
    pods: Informer

    def on_pod(kind: str, pod: Json) -> None:
        state.watched.on_pod(kind, pod, synced=pods.synced.is_set())

    supervisor = Supervisor(tool="handoff")  # the stream's own watches, no node's
    pods = Informer(
        pods_in_namespace(kube.api, namespace), on_pod, supervisor=supervisor, tool="handoff"
    )
    informers = [pods] + [
        Informer(
            events_with_reason(kube.api, reason, namespace),
            state.watched.on_event,
            supervisor=supervisor,
            tool="handoff",
        )
        for reason in (SCHEDULED, FAILED_SCHEDULING)
    ]
    for informer in informers:
        informer.start()
    try:
        while not stop.is_set() and not all(i.synced.is_set() for i in informers):
            stop.wait(0.05)
        if stop.is_set():
            return
        if listening is not None:
            listening.set()
        while not stop.is_set():
            state.tick()
            stop.wait(poll)
    finally:
        for informer in informers:
            informer.stop()
