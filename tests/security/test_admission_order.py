"""Admission as the kubelet does it: one at a time, oldest first, counting only admitted pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.agent_fixture import start_agent
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.pods import container, make_pod, pod_containers, running_ready, status_of, wait_status

CPU_800M = {"requests": {"cpu": "800m"}}


def _phases(cluster: ApiUnderTest, names: list[str]) -> dict[str, str] | None:
    """Each pod's phase, once none is Pending any more."""
    phases = {n: str(status_of(cluster, n).get("phase") or "Pending") for n in names}
    return None if "Pending" in phases.values() else phases


def test_a_burst_that_overflows_the_node_loses_only_the_youngest_pod(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    """Three pods of 800m on a 2-CPU node: two run, the last one created is refused."""
    names = ["first", "second", "third"]
    for name in names:  # created before the node looks, so that they arrive as one burst
        make_pod(cluster, name, container(resources=CPU_800M))
    running = start_agent(cluster, docker_env, tmp_path / "root", node={"cpu": "2"})
    try:
        phases = wait_for(lambda: _phases(cluster, names), 40, "every pod decided")
        assert phases == {"first": "Running", "second": "Running", "third": "Failed"}
        refused = status_of(cluster, "third")
        assert refused["reason"] == "OutOfcpu"
        assert refused["message"] == (
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 800,"
            " used: 1600, capacity: 2000"
        )
    finally:
        running.stop()


def test_a_restart_with_a_smaller_node_keeps_what_runs(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    names = ["a", "b", "c"]
    first = start_agent(cluster, docker_env, tmp_path / "root", node={"cpu": "4"})
    try:
        pods: dict[str, Any] = {
            n: make_pod(cluster, n, container(resources=CPU_800M)) for n in names
        }
        for name in names:
            wait_status(cluster, name, running_ready, 30, "Running and Ready")
    finally:
        first.stop()
    before = {
        n: {c.id for c in pod_containers(docker_env, p["metadata"]["uid"])} for n, p in pods.items()
    }
    second = start_agent(cluster, docker_env, tmp_path / "root", node={"cpu": "1"})
    try:
        make_pod(cluster, "newcomer", container(resources=CPU_800M))
        refused = wait_status(
            cluster, "newcomer", lambda s: s.get("phase") == "Failed", 30, "refused"
        )
        assert refused["reason"] == "OutOfcpu"
        for name, pod in pods.items():
            assert running_ready(status_of(cluster, name)), name
            now = {c.id for c in pod_containers(docker_env, pod["metadata"]["uid"])}
            assert now == before[name], f"{name}'s containers were not touched"
    finally:
        second.stop()
