"""What a user watching a pod sees, write by write, compared with the kubelet's own writes.

Every status write of the pod is read from a watch (not polled), so a state that lasts one write
is seen. The kubelet (kubelet.go SyncPod) writes the status it generated *before* its runtime's
SyncPod acts, with the reasons of the sync before (reasonCache): a container that just died is
`terminated` until the next sync says CrashLoopBackOff, and what happens during a sync (a sandbox
made, an image being pulled) is never shown half done.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kubelet_sim.formats.jsontypes import Json
from tests.agent_fixture import RunningAgent
from tests.cluster import ApiUnderTest, EventStream, open_watch
from tests.pods import container, make_pod

pytestmark = pytest.mark.docker


@pytest.fixture
def pod_writes(cluster: ApiUnderTest) -> Iterator[EventStream]:
    stream = open_watch(
        cluster.core.list_namespaced_pod,
        cluster.namespace,
        timeout_seconds=240,
        _request_timeout=300,
    )
    yield stream
    stream.close()


def statuses_of(stream: EventStream, name: str, until: Any, timeout: float) -> list[Json]:
    """Each status the watch showed for pod `name`, until one satisfies `until`."""
    seen: list[Json] = []

    def done(event: Json) -> bool:
        obj = event["object"]
        if obj.get("metadata", {}).get("name") != name or event["type"] == "DELETED":
            return False
        status = obj.get("status") or {}
        if not seen or seen[-1] != status:
            seen.append(status)
        return bool(until(status))

    stream.wait(done, timeout)
    return seen


def app_status(status: Json) -> Json:
    return next(iter(status.get("containerStatuses") or [{}]))


def state_of(cs: Json) -> str:
    state = cs.get("state") or {}
    if "running" in state:
        return "running"
    if "terminated" in state:
        return f"terminated:{state['terminated'].get('reason')}"
    return f"waiting:{(state.get('waiting') or {}).get('reason', '')}"


def test_a_crash_looping_container_is_ready_whenever_it_runs_and_terminated_before_backoff(
    cluster: ApiUnderTest, agent: RunningAgent, pod_writes: EventStream
) -> None:
    """Runs 1 s, exits 1, restartPolicy Always, no probe: three restarts (immediate, 10 s,
    20 s of back-off), every write watched.

    Ready as soon as running (prober_manager UpdatePodStatus: no readiness probe is ready):
    no write shows the container running and not ready, so that upstream's "should run with
    the expected status" sees restartCount, phase Running and ready true together.
    After each exit the kubelet first writes `terminated` (Error) with that attempt's restart
    count, and only its next sync says `waiting: CrashLoopBackOff`."""
    make_pod(cluster, "crashloop", container(command=["sh", "-c", "sleep 1; exit 1"]))
    writes = statuses_of(
        pod_writes,
        "crashloop",
        lambda s: app_status(s).get("restartCount", 0) >= 3 and "running" in app_status(s)["state"],
        90,
    )
    trail = [(state_of(app_status(s)), app_status(s).get("restartCount")) for s in writes]
    for status in writes:
        cs = app_status(status)
        if "running" in (cs.get("state") or {}):
            assert (cs["ready"], cs["started"]) == (True, True), trail
            ready = {c["type"]: c["status"] for c in status["conditions"]}
            assert ready["ContainersReady"] == ready["Ready"] == "True", trail
        elif cs:
            assert cs["ready"] is False, trail
        if cs.get("restartCount", 0) >= 1:
            assert status["phase"] == "Running", trail
    # (state, restartCount) as the kubelet writes them: each exit is told as it is first
    for count in (0, 1, 2):
        assert ("terminated:Error", count) in trail, trail
    for count in (1, 2):  # the back-offs (the first restart is immediate)
        backoff = trail.index(("waiting:CrashLoopBackOff", count))
        assert trail.index(("terminated:Error", count)) < backoff, trail
    assert [t for t in trail if t[0] == "running"] == [("running", n) for n in range(4)], trail


def test_a_pod_whose_image_cannot_be_pulled_gets_its_ip_with_err_image_pull(
    cluster: ApiUnderTest, agent: RunningAgent, pod_writes: EventStream
) -> None:
    """The kubelet pulls inside SyncPod, after the sandbox is made: its first write is
    ContainerCreating without an IP (generated before SyncPod), its next one has the sandbox's
    IP and the pull's ErrImagePull together. A ContainerCreating with a pod IP is never
    written (nor would be while a slow pull lasts)."""
    make_pod(cluster, "nopull", container(image="127.0.0.1:1/nope/img:1"))
    writes = statuses_of(
        pod_writes,
        "nopull",
        lambda s: (
            (app_status(s).get("state") or {}).get("waiting", {}).get("reason")
            == "ImagePullBackOff"
        ),
        60,
    )
    trail = [(state_of(app_status(s)), s.get("podIP")) for s in writes]
    with_ip = [t for t in trail if t[1]]
    assert with_ip, trail
    assert with_ip[0][0] == "waiting:ErrImagePull", trail
    assert all(t[1] is None for t in trail if t[0] == "waiting:ContainerCreating"), trail
    assert all(s["phase"] == "Pending" for s in writes), trail


# runtime.go's "should run with the expected status", restartPolicy Always: exit 1, then 0,
# then run for good (the attempts count themselves in an emptyDir).
RESTART_COUNTED = """f=/restart-count/restartCount
count=$(echo 'hello' >> $f ; wc -l $f | awk {'print $1'})
if [ $count -eq 1 ]; then exit 1; fi
if [ $count -eq 2 ]; then exit 0; fi
while true; do sleep 1; done
"""


def test_restart_count_two_phase_running_and_ready_come_together(
    cluster: ApiUnderTest, agent: RunningAgent, pod_writes: EventStream
) -> None:
    """Upstream polls restartCount until 2, then the phase until Running, then reads the pod's
    Ready condition once: it must be True. No write may show the third attempt running and
    the pod not ready, nor restartCount 2 before that attempt runs."""
    make_pod(
        cluster,
        "rpa",
        container(
            command=["sh", "-c", RESTART_COUNTED],
            volumeMounts=[{"name": "restart-count", "mountPath": "/restart-count"}],
        ),
        volumes=[{"name": "restart-count", "emptyDir": {}}],
    )
    writes = statuses_of(
        pod_writes,
        "rpa",
        lambda s: app_status(s).get("restartCount") == 2 and "running" in app_status(s)["state"],
        60,
    )
    trail = [(state_of(app_status(s)), app_status(s).get("restartCount")) for s in writes]
    for status in writes:
        cs = app_status(status)
        ready = {c["type"]: c["status"] for c in status.get("conditions") or []}
        if "running" in (cs.get("state") or {}):
            assert (cs["ready"], ready["Ready"]) == (True, "True"), trail
        if cs.get("restartCount") == 2:
            assert status["phase"] == "Running", trail
            assert "running" in cs["state"], trail
    first, second, backoff = (
        trail.index(("terminated:Error", 0)),
        trail.index(("terminated:Completed", 1)),
        trail.index(("waiting:CrashLoopBackOff", 1)),
    )
    assert first < second < backoff, trail
