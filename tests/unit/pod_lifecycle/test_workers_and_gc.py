"""The pod workers' threads and queue, admission, volumes and references, the container GC."""

from __future__ import annotations

from kubelet_sim.loops.supervise import Supervisor
from kubelet_sim.loops.timers import Timers
from kubelet_sim.loops.workqueue import WorkQueue
from kubelet_sim.podworkers.gc import ContainerGC
from kubelet_sim.podworkers.workers import PodWorkers, waker
from tests.cluster import wait_for
from tests.fakeruntime import Behaviour
from tests.unit.harness import Node, container, pod_body


def _workers(node: Node, resync: float = 60.0) -> PodWorkers:
    queue: WorkQueue[str] = WorkQueue(supervisor=node.supervisor)
    return PodWorkers(node.syncer, queue, workers=2, resync=resync, supervisor=node.supervisor)


def test_workers_sync_what_is_queued_and_come_back_when_asked(node: Node) -> None:
    workers = _workers(node)
    node.forward = workers.enqueue  # the pull's end queues the pod again
    node.runtime.on_change = workers.enqueue  # as Docker's events do
    workers.start()
    try:
        uid = node.add(pod_body(containers=[container(image="registry.example/app:1")]))
        workers.enqueue(uid)
        workers.enqueue("")  # nothing to sync: ignored
        wait_for(lambda: node.condition(uid, "Ready") == "True", 10, "Ready")
        assert workers.syncs >= 2  # the first started the pull, a later one the container
        assert workers.duration.snapshot()
    finally:
        workers.stop(2)


def test_a_sync_that_raises_is_retried_in_ten_seconds(node: Node) -> None:
    workers = _workers(node)
    node.pods["boom"] = {"metadata": {}}  # no uid, no spec: the sync raises
    assert workers._sync("boom") == 10.0
    uid = node.add(pod_body())
    assert workers._sync(uid) == 60.0  # a pod that is here: back at the next resync
    del node.pods[uid]
    assert workers._sync(uid) == 3.0  # gone: its containers stop first (2 s, and a margin)
    assert workers._sync(uid) is None  # then are removed: never again
    workers.stop(0)


def test_a_waker_queues_a_pod_once(node: Node) -> None:
    queue: WorkQueue[str] = WorkQueue(supervisor=node.supervisor)
    wake = waker(queue)
    wake("a")
    wake("a")
    wake("")
    assert len(queue) == 1
    queue.shut_down()


def test_a_pod_over_the_node_is_rejected_with_its_reason(node: Node) -> None:
    big = container(resources={"requests": {"cpu": "64"}})
    uid = node.add(pod_body(containers=[big]))
    node.sync(uid)
    status = node.last_status(uid)
    assert (status["phase"], status["reason"]) == ("Failed", "OutOfcpu")
    assert "OutOfcpu" in node.events.reasons(uid)
    assert node.runtime.operations("run_sandbox") == []
    node.delete(uid)
    node.sync(uid)
    assert node.deleted == [uid]


def test_pods_are_admitted_oldest_first_counting_only_active_ones(node: Node) -> None:
    half = container(resources={"requests": {"cpu": "3"}})
    done = node.add(pod_body("done", [half]))
    node.pods[done]["status"]["phase"] = "Succeeded"  # finished before the node saw it
    first = node.add(pod_body("first", [half]))
    second = node.add(pod_body("second", [half]))
    node.sync(second)
    node.sync(first)
    assert node.last_status(second)["reason"] == "OutOfcpu"
    assert "reason" not in node.last_status(first)
    assert node.runtime.operations("run_sandbox") == [first]


def test_a_volume_that_fails_to_mount_holds_the_pod_and_backs_off(node: Node) -> None:
    node.volumes.failing["data"] = 'MountVolume.SetUp failed for volume "data" : no'
    spec = {"volumes": [{"name": "data", "emptyDir": {}}]}
    mount = {"name": "data", "mountPath": "/data"}
    uid = node.add(pod_body(containers=[container(volumeMounts=[mount])], **spec))
    delay = node.sync(uid)
    assert delay == 2.0  # the volume manager's first retry
    assert node.sync(uid) == 4.0
    assert "FailedMount" in node.events.reasons(uid)
    assert node.runtime.operations("create") == []
    del node.volumes.failing["data"]
    node.clock.advance(delay)
    node.sync_until_ready(uid)


