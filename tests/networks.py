"""A user-defined Docker network of the test's own engine, as kind makes its `kind` network."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from kubelet_sim import cri
from tests.cluster import ApiUnderTest
from tests.docker_env import TEST_LABEL, DockerEnv


@pytest.fixture
def network(
    cluster: ApiUnderTest, docker_env: DockerEnv, request: pytest.FixtureRequest
) -> Iterator[Any]:
    """A bridge network of the test's own engine, as kind makes its `kind` network."""
    created = docker_env.client.networks.create(
        f"ks-net-{secrets.token_hex(3)}", driver="bridge", labels={TEST_LABEL: request.node.nodeid}
    )
    created.reload()
    yield created
    docker_env.remove_labelled(f"{cri.LABEL_NODE}={cluster.node_name}")  # its endpoints first
    created.remove()
