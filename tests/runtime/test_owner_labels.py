"""Two kinds of node on one engine with one node name (the demo's `n1` and a user's own `n1`):
neither takes the other's containers for orphans (cri.LABEL_OWNER)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kubelet_sim import cri
from kubelet_sim.runtime.node_runtime import NodeRuntime
from tests.agent_fixture import start_agent
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import TEST_LABEL, DockerEnv


def test_which_containers_a_runtime_owns() -> None:
    plain = NodeRuntime(None, node_name="n1")  # type: ignore[arg-type]
    demo = NodeRuntime(None, node_name="n1", owner_labels={cri.LABEL_OWNER: "abc"})  # type: ignore[arg-type]
    everyone = NodeRuntime(None, node_name="n1", owner_labels=None)  # type: ignore[arg-type]
    mine, theirs = {cri.LABEL_NODE: "n1"}, {cri.LABEL_NODE: "n1", cri.LABEL_OWNER: "abc"}
    other_demo = {cri.LABEL_NODE: "n1", cri.LABEL_OWNER: "def"}
    assert plain.owns(mine)
    assert not plain.owns(theirs)
    assert demo.owns(theirs)
    assert not demo.owns(mine)
    assert not demo.owns(other_demo)
    assert everyone.owns(mine)
    assert everyone.owns(theirs)


@pytest.mark.docker
@pytest.mark.parametrize("owner", ["someone-else", None])
def test_a_node_leaves_alone_a_container_another_owner_made_under_its_name(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path, owner: str | None
) -> None:
    """A container under this node's name whose pod the API server does not know is an orphan
    and removed, unless another owner made it (the parametrization shows both)."""
    labels = {
        cri.LABEL_NODE: cluster.node_name,
        cri.LABEL_POD_UID: str(uuid.uuid4()),
        cri.LABEL_POD_NAME: "elsewhere",
        cri.LABEL_POD_NAMESPACE: cluster.namespace,
        cri.LABEL_CONTAINER_NAME: "c",
        cri.LABEL_CONTAINER_TYPE: "container",
        TEST_LABEL: "owner-labels",
    }
    if owner:
        labels[cri.LABEL_OWNER] = owner
    stranger = docker_env.client.containers.run(
        docker_env.busybox_image, ["sleep", "300"], detach=True, labels=labels
    )
    try:
        running = start_agent(cluster, docker_env, tmp_path / "root")  # its workers started
        try:
            if owner is None:
                wait_for(lambda: _gone(docker_env, stranger.id), 20, "the orphan removed")
            else:
                # The node's view of its containers (what orphan removal works from) is synced
                # and does not hold it, so nothing will ever remove it.
                seen = running.agent.syncer.watcher.all_containers()
                assert stranger.id not in {c.id for c in seen}
                stranger.reload()
                assert stranger.status == "running"
        finally:
            running.stop()
    finally:
        if not _gone(docker_env, stranger.id):
            stranger.remove(force=True)


def _gone(docker_env: DockerEnv, container_id: str) -> bool:
    listed = docker_env.client.containers.list(
        all=True, filters={"id": container_id}, ignore_removed=True
    )  # removed between Docker's list and the SDK's inspect of it: gone
    return not listed
