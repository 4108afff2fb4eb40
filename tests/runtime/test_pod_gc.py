"""Container GC: the newest dead attempt per container stays, older ones and sandboxes go."""

from __future__ import annotations

import time

from kubelet_sim.cri import ContainerState, ObservedContainer, PodRef
from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.loops.timers import Timers
from kubelet_sim.pod.gc import garbage
from kubelet_sim.pod.restart_backoff import KeyedBackoff
from kubelet_sim.podworkers.gc import ContainerGC
from tests.observed import observed_container

REF = PodRef("n", "p", "ns", "u")


def c(name: str, attempt: int, state: ContainerState) -> ObservedContainer:
    return observed_container(name, attempt, state, pod=REF)


def test_keeps_newest_dead_attempt_and_the_running_one() -> None:
    containers = [
        c("app", 0, ContainerState.EXITED),
        c("app", 1, ContainerState.EXITED),
        c("app", 2, ContainerState.RUNNING),
        c("POD", 0, ContainerState.EXITED),
        c("POD", 1, ContainerState.RUNNING),
        c("done", 0, ContainerState.EXITED),
    ]
    assert sorted(x.id for x in garbage(containers)) == ["POD0", "app0"]


def test_nothing_to_collect_for_a_healthy_pod() -> None:
    assert garbage([c("POD", 0, ContainerState.RUNNING), c("app", 0, ContainerState.RUNNING)]) == []


def test_each_gc_pass_drops_idle_backoff_entries() -> None:
    class _Watcher:
        def all_containers(self) -> list[ObservedContainer]:
            return []

    crash = KeyedBackoff(initial=10, maximum=300)
    crash.next("idle", event_time=0, now=time.time() - 601)
    crash.next("fresh", event_time=0, now=time.time())
    timers = Timers(pool_threads=1, supervisor=Supervisor())
    gc = ContainerGC(_Watcher(), None, "n", timers, backoffs=[crash])  # type: ignore[arg-type]
    assert gc.collect() == 0
    assert len(crash) == 1
    assert crash.get("fresh") == 10
