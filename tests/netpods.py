"""Pods that serve and ask over the network, seen from the test: their IPs, their containers,
their namespaces (entered with nsenter), one HTTP request from inside one (busybox's nc: its
wget crashes on this machine); a Node standing for another node whose pods they reach."""

from __future__ import annotations

import subprocess
from typing import Any

from kubelet_sim import cri
from kubelet_sim.kube.rest import request_json
from tests.cluster import ApiUnderTest
from tests.docker_env import DockerEnv
from tests.pods import get_pod, pod_containers, running_ready, wait_status

SERVE = [
    "sh", "-c", "mkdir -p /www && echo $HOSTNAME > /www/index.html && exec httpd -f -p 8080 -h /www"
]  # fmt: skip


def register_node(api: Any, name: str, pod_cidr: str, internal_ip: str) -> None:
    """A Node `name` whose pods are in `pod_cidr`, reached at `internal_ip` (as kind's worker):
    what a node's network plugin routes to."""
    request_json(api, "POST", "/api/v1/nodes", body={
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]},
    })  # fmt: skip
    request_json(
        api, "PATCH", f"/api/v1/nodes/{name}/status",
        body={"status": {"addresses": [{"type": "InternalIP", "address": internal_ip}]}},
        content_type="application/merge-patch+json",
    )  # fmt: skip


def pod_ip(cluster: ApiUnderTest, name: str) -> str:
    st = wait_status(cluster, name, running_ready, 30, "running and ready")
    return str(st["podIP"])


def app_container(cluster: ApiUnderTest, docker_env: DockerEnv, name: str) -> str:
    uid = (get_pod(cluster, name) or {})["metadata"]["uid"]
    (app,) = [
        c
        for c in pod_containers(docker_env, uid)
        if c.labels.get(cri.LABEL_CONTAINER_NAME) != cri.SANDBOX_CONTAINER_NAME
        and c.status == "running"
    ]
    return app.id


def ask(docker_env: DockerEnv, client: str, address: str) -> str:
    """One HTTP request from inside the client pod (nc: this busybox's wget crashes): the
    body's last line, or nc's error (`… Connection refused`)."""
    host, port = address.rsplit(":", 1)
    script = f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {host} {port} 2>&1"
    result = docker_env.client.api.exec_create(client, ["sh", "-c", script])
    out = docker_env.client.api.exec_start(result["Id"]).decode().strip()
    return out.splitlines()[-1].strip() if out else ""


def sandbox_pid(docker_env: DockerEnv, uid: str) -> int:
    """The pid of the pod's sandbox: the container its app containers share a network with
    (a sandbox taken from the warm pool keeps the pool's Docker labels, so the pod's uid label
    finds its app containers only)."""
    containers = pod_containers(docker_env, uid)
    named = cri.SANDBOX_CONTAINER_NAME
    sandboxes = [c.id for c in containers if c.labels.get(cri.LABEL_CONTAINER_NAME) == named]
    if not sandboxes:
        modes = {
            docker_env.client.api.inspect_container(c.id)["HostConfig"]["NetworkMode"]
            for c in containers
        }
        sandboxes = [m.split(":", 1)[1] for m in modes if m.startswith("container:")]
    (sandbox,) = sandboxes
    return int(docker_env.client.api.inspect_container(sandbox)["State"]["Pid"])


def in_netns(pid: int, *argv: str) -> str:
    return subprocess.run(
        ["nsenter", f"--net=/proc/{pid}/ns/net", "--", *argv],
        capture_output=True, text=True, check=True, timeout=10,
    ).stdout  # fmt: skip
