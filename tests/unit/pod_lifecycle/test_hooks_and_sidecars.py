"""Lifecycle hooks (postStart, preStop) on their own threads, and sidecars stopping in turn.

Hook threads are real; the tests wait for what they report (the pod woken) with a deadline."""

from __future__ import annotations

from kubelet_sim import cri
from tests.cluster import wait_for
from tests.fakeruntime import Behaviour
from tests.unit.harness import Node, container, pod_body


def _exec_hook(*command: str) -> dict[str, object]:
    return {"exec": {"command": list(command)}}


def _ready_pod(node: Node, lifecycle: dict[str, object]) -> str:
    """A pod of one container, app, with these hooks, synced until Ready."""
    uid = node.add(pod_body(containers=[container(lifecycle=lifecycle)]))
    node.sync_until_ready(uid)
    return uid


def _delete_until_stop_signal(node: Node, uid: str) -> cri.ObservedContainer:
    """Delete the ready pod and wait (with a deadline) for app's stop signal; app returned."""
    app = node.containers(uid, "app")[0]
    node.delete(uid, grace=30)
    node.sync(uid)
    wait_for(lambda: app.id in node.runtime.operations("signal_stop"), 10, "the stop signal")
    return app


def _sidecar_pod(node: Node, *, app: Behaviour, log: Behaviour) -> str:
    """A pod of app and a sidecar, log (an init container always restarted), until Ready."""
    uid = node.add(pod_body(initContainers=[container("log", restartPolicy="Always")]))
    node.runtime.behave("log", log)
    node.runtime.behave("app", app)
    node.sync_until_ready(uid)
    return uid


def test_a_post_start_hook_holds_the_next_container_until_it_ends(node: Node) -> None:
    lifecycle = {"postStart": _exec_hook("sh", "-c", "exit 0")}
    uid = node.add(pod_body(containers=[container("a", lifecycle=lifecycle), container("b")]))
    node.sync(uid)  # the first status
    node.sync(uid)  # a starts, its hook runs on a thread of its own
    node.wait_woken(uid)
    assert "sh -c exit 0" in node.runtime.operations("exec")
    node.sync_until_ready(uid)
    assert node.runtime.operations("create") == ["a", "b"]


def test_a_failed_post_start_hook_kills_its_container(node: Node) -> None:
    lifecycle = {"postStart": _exec_hook("sh", "-c", "exit 7")}
    uid = node.add(pod_body(containers=[container(lifecycle=lifecycle)]))
    node.sync(uid)
    node.sync(uid)
    node.wait_woken(uid)
    node.sync(uid)
    failed = node.events.of("FailedPostStartHook")
    assert failed
    assert "exited with 7" in failed[0].message
    killing = node.events.of("Killing")
    assert killing[0].message == "FailedPostStartHook"
    first = node.containers(uid, "app")[0]
    assert first.state is cri.ContainerState.EXITED


def test_a_pre_stop_hook_runs_before_the_stop_signal(node: Node) -> None:
    uid = _ready_pod(node, {"preStop": _exec_hook("sh", "-c", "exit 0")})
    app = _delete_until_stop_signal(node, uid)
    calls = [c for c in node.runtime.calls if c[0] in ("exec", "signal_stop")]
    assert calls[0] == ("exec", "sh -c exit 0")
    assert calls[1] == ("signal_stop", app.id)
    node.sync_until_deleted(uid)


def test_a_failed_pre_stop_hook_still_ends_in_the_stop_signal(node: Node) -> None:
    hook = {"httpGet": {"host": "127.0.0.1", "port": 1, "path": "/quit"}}
    uid = _ready_pod(node, {"preStop": hook})
    _delete_until_stop_signal(node, uid)
    assert "HTTP lifecycle hook (/quit)" in node.events.of("FailedPreStopHook")[0].message
    node.sync_until_deleted(uid)


def test_a_sleep_hook_and_an_unknown_one(node: Node) -> None:
    hooks = {"postStart": {"sleep": {"seconds": 0}}, "preStop": {"tcpSocket": {"port": 1}}}
    uid = _ready_pod(node, hooks)
    node.delete(uid, grace=30)
    node.sync(uid)
    wait_for(lambda: node.events.of("FailedPreStopHook"), 10, "the hook's failure")
    message = node.events.of("FailedPreStopHook")[0].message
    assert message.endswith("no handler the kubelet knows")


