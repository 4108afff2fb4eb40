"""A sync writes the status of the runtime state it started from, before it acts (the kubelet's
SyncPod): what its own actions did is told by the next sync. So a container that starts and
exits between two observations is never told running, and a liveness kill and the restart that
follows it are told in one write, as the real kubelet's (issue 32)."""

from __future__ import annotations

import pytest

from kubelet_sim.formats.jsontypes import Json
from tests.cluster import wait_for
from tests.unit.harness import Node, container, pod_body
from tests.unit.pod_lifecycle.test_probes import _answers, _attempts, _tick


def _entries(status: Json) -> list[Json]:
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def _ever_running(node: Node, uid: str, name: str) -> list[Json]:
    """Every write that told `name` running (or, while not terminated, ready), or the pod
    Ready. A completed init container is ready, as the kubelet tells it."""
    told = []
    for status in node.status.history(uid):
        for entry in _entries(status):
            state = entry["state"]
            ready = entry.get("ready") and "terminated" not in state
            if entry["name"] == name and ("running" in state or ready):
                told.append(status)
        for cond in status.get("conditions") or []:
            if cond["type"] == "Ready" and cond["status"] == "True":
                told.append(status)
    return told


def _exit_between_syncs(node: Node, uid: str, name: str, code: int) -> None:
    """The container the last sync started exits before the next sync looks."""
    running = node.runtime.running(uid)
    started = [c for c in running if c.name == name]
    assert started, f"{name} was not started"
    node.runtime.exit(started[-1].id, code)


@pytest.mark.parametrize("policy", ["Always", "OnFailure", "Never"])
def test_a_container_that_exits_before_the_next_observation_is_never_told_running(
    node: Node, policy: str
) -> None:
    uid = node.add(pod_body(restartPolicy=policy))
    node.sync(uid)  # Pending first, then the sandbox and the container start
    assert node.runtime.operations("start")
    assert node.container_status(uid, "app")["state"]["waiting"]["reason"] == "ContainerCreating"
    _exit_between_syncs(node, uid, "app", 1)
    node.sync(uid)
    app = node.container_status(uid, "app")
    assert app["state"]["terminated"]["reason"] == "Error"
    assert app["restartCount"] == 0
    assert app["ready"] is False
    if policy == "Never":
        assert node.last_status(uid)["phase"] == "Failed"
    else:  # restarted at once; the new attempt is told by the sync after
        assert len(node.containers(uid, "app")) == 2
    assert _ever_running(node, uid, "app") == []


def test_an_init_container_that_ends_before_the_next_observation_is_never_told_running(
    node: Node,
) -> None:
    uid = node.add(pod_body(initContainers=[container("init", command=["echo", "one"])]))
    node.sync(uid)
    _exit_between_syncs(node, uid, "init", 0)
    node.sync(uid)  # tells init Completed, starts app
    init = node.container_status(uid, "init")
    assert init["state"]["terminated"]["reason"] == "Completed"
    assert node.condition(uid, "Initialized") == "True"
    assert _ever_running(node, uid, "init") == []
    assert node.container_status(uid, "app")["state"]["waiting"]["reason"] == "PodInitializing"
    node.sync(uid)
    assert "running" in node.container_status(uid, "app")["state"]


def test_the_container_a_sync_started_is_told_by_the_next_sync(node: Node) -> None:
    uid = node.add(pod_body())
    node.sync(uid)
    assert node.runtime.running(uid)  # started by the first sync...
    assert node.condition(uid, "Ready") == "False"  # ...which told what it started from
    node.sync(uid)
    assert node.condition(uid, "Ready") == "True"
    assert node.container_status(uid, "app")["started"] is True


def test_a_liveness_kill_and_its_restart_are_told_in_one_write(node: Node) -> None:
    _answers(node, 1)
    probe = {"exec": {"command": ["check"]}, "periodSeconds": 10, "failureThreshold": 1}
    uid = node.add(pod_body(containers=[container(livenessProbe=probe)]))
    node.syncer.start()
    node.sync_until(uid, lambda: node.condition(uid, "Ready") == "True", "Ready")
    wait_for(lambda: _attempts(node) >= 1, 10, "the first attempt")
    node.wait_woken(uid)
    node.sync(uid)  # the failure: the container is killed (it stops at once here)
    assert node.events.of("Killing")
    node.sync(uid)  # the kill's sync goes on: the restart, nothing written first
    node.sync(uid)  # the restart is told
    assert len(node.containers(uid, "app")) == 2
    app = node.container_status(uid, "app")
    assert app["restartCount"] == 1
    assert "running" in app["state"]
    assert app["lastState"]["terminated"]["exitCode"] == 143
    for status in node.status.history(uid):
        for entry in _entries(status):
            assert not ("terminated" in entry["state"] and entry["restartCount"] == 0), status
    _tick(node, 0, 1)  # the prober still answers for the new attempt


def test_a_second_liveness_restart_backs_off_from_the_attempt_before_the_killed_one(
    node: Node,
) -> None:
    """The SyncPod that kills a container for its liveness probe starts it again judging from
    where it ran: doBackOff looks at the attempt that ended before it. Ten seconds after the
    first restart, the second comes at once (no BackOff), as on the real kubelet."""
    _answers(node, 1)
    probe = {"exec": {"command": ["check"]}, "periodSeconds": 10, "failureThreshold": 1}
    uid = node.add(pod_body(containers=[container(livenessProbe=probe)]))
    node.syncer.start()
    node.sync_until(uid, lambda: node.condition(uid, "Ready") == "True", "Ready")
    for attempt in (1, 2):
        wait_for(lambda n=attempt: _attempts(node) >= n, 10, f"probe attempt {attempt}")
        node.wait_woken(uid)
        node.sync(uid)  # the kill (the fake container ends on its signal at once)
        node.sync(uid)  # the restart, judged from where the killed attempt ran
        assert len(node.containers(uid, "app")) == attempt + 1
        node.sync(uid)  # the new attempt is told, and probed from now on
        node.clock.advance(12)
        node.syncer.prober.recheck()
    assert "BackOff" not in node.events.reasons(uid)
    assert node.containers(uid, "app")[-1].state.value == "running"
