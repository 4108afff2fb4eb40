"""The agent as a whole: its own Node, and pods that changed while it was away."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
from kubernetes import client

from kubelet_sim import cri
from tests.agent_fixture import RunningAgent, start_agent
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.pods import (
    container,
    container_status,
    make_pod,
    pod_containers,
    running_ready,
    wait_status,
)

pytestmark = pytest.mark.docker


def _node_uid(cluster: ApiUnderTest) -> str | None:
    try:
        return str(cluster.core.read_node(cluster.node_name).metadata.uid)
    except client.ApiException:
        return None


def test_deleted_node_is_registered_again(cluster: ApiUnderTest, agent: RunningAgent) -> None:
    first = wait_for(lambda: _node_uid(cluster), 10, "the Node")
    cluster.core.delete_node(cluster.node_name)
    second = wait_for(
        lambda: (uid := _node_uid(cluster)) not in (None, first) and uid, 15, "a new Node"
    )
    assert second != first


def test_pod_deleted_while_away_has_its_containers_removed(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent, tmp_path: Path
) -> None:
    pod = make_pod(cluster, "orphan")
    wait_status(cluster, "orphan", running_ready, 20, "Running")
    agent.stop()
    cluster.core.delete_namespaced_pod("orphan", cluster.namespace, grace_period_seconds=0)
    second = start_agent(cluster, docker_env, tmp_path / "root")
    try:
        wait_for(
            lambda: not pod_containers(docker_env, pod["metadata"]["uid"]), 20, "orphans removed"
        )
    finally:
        second.stop()


def test_pod_too_big_for_the_node_is_refused(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    huge = container(resources={"requests": {"cpu": "1000"}})
    pod = make_pod(cluster, "huge", huge)
    st = wait_status(cluster, "huge", lambda s: s.get("phase") == "Failed", 20, "Failed")
    assert st["reason"] == "OutOfcpu"
    assert st["message"].startswith(
        "Pod was rejected: Node didn't have enough resource: cpu, requested: 1000000"
    )
    assert not pod_containers(docker_env, pod["metadata"]["uid"])


def test_fallback_to_logs_on_error(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    failing = container(
        command=["sh", "-c", "echo last words; exit 3"],
        terminationMessagePolicy="FallbackToLogsOnError",
    )
    make_pod(cluster, "talker", failing, restart="Never")
    st = wait_status(cluster, "talker", lambda s: s.get("phase") == "Failed", 20, "Failed")
    term = container_status(st)["state"]["terminated"]
    assert (term["exitCode"], term["reason"], term["message"]) == (3, "Error", "last words\n")


def test_every_container_is_labelled_for_recovery(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    pod = make_pod(cluster, "labelled")
    wait_status(cluster, "labelled", running_ready, 20, "Running")
    for c in pod_containers(docker_env, pod["metadata"]["uid"]):
        labels = c.labels
        assert labels[cri.LABEL_NODE] == cluster.node_name
        assert labels[cri.LABEL_POD_NAME] == "labelled"
        assert labels[cri.LABEL_POD_NAMESPACE] == cluster.namespace
        assert labels[cri.LABEL_CONTAINER_TYPE] in ("podsandbox", "container")
        if labels[cri.LABEL_CONTAINER_TYPE] == "container":
            assert labels[cri.LABEL_RESTART_COUNT] == "0"
            assert labels[cri.LABEL_CONTAINER_HASH]


def test_object_watches_follow_the_pods_that_use_them(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    ns = cluster.namespace
    cluster.core.create_namespaced_config_map(
        ns, {"metadata": {"name": "shared"}, "data": {"k": "v"}}
    )
    env = [{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "shared", "key": "k"}}}]
    make_pod(cluster, "first", container(env=env))
    make_pod(cluster, "second", container(env=env))
    ref = ("ConfigMap", ns, "shared")
    wait_for(lambda: ref in agent.agent.objects.watched(), 10, "the ConfigMap watched")
    wait_status(cluster, "second", running_ready, 20, "Running")
    cluster.core.delete_namespaced_pod("first", ns, grace_period_seconds=0)
    wait_for(
        lambda: agent.agent.pods.get(_uid(cluster, "second")) is not None, 5, "second still known"
    )
    assert ref in agent.agent.objects.watched(), "still used by the second pod"
    cluster.core.delete_namespaced_pod("second", ns, grace_period_seconds=0)
    wait_for(
        lambda: ref not in agent.agent.objects.watched(), 10, "the watch stopped with the last pod"
    )


def _uid(cluster: ApiUnderTest, name: str) -> str:
    return str(cluster.core.read_namespaced_pod(name, cluster.namespace).metadata.uid)


def test_status_write_failure_is_retried(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    fake = cluster.require_fake("fails a status write")
    make_pod(cluster, "flaky", container(command=["sh", "-c", "sleep 1"]), restart="Never")
    wait_status(cluster, "flaky", lambda s: s.get("phase") == "Running", 20, "Running")
    fake.fail_next(1, 503, verb="patch", resource="pods")
    wait_status(
        cluster, "flaky", lambda s: s.get("phase") == "Succeeded", 30, "Succeeded after a retry"
    )
    failed = [r for r in fake.requests(verb="patch", resource="pods") if r.code == 503]
    assert len(failed) == 1, "the first write after the exit failed and was retried"


def test_repeated_status_write_failures_back_off_and_are_said_once(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    from structlog.testing import capture_logs

    fake = cluster.require_fake("fails status writes")
    began = time.time()  # the fake's log is the session's: this test's requests only
    with capture_logs() as logs:
        running = start_agent(cluster, docker_env, tmp_path / "root")
        try:
            fake.fail_next(4, 500, verb="patch", resource="pods")
            make_pod(cluster, "stubborn")
            wait_status(cluster, "stubborn", running_ready, 40, "Running and Ready")
        finally:
            running.stop()
    patches = fake.requests(verb="patch", resource="pods", since=began)
    failed = [r.time for r in patches if r.code == 500]
    assert len(failed) == 4
    gaps = [b - a for a, b in itertools.pairwise(failed)]
    # Each retry waits at least its booked delay (1 s doubling, jitter only adds); a slow sync
    # can only make a gap longer, so the bounds are lower bounds.
    assert all(gap >= 2**i for i, gap in enumerate(gaps)), f"retries back off: {gaps}"
    said = [e for e in logs if e["event"] == "status write failed; retrying with backoff"]
    assert [e["log_level"] for e in said].count("warning") == 1, said
    recovered = [e for e in logs if e["event"] == "status write succeeded after failures"]
    assert [e["attempts"] for e in recovered] == [4]


def test_an_unchanged_status_is_not_written_again(
    cluster: ApiUnderTest, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    """Fields the server drops (v1.24 and `hostIPs`) must not make every sync a write."""
    make_pod(cluster, "steady")
    wait_status(cluster, "steady", running_ready, 20, "Running and Ready")
    writer = agent.agent.syncer.status.sink
    before = writer.unchanged
    labelled = cluster.core.patch_namespaced_pod(
        "steady", cluster.namespace, {"metadata": {"labels": {"resync": "please"}}}
    )
    wait_for(lambda: writer.unchanged > before, 10, "a sync that found nothing to write")
    pod = cluster.core.read_namespaced_pod("steady", cluster.namespace)
    assert pod.metadata.resource_version == labelled.metadata.resource_version
