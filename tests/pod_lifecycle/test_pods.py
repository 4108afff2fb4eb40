"""Pods bound to the node run as real Docker containers, and their status tells the truth.

Each test checks both sides: the pod object in the API and the containers in Docker.
"""

from __future__ import annotations

import time

import pytest

from kubelet_sim import cri
from tests.agent_fixture import RunningAgent
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.pods import (
    container,
    container_status,
    get_pod,
    kubelet_events,
    make_pod,
    pod_containers,
    running_ready,
    wait_for_events,
    wait_status,
)

pytestmark = pytest.mark.docker


def test_sleep_pod_runs_with_ip_and_is_ready(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    pod = make_pod(cluster, "sleeper")
    st = wait_status(cluster, "sleeper", running_ready, 20, "Running and Ready")
    cs = container_status(st)
    assert cs["ready"] is True
    assert cs["started"] is True
    assert cs["restartCount"] == 0
    assert "running" in cs["state"]
    assert st["hostIP"] == "127.0.0.1"
    assert st["startTime"]
    containers = {
        c.labels[cri.LABEL_CONTAINER_NAME]: c
        for c in pod_containers(docker_env, pod["metadata"]["uid"])
    }
    assert set(containers) == {"POD", "c"}
    app, sandbox = containers["c"], containers["POD"]
    assert cs["containerID"] == f"docker://{app.id}"
    assert app.status == "running"
    sandbox_ip = docker_env.client.api.inspect_container(sandbox.id)["NetworkSettings"]["IPAddress"]
    assert sandbox_ip == st["podIP"]
    assert st["podIPs"] == [{"ip": st["podIP"]}]
    assert app.name == f"k8s_c_sleeper_{cluster.namespace}_{pod['metadata']['uid']}_0"
    wait_for_events(cluster, "sleeper", "Pulled", "Created", "Started")


def test_exit_zero_with_never_succeeds(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    pod = make_pod(cluster, "once", container(command=["true"]), restart="Never")
    make_pod(
        cluster,
        "once-init",
        container(command=["true"]),
        restart="Never",
        initContainers=[container("setup", ["true"])],
    )
    st = wait_status(cluster, "once", lambda s: s.get("phase") == "Succeeded", 20, "Succeeded")
    term = container_status(st)["state"]["terminated"]
    assert term["reason"] == "Completed"
    assert term["exitCode"] == 0
    ready = next(c for c in st["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready.get("reason")) == ("False", "PodCompleted")
    # GeneratePodInitializedCondition: PodCompleted, with or without init containers
    with_init = wait_status(
        cluster, "once-init", lambda s: s.get("phase") == "Succeeded", 20, "Succeeded"
    )
    for succeeded in (st, with_init):
        initialized = next(c for c in succeeded["conditions"] if c["type"] == "Initialized")
        assert (initialized["status"], initialized.get("reason")) == ("True", "PodCompleted")
    assert get_pod(cluster, "once") is not None, "the kubelet does not delete a finished pod"
    [app] = [
        c
        for c in pod_containers(docker_env, pod["metadata"]["uid"])
        if c.labels[cri.LABEL_CONTAINER_NAME] == "c"
    ]
    assert app.status == "exited"


def test_failure_with_always_crash_loops_with_growing_waits(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    make_pod(
        cluster,
        "crasher",
        container(command=["sh", "-c", "echo boom > /dev/termination-log; exit 1"]),
    )

    def waiting(st: dict, wait: str, count: int) -> bool:  # type: ignore[type-arg]
        cs = container_status(st)
        state = (cs.get("state") or {}).get("waiting") or {}
        return (
            cs.get("restartCount") == count
            and state.get("reason") == "CrashLoopBackOff"
            and wait in state.get("message", "")
        )

    st = wait_status(
        cluster, "crasher", lambda s: waiting(s, "back-off 10s", 1), 30, "first back-off"
    )
    cs = container_status(st)
    assert st["phase"] == "Running"
    assert cs["lastState"]["terminated"]["reason"] == "Error"
    assert cs["lastState"]["terminated"]["exitCode"] == 1
    assert cs["lastState"]["terminated"]["message"] == "boom\n"
    uid = get_pod(cluster, "crasher")["metadata"]["uid"]  # type: ignore[index]
    assert (
        cs["state"]["waiting"]["message"]
        == f"back-off 10s restarting failed container=c pod=crasher_{cluster.namespace}({uid})"
    )
    wait_status(
        cluster, "crasher", lambda s: waiting(s, "back-off 20s", 2), 30, "second, longer back-off"
    )
    attempts = [
        c for c in pod_containers(docker_env, uid) if c.labels[cri.LABEL_CONTAINER_NAME] == "c"
    ]
    assert len(attempts) == 3
    wait_for_events(cluster, "crasher", "BackOff")
    assert agent.agent.gc.collect() == 2, "the container GC keeps only the newest dead attempt"
    [kept] = [
        c for c in pod_containers(docker_env, uid) if c.labels[cri.LABEL_CONTAINER_NAME] == "c"
    ]
    assert kept.labels[cri.LABEL_RESTART_COUNT] == "2"
    st = wait_status(cluster, "crasher", lambda s: True, 1, "status")
    assert container_status(st)["restartCount"] == 2, "GC does not change the restart count"


def test_on_failure_restarts_failures_only(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    make_pod(cluster, "ok", container(command=["true"]), restart="OnFailure")
    make_pod(cluster, "bad", container(command=["false"]), restart="OnFailure")
    wait_status(cluster, "ok", lambda s: s.get("phase") == "Succeeded", 20, "Succeeded")
    st = wait_status(
        cluster, "bad", lambda s: container_status(s).get("restartCount", 0) >= 1, 30, "a restart"
    )
    assert st["phase"] == "Running"
    assert (
        container_status(status_ok := wait_status(cluster, "ok", lambda s: True, 1, "status"))[
            "restartCount"
        ]
        == 0
    )
    assert status_ok["phase"] == "Succeeded"


def test_init_containers_run_in_order_before_app(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    make_pod(
        cluster,
        "inits",
        container(),
        initContainers=[container("one", ["sh", "-c", "sleep 0.3"]), container("two", ["true"])],
    )
    st = wait_status(cluster, "inits", running_ready, 30, "Running")
    one, two = container_status(st, "one", init=True), container_status(st, "two", init=True)
    assert one["state"]["terminated"]["reason"] == "Completed"
    assert two["state"]["terminated"]["reason"] == "Completed"
    assert one["state"]["terminated"]["finishedAt"] <= two["state"]["terminated"]["startedAt"]
    assert (
        two["state"]["terminated"]["finishedAt"]
        <= container_status(st)["state"]["running"]["startedAt"]
    )
    assert next(c for c in st["conditions"] if c["type"] == "Initialized")["status"] == "True"


def test_failing_init_with_never_fails_the_pod(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    pod = make_pod(
        cluster,
        "badinit",
        container(),
        restart="Never",
        initContainers=[container("setup", ["false"])],
    )
    st = wait_status(cluster, "badinit", lambda s: s.get("phase") == "Failed", 30, "Failed")
    assert container_status(st, "setup", init=True)["state"]["terminated"]["exitCode"] == 1
    assert container_status(st)["state"]["waiting"]["reason"] == "PodInitializing"
    names = {
        c.labels[cri.LABEL_CONTAINER_NAME]
        for c in pod_containers(docker_env, pod["metadata"]["uid"])
    }
    assert "c" not in names, "the app container never starts"


@pytest.mark.parametrize(
    ("image", "policy", "reasons"),
    [
        ("127.0.0.1:1/nope/img:1", "IfNotPresent", {"ErrImagePull", "ImagePullBackOff"}),
        ("Not/A:Valid:Ref", "IfNotPresent", {"InvalidImageName"}),
        ("kubelet-sim.local/absent:1", "Never", {"ErrImageNeverPull"}),
    ],
)
def test_bad_images_wait_with_the_kubelet_reason(
    cluster: ApiUnderTest,
    docker_env: DockerEnv,
    agent: RunningAgent,
    image: str,
    policy: str,
    reasons: set[str],
) -> None:
    pod = make_pod(cluster, "img", container(image=image, imagePullPolicy=policy))
    st = wait_status(
        cluster,
        "img",
        lambda s: (
            ((container_status(s).get("state") or {}).get("waiting") or {}).get("reason") in reasons
        ),
        20,
        f"waiting with {reasons}",
    )
    assert st["phase"] == "Pending"
    names = {
        c.labels[cri.LABEL_CONTAINER_NAME]
        for c in pod_containers(docker_env, pod["metadata"]["uid"])
    }
    assert "c" not in names
    expected = {"Failed", "InspectFailed", "ErrImageNeverPull"}
    wait_for(  # events are sent on their own thread, after the status
        lambda: {e.reason for e in kubelet_events(cluster, "img")} & expected,
        10,
        f"one of the kubelet's events {expected}",
    )


def test_deleted_pod_is_stopped_and_leaves_the_api(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    pod = make_pod(cluster, "doomed")
    wait_status(cluster, "doomed", running_ready, 20, "Running")
    cluster.core.delete_namespaced_pod("doomed", cluster.namespace)
    wait_for(lambda: get_pod(cluster, "doomed") is None, 15, "the pod to leave the API")
    wait_for_events(cluster, "doomed", "Killing")
    wait_for(
        lambda: not pod_containers(docker_env, pod["metadata"]["uid"]), 10, "containers removed"
    )


def test_container_ignoring_sigterm_is_killed_after_the_grace_period(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    make_pod(
        cluster,
        "stubborn",
        container(command=["sh", "-c", "trap '' TERM; while :; do sleep 1; done"]),
        terminationGracePeriodSeconds=3,
    )
    wait_status(cluster, "stubborn", running_ready, 20, "Running")
    started = time.monotonic()
    cluster.core.delete_namespaced_pod("stubborn", cluster.namespace)
    wait_for(lambda: get_pod(cluster, "stubborn") is None, 20, "the pod to leave the API")
    took = time.monotonic() - started
    assert took >= 3, f"killed before its grace period ended ({took:.1f}s)"


def test_container_removed_behind_our_back_is_recreated(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    pod = make_pod(cluster, "victim")
    st = wait_status(cluster, "victim", running_ready, 20, "Running")
    first = container_status(st)["containerID"].removeprefix("docker://")
    docker_env.client.containers.get(first).remove(force=True)
    st = wait_status(
        cluster,
        "victim",
        lambda s: running_ready(s) and container_status(s)["containerID"] != f"docker://{first}",
        30,
        "a new container",
    )
    assert container_status(st)["restartCount"] == 1
    apps = [
        c
        for c in pod_containers(docker_env, pod["metadata"]["uid"])
        if c.labels[cri.LABEL_CONTAINER_NAME] == "c"
    ]
    assert [c.status for c in apps] == ["running"]


def test_privileged_pod_is_refused(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    pod = make_pod(cluster, "root", container(securityContext={"privileged": True}))
    st = wait_status(cluster, "root", lambda s: s.get("phase") == "Failed", 20, "Failed")
    assert st["reason"] == "Forbidden"
    assert "privileged" in st["message"]
    assert not pod_containers(docker_env, pod["metadata"]["uid"])
    wait_for_events(cluster, "root", "Forbidden")


def test_active_deadline_fails_the_pod(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    make_pod(cluster, "deadline", activeDeadlineSeconds=2)
    st = wait_status(cluster, "deadline", lambda s: s.get("phase") == "Failed", 20, "Failed")
    assert st["reason"] == "DeadlineExceeded"
    assert st["message"] == "Pod was active on the node longer than the specified deadline"


def test_missing_configmap_then_created(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    env = [
        {"name": "COLOR", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "color"}}}
    ]
    make_pod(cluster, "configured", container(env=env))
    st = wait_status(
        cluster,
        "configured",
        lambda s: (
            ((container_status(s).get("state") or {}).get("waiting") or {}).get("reason")
            == "CreateContainerConfigError"
        ),
        20,
        "CreateContainerConfigError",
    )
    assert container_status(st)["state"]["waiting"]["message"] == 'configmap "settings" not found'
    cluster.core.create_namespaced_config_map(
        cluster.namespace, {"metadata": {"name": "settings"}, "data": {"color": "blue"}}
    )
    wait_status(cluster, "configured", running_ready, 30, "Running once the ConfigMap exists")


def test_agent_restart_keeps_containers(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent, tmp_path: object
) -> None:
    from tests.agent_fixture import start_agent

    pod = make_pod(cluster, "survivor")
    st = wait_status(cluster, "survivor", running_ready, 20, "Running")
    before = container_status(st)["containerID"]
    agent.stop()
    second = start_agent(cluster, docker_env, tmp_path / "root")  # type: ignore[operator]
    try:
        wait_for(lambda: second.agent.workers.syncs > 0, 10, "a sync after restart")
        st = wait_status(cluster, "survivor", running_ready, 10, "still Running")
        assert container_status(st)["containerID"] == before
        assert container_status(st)["restartCount"] == 0
        names = sorted(
            c.labels[cri.LABEL_CONTAINER_NAME]
            for c in pod_containers(docker_env, pod["metadata"]["uid"])
        )
        assert names == ["POD", "c"], "nothing restarted or duplicated"
    finally:
        second.stop()


def _exec(docker_env: DockerEnv, uid: str, name: str, command: str) -> str:
    [target] = [
        c for c in pod_containers(docker_env, uid) if c.labels[cri.LABEL_CONTAINER_NAME] == name
    ]
    code, out = docker_env.client.containers.get(target.id).exec_run(["sh", "-c", command])
    return f"{code}:{out.decode()}"


def test_volumes_reach_the_containers(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    ns = cluster.namespace
    cluster.core.create_namespaced_config_map(
        ns, {"metadata": {"name": "web"}, "data": {"index.html": "v1"}}
    )
    cluster.core.create_namespaced_secret(
        ns, {"metadata": {"name": "creds"}, "stringData": {"password": "hunter2"}}
    )
    writer = container(
        "writer",
        ["sh", "-c", "echo shared > /scratch/note; exec sleep 3600"],
        volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}],
    )
    reader = container(
        "reader",
        volumeMounts=[
            {"name": "scratch", "mountPath": "/scratch"},
            {"name": "web", "mountPath": "/web"},
            {"name": "creds", "mountPath": "/creds"},
        ],
    )
    pod = make_pod(
        cluster,
        "volumes",
        writer,
        reader,
        automountServiceAccountToken=None,
        volumes=[
            {"name": "scratch", "emptyDir": {}},
            {"name": "web", "configMap": {"name": "web"}},
            {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o400}},
        ],
    )
    uid = pod["metadata"]["uid"]
    wait_status(cluster, "volumes", running_ready, 30, "Running")
    wait_for(
        lambda: _exec(docker_env, uid, "reader", "cat /scratch/note") == "0:shared\n",
        10,
        "emptyDir shared",
    )
    assert _exec(docker_env, uid, "reader", "cat /web/index.html") == "0:v1"
    assert _exec(docker_env, uid, "reader", "cat /creds/password") == "0:hunter2"
    assert (
        _exec(docker_env, uid, "reader", "touch /web/x 2>/dev/null || echo read-only")
        == "0:read-only\n"
    )
    cluster.core.patch_namespaced_config_map("web", ns, {"data": {"index.html": "v2"}})
    wait_for(
        lambda: _exec(docker_env, uid, "reader", "cat /web/index.html") == "0:v2",
        15,
        "the update in the volume",
    )
    volumes = [v["name"] for v in pod["spec"].get("volumes") or []]
    if not any(v.startswith("kube-api-access-") for v in volumes):
        pytest.skip("the API server's ServiceAccount admission added no token volume to check")
    token_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
    assert _exec(docker_env, uid, "reader", f"cat {token_dir}/namespace") == f"0:{ns}"
    assert (
        _exec(docker_env, uid, "reader", f"test -s {token_dir}/token && echo token") == "0:token\n"
    )


def test_missing_configmap_volume_waits_with_failed_mount(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    make_pod(
        cluster,
        "unmounted",
        container(volumeMounts=[{"name": "cfg", "mountPath": "/cfg"}]),
        volumes=[{"name": "cfg", "configMap": {"name": "later"}}],
    )
    wait_for(
        lambda: "FailedMount" in {e.reason for e in kubelet_events(cluster, "unmounted")},
        15,
        "FailedMount",
    )
    failed = next(e for e in kubelet_events(cluster, "unmounted") if e.reason == "FailedMount")
    assert (
        failed.message == 'MountVolume.SetUp failed for volume "cfg" : configmap "later" not found'
    )
    st = wait_status(
        cluster, "unmounted", lambda s: bool(s.get("containerStatuses")), 10, "a status"
    )
    assert st["phase"] == "Pending"
    assert container_status(st)["state"]["waiting"]["reason"] == "ContainerCreating"
    cluster.core.create_namespaced_config_map(
        cluster.namespace, {"metadata": {"name": "later"}, "data": {"k": "v"}}
    )
    wait_status(cluster, "unmounted", running_ready, 30, "Running once the ConfigMap exists")


def test_memory_empty_dir_is_one_tmpfs_shared_by_the_pod(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    mount = [{"name": "mem", "mountPath": "/mem"}]
    writer = container(
        "writer", ["sh", "-c", "echo hi > /mem/x; exec sleep 3600"], volumeMounts=mount
    )
    pod = make_pod(
        cluster,
        "memory",
        writer,
        container("reader", volumeMounts=mount),
        volumes=[{"name": "mem", "emptyDir": {"medium": "Memory"}}],
    )
    uid = pod["metadata"]["uid"]
    wait_status(cluster, "memory", running_ready, 30, "Running")
    wait_for(lambda: _exec(docker_env, uid, "reader", "cat /mem/x") == "0:hi\n", 10, "shared tmpfs")
    assert "tmpfs" in _exec(docker_env, uid, "reader", "grep ' /mem ' /proc/mounts")
    cluster.core.delete_namespaced_pod("memory", cluster.namespace)
    wait_for(lambda: get_pod(cluster, "memory") is None, 20, "the pod to leave the API")
    wait_for(
        lambda: (
            not docker_env.client.api.volumes(filters={"label": f"{cri.LABEL_POD_UID}={uid}"})[
                "Volumes"
            ]
        ),
        10,
        "the pod's memory volume removed",
    )


def test_memory_empty_dir_keeps_its_files_across_a_restart(
    cluster: ApiUnderTest, agent: RunningAgent
) -> None:
    """The kubelet's tmpfs lives with the pod, not with one container (the conformance spec
    "Container Runtime blackbox test ... should run with the expected status" counts restarts
    in one): the first run leaves a file and fails, the second finds it and runs."""
    script = "[ -f /mem/seen ] && exec sleep 3600; touch /mem/seen; exit 1"
    make_pod(
        cluster,
        "remembers",
        container(
            command=["sh", "-c", script], volumeMounts=[{"name": "mem", "mountPath": "/mem"}]
        ),
        volumes=[{"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}],
    )
    st = wait_status(cluster, "remembers", running_ready, 40, "Running after one restart")
    assert container_status(st)["restartCount"] == 1


def test_a_container_over_its_memory_limit_is_oom_killed(
    cluster: ApiUnderTest, agent: RunningAgent
) -> None:
    """The kernel kills it inside its limit (dd's 64 MiB buffer in 16 MiB): OOMKilled, 137.

    Docker may report the OOM kill just after the exit (runtime/observe.py): the reason can
    read Error for a moment, so the wait is for a terminated reason other than that."""
    make_pod(
        cluster,
        "greedy",
        container(
            command=["dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"],
            resources={"limits": {"memory": "16Mi"}},
        ),
        restart="Never",
    )
    st = wait_status(
        cluster,
        "greedy",
        lambda s: s.get("phase") == "Failed" and _terminated_reason(s) not in (None, "Error"),
        30,
        "Failed, with the reason of the kill",
    )
    terminated = container_status(st)["state"]["terminated"]
    assert (terminated["reason"], terminated["exitCode"]) == ("OOMKilled", 137)


def _terminated_reason(status: dict) -> str | None:
    terminated = ((status.get("containerStatuses") or [{}])[0].get("state") or {}).get("terminated")
    return terminated.get("reason") if terminated else None
