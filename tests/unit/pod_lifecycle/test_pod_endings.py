"""How pods end: crash loops, restart policies, deletion with its grace period, deadlines, a
pod gone from the API. The clock is moved by hand: a 30 s grace period takes no time."""

from __future__ import annotations

from kubelet_sim import cri
from tests.fakeruntime import Behaviour
from tests.unit.harness import Node, api_error, container, pod_body


def test_a_crash_loop_backs_off_ten_then_twenty_seconds(node: Node) -> None:
    node.runtime.behave("app", Behaviour(exit_code=1))
    uid = node.add(pod_body())

    def waiting() -> str:
        state = node.container_status(uid, "app")["state"] if node.status.history(uid) else {}
        return str((state.get("waiting") or {}).get("message", ""))

    node.sync_until(uid, lambda: "back-off 10s" in waiting(), "the first back-off")
    # The first restart came at once; the back-off is told by the pod worker's next sync (10 s
    # after the failed start, as the kubelet's), which also starts the next attempt: the 10 s
    # since the death are out by then.
    assert node.container_status(uid, "app")["restartCount"] == 1
    assert "BackOff" in node.events.reasons(uid)
    node.sync_until(uid, lambda: "back-off 20s" in waiting(), "the doubled back-off")
    assert len(node.containers(uid, "app")) == 3
    node.clock.advance(5)  # 15 s since the death: not one more before the 20 s are out
    node.sync(uid)
    assert len(node.containers(uid, "app")) == 3
    assert waiting().startswith("back-off 20s restarting failed container=app pod=p_ns")
    status = node.container_status(uid, "app")
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert status["restartCount"] == 2
    assert status["lastState"]["terminated"]["exitCode"] == 1


def test_a_new_image_starts_at_once_whatever_the_old_ones_back_off(node: Node) -> None:
    """The kubelet keys the crash-loop back-off by the container's spec hash (getStableKey),
    image included: the conformance spec "Pods should have their auto-restart back-off timer
    reset on image update" changes the image of a crash-looping container and wants it at once."""
    node.runtime.behave("app", Behaviour(exit_code=1))
    uid = node.add(pod_body())
    node.sync_until(uid, lambda: len(node.containers(uid, "app")) == 3, "two restarts")
    node.sync_until(
        uid,
        lambda: (
            node.container_status(uid, "app")["state"].get("waiting", {}).get("reason")
            == "CrashLoopBackOff"
        ),
        "in back-off",
    )
    node.runtime.add_image("busybox:2")
    node.pods[uid]["spec"]["containers"][0]["image"] = "busybox:2"
    node.sync(uid)
    started = [c for c in node.containers(uid, "app") if c.image == "busybox:2"]
    assert len(started) == 1, "started by the first sync after the change, no back-off"


