"""In-place resize end to end: PATCH pods/<p>/resize, then what Docker and the pod say.

What the v1.34.9 kubelet did on this machine's rig with the same pod (one container, requests
cpu 100m memory 32Mi, limits cpu 200m memory 64Mi): to cpu 150m/250m, the container kept
running (restartCount 0) with its status and allocation moved and a ResizeCompleted event; to
cpu 100, nothing moved but a PodResizePending condition, Infeasible. Servers before v1.33 serve
no `resize` subresource (resources are immutable there): skipped on them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim.kube.rest import request_json
from tests.agent_fixture import RunningAgent, start_agent
from tests.cluster import ApiUnderTest
from tests.docker_env import DockerEnv
from tests.pods import (
    condition,
    container,
    container_status,
    containers_named,
    event_messages,
    get_pod,
    make_pod,
    running_ready,
    wait_condition,
    wait_for_events,
    wait_status,
)

SMALL = {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}}
BIGGER = {
    "requests": {"cpu": "150m", "memory": "32Mi"},
    "limits": {"cpu": "250m", "memory": "64Mi"},
}
HUGE = {"requests": {"cpu": "100", "memory": "32Mi"}, "limits": {"cpu": "100", "memory": "64Mi"}}


@pytest.fixture(autouse=True)
def _needs_resize(cluster: ApiUnderTest) -> None:
    listed = request_json(cluster.api, "GET", "/api/v1")
    if "pods/resize" not in {r.get("name") for r in listed.get("resources") or []}:
        pytest.skip("the API server serves no pods/resize (in-place resize is v1.33+)")


@pytest.fixture
def agent(cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path) -> Iterator[RunningAgent]:
    running = start_agent(cluster, docker_env, tmp_path / "root", node={"cpu": "2"})
    yield running
    running.stop()


def _resize(cluster: ApiUnderTest, name: str, resources: dict[str, Any]) -> None:
    """kubectl patch pod <p> --subresource resize (a strategic merge patch)."""
    path = f"/api/v1/namespaces/{cluster.namespace}/pods/{name}/resize"
    body = {"spec": {"containers": [{"name": "main", "resources": resources}]}}
    request_json(
        cluster.api, "PATCH", path, body, content_type="application/strategic-merge-patch+json"
    )


def _app(docker_env: DockerEnv, uid: str) -> list[str]:
    return [c.id for c in containers_named(docker_env, uid, "main")]


def _host_config(docker_env: DockerEnv, container_id: str) -> tuple[int, int]:
    host = docker_env.client.api.inspect_container(container_id)["HostConfig"]
    return host["CpuQuota"], host["CpuShares"]


@pytest.mark.usefixtures("agent")
def test_a_resize_that_fits_is_applied_in_place_and_one_that_cannot_is_infeasible(
    cluster: ApiUnderTest, docker_env: DockerEnv
) -> None:
    pod = make_pod(cluster, "resized", container("main", resources=SMALL))
    uid = pod["metadata"]["uid"]
    wait_status(cluster, "resized", running_ready, 60, "Running and Ready")
    (first,) = _app(docker_env, uid)
    assert _host_config(docker_env, first) == (20000, 102)

    _resize(cluster, "resized", BIGGER)

    def applied(st: dict[str, Any]) -> bool:
        told = container_status(st, "main")
        return told.get("resources") == BIGGER and not condition(st, "PodResizeInProgress")

    status = wait_status(cluster, "resized", applied, 30, "the resize applied")
    told = container_status(status, "main")
    assert told["allocatedResources"] == {"cpu": "150m", "memory": "32Mi"}
    assert told["restartCount"] == 0
    assert told["containerID"] == f"docker://{first}"
    assert _app(docker_env, uid) == [first]
    assert _host_config(docker_env, first) == (25000, 153)
    wait_for_events(cluster, "resized", "ResizeCompleted")
    assert event_messages(cluster, "resized", "ResizeCompleted") == [
        'Pod resize completed: {"containers":[{"name":"main","resources":{"limits":'
        '{"cpu":"250m","memory":"64Mi"},"requests":{"cpu":"150m","memory":"32Mi"}}}]}'
    ]
    assert event_messages(cluster, "resized", "Killing") == []

    _resize(cluster, "resized", HUGE)
    status = wait_condition(cluster, "resized", "PodResizePending", 30, reason="Infeasible")
    pending = condition(status, "PodResizePending")
    assert pending["status"] == "True"
    assert pending["message"] == (
        "Node didn't have enough capacity: cpu, requested: 100000, capacity: 2000"
    )
    current = get_pod(cluster, "resized")
    assert current is not None
    assert pending["observedGeneration"] == current["metadata"]["generation"]
    told = container_status(status, "main")
    assert told["resources"] == BIGGER
    assert told["allocatedResources"] == {"cpu": "150m", "memory": "32Mi"}
    assert told["restartCount"] == 0
    assert _app(docker_env, uid) == [first]
    assert _host_config(docker_env, first) == (25000, 153)
    assert len(event_messages(cluster, "resized", "ResizeCompleted")) == 1
