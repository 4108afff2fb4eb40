"""Pods of other nodes, kind's way: each node's podCIDR behind its InternalIP on the shared
Docker network (what kindnet programs on kind's nodes), and the virtual node's pods reached
directly on that network. A "kind node" here is a container of the test on a network the test
made, holding an address of its own pod range; every packet stays on that network.
"""

from __future__ import annotations

import contextlib
import secrets
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim.kube.rest import request_json
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import TEST_LABEL, DockerEnv
from tests.netpods import SERVE, app_container, in_netns, pod_ip, register_node, sandbox_pid
from tests.pods import container, get_pod, make_pod

pytestmark = pytest.mark.docker


def _exec(docker_env: DockerEnv, container_id: str, script: str) -> str:
    created = docker_env.client.api.exec_create(container_id, ["sh", "-c", script])
    return str(docker_env.client.api.exec_start(created["Id"]).decode())


def _http(address: str, port: int) -> str:
    return f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {address} {port} | tail -n 1"


def test_pods_reach_other_nodes_pod_ranges_and_are_reached(
    cluster: ApiUnderTest, docker_env: DockerEnv, network: Any, tmp_path: Path
) -> None:
    from tests.agent_fixture import start_agent

    octet = 100 + secrets.randbelow(150)
    cidr, kind_pod_ip = f"10.244.{octet}.0/24", f"10.244.{octet}.5"
    script = (
        f"ip addr add {kind_pod_ip}/32 dev lo && mkdir -p /www && echo kind-pod > /www/index.html"
        " && exec httpd -f -p 8080 -h /www"
    )
    kind_node = docker_env.client.containers.run(
        docker_env.busybox_image, ["sh", "-c", script], detach=True, network=network.name,
        cap_add=["NET_ADMIN"], labels={TEST_LABEL: "pod-routes"},
    )  # fmt: skip
    worker = f"kind-worker-{secrets.token_hex(3)}"
    try:
        kind_node.reload()
        kind_ip = kind_node.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]
        register_node(cluster.api, worker, cidr, kind_ip)
        running = start_agent(
            cluster, docker_env, tmp_path / "root", service_proxy=True,
            docker_network=network.name,
        )  # fmt: skip
        try:
            make_pod(cluster, "client", container(command=SERVE))
            client_ip = pod_ip(cluster, "client")
            pid = sandbox_pid(docker_env, (get_pod(cluster, "client") or {})["metadata"]["uid"])
            routes = ("ip", "-4", "route", "show", "proto", "250")
            wait_for(
                lambda: f"{cidr} via {kind_ip}" in in_netns(pid, *routes),
                10,
                f"the route to {worker}'s pod range in the client's namespace",
            )  # fmt: skip
            client = app_container(cluster, docker_env, "client")
            assert _exec(docker_env, client, _http(kind_pod_ip, 8080)).strip() == "kind-pod"
            # and the other way: the kind node reaches the virtual node's pod on the network
            assert _exec(docker_env, kind_node.id, _http(client_ip, 8080)).strip() == "client"
            # the node gone: its route goes
            request_json(cluster.api, "DELETE", f"/api/v1/nodes/{worker}")
            wait_for(
                lambda: cidr not in in_netns(pid, *routes),
                5,
                "the route gone with the node",
            )
        finally:
            running.stop()
    finally:
        kind_node.remove(force=True)
        with contextlib.suppress(Exception):
            request_json(cluster.api, "DELETE", f"/api/v1/nodes/{worker}")
