"""What a pod may reach of the node: secrets kept off the disk, no host access unless allowed,
subPaths that stay inside their volume, and the taint that keeps ordinary workloads away."""

from __future__ import annotations

import base64
import stat
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim import cri
from kubelet_sim.volumes.hostmount import can_mount, mount_points_under
from tests.agent_fixture import RunningAgent, start_agent
from tests.cluster import Cluster, wait_for
from tests.docker_env import DockerEnv
from tests.pods import (
    container,
    container_status,
    get_pod,
    make_pod,
    pod_containers,
    running_ready,
    wait_status,
)

pytestmark = pytest.mark.docker


def _pod_dir(agent: RunningAgent, uid: str) -> Path:
    return agent.agent.runtime.root_dir / "pods" / uid


def _fstype(path: Path) -> str | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        before, _, after = line.partition(" - ")
        if before.split()[4] == str(path):
            return after.split()[0]
    return None


@pytest.mark.skipif(not can_mount(), reason="tmpfs volumes need CAP_SYS_ADMIN")
def test_secret_volume_is_tmpfs_with_the_pods_modes_and_goes_with_the_pod(
    cluster: Cluster, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    cluster.core.create_namespaced_secret(
        cluster.namespace,
        {"metadata": {"name": "creds"}, "data": {"pass": base64.b64encode(b"s3cr3t").decode()}},
    )
    volume = {"name": "s", "secret": {"secretName": "creds", "defaultMode": 0o400}}
    reader = container(
        command=["sh", "-c", "stat -L -c %a /s/pass; cat /s/pass; echo; exec sleep 3600"],
        volumeMounts=[{"name": "s", "mountPath": "/s"}],
    )
    pod = make_pod(cluster, "secretive", reader, volumes=[volume])
    uid = pod["metadata"]["uid"]
    wait_status(cluster, "secretive", running_ready, 30, "Running")
    pod_dir = _pod_dir(agent, uid)
    secret_dir = pod_dir / "volumes" / "kubernetes.io~secret" / "s"

    assert _fstype(secret_dir) == "tmpfs"
    assert stat.S_IMODE((secret_dir / "pass").stat().st_mode) == 0o400
    assert stat.S_IMODE(pod_dir.stat().st_mode) == 0o750
    assert stat.S_IMODE(agent.agent.runtime.root_dir.stat().st_mode) == 0o700
    [app] = [
        c for c in pod_containers(docker_env, uid) if c.labels.get(cri.LABEL_CONTAINER_NAME) == "c"
    ]
    logs = docker_env.client.containers.get(app.id).logs
    wait_for(
        lambda: logs().decode().split() == ["400", "s3cr3t"],
        10,
        "the container to read the secret, with the pod's mode",
    )

    cluster.core.delete_namespaced_pod("secretive", cluster.namespace)
    wait_for(lambda: get_pod(cluster, "secretive") is None, 30, "the pod gone from the API")
    wait_for(lambda: not pod_dir.exists(), 15, "the pod's directory removed")
    assert mount_points_under(pod_dir) == []


def _waiting(st: dict[str, Any], name: str) -> dict[str, Any]:
    return (container_status(st, name).get("state") or {}).get("waiting") or {}


HOST_PATH = [{"name": "host", "hostPath": {"path": "/var/run", "type": "Directory"}}]


def test_host_path_is_refused_without_allow_privileged(
    cluster: Cluster, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    mounts = [{"name": "host", "mountPath": "/host", "readOnly": True}]
    pod = make_pod(cluster, "nosy", container(volumeMounts=mounts), volumes=HOST_PATH)
    st = wait_status(cluster, "nosy", lambda s: s.get("phase") == "Failed", 20, "Failed")
    assert st["reason"] == "Forbidden"
    assert st["message"] == (
        f'Pod was rejected: pod with UID "{pod["metadata"]["uid"]}" specified hostPath volume'
        ' "host", but is disallowed'
    )
    assert not pod_containers(docker_env, pod["metadata"]["uid"])


def test_allow_privileged_admits_host_path_and_added_capabilities(
    cluster: Cluster, docker_env: DockerEnv, tmp_path: Path
) -> None:
    running = start_agent(cluster, docker_env, tmp_path / "root", allow_privileged=True)
    try:
        mounts = [{"name": "host", "mountPath": "/host", "readOnly": True}]
        caps = {"capabilities": {"add": ["NET_ADMIN"]}}
        make_pod(
            cluster,
            "trusted",
            container(volumeMounts=mounts, securityContext=caps),
            volumes=HOST_PATH,
        )
        wait_status(cluster, "trusted", running_ready, 30, "Running with --allow-privileged")
    finally:
        running.stop()


def test_sub_path_symlink_planted_by_a_container_does_not_leave_the_volume(
    cluster: Cluster, docker_env: DockerEnv, agent: RunningAgent
) -> None:
    """An init container plants `escape -> /etc` in a shared emptyDir; a later container's
    subPath through it is refused as the kubelet refuses it, the honest subPath works."""
    plant = container(
        "plant",
        ["sh", "-c", "mkdir -p /data/ok && echo inside > /data/ok/f && ln -s /etc /data/escape"],
        volumeMounts=[{"name": "data", "mountPath": "/data"}],
    )
    good = container(
        "good",
        ["sh", "-c", "cat /ok/f; exec sleep 3600"],
        volumeMounts=[{"name": "data", "mountPath": "/ok", "subPath": "ok"}],
    )
    bad = container(
        "bad", volumeMounts=[{"name": "data", "mountPath": "/etc-of-host", "subPath": "escape"}]
    )
    pod = make_pod(
        cluster,
        "climber",
        good,
        bad,
        initContainers=[plant],
        volumes=[{"name": "data", "emptyDir": {}}],
        restart="Never",
    )
    st = wait_status(
        cluster,
        "climber",
        lambda s: (
            _waiting(s, "bad").get("reason") == "CreateContainerConfigError"
            and container_status(s, "good").get("ready")
        ),
        30,
        "bad refused, good running",
    )
    assert _waiting(st, "bad")["message"] == (
        'failed to prepare subPath for volumeMount "data" of container "bad"'
    )
    uid = pod["metadata"]["uid"]
    [seen] = [
        c
        for c in pod_containers(docker_env, uid)
        if c.labels.get(cri.LABEL_CONTAINER_NAME) == "good"
    ]
    logs = docker_env.client.containers.get(seen.id).logs
    wait_for(lambda: logs().decode().strip() == "inside", 10, "the file through the subPath")
