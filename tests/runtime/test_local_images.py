"""The local images that every Docker test runs on must behave like busybox and pause."""

from __future__ import annotations

import time

import pytest

from tests.docker_env import TEST_LABEL, DockerEnv

pytestmark = pytest.mark.docker


def test_busybox_image_runs_applets(docker_env: DockerEnv, request: pytest.FixtureRequest) -> None:
    out = docker_env.client.containers.run(
        docker_env.busybox_image,
        ["sh", "-c", "echo hello from $(uname -s); ls /bin/sleep && id -u"],
        labels={TEST_LABEL: request.node.nodeid},
        remove=False,
    )
    assert out.decode().split() == ["hello", "from", "Linux", "/bin/sleep", "0"]


def test_pause_image_exits_zero_on_sigterm(
    docker_env: DockerEnv, request: pytest.FixtureRequest
) -> None:
    container = docker_env.client.containers.run(
        docker_env.pause_image, detach=True, labels={TEST_LABEL: request.node.nodeid}
    )
    deadline = time.monotonic() + 10
    while container.status != "running" and time.monotonic() < deadline:
        time.sleep(0.02)
        container.reload()
    assert container.status == "running"
    container.stop(timeout=10)  # SIGTERM, then SIGKILL after 10 s
    container.reload()
    assert container.attrs["State"]["ExitCode"] == 0, "pause exits on SIGTERM (SIGKILL is 137)"
