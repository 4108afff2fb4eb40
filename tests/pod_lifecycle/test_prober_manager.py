"""The prober manager with a fake runtime: gates, holds and wake-ups, without Docker or an API.

Periods here are fractions of a second (the API's minimum is 1 s) so that the scheduling is
observed in a few ticks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from kubelet_sim import cri
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.pod.probes import Result
from kubelet_sim.pod.spec import ContainerView, PodView
from kubelet_sim.prober.manager import ProbeManager
from tests.cluster import wait_for
from tests.manifests import pod_manifest, served
from tests.observed import observed_container

REF = cri.PodRef(node="n1", namespace="ns", name="p", uid="u1")
TICK = 0.05


class FakeExec:
    """Answers each command by its first word: `ok` exits 0, anything else exits 1."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.first: dict[str, float] = {}  # time.monotonic() of each word's first call
        self.lock = threading.Lock()

    def exec_probe(
        self, container_id: str, command: Sequence[str], timeout: float
    ) -> cri.ExecResult:
        with self.lock:
            self.calls.append(tuple(command))
            self.first.setdefault(command[0], time.monotonic())
        if command[0] == "hang":
            return cri.ExecResult(None, "", timed_out=True)
        return cri.ExecResult(0 if command[0] == "ok" else 1, f"said {command[0]}")

    def count(self, word: str) -> int:
        with self.lock:
            return sum(1 for c in self.calls if c[0] == word)


def _pod(**probes: Any) -> PodView:
    return PodView.from_api(served(pod_manifest("p", [{"name": "c", "image": "i:1", **probes}])))


def _probe(word: str, **extra: Any) -> dict[str, Any]:
    return {"exec": {"command": [word]}, "periodSeconds": TICK, "failureThreshold": 1, **extra}


def _observed(cid: str = "c1") -> list[cri.ObservedContainer]:
    return [observed_container(pod=REF, container_id=cid, started_at=datetime.now(UTC))]


class Harness:
    def __init__(self) -> None:
        self.runtime = FakeExec()
        self.events: list[tuple[str, str]] = []
        self.woken: list[str] = []
        self.manager = ProbeManager(self.runtime, self._event, supervisor=Supervisor())
        self.manager.wake = self.woken.append
        self.manager.start()

    def _event(self, _p: PodView, _c: ContainerView, _t: str, reason: str, msg: str) -> None:
        self.events.append((reason, msg))

    def result(self, kind: str, cid: str = "c1") -> Result | None:
        probes = self.manager.results("u1").of(cid)
        return getattr(probes, kind) if probes is not None else None


def test_readiness_waits_for_startup_and_a_failed_liveness_is_held() -> None:
    h = Harness()
    try:
        pod = _pod(
            startupProbe=_probe("no", failureThreshold=1000),
            readinessProbe=_probe("ok"),
            livenessProbe=_probe("dead"),
        )
        h.manager.sync_pod(pod, _observed(), "10.0.0.2")
        wait_for(lambda: h.runtime.count("no") >= 3, 5, "startup probed")
        assert h.runtime.count("ok") == 0, "readiness waits for the startup probe"
        assert h.runtime.count("dead") == 0, "so does liveness"
        assert h.result("readiness") is Result.FAILURE
        assert ("Unhealthy", "Startup probe failed: said no") in h.events
        # the same container, now starting up fine
        started = _pod(
            startupProbe=_probe("ok"), readinessProbe=_probe("ok"), livenessProbe=_probe("dead")
        )
        h.manager.forget_pod("u1")
        h.manager.sync_pod(started, _observed("c2"), "10.0.0.2")
        wait_for(lambda: h.result("readiness", "c2") is Result.SUCCESS, 5, "ready once started")
        wait_for(lambda: h.result("liveness", "c2") is Result.FAILURE, 5, "liveness failed")
        assert "u1" in h.woken, "a changed result brings the pod back to its worker"
        held = h.runtime.count("dead")
        wait_for(lambda: h.runtime.count("ok") >= held + 6, 5, "other probes go on")
        assert h.runtime.count("dead") == held, "a failed liveness probe stops until a restart"
    finally:
        h.manager.shutdown()


