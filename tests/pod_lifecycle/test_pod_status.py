"""Pod status generation matches the kubelet's, field by field, without Docker or an API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kubelet_sim.cri import ContainerState, ObservedContainer, PodRef
from kubelet_sim.pod.spec import PodView, default_pull_policy
from kubelet_sim.pod.status import StatusInput, WaitingReason, generate_status
from tests.manifests import pod_manifest, served
from tests.observed import observed_container

NOW = datetime(2026, 11, 22, 17, 0, 0, tzinfo=UTC)
T0 = NOW - timedelta(seconds=30)
REF = PodRef(node="n1", name="p", namespace="ns", uid="uid-1")


def pod(
    restart: str = "Always", init: int = 0, names: tuple[str, ...] = ("c",), **extra: Any
) -> PodView:
    spec: dict[str, Any] = {
        "restartPolicy": restart,
        "containers": [{"name": n, "image": "busybox:1"} for n in names],
    }
    if init:
        spec["initContainers"] = [{"name": f"init{i}", "image": "busybox:1"} for i in range(init)]
    spec.update(extra)
    scheduled = {
        "type": "PodScheduled",
        "status": "True",
        "lastTransitionTime": "2026-11-22T16:59:00Z",
    }
    status = {
        "phase": "Pending",
        "qosClass": "BestEffort",
        "conditions": [scheduled, {"type": "example.com/Custom", "status": "True"}],
    }
    return PodView.from_api(served(pod_manifest("p", **spec), uid="uid-1", status=status))


def sandbox(
    ip: str = "172.17.0.5", state: ContainerState = ContainerState.RUNNING
) -> ObservedContainer:
    return observed_container(
        "POD", 0, state, pod=REF, container_id="sb", image="pause", ip=ip, created_at=T0
    )


def container(
    name: str = "c",
    attempt: int = 0,
    state: ContainerState = ContainerState.RUNNING,
    **fields: Any,
) -> ObservedContainer:
    """Created and started `attempt` seconds after T0, ended a second later if exited."""
    ended = T0 + timedelta(seconds=attempt + 1) if state is ContainerState.EXITED else None
    at = T0 + timedelta(seconds=attempt)
    return observed_container(
        name,
        attempt,
        state,
        pod=REF,
        container_id=f"{name}-{attempt}",
        image="busybox:1",
        image_id="docker://sha256:abc",
        **{"created_at": at, "started_at": at, "finished_at": ended, **fields},
    )


def status(p: PodView, *observed: ObservedContainer, **kw: Any) -> dict[str, Any]:
    return generate_status(
        StatusInput(pod=p, containers=observed, host_ip="10.0.0.1", now=NOW, **kw)
    )


def conditions(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in st["conditions"]}


def test_first_status_before_anything_runs() -> None:
    st = status(pod())
    assert st["phase"] == "Pending"
    assert st["hostIP"] == "10.0.0.1"
    assert st["hostIPs"] == [{"ip": "10.0.0.1"}]
    assert st["startTime"] == "2026-11-22T17:00:00Z"
    assert "podIP" not in st
    [cs] = st["containerStatuses"]
    assert cs["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert (cs["ready"], cs["started"], cs["restartCount"]) == (False, False, 0)
    cond = conditions(st)
    assert cond["Initialized"]["status"] == "True"
    assert cond["PodReadyToStartContainers"]["status"] == "False"
    for kind in ("Ready", "ContainersReady"):
        assert cond[kind]["status"] == "False"
        assert cond[kind]["reason"] == "ContainersNotReady"
        assert cond[kind]["message"] == "containers with unready status: [c]"
    assert cond["PodScheduled"]["lastTransitionTime"] == "2026-11-22T16:59:00Z", "kept"
    assert cond["example.com/Custom"]["status"] == "True", "foreign conditions are kept"
    assert [c["type"] for c in st["conditions"]][-5:] == [
        "PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled",
    ]  # fmt: skip


def test_running_pod_is_ready_with_ip() -> None:
    st = status(pod(names=("b", "a")), sandbox(), container("a"), container("b"))
    assert st["phase"] == "Running"
    assert st["podIP"] == "172.17.0.5"
    assert st["podIPs"] == [{"ip": "172.17.0.5"}]
    assert [c["name"] for c in st["containerStatuses"]] == ["a", "b"], "sorted by name"
    cs = st["containerStatuses"][0]
    assert cs["state"] == {"running": {"startedAt": "2026-11-22T16:59:30Z"}}
    assert cs["containerID"] == "docker://a-0"
    assert cs["imageID"] == "docker://sha256:abc"
    assert (cs["ready"], cs["started"]) == (True, True)
    cond = conditions(st)
    assert all(
        cond[k]["status"] == "True"
        for k in ("Ready", "ContainersReady", "PodReadyToStartContainers")
    )


def test_exit_zero_with_never_succeeds_and_is_completed() -> None:
    st = status(pod("Never"), sandbox(), container(state=ContainerState.EXITED, exit_code=0))
    assert st["phase"] == "Succeeded"
    term = st["containerStatuses"][0]["state"]["terminated"]
    assert term["reason"] == "Completed"
    assert term["exitCode"] == 0
    assert term["startedAt"] == "2026-11-22T16:59:30Z"
    assert term["finishedAt"] == "2026-11-22T16:59:31Z"
    cond = conditions(st)
    assert (cond["Ready"]["status"], cond["Ready"]["reason"]) == ("False", "PodCompleted")


def test_a_succeeded_pod_is_initialized_with_reason_pod_completed_with_or_without_inits() -> None:
    """GeneratePodInitializedCondition: PodCompleted for every Succeeded pod; until then a pod
    without init containers is plainly Initialized (no reason)."""
    for p, observed in (
        (pod("Never"), ()),
        (pod("Never", init=1), (container("init0", state=ContainerState.EXITED, exit_code=0),)),
    ):
        done = container(state=ContainerState.EXITED, exit_code=0)
        st = status(p, sandbox(), *observed, done)
        assert st["phase"] == "Succeeded"
        assert {k: v for k, v in conditions(st)["Initialized"].items() if "Time" not in k} == {
            "type": "Initialized",
            "status": "True",
            "reason": "PodCompleted",
        }
    running = conditions(status(pod("Never"), sandbox(), container()))["Initialized"]
    assert (running["status"], "reason" in running) == ("True", False)
    failed = status(pod("Never"), sandbox(), container(state=ContainerState.EXITED, exit_code=1))
    assert st["phase"] != failed["phase"] == "Failed"
    initialized = conditions(failed)["Initialized"]
    assert (initialized["status"], "reason" in initialized) == ("True", False)


def test_crash_loop_waits_with_last_state_and_stays_running() -> None:
    message = "back-off 10s restarting failed container=c pod=p_ns(uid-1)"
    st = status(
        pod("Always"),
        sandbox(),
        container(attempt=1, state=ContainerState.EXITED, exit_code=1),
        container(attempt=0, state=ContainerState.EXITED, exit_code=1),
        waiting={"c": WaitingReason("CrashLoopBackOff", message)},
    )
    cs = st["containerStatuses"][0]
    assert st["phase"] == "Running"
    assert cs["state"] == {"waiting": {"reason": "CrashLoopBackOff", "message": message}}
    assert cs["lastState"]["terminated"]["reason"] == "Error"
    assert cs["lastState"]["terminated"]["exitCode"] == 1
    assert cs["restartCount"] == 1


def test_failure_with_never_fails_and_termination_message_is_reported() -> None:
    st = status(
        pod("Never"),
        sandbox(),
        container(state=ContainerState.EXITED, exit_code=2),
        messages={"c-0": "disk on fire"},
    )
    assert st["phase"] == "Failed"
    term = st["containerStatuses"][0]["state"]["terminated"]
    assert (term["reason"], term["message"]) == ("Error", "disk on fire")
    assert conditions(st)["Ready"]["reason"] == "PodFailed"


def test_oom_killed_reason() -> None:
    st = status(
        pod("Never"),
        sandbox(),
        container(state=ContainerState.EXITED, exit_code=137, oom_killed=True),
    )
    assert st["containerStatuses"][0]["state"]["terminated"]["reason"] == "OOMKilled"


def test_on_failure_restarts_failures_and_succeeds_on_zero() -> None:
    failed = status(
        pod("OnFailure"), sandbox(), container(state=ContainerState.EXITED, exit_code=1)
    )
    assert failed["phase"] == "Running"
    done = status(pod("OnFailure"), sandbox(), container(state=ContainerState.EXITED, exit_code=0))
    assert done["phase"] == "Succeeded"


def test_init_containers_pending_then_failed_with_never() -> None:
    st = status(pod("Never", init=2), sandbox(), container("init0", state=ContainerState.RUNNING))
    assert st["phase"] == "Pending"
    assert st["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert [s["name"] for s in st["initContainerStatuses"]] == ["init0", "init1"]
    init = conditions(st)["Initialized"]
    assert (init["status"], init["reason"]) == ("False", "ContainersNotInitialized")
    assert init["message"] == "containers with incomplete status: [init0 init1]"

    failed = status(
        pod("Never", init=2),
        sandbox(),
        container("init0", state=ContainerState.EXITED, exit_code=1),
    )
    assert failed["phase"] == "Failed"


def test_init_done_then_app_running() -> None:
    st = status(
        pod("Always", init=1),
        sandbox(),
        container("init0", state=ContainerState.EXITED, exit_code=0),
        container("c"),
    )
    assert st["phase"] == "Running"
    [init] = st["initContainerStatuses"]
    assert init["ready"] is True
    assert init["state"]["terminated"]["reason"] == "Completed"
    assert conditions(st)["Initialized"]["status"] == "True"


def test_image_pull_error_keeps_pending() -> None:
    st = status(pod(), sandbox(), waiting={"c": WaitingReason("ErrImagePull", "no such host")})
    assert st["phase"] == "Pending"
    assert st["containerStatuses"][0]["state"] == {
        "waiting": {"reason": "ErrImagePull", "message": "no such host"}
    }


def test_transition_time_kept_while_condition_unchanged() -> None:
    p = pod()
    first = status(p, sandbox(), container())
    later = generate_status(
        StatusInput(
            pod=p,
            containers=[sandbox(), container()],
            host_ip="10.0.0.1",
            now=NOW + timedelta(minutes=5),
            previous=first,
        )
    )
    assert (
        conditions(later)["Ready"]["lastTransitionTime"]
        == conditions(first)["Ready"]["lastTransitionTime"]
    )
    assert later["startTime"] == first["startTime"]


def test_terminal_phase_never_regresses() -> None:
    p = pod("Never")
    terminal = PodView.from_api({**p.raw, "status": {**p.status, "phase": "Succeeded"}})
    st = status(terminal, sandbox(), container())
    assert st["phase"] == "Succeeded"


def test_deleted_pod_with_all_stopped_is_terminal_even_with_always() -> None:
    st = status(
        pod("Always"),
        sandbox(state=ContainerState.EXITED),
        container(state=ContainerState.EXITED, exit_code=143),
        is_terminal=True,
    )
    assert st["phase"] == "Failed"
    st = status(
        pod("Always"), container(state=ContainerState.EXITED, exit_code=0), is_terminal=True
    )
    assert st["phase"] == "Succeeded"


def test_evicted_by_deadline() -> None:
    st = status(
        pod(),
        sandbox(),
        container(),
        evicted=WaitingReason(
            "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"
        ),
    )
    assert (st["phase"], st["reason"]) == ("Failed", "DeadlineExceeded")


def test_readiness_probe_is_not_faked() -> None:
    p = PodView.from_api(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "uid-1"},
            "spec": {
                "containers": [
                    {"name": "c", "image": "x:1", "readinessProbe": {"exec": {"command": ["true"]}}}
                ]
            },
        }
    )
    st = status(p, sandbox(), container())
    assert st["containerStatuses"][0]["ready"] is False


def test_default_pull_policy_by_tag() -> None:
    assert default_pull_policy("busybox") == "Always"
    assert default_pull_policy("busybox:latest") == "Always"
    assert default_pull_policy("localhost:5000/busybox") == "Always"
    assert default_pull_policy("localhost:5000/busybox:1.36") == "IfNotPresent"
    assert default_pull_policy("busybox@sha256:" + "a" * 64) == "IfNotPresent"


UNKNOWN = {
    "terminated": {
        "exitCode": 137,
        "reason": "ContainerStatusUnknown",
        "message": "The container could not be located when the pod was terminated",
    }
}


def test_a_pod_finished_before_it_started_ends_failed_with_unknown_containers() -> None:
    """status_manager.TerminatePod: a pod deleted before its containers ran."""
    st = status(pod("Always"), is_terminal=True, finished=True)
    assert st["phase"] == "Failed"
    assert st["containerStatuses"][0]["state"] == UNKNOWN
    assert st["containerStatuses"][0]["ready"] is False


def test_finishing_keeps_real_ends_and_defaults_a_crash_looping_container() -> None:
    st = status(
        pod("Always", names=("done", "looping")),
        container("done", state=ContainerState.EXITED, exit_code=0),
        container("looping", state=ContainerState.EXITED, exit_code=1),
        waiting={"looping": WaitingReason("CrashLoopBackOff", "back-off 10s")},
        is_terminal=True,
        finished=True,
    )
    by_name = {s["name"]: s for s in st["containerStatuses"]}
    assert by_name["done"]["state"]["terminated"]["exitCode"] == 0
    assert by_name["looping"]["state"] == UNKNOWN
    assert by_name["looping"]["lastState"]["terminated"]["exitCode"] == 1
    assert st["phase"] == "Failed"


def test_an_uninitialized_pod_defaults_only_the_init_containers_that_could_have_run() -> None:
    st = status(
        pod("Never", init=2), sandbox(state=ContainerState.EXITED), is_terminal=True, finished=True
    )
    inits = st["initContainerStatuses"]
    assert inits[0]["state"] == UNKNOWN
    assert "waiting" in inits[1]["state"]
    assert "waiting" in st["containerStatuses"][0]["state"]
    assert st["phase"] == "Failed"


def test_readiness_gates_hold_ready_until_their_conditions_are_true() -> None:
    gated = pod(readinessGates=[{"conditionType": "example.com/lb"}, {"conditionType": "x.io/b"}])
    ready = conditions(status(gated, sandbox(), container()))["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "ReadinessGatesNotReady")
    assert ready["message"] == (
        'corresponding condition of pod readiness gate "example.com/lb" does not exist., '
        'corresponding condition of pod readiness gate "x.io/b" does not exist.'
    )
    gated.status["conditions"] += [
        {"type": "example.com/lb", "status": "False"},
        {"type": "x.io/b", "status": "True"},
    ]
    ready = conditions(status(gated, sandbox(), container()))["Ready"]
    assert (
        ready["message"]
        == 'the status of pod readiness gate "example.com/lb" is not "True", but False'
    )
    gated.status["conditions"][-2]["status"] = "True"
    st = status(gated, sandbox(), container())
    assert conditions(st)["Ready"]["status"] == "True"
    assert conditions(st)["ContainersReady"]["status"] == "True"


def test_a_host_network_pod_reports_the_node_ip() -> None:
    st = status(pod(hostNetwork=True), sandbox(ip=""), container())
    assert st["podIP"] == "10.0.0.1"
    assert st["podIPs"] == [{"ip": "10.0.0.1"}]


# --- sidecars (restartable init containers): getPhase, generate.go, UpdatePodStatus ----------


def sidecar_pod(restart: str = "Never", **extra: Any) -> PodView:
    sidecar = {"name": "side", "image": "busybox:1", "restartPolicy": "Always", **extra}
    return pod(restart, initContainers=[sidecar, {"name": "init", "image": "busybox:1"}])


def test_a_running_sidecar_initializes_and_is_counted_for_readiness() -> None:
    p = sidecar_pod()
    starting = status(p, sandbox(), container("side"))
    assert starting["phase"] == "Pending"  # `init` has not run yet
    side, init = starting["initContainerStatuses"]
    assert (side["started"], side["ready"], init["started"]) == (True, True, False)
    assert conditions(starting)["Initialized"]["message"] == (
        "containers with incomplete status: [init]"
    )
    running = status(
        p,
        sandbox(),
        container("side"),
        container("init", state=ContainerState.EXITED, exit_code=0),
        container("c", attempt=0),
    )
    assert running["phase"] == "Running"
    assert conditions(running)["Initialized"]["status"] == "True"
    assert conditions(running)["ContainersReady"]["status"] == "True"
    crashed = status(
        p,
        sandbox(),
        container("side", state=ContainerState.EXITED, exit_code=1),
        container("init", state=ContainerState.EXITED, exit_code=0),
        container("c"),
        waiting={"side": WaitingReason("CrashLoopBackOff", "back-off 10s")},
    )
    assert crashed["phase"] == "Running"  # a stopped sidecar does not count for the phase
    side = crashed["initContainerStatuses"][0]
    assert side["state"]["waiting"]["reason"] == "CrashLoopBackOff"  # even in a Never pod
    ready = conditions(crashed)["ContainersReady"]
    assert (ready["status"], ready["message"]) == (
        "False",
        "containers with unready status: [side]",
    )
    assert conditions(crashed)["Initialized"]["status"] == "True"


def test_a_sidecar_with_a_startup_probe_is_not_started_until_it_succeeds() -> None:
    p = sidecar_pod(startupProbe={"exec": {"command": ["true"]}})
    st = status(p, sandbox(), container("side"))
    side = st["initContainerStatuses"][0]
    assert (side["started"], side["ready"]) == (False, False)
    assert conditions(st)["Initialized"]["message"] == (
        "containers with incomplete status: [side init]"
    )
    assert st["phase"] == "Pending"


def test_a_pod_whose_app_containers_succeeded_succeeds_whatever_its_sidecars_exit_with() -> None:
    st = status(
        sidecar_pod(),
        sandbox(state=ContainerState.EXITED),
        container("side", state=ContainerState.EXITED, exit_code=143),
        container("init", state=ContainerState.EXITED, exit_code=0),
        container("c", state=ContainerState.EXITED, exit_code=0),
        is_terminal=True,
    )
    assert st["phase"] == "Succeeded"
    assert conditions(st)["Initialized"] == {
        "type": "Initialized",
        "status": "True",
        "reason": "PodCompleted",
        "lastProbeTime": None,
        "lastTransitionTime": "2026-11-22T17:00:00Z",
    }


def test_observed_generation_where_the_server_counts_generations() -> None:
    p = pod()
    p.raw["metadata"]["generation"] = 3
    st = status(p, sandbox(), container("c"))
    assert st["observedGeneration"] == 3
    by_type = conditions(st)
    for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady"):
        assert by_type[kind]["observedGeneration"] == 3
    assert by_type["PodScheduled"]["observedGeneration"] == 3
    assert "observedGeneration" not in by_type["example.com/Custom"]  # not the kubelet's
    older = status(pod(), sandbox(), container("c"))  # v1.24: pods have no generation
    assert "observedGeneration" not in older
    assert all("observedGeneration" not in c for c in older["conditions"])


def test_a_created_container_reports_its_resources_and_allocated_requests() -> None:
    resources = {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}
    p = pod(containers=[{"name": "c", "image": "busybox:1", "resources": resources},
                        {"name": "d", "image": "busybox:1"},
                        {"name": "e", "image": "busybox:1"}])  # fmt: skip
    st = status(p, sandbox(), container("c"), container("d", state=ContainerState.EXITED))
    c, d, e = st["containerStatuses"]
    assert c["resources"] == resources
    assert c["allocatedResources"] == {"cpu": "100m", "memory": "32Mi"}
    assert d["resources"] == {}  # the runtime has it: reported, if empty
    assert "allocatedResources" not in d
    assert "resources" not in e  # never created: nothing to report


def test_an_init_container_removed_after_initialization_counts_as_completed() -> None:
    st = status(pod("Always", init=1), sandbox(), container("c"))
    [init] = st["initContainerStatuses"]
    assert init["state"]["terminated"]["reason"] == "Completed"
    assert init["state"]["terminated"]["message"].startswith(
        "Unable to get init container status from container runtime"
    )
    assert init["ready"] is True
    assert st["phase"] == "Running"
    before = status(pod("Always", init=1), sandbox())  # nothing created yet: still to run
    assert before["initContainerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}


def test_a_container_whose_post_start_hook_runs_is_still_being_created() -> None:
    """The kubelet runs postStart inside startContainer: whatever it writes meanwhile says
    waiting ContainerCreating, the pod Pending and not Ready, though Docker says running."""
    running = container("c")
    st = status(
        pod(names=("b", "c")), sandbox(), container("b"), running, starting=frozenset({running.id})
    )
    by_name = {cs["name"]: cs for cs in st["containerStatuses"]}
    assert by_name["c"]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert (by_name["c"]["ready"], by_name["c"]["started"]) == (False, False)
    assert "containerID" not in by_name["c"], "a start that has not returned has no id yet"
    assert "running" in by_name["b"]["state"]
    assert st["phase"] == "Pending"
    cond = conditions(st)
    assert cond["Ready"]["status"] == "False"
    assert cond["ContainersReady"]["message"] == "containers with unready status: [c]"
    st = status(pod(names=("b", "c")), sandbox(), container("b"), running)  # the hook ended
    assert st["phase"] == "Running"
    assert conditions(st)["Ready"]["status"] == "True"


def test_a_restart_whose_post_start_hook_runs_waits_after_its_last_end() -> None:
    """A restarted container in its hook: waiting ContainerCreating after the attempt that
    ended (its lastState and restart count), and the pod, which ran before, stays Running."""
    restarted = container(attempt=1)
    st = status(
        pod("Always"),
        sandbox(),
        restarted,
        container(attempt=0, state=ContainerState.EXITED, exit_code=1),
        starting=frozenset({restarted.id}),
    )
    [cs] = st["containerStatuses"]
    assert cs["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert cs["lastState"]["terminated"]["exitCode"] == 1
    assert cs["restartCount"] == 0
    assert st["phase"] == "Running"
    assert conditions(st)["Ready"]["status"] == "False"


def test_in_a_pod_with_init_containers_a_hooked_start_waits_as_pod_initializing() -> None:
    """convertToAPIContainerStatuses' default waiting reason there is PodInitializing."""
    running = container("c")
    st = status(
        pod(init=1),
        sandbox(),
        container("init0", state=ContainerState.EXITED, exit_code=0),
        running,
        starting=frozenset({running.id}),
    )
    [cs] = st["containerStatuses"]
    assert cs["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert st["phase"] == "Pending"