def test_restart_policy_never_ends_the_pod_succeeded_or_failed(node: Node) -> None:
    node.runtime.behave("ok", Behaviour(exit_code=0))
    node.runtime.behave("bad", Behaviour(exit_code=2, message="went wrong"))
    good = node.add(pod_body("good", [container("ok")], restartPolicy="Never"))
    bad = node.add(pod_body("bad", [container("bad")], restartPolicy="Never"))
    node.sync_until(good, lambda: node.last_status(good)["phase"] == "Succeeded", "Succeeded")
    node.sync_until(bad, lambda: node.last_status(bad)["phase"] == "Failed", "Failed")
    terminated = node.container_status(bad, "bad")["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (2, "Error")
    assert terminated["message"] == "went wrong"
    assert len(node.containers(good, "ok")) == 1  # never restarted


def test_an_oom_kill_learned_after_the_exit_corrects_the_finished_pods_reason(node: Node) -> None:
    """Docker may tell of the OOM kill after the exit (runtime/observe.py): the pod was already
    written Failed with reason Error; its status then says OOMKilled, as the kubelet's would
    once containerd's late OOM event sets the reason."""
    node.runtime.behave("greedy", Behaviour(exit_code=137))
    uid = node.add(pod_body("greedy", [container("greedy")], restartPolicy="Never"))
    node.sync_until(uid, lambda: node.last_status(uid)["phase"] == "Failed", "Failed")
    assert node.container_status(uid, "greedy")["state"]["terminated"]["reason"] == "Error"
    (app,) = node.containers(uid, "greedy")
    node.runtime.mark_oom(app.id)
    node.sync_until(
        uid,
        lambda: (
            node.container_status(uid, "greedy")["state"]["terminated"]["reason"] == "OOMKilled"
        ),
        "the reason corrected",
    )
    terminated = node.container_status(uid, "greedy")["state"]["terminated"]
    assert terminated["exitCode"] == 137
    assert node.last_status(uid)["phase"] == "Failed"
    assert len(node.containers(uid, "greedy")) == 1  # never restarted


def test_fallback_to_logs_on_error_reads_the_logs(node: Node) -> None:
    node.runtime.behave("app", Behaviour(exit_code=3))
    spec = container(terminationMessagePolicy="FallbackToLogsOnError")
    uid = node.add(pod_body(containers=[spec], restartPolicy="Never"))
    node.sync_until(uid, lambda: node.last_status(uid)["phase"] == "Failed", "Failed")
    message = node.container_status(uid, "app")["state"]["terminated"]["message"]
    assert message.startswith("logs of ")


def test_a_deleted_pod_is_stopped_then_deleted_from_the_api(node: Node) -> None:
    uid = node.add(pod_body())
    node.sync_until_ready(uid)
    node.delete(uid, grace=30)
    node.sync(uid)  # its shell ends on SIGTERM; the sandbox is stopped once it has
    assert "Killing" in node.events.reasons(uid)
    node.sync(uid)
    assert node.runtime.running(uid) == []
    assert node.deleted == [uid]
    assert node.last_status(uid)["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 143
    assert node.sync(uid) is None  # nothing more to do until the informer drops it


def test_a_container_that_ignores_sigterm_is_killed_when_the_grace_period_ends(
    node: Node,
) -> None:
    node.runtime.behave("app", Behaviour(ignores_sigterm=True))
    uid = node.add(pod_body())
    node.sync_until_ready(uid)
    node.delete(uid, grace=30)
    delay = node.sync(uid)
    assert delay is not None
    assert 30 < delay <= 31.5  # back after the SIGKILL
    app = node.containers(uid, "app")[0]
    assert node.runtime.operations("signal_stop") == [app.id]
    assert node.syncer.stopper.stopping() == 1
    node.clock.advance(29)
    assert node.syncer.stopper.kill_due() == 0  # not yet
    node.delete(uid, grace=5)  # a second delete with a shorter grace period hurries it
    node.sync(uid)
    node.clock.advance(5)
    assert node.syncer.stopper.kill_due() == 1
    assert node.containers(uid, "app")[0].exit_code == 137
    node.sync_until_deleted(uid)


def test_a_final_delete_that_fails_is_retried(node: Node) -> None:
    """The status manager sends it once the terminal status is in, and again until the
    server takes it; a pod already gone counts as deleted."""
    uid = node.add(pod_body())
    node.sync_until_ready(uid)
    node.delete(uid, grace=0)
    node.delete_error = api_error(500)
    node.sync_until(uid, lambda: not node.runtime.running(uid), "everything stopped")
    node.sync(uid)
    node.syncer.status.flush()
    assert node.deleted == []
    node.delete_error = api_error(404)  # already gone: done all the same
    node.syncer.status.flush()
    node.delete_error = None
    node.syncer.status.flush()
    assert node.deleted == [], "never sent again"
    assert node.sync(uid) is None


def test_active_deadline_seconds_ends_the_pod(node: Node) -> None:
    uid = node.add(pod_body(activeDeadlineSeconds=60))
    node.sync_until_ready(uid)
    node.update_status(uid)
    start = node.pods[uid]["status"]["startTime"]
    assert start
    delay = node.sync(uid)
    assert delay is not None
    assert delay <= 60
    node.clock.advance(61)
    node.sync_until(uid, lambda: node.last_status(uid)["phase"] == "Failed", "Failed")
    assert node.last_status(uid)["reason"] == "DeadlineExceeded"
    assert node.events.reasons(uid).count("DeadlineExceeded") == 1


def test_a_pod_gone_from_the_api_leaves_nothing_behind(node: Node) -> None:
    uid = node.add(pod_body())
    node.sync_until_ready(uid)
    del node.pods[uid]
    node.sync_until(uid, lambda: not node.cache.pod_containers(uid), "containers removed")
    assert node.runtime.operations("remove_pod_dir") == [uid]
    assert node.volumes.torn_down == [uid]
    assert uid not in node.syncer.states
    assert not node.status.has_written(uid)


def test_a_changed_container_is_replaced_even_after_a_clean_exit(node: Node) -> None:
    uid = node.add(pod_body(restartPolicy="OnFailure"))
    node.sync_until_ready(uid)
    pod = node.pods[uid]
    pod["spec"]["containers"][0]["command"] = ["sh", "-c", "sleep 1000"]
    node.sync_until(uid, lambda: len(node.containers(uid, "app")) == 2, "the replacement")
    old, new = node.containers(uid, "app")
    assert old.state is cri.ContainerState.EXITED
    assert new.state is cri.ContainerState.RUNNING
    assert (
        node.events.of("Killing")[0].message
        == "Container app definition changed, will be restarted"
    )


def test_a_dead_sandbox_is_made_again_after_its_containers_stopped(node: Node) -> None:
    uid = node.add(pod_body())
    node.sync_until_ready(uid)
    sandbox = next(c for c in node.cache.pod_containers(uid) if c.is_sandbox)
    node.runtime.kill_container(sandbox.id)
    node.sync_until(uid, lambda: len(node.runtime.operations("run_sandbox")) == 2, "a sandbox")
    node.sync_until_ready(uid)
    assert len(node.containers(uid, "app")) == 2


def test_status_writes_that_fail_back_off_and_never_hold_up_the_runtime(node: Node) -> None:
    uid = node.add(pod_body())
    node.status.error = RuntimeError("connection refused")
    node.sync(uid)
    assert node.runtime.operations("run_sandbox"), "the sandbox is made whatever the API says"
    failure = node.syncer.status.failure(uid)
    assert failure is not None
    assert failure.attempts == 1
    assert 1 <= failure.retry_in(node.clock.monotonic()) <= 1.2  # the first retry, jittered
    node.syncer.status.flush()  # within the backoff: no write tried
    assert failure.attempts == 1
    node.status.error = api_error(500)
    node.clock.advance(2)
    node.syncer.status.flush()
    assert node.syncer.status.failure(uid) is not None
    node.status.error = None
    node.clock.advance(5)
    node.sync_until_ready(uid)
    assert node.syncer.status.failure(uid) is None


def test_a_pod_replaced_in_the_api_is_not_written_again(node: Node) -> None:
    uid = node.add(pod_body())
    node.status.error = api_error(404)
    node.sync(uid)
    assert node.syncer.status.failure(uid) is None, "not an error to retry"


def test_the_lifecycle_moves_forward_and_a_terminating_pod_starts_nothing(node: Node) -> None:
    from kubelet_sim.podworkers.state import Deleted, Syncing, Terminating

    node.runtime.behave("app", Behaviour(ignores_sigterm=True))
    node.runtime.behave("quick", Behaviour(exit_code=1))
    uid = node.add(pod_body(containers=[container("app"), container("quick")]))
    node.sync_until(uid, lambda: len(node.containers(uid, "quick")) >= 1, "both started")
    state = node.syncer.states[uid]
    assert isinstance(state.lifecycle, Syncing)
    created = len(node.runtime.operations("create"))
    node.delete(uid, grace=30)
    node.sync(uid)
    assert isinstance(state.lifecycle, Terminating)
    node.clock.advance(20)
    node.sync(uid)  # `quick` crashed long ago: a syncing pod would restart it, this one not
    assert len(node.runtime.operations("create")) == created
    assert node.last_status(uid)["phase"] == "Running"  # not terminal while app still runs
    node.clock.advance(12)
    node.syncer.stopper.kill_due()
    node.sync_until_deleted(uid)
    assert isinstance(state.lifecycle, Deleted)  # terminated, then the final DELETE
    assert node.last_status(uid)["phase"] == "Failed"
