"""Privileged containers get what the host can grant (issue 21 item 5), as containerd gives them:
the engine's capabilities, the host's devices, no seccomp, and hostPath files both ways."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from docker.errors import APIError

from kubelet_sim.runtime import privileged
from tests.agent_fixture import start_agent
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.pods import BUSYBOX, container, containers_named, make_pod, running_ready, wait_status

pytestmark = pytest.mark.docker

PRIVILEGED = {"privileged": True}
SHOW = "grep -E '^(CapEff|Seccomp):' /proc/self/status; ls /dev; mount; exec sleep 3600"


def _engine_caps(docker_env: DockerEnv) -> int | None:
    path = getattr(getattr(docker_env.client.api, "_custom_adapter", None), "socket_path", None)
    return privileged.engine_bounding_set(path) if isinstance(path, str) else None


def _skip_unless_privileged_can_run(docker_env: DockerEnv) -> None:
    """Where the engine's set cannot be read, only Docker's own flag is left: skip if it fails."""
    if _engine_caps(docker_env) is not None:
        return
    try:
        docker_env.client.containers.run(BUSYBOX, ["true"], privileged=True, remove=True)
    except APIError as exc:
        pytest.skip(
            "this host runs no privileged container: the engine's capability bounding set is"
            f" unknown (not a local unix socket) and Docker's privileged fails: {exc}"
        )


def _app(docker_env: DockerEnv, uid: str) -> str:
    [app] = containers_named(docker_env, uid)
    return app.id


def _docker_refuses(docker_env: DockerEnv, cap: str) -> bool:
    """Docker has no name for `cap` (20.10 and CAP_PERFMON): it refuses the create."""
    host = docker_env.client.api.create_host_config(cap_add=[cap])
    try:
        created = docker_env.client.api.create_container(BUSYBOX, ["true"], host_config=host)
    except APIError as exc:
        return privileged.UNKNOWN_CAPABILITY.search(str(exc.explanation or exc)) is not None
    docker_env.client.api.remove_container(created["Id"], force=True)
    return False


def test_a_privileged_pod_runs_with_the_engines_capabilities_and_the_hosts_devices(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    _skip_unless_privileged_can_run(docker_env)
    running = start_agent(cluster, docker_env, tmp_path / "root", allow_privileged=True)
    try:
        shown = container(command=["sh", "-c", SHOW], securityContext=PRIVILEGED)
        uid = make_pod(cluster, "root", shown)["metadata"]["uid"]
        wait_status(cluster, "root", running_ready, 30, "the privileged pod Running and Ready")
        app = _app(docker_env, uid)
        logs = docker_env.client.api.logs

        def shown_lines() -> list[str] | None:
            lines = logs(app).decode().splitlines()
            return lines if any(" on /sys " in line for line in lines) else None

        lines = wait_for(shown_lines, 10, "the container's view of itself")
        fields = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
        assert fields["Seccomp"].strip() == "0"
        assert "kmsg" in lines, "a host device is in the container's /dev"
        [sys_mount] = [line for line in lines if " on /sys " in line]
        assert "(rw" in sys_mount, sys_mount

        effective = int(fields["CapEff"], 16)
        engine = _engine_caps(docker_env)
        kernel = privileged.kernel_capabilities()
        host = docker_env.client.api.inspect_container(app)["HostConfig"]
        if engine is None or engine & kernel == kernel:
            assert host["Privileged"] is True  # the host grants everything: Docker's flag
            assert engine is None or effective == engine & kernel
            return
        assert host["Privileged"] is False
        # Every capability of the engine, but for those Docker has no name for.
        assert effective & ~engine == 0, f"{effective:x} beyond the engine's {engine:x}"
        missing = [
            f"CAP_{name}"
            for bit, name in enumerate(privileged.CAPABILITIES)
            if (engine & kernel & ~effective) >> bit & 1
        ]
        assert all(_docker_refuses(docker_env, cap) for cap in missing), missing
    finally:
        running.stop()


def test_a_privileged_pod_writes_and_reads_a_host_path(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    _skip_unless_privileged_can_run(docker_env)
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "from-test").write_text("hello from the host\n")
    running = start_agent(cluster, docker_env, tmp_path / "root", allow_privileged=True)
    try:
        volume: dict[str, Any] = {
            "name": "host",
            "hostPath": {"path": str(shared), "type": "Directory"},
        }
        script = "cat /host/from-test; echo written by the pod > /host/from-pod; exec sleep 3600"
        writer = container(
            command=["sh", "-c", script],
            securityContext=PRIVILEGED,
            volumeMounts=[{"name": "host", "mountPath": "/host"}],
        )
        uid = make_pod(cluster, "host-writer", writer, volumes=[volume])["metadata"]["uid"]
        wait_status(cluster, "host-writer", running_ready, 30, "Running and Ready")
        written = shared / "from-pod"
        wait_for(written.exists, 10, "the pod's file on the host")
        assert written.read_text() == "written by the pod\n"
        logs = docker_env.client.api.logs
        app = _app(docker_env, uid)
        wait_for(
            lambda: logs(app).decode() == "hello from the host\n", 10, "the pod read the host's"
        )
    finally:
        running.stop()
