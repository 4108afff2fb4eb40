"""The stopper's SIGKILL timer, without Docker: when kills are sent, and how a shorter grace
period hurries one in flight. Real stops are in test_slow_work.py."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from kubelet_sim import cri
from kubelet_sim.loops.backoff import Backoff
from kubelet_sim.loops.supervise import RUNNING, Supervisor
from kubelet_sim.pod.spec import PodView
from kubelet_sim.podworkers.state import PodState
from kubelet_sim.podworkers.stopper import ContainerStopper
from tests.cluster import wait_for
from tests.manifests import pod_manifest, served
from tests.observed import observed_container

REF = cri.PodRef(node="n1", name="p", namespace="ns", uid="u1")


@dataclass
class FakeRuntime:
    node_name: str = "n1"
    calls: list[tuple[str, str, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def signal_stop(self, container_id: str) -> bool:
        with self.lock:
            self.calls.append(("term", container_id, time.monotonic()))
        return True

    def kill_container(self, container_id: str) -> None:
        with self.lock:
            self.calls.append(("kill", container_id, time.monotonic()))

    def inspect(self, container_id: str) -> None:
        return None

    def kills(self) -> list[tuple[str, str, float]]:
        with self.lock:
            return [c for c in self.calls if c[0] == "kill"]


class FakeWatcher:
    def get(self, container_id: str) -> None:
        return None  # unknown: the timer kills it

    def record(self, observed: Any) -> None:
        pass


class NoEvents:
    def event(self, *args: Any) -> None:
        pass


def running(container_id: str) -> cri.ObservedContainer:
    return observed_container(pod=REF, container_id=container_id)


def view() -> PodView:
    return PodView.from_api(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {"containers": [{"name": "c"}]},
        }
    )


def stopper() -> tuple[ContainerStopper, FakeRuntime]:
    runtime = FakeRuntime()
    return ContainerStopper(runtime, FakeWatcher(), NoEvents(), supervisor=Supervisor()), runtime  # type: ignore[arg-type]


def test_a_stop_returns_at_once_and_kills_when_the_grace_period_ends() -> None:
    stop, runtime = stopper()
    began = time.monotonic()
    stop.stop(view(), running("a"), PodState(), 2, "Stopping container c")
    assert time.monotonic() - began < 0.5
    assert [c[0] for c in runtime.calls] == ["term"]
    kill = wait_for(runtime.kills, 5, "the SIGKILL")[0]
    assert kill[2] - began >= 2.0
    stop.shutdown()


def test_a_shorter_grace_period_moves_the_kill_earlier_and_a_longer_one_does_not() -> None:
    stop, runtime = stopper()
    state = PodState()
    began = time.monotonic()
    stop.stop(view(), running("a"), state, 60, "Stopping container c")
    stop.stop(view(), running("a"), state, 120, "Stopping container c")
    stop.stop(view(), running("a"), state, 2, "Stopping container c")
    kills = wait_for(runtime.kills, 5, "the hurried SIGKILL")
    assert kills[0][2] - began < 5
    assert [c[0] for c in runtime.calls].count("term") == 1, "the stop signal is sent once"
    assert stop.stopping() == 0
    stop.shutdown()


def test_grace_zero_kills_without_a_stop_signal() -> None:
    stop, runtime = stopper()
    stop.stop(view(), running("a"), PodState(), 0, "Stopping container c")
    wait_for(runtime.kills, 5, "the SIGKILL")
    assert [c[0] for c in runtime.calls] == ["kill"]
    stop.shutdown()


def sidecar_pod() -> PodView:
    """App container `app`; sidecars `s1` then `s2` (s2 is stopped first, then s1)."""
    sidecars = [{"name": n, "restartPolicy": "Always"} for n in ("s1", "s2")]
    return PodView.from_api(served(pod_manifest("p", [{"name": "app"}], initContainers=sidecars)))


def named(name: str) -> cri.ObservedContainer:
    return observed_container(name, pod=REF, container_id=name)


def terms(runtime: FakeRuntime) -> list[str]:
    with runtime.lock:
        return [c[1] for c in runtime.calls if c[0] == "term"]


def test_sidecars_are_signalled_after_the_app_containers_the_last_declared_first() -> None:
    stop, runtime = stopper()
    pod, state = sidecar_pod(), PodState()
    everyone = [named("app"), named("s1"), named("s2")]
    again = stop.stop_all(pod, everyone, state, 30)
    assert terms(runtime) == ["app"]  # the sidecars wait their turn
    assert again is not None
    assert again < 31
    stop.stop_all(pod, [named("s1"), named("s2")], state, 30)  # app stopped
    assert terms(runtime) == ["app", "s2"]
    stop.stop_all(pod, [named("s1"), named("s2")], state, 30)  # s2 still stopping
    assert terms(runtime) == ["app", "s2"]
    stop.stop_all(pod, [named("s1")], state, 30)
    assert terms(runtime) == ["app", "s2", "s1"]
    stop.shutdown()


def test_a_sidecar_stops_when_the_grace_period_is_spent_even_if_the_app_container_runs() -> None:
    stop, runtime = stopper()
    pod, state = sidecar_pod(), PodState()
    everyone = [named("app"), named("s1"), named("s2")]
    again = stop.stop_all(pod, everyone, state, 1)
    assert again is not None
    assert again <= 1.1  # back when the sidecars' wait ends
    assert terms(runtime) == ["app"]
    assert state.stop is not None
    began = state.stop.began
    wait_for(lambda: time.monotonic() - began >= 1, 3, "the grace period")
    stop.stop_all(pod, everyone, state, 1)
    assert sorted(terms(runtime)) == ["app", "s1", "s2"]
    # each has at least 2 s left before its SIGKILL (killContainer's minimum)
    assert not [k for k in runtime.kills() if k[1] in ("s1", "s2")]
    stop.shutdown()


def test_with_no_grace_everything_is_killed_at_once() -> None:
    stop, runtime = stopper()
    stop.stop_all(sidecar_pod(), [named("app"), named("s1"), named("s2")], PodState(), 0)
    wait_for(lambda: len(runtime.kills()) == 3, 3, "three SIGKILLs")
    assert terms(runtime) == []
    stop.shutdown()


# -- numbers no timer can take, and a timer that failed --------------------------------------


def test_a_grace_period_past_any_timer_leaves_the_others_on_time() -> None:
    """10**10 s is past what Condition.wait takes (OverflowError): the timer sleeps in bounded
    steps, so it lives on and the 2 s grace of another container ends in its SIGKILL."""
    stop, runtime = stopper()
    stop.stop(view(), running("forever"), PodState(), 10**10, "Stopping container c")
    began = time.monotonic()
    stop.stop(view(), running("a"), PodState(), 2, "Stopping container c")
    kills = wait_for(runtime.kills, 10, "the SIGKILL of the 2 s grace")
    assert [k[1] for k in kills] == ["a"]
    assert kills[0][2] - began >= 2.0
    assert stop.stopping() == 1, "the other one's SIGKILL is still booked"
    stop.shutdown()


def test_the_stop_timer_runs_under_supervision(monkeypatch: pytest.MonkeyPatch) -> None:
    """A timer that raised is restarted, and the SIGKILLs it had booked still come."""
    runtime = FakeRuntime()
    supervisor = Supervisor(backoff=lambda: Backoff(initial=0.05, cap=0.1))
    stop = ContainerStopper(runtime, FakeWatcher(), NoEvents(), supervisor=supervisor)  # type: ignore[arg-type]
    next_due = stop._next_due
    failures = iter([OverflowError("timestamp out of range for platform time_t")])

    def fails_once() -> str | None:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return next_due()

    monkeypatch.setattr(stop, "_next_due", fails_once)
    stop.stop(view(), running("a"), PodState(), 2, "Stopping container c")
    wait_for(runtime.kills, 10, "the SIGKILL, after a restart of the timer")
    (timer,) = supervisor.health().values()
    assert (timer.state, timer.restarts, timer.last_error) == (
        RUNNING,
        1,
        "OverflowError: timestamp out of range for platform time_t",
    )
    stop.shutdown()
