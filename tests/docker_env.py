"""Docker fixtures: the engine this test run started, local images, and cleanup by label."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import docker
import pytest
from docker.errors import DockerException, NotFound

from kubelet_sim import cri
from kubelet_sim.runtime.local_images import BUSYBOX_IMAGE, PAUSE_IMAGE, ensure_local_images

__all__ = ["DockerEnv", "docker_env", "docker_session"]

TEST_LABEL = "io.kubelet-sim.test"


@dataclass
class DockerEnv:
    client: docker.DockerClient
    busybox_image: str = BUSYBOX_IMAGE
    pause_image: str = PAUSE_IMAGE

    def containers_of_node(self, node_name: str) -> list[docker.models.containers.Container]:
        """The node's containers, inspected; one removed between list and inspect is skipped
        (the SDK's own list would raise NotFound while the agent removes containers)."""
        found = []
        for summary in self.client.api.containers(
            all=True, filters={"label": f"{cri.LABEL_NODE}={node_name}"}
        ):
            with contextlib.suppress(NotFound):
                found.append(self.client.containers.get(summary["Id"]))
        return found

    def remove_labelled(self, label: str) -> None:
        """Force-remove what carries `label`; one removed meanwhile (a node's pool giving a
        sandbox back as it stops) is skipped."""
        listed = self.client.containers.list(
            all=True, filters={"label": label}, ignore_removed=True
        )
        for container in listed:
            with contextlib.suppress(NotFound):
                container.remove(force=True)


@pytest.fixture(scope="session")
def docker_session() -> Iterator[DockerEnv]:
    """The Docker engine (which .ci/run starts) with the local busybox and pause images."""
    try:
        client = docker.from_env()
        client.ping()
    except DockerException as exc:
        pytest.fail(
            f"Docker engine not reachable ({exc}); .ci/run installs and starts one,"
            " or run `dockerd &` as root",
            pytrace=False,
        )
    ensure_local_images(client)
    yield DockerEnv(client=client)
    client.close()


@pytest.fixture
def docker_env(docker_session: DockerEnv, request: pytest.FixtureRequest) -> Iterator[DockerEnv]:
    """Per test: removes every container the test or an agent it ran created for its node."""
    yield docker_session
    docker_session.remove_labelled(f"{TEST_LABEL}={request.node.nodeid}")
    if "cluster" in request.fixturenames:
        node_name = request.getfixturevalue("cluster").node_name
        docker_session.remove_labelled(f"{cri.LABEL_NODE}={node_name}")
