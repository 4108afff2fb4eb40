"""bench/dockerfloor.py: Docker alone doing a bench pod's containers. Its numbers are the floor
under bench.perf's pod rows, so its pods must be the bench's pods: a sandbox that owns the
network and an app in it that exits at once on SIGTERM. No API server is involved (so this
runs in the fake pass only)."""

from __future__ import annotations

import pytest

from bench import dockerfloor
from tests.docker_env import DockerEnv

pytestmark = pytest.mark.docker


def test_a_floor_pod_is_a_sandbox_and_an_app_that_ends_on_sigterm(docker_env: DockerEnv) -> None:
    api = docker_env.client.api
    pods = dockerfloor.FloorPods(api, docker_env.pause_image)
    try:
        pod = pods.start()
        sandbox, app = api.inspect_container(pod.sandbox), api.inspect_container(pod.app)
        assert sandbox["State"]["Running"]
        assert app["State"]["Running"]
        assert sandbox["HostConfig"]["NetworkMode"] == "bridge"
        assert sandbox["NetworkSettings"]["IPAddress"]
        assert app["HostConfig"]["NetworkMode"] == f"container:{pod.sandbox}"
        pods.stop(pod)
        for container_id in (pod.app, pod.sandbox):
            state = api.inspect_container(container_id)["State"]
            assert (state["Running"], state["ExitCode"]) == (False, 0)  # SIGTERM, not SIGKILL
    finally:
        pods.remove_all()
    assert (
        api.containers(all=True, filters={"label": f"{dockerfloor.LABEL}={dockerfloor.VALUE}"})
        == []
    )


def test_the_floor_times_each_step_and_leaves_no_container(docker_env: DockerEnv) -> None:
    floor = dockerfloor.measure(
        docker_env.client, docker_env.pause_image, repeat=2, size=3, workers=2
    )
    assert (floor.repeat, floor.size, floor.workers) == (2, 3, 2)
    for seconds in (floor.one_start_p50, floor.one_stop_p50, floor.many_start, floor.many_stop):
        assert seconds > 0
    api = docker_env.client.api
    assert (
        api.containers(all=True, filters={"label": f"{dockerfloor.LABEL}={dockerfloor.VALUE}"})
        == []
    )