def test_initial_delay_and_stopped_containers() -> None:
    h = Harness()
    try:
        began = time.monotonic()
        h.manager.sync_pod(
            _pod(readinessProbe=_probe("ok", initialDelaySeconds=0.5)), _observed(), ""
        )
        wait_for(lambda: h.result("readiness") is Result.SUCCESS, 5, "ready after the delay")
        assert h.runtime.first["ok"] - began >= 0.5, "no probe within the initial delay"
        other = PodView.from_api({**_pod(readinessProbe=_probe("other")).raw, "metadata": {
            "name": "q", "namespace": "ns", "uid": "u2"}})  # fmt: skip
        h.manager.sync_pod(other, _observed("c9"), "")
        h.manager.sync_pod(_pod(readinessProbe=_probe("ok")), [], "")
        assert h.manager.results("u1").of("c1") is None, "no result for a stopped container"
        calls = h.runtime.count("ok")
        marker = h.runtime.count("other")
        wait_for(lambda: h.runtime.count("other") >= marker + 6, 5, "six ticks of another pod")
        assert h.runtime.count("ok") <= calls + 1, "a stopped container is not probed"
    finally:
        h.manager.shutdown()


def test_a_timeout_fails_and_an_error_is_no_result() -> None:
    """exec.go: a timed out command is a failure; prober.go: a probe that cannot run (a port
    name the container lacks) is an error, told, and never counted."""
    h = Harness()
    try:
        pod = _pod(
            livenessProbe=_probe("hang", failureThreshold=2),
            readinessProbe={"tcpSocket": {"port": "nope"}, "periodSeconds": TICK},
        )
        h.manager.sync_pod(pod, _observed(), "10.0.0.2")
        wait_for(lambda: h.result("liveness") is Result.FAILURE, 5, "liveness failed")
        assert ("Unhealthy", 'Liveness probe failed: command "hang" timed out') in h.events
        errored = "Readiness probe errored and resulted in unknown state: port nope not found"
        wait_for(lambda: ("Unhealthy", errored) in h.events, 5, "the error told")
        assert h.result("readiness") is Result.FAILURE, "still its initial result"
    finally:
        h.manager.shutdown()


class _Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def event(self, _ref: object, _type: str, reason: str, message: str) -> None:
        self.seen.append((reason, message))


def test_hooks_sleep_within_their_bound_and_say_a_failed_pre_stop() -> None:
    """The sleep action (v1.29+: a v1.24 server drops it, so it is checked here) and the
    FailedPreStopHook event of a failed exec hook."""
    from kubelet_sim.podworkers.hooks import PRE_STOP, HookRunner

    events = _Events()
    runner = HookRunner(FakeExec(), events)  # type: ignore[arg-type]
    try:
        sleep = {"preStop": {"sleep": {"seconds": 30}}}
        fails = {"preStop": {"exec": {"command": ["no"]}}}
        pod = PodView.from_api(
            {
                "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "i", "lifecycle": sleep},
                        {"name": "d", "image": "i", "lifecycle": fails},
                    ]
                },
            }
        )
        began = time.monotonic()
        assert runner.run(pod, pod.containers[0], "c1", PRE_STOP, [], timeout=0.3) is None
        assert 0.3 <= time.monotonic() - began < 5, "a sleep hook ends with its grace period"
        error = runner.run(pod, pod.containers[1], "d1", PRE_STOP, [], timeout=1)
        assert error == (
            'Exec lifecycle hook ([no]) for Container "d" in Pod "p_ns(u1)" failed - error:'
            " command 'no' exited with 1: , message: \"said no\""
        )
        assert events.seen == [("FailedPreStopHook", error)]
    finally:
        runner.shutdown()
