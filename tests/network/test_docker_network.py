"""`--docker-network`: pod sandboxes on a named Docker network, the node reachable there (kind)."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from kubelet_sim import cri
from tests.agent_process import running_agent
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.pods import container, make_pod, running_ready, wait_status

pytestmark = pytest.mark.docker


def _internal_ip(cluster: ApiUnderTest) -> str | None:
    try:
        node = cluster.core.read_node(cluster.node_name)
    except Exception:
        return None
    return next((a.address for a in node.status.addresses or [] if a.type == "InternalIP"), None)


def test_sandboxes_join_the_network_and_the_node_ip_is_the_hosts_address_there(
    cluster: ApiUnderTest, docker_env: DockerEnv, network: Any
) -> None:
    config = network.attrs["IPAM"]["Config"][0]
    subnet, gateway = ipaddress.ip_network(config["Subnet"]), config["Gateway"]
    with running_agent(cluster, "--docker-network", network.name):
        ip = wait_for(lambda: _internal_ip(cluster), 20, "the Node's InternalIP")
        assert ip == gateway
        make_pod(cluster, "on-net", container())
        status = wait_status(cluster, "on-net", running_ready, 30, "Running and Ready")
        assert ipaddress.ip_address(status["podIP"]) in subnet
        assert status["hostIP"] == gateway
        sandboxes = [
            c
            for c in docker_env.containers_of_node(cluster.node_name)
            if c.labels.get(cri.LABEL_CONTAINER_TYPE) == "podsandbox"
        ]
        assert [list(s.attrs["NetworkSettings"]["Networks"]) for s in sandboxes] == [[network.name]]


def test_a_missing_network_is_one_clear_line(cluster: ApiUnderTest, docker_env: DockerEnv) -> None:
    with running_agent(cluster, "--docker-network", "no-such-network-here") as agent:
        code = agent.proc.wait(30)
    assert code == 1
    assert agent.lines[-1] == (
        "kubelet-sim: error: Docker network 'no-such-network-here' does not exist"
    )