def test_a_pod_waits_for_the_first_list_of_what_it_references(node: Node) -> None:
    env = [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    ref = ("Secret", "ns", "s")
    node.objects.unsynced.add(ref)
    uid = node.add(pod_body(containers=[container(env=env)]))
    assert node.sync(uid) is None  # the list's end brings it back
    assert not node.status.has_written(uid)
    node.objects.unsynced.clear()
    node.objects.objects[ref] = {"data": {"k": "dg=="}}
    node.sync_until_ready(uid)


def test_the_gc_removes_dead_attempts_and_forgets_old_backoffs(node: Node) -> None:
    node.runtime.behave("app", Behaviour(exit_code=1))
    uid = node.add(pod_body())
    node.sync_until(uid, lambda: len(node.containers(uid, "app")) >= 3, "three attempts", 40)
    gc = ContainerGC(
        node.cache,
        node.syncer.stopper,
        "n1",
        # not started: the test runs one pass itself
        timers=Timers(pool_threads=1, supervisor=Supervisor()),
        backoffs=(node.syncer.starter.crash_backoff,),
        clock=node.clock,
    )
    removed = gc.collect()
    assert removed >= 1
    assert gc.removed == removed
    assert len(node.containers(uid, "app")) == 1  # only the newest dead attempt
    assert len(node.syncer.starter.crash_backoff) == 1
    node.clock.advance(3600)
    gc.collect()
    assert len(node.syncer.starter.crash_backoff) == 0  # idle past twice its maximum
    gc.start()
    gc.stop(2)


def test_a_pod_syncs_again_only_once_its_next_observation_can_be_in(node: Node) -> None:
    """The kubelet's pod worker waits for a pod cache entry newer than its last sync: wakes
    that come sooner (our own status write's echo, Docker's events of what the sync did) are
    held until OBSERVE_AFTER has passed since the sync ended, and then run as one sync."""
    import itertools
    import time

    from kubelet_sim.podworkers.waits import OBSERVE_AFTER

    workers = _workers(node)
    spans: list[tuple[float, float]] = []
    sync = node.syncer.sync

    def timed(uid: str) -> float | None:
        began = time.monotonic()
        try:
            return sync(uid)
        finally:
            spans.append((began, time.monotonic()))

    node.syncer.sync = timed  # type: ignore[method-assign]
    workers.start()
    try:
        uid = node.add(pod_body())
        workers.enqueue(uid)
        wait_for(lambda: len(spans) >= 1, 10, "the first sync")
        burst = time.monotonic()
        for _ in range(20):  # a burst of wakes right after it
            workers.enqueue(uid)
            time.sleep(0.01)
        burst = time.monotonic() - burst  # 0.2 s, longer on a loaded machine
        wait_for(lambda: node.condition(uid, "Ready") == "True", 10, "Ready")
        # The burst ran as a few syncs, not twenty: one per OBSERVE_AFTER it lasted, at most.
        assert 2 <= len(spans) <= 4 + int(burst / OBSERVE_AFTER) < 20, (len(spans), burst)
        for (_, ended), (began, _) in itertools.pairwise(spans):
            assert began - ended >= OBSERVE_AFTER * 0.99
    finally:
        workers.stop(2)


def test_a_pod_being_terminated_is_synced_again_without_the_relists_wait(node: Node) -> None:
    """The kubelet's killPod blocks until the containers stopped and its terminated sync
    follows at once: no relist wait between the stop and the final DELETE (podworkers/waits.py)."""
    import time

    from kubelet_sim.podworkers.waits import OBSERVE_AFTER, observe_after, relist_lag

    workers = _workers(node)
    node.forward = workers.enqueue
    node.runtime.on_change = workers.enqueue  # as Docker's events do
    workers.start()
    try:
        uid = node.add(pod_body())
        assert node.syncer.runs(uid)
        assert relist_lag(node.syncer.runs(uid)) > 0
        workers.enqueue(uid)
        wait_for(lambda: node.condition(uid, "Ready") == "True", 10, "Ready")
        time.sleep(OBSERVE_AFTER)  # the last sync's wait is over: only the deletion's count
        node.delete(uid, grace=30)
        began = time.monotonic()
        workers.enqueue(uid)
        wait_for(lambda: node.deleted == [uid], 10, "the final delete")
        assert time.monotonic() - began < OBSERVE_AFTER, "stop → DELETE waited for a relist"
        assert not node.syncer.runs(uid)
        assert observe_after(node.syncer.runs(uid)) == 0
    finally:
        workers.stop(2)
