"""The prober manager (pkg/kubelet/prober/prober_manager.go, worker.go), without a thread per probe.

Each probe of each running container is a worker record; one scheduler thread keeps them in a
heap by their next tick, and a small pool runs the attempts that are due. Both are threads on
demand: the scheduler lives while the node has probes, the pool's threads while attempts are
due (a few seconds more, then they end). A probe never writes status: a result that changes
wakes the pod, and the pod's sync reads `results(uid)` as an input of the status it writes and
of the kills it decides (liveness, startup).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kubelet_sim import cri
from kubelet_sim.formats.durations import timer_wait
from kubelet_sim.logs import get_logger
from kubelet_sim.loops.clock import SYSTEM_CLOCK, Clock
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.pod.attempts import latest_attempt
from kubelet_sim.pod.probes import (
    ContainerProbes,
    Outcome,
    ProbeCounter,
    ProbeKind,
    ProbeResults,
    ProbeSpec,
    Result,
    probe_specs,
)
from kubelet_sim.pod.spec import ContainerView, PodView
from kubelet_sim.prober.handlers import ExecRuntime, run_probe

# (pod, container, event type, reason, message): the pod workers' event recorder.
RecordEvent = Callable[[PodView, ContainerView, str, str, str], None]
PROBE_THREADS = 4  # attempts in flight at once, whatever the number of probes

_Key = tuple[str, ProbeKind]  # container id, kind


@dataclass
class _Worker:
    uid: str
    pod: PodView
    container: ContainerView
    container_id: str
    started_at: float  # the clock's monotonic equivalent of the container's start
    counter: ProbeCounter
    on_hold: bool = False  # liveness/startup failed: no more probing of this attempt
    busy: bool = False

    @property
    def spec(self) -> ProbeSpec:
        return self.counter.spec


class ProbeManager:
    def __init__(
        self,
        runtime: ExecRuntime,
        record_event: RecordEvent,
        *,
        node: str = "",
        supervisor: Supervisor,
        threads: int = PROBE_THREADS,
        wake: Callable[[str], None] = lambda _uid: None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """`wake`: queue a pod for its worker again (a result changed)."""
        self.clock = clock
        self.runtime = runtime
        self.record_event = record_event
        self.wake = wake
        self._workers: dict[_Key, _Worker] = {}
        self._pod_keys: dict[str, set[_Key]] = {}  # each pod's workers: no scan of the node's
        self._pod_ips: dict[str, str] = {}
        self._heap: list[tuple[float, int, _Key, _Worker]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._due: deque[tuple[_Key, _Worker, str]] = deque()  # attempts for the pool
        self._pool = supervisor.on_demand(
            f"probe {node}", self._run_attempts, self._stop, limit=threads
        )
        self._scheduler = supervisor.on_demand(f"prober {node}", self._run, self._stop)
        self.attempts = 0
        self.log = get_logger("kubelet_sim.prober", node=node)

    def start(self) -> None:
        self._pool.start()
        self._scheduler.start()

    def shutdown(self) -> None:
        self._stop.set()
        with self._cond:
            self._due.clear()
            self._cond.notify_all()
        self._scheduler.stop()
        self._pool.stop()

    def threads(self) -> int:
        """The scheduler's and the pool's threads alive now: none while nothing is probed."""
        return self._scheduler.running() + self._pool.running()

    # -- what the pod workers tell and ask -----------------------------------------------

    def sync_pod(
        self, pod: PodView, observed: Sequence[cri.ObservedContainer], pod_ip: str
    ) -> None:
        """Probe exactly the running app containers' and sidecars' probes (AddPod/RemovePod in
        one call)."""
        wanted: dict[_Key, tuple[ContainerView, cri.ObservedContainer, ProbeSpec]] = {}
        for container in (*pod.sidecars, *pod.containers):
            latest = latest_attempt(observed, container.name)
            if latest is None or latest.state is not cri.ContainerState.RUNNING:
                continue
            for spec in probe_specs(container):
                wanted[(latest.id, spec.kind)] = (container, latest, spec)
        now = self.clock.monotonic()
        with self._cond:
            self._pod_ips[pod.uid] = pod_ip
            keys = self._pod_keys.setdefault(pod.uid, set())
            for key in keys - wanted.keys():
                del self._workers[key]
            keys.intersection_update(wanted)
            for key in keys:
                self._workers[key].pod = pod
            for key, (container, latest, spec) in wanted.items():
                if key in self._workers:
                    continue
                started = latest.started_at.timestamp() if latest.started_at else self.clock.time()
                worker = self._workers[key] = _Worker(
                    uid=pod.uid,
                    pod=pod,
                    container=container,
                    container_id=latest.id,
                    started_at=now - max(0.0, self.clock.time() - started),
                    counter=ProbeCounter.new(spec),
                )
                keys.add(key)
                heapq.heappush(self._heap, (now, next(self._seq), key, worker))
                self._cond.notify_all()
                self._scheduler.wake()

    def recheck(self) -> None:
        """Look at the clock again now: the scheduler does so as real time passes; with a clock
        moved by hand (tests), the one who moves it calls this."""
        with self._cond:
            self._cond.notify_all()

    def forget_pod(self, uid: str) -> None:
        with self._cond:
            for key in self._pod_keys.pop(uid, set()):
                del self._workers[key]
            self._pod_ips.pop(uid, None)

    def results(self, uid: str) -> ProbeResults:
        found: dict[str, dict[ProbeKind, Result]] = {}
        with self._cond:
            for cid, kind in self._pod_keys.get(uid, ()):
                found.setdefault(cid, {})[kind] = self._workers[(cid, kind)].counter.result
        return ProbeResults(
            {
                cid: ContainerProbes(
                    liveness=kinds.get(ProbeKind.LIVENESS),
                    readiness=kinds.get(ProbeKind.READINESS),
                    startup=kinds.get(ProbeKind.STARTUP),
                )
                for cid, kinds in found.items()
            }
        )

    # -- the scheduler -------------------------------------------------------------------

    def _run(self) -> None:
        """Hand each due attempt to the pool; return once the node has no probe left."""
        while not self._stop.is_set():
            with self._cond:
                if not self._workers:
                    self._heap.clear()  # only ticks of workers that are gone
                    return
                due = self._next_due()
                if due is None:
                    wait = self._heap[0][0] - self.clock.monotonic()  # a worker has a tick
                    self._cond.wait(timer_wait(wait))
                    continue
                key, worker = due
                worker.busy = True
                self._due.append((key, worker, self._pod_ips.get(worker.uid, "")))
            self._pool.wake()

    def _run_attempts(self) -> None:
        """The pool: run due attempts until none is left."""
        while not self._stop.is_set():
            with self._cond:
                if not self._due:
                    return
                key, worker, ip = self._due.popleft()
            self._attempt(key, worker, ip)

    def _next_due(self) -> tuple[_Key, _Worker] | None:
        """Pop ticks that are due; the first whose worker should probe now is returned."""
        now = self.clock.monotonic()
        while self._heap and self._heap[0][0] <= now:
            tick, _, key, worker = heapq.heappop(self._heap)
            if self._workers.get(key) is not worker:
                continue  # its container stopped: the worker is gone
            heapq.heappush(self._heap, (tick + worker.spec.period, next(self._seq), key, worker))
            if worker.busy or not self._should_probe(worker, now):
                continue
            return key, worker
        return None

    def _should_probe(self, worker: _Worker, now: float) -> bool:
        """worker.go's doProbe gates: held after a kill, started first, the initial delay."""
        if worker.on_hold:
            return False
        if worker.spec.kind is ProbeKind.STARTUP:
            if worker.counter.result is Result.SUCCESS:
                return False  # a started container is never probed for startup again
        elif not self._started(worker):
            return False
        return now - worker.started_at >= worker.spec.initial_delay

    def _started(self, worker: _Worker) -> bool:
        startup = self._workers.get((worker.container_id, ProbeKind.STARTUP))
        return startup is None or startup.counter.result is Result.SUCCESS

    # -- one attempt (on the pool) -------------------------------------------------------

    def _attempt(self, key: _Key, worker: _Worker, pod_ip: str) -> None:
        spec = worker.spec
        try:
            if spec.action is None:
                outcome, output = Outcome.UNKNOWN, spec.error
            else:
                outcome, output = run_probe(
                    spec.action, self.runtime, worker.container_id, pod_ip, spec.timeout
                )
        except Exception as exc:  # a probe must never take the pool down
            outcome, output = Outcome.UNKNOWN, f"{type(exc).__name__}: {exc}"
        with self._cond:
            self.attempts += 1
            worker.busy = False
            if self._workers.get(key) is not worker:
                return  # the container stopped while it was probed
            changed = worker.counter.record(outcome)
            if (
                changed
                and worker.counter.result is Result.FAILURE
                and spec.kind
                in (
                    ProbeKind.LIVENESS,
                    ProbeKind.STARTUP,
                )
            ):
                worker.on_hold = True
        self._tell(worker, outcome, output)
        if changed:
            self.log.info(
                "probe result changed",
                pod=f"{worker.pod.namespace}/{worker.pod.name}",
                container=worker.container.name,
                probe=spec.kind.value,
                result=worker.counter.result.value,
            )
            self.wake(worker.uid)

    def _tell(self, worker: _Worker, outcome: Outcome, output: str) -> None:
        """prober.go's events: Unhealthy for a failure or an error, ProbeWarning for a warning."""
        kind = worker.spec.kind.value
        if outcome is Outcome.FAILURE:
            reason, message = "Unhealthy", f"{kind} probe failed: {output}"
        elif outcome is Outcome.UNKNOWN:
            reason = "Unhealthy"  # prober.go, since the result is named in it
            message = f"{kind} probe errored and resulted in unknown state: {output}"
        elif outcome is Outcome.WARNING:
            reason, message = "ProbeWarning", f"{kind} probe warning: {output}"
        else:
            return
        self.record_event(worker.pod, worker.container, "Warning", reason, message)