def test_sidecars_stop_after_the_app_containers(node: Node) -> None:
    uid = _sidecar_pod(
        node, app=Behaviour(ignores_sigterm=True), log=Behaviour(ignores_sigterm=False)
    )
    app = node.containers(uid, "app")[0]
    log = node.containers(uid, "log")[0]
    node.delete(uid, grace=30)
    node.sync(uid)
    signalled = node.runtime.operations("signal_stop")
    assert app.id in signalled
    assert log.id not in signalled  # its turn comes once the app has stopped
    killing = sorted(e.field_path for e in node.events.of("Killing"))
    assert killing == ["spec.containers{app}", "spec.initContainers{log}"]  # both told at once
    node.runtime.kill_container(app.id)  # the app ends
    node.sync(uid)
    assert log.id in node.runtime.operations("signal_stop")
    node.sync_until_deleted(uid)


def test_a_sidecar_stops_when_the_grace_period_is_spent(node: Node) -> None:
    uid = _sidecar_pod(
        node, app=Behaviour(ignores_sigterm=True), log=Behaviour(ignores_sigterm=True)
    )
    log = node.containers(uid, "log")[0]
    node.delete(uid, grace=10)
    delay = node.sync(uid)
    assert delay is not None
    assert delay <= 10.1
    node.clock.advance(10.1)
    node.sync(uid)
    assert log.id in node.runtime.operations("signal_stop")  # the app still runs: its turn
    node.sync_until_deleted(uid)


def test_a_pod_whose_app_is_done_is_killed_and_starts_nothing_until_it_is_down(node: Node) -> None:
    """killPod from SyncPod: restartPolicy Never and the app done, so the sidecar is stopped,
    and while it ignores its stop signal no container starts (the stop goes on across syncs)."""
    from kubelet_sim.podworkers.state import Syncing

    node.runtime.behave("log", Behaviour(ignores_sigterm=True))
    node.runtime.behave("app", Behaviour(exit_code=0))
    sidecar = container("log", restartPolicy="Always")
    uid = node.add(pod_body(initContainers=[sidecar], restartPolicy="Never"))
    signalled = node.runtime.operations  # a callable: the operations so far

    def log_signalled() -> bool:
        return any(c.id in signalled("signal_stop") for c in node.containers(uid, "log"))

    node.sync_until(uid, log_signalled, "the sidecar's stop signal")
    syncing = node.syncer.states[uid].lifecycle
    assert isinstance(syncing, Syncing)
    assert syncing.killing_pod
    created = len(node.runtime.operations("create"))
    node.sync(uid)
    assert syncing.killing_pod  # still down to stop: nothing started
    assert len(node.runtime.operations("create")) == created
    node.clock.advance(31)
    node.syncer.stopper.kill_due()
    node.sync_until(uid, lambda: node.last_status(uid)["phase"] == "Succeeded", "Succeeded")
    # Down, and terminated as the kubelet's SyncPod does once its status is terminal.
    assert not isinstance(node.syncer.states[uid].lifecycle, Syncing)
    assert len(node.runtime.operations("create")) == created


def test_a_killed_pods_sidecar_end_is_told_with_its_sandbox_down(node: Node) -> None:
    """killPodWithSyncResult stops the sidecar and then the sandbox in one SyncPod, so no
    status tells the sidecar ended while PodReadyToStartContainers is still True (the v1.34
    kubelet never wrote one in compare's sidecar-app-exits)."""
    node.runtime.behave("app", Behaviour(exit_code=0))
    sidecar = container("log", restartPolicy="Always")
    uid = node.add(pod_body(initContainers=[sidecar], restartPolicy="Never"))
    node.sync_until(uid, lambda: node.last_status(uid)["phase"] == "Succeeded", "Succeeded")
    for status in node.status.history(uid):
        (log,) = status.get("initContainerStatuses") or [{}]
        if "terminated" in (log.get("state") or {}):
            ready = {c["type"]: c["status"] for c in status["conditions"]}
            assert ready["PodReadyToStartContainers"] == "False", status
