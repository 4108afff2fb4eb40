"""Slow work never holds a pod worker: stops that wait out a grace period, pulls that hang.

Each test runs the agent with one or two pod workers, so that on a node whose workers block,
the pod that must start would wait for the slow work to end.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent_fixture import start_agent
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv
from tests.pods import (
    container,
    container_status,
    get_pod,
    make_pod,
    running_ready,
    status_of,
    wait_status,
)

IGNORES_SIGTERM = ["sleep", "3600"]  # PID 1 without a handler: SIGTERM does nothing


def _delete(cluster: ApiUnderTest, name: str, grace: int | None = None) -> None:
    cluster.core.delete_namespaced_pod(name, cluster.namespace, grace_period_seconds=grace)


def test_pods_start_while_others_wait_out_their_grace_period(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    running = start_agent(cluster, docker_env, tmp_path / "root", workers=2)
    try:
        stubborn = [f"stubborn-{i}" for i in range(3)]
        for name in stubborn:
            make_pod(
                cluster, name, container(command=IGNORES_SIGTERM), terminationGracePeriodSeconds=30
            )
        for name in stubborn:
            wait_status(cluster, name, running_ready, 30, "Running and Ready")
        for name in stubborn:
            _delete(cluster, name)
        make_pod(cluster, "fresh")
        wait_status(cluster, "fresh", running_ready, 15, "Running while the others stop")
        assert all(get_pod(cluster, n) is not None for n in stubborn), "still in their grace"
        st = status_of(cluster, stubborn[0])
        assert st["phase"] == "Running", "the phase stays until the containers have stopped"
    finally:
        running.stop()


def test_a_shorter_grace_period_cuts_a_stop_in_flight(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> None:
    running = start_agent(cluster, docker_env, tmp_path / "root", workers=1)
    try:
        make_pod(
            cluster, "slow", container(command=IGNORES_SIGTERM), terminationGracePeriodSeconds=60
        )
        wait_status(cluster, "slow", running_ready, 30, "Running and Ready")
        _delete(cluster, "slow")
        wait_for(lambda: status_of(cluster, "slow") and _killing_sent(cluster), 15, "Killing")
        _delete(cluster, "slow", grace=3)
        wait_for(lambda: get_pod(cluster, "slow") is None, 20, "the pod gone after 3 s, not 60")
    finally:
        running.stop()


def _killing_sent(cluster: ApiUnderTest) -> bool:
    events = cluster.core.list_namespaced_event(cluster.namespace).items
    return any(e.reason == "Killing" and e.involved_object.name == "slow" for e in events)


@pytest.fixture
def silent_registry() -> Iterator[str]:
    """A registry on loopback that accepts connections and never answers a byte."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not done.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    done.set()
    thread.join(2)
    for conn in held:
        conn.close()
    server.close()


def test_a_pull_that_hangs_is_cancelled_and_never_holds_a_worker(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path, silent_registry: str
) -> None:
    running = start_agent(
        cluster, docker_env, tmp_path / "root", workers=1, pull_progress_deadline=3
    )
    try:
        make_pod(cluster, "hangs", container(image=f"{silent_registry}/never:1"))
        make_pod(cluster, "quick")
        wait_status(cluster, "quick", running_ready, 20, "Running beside a hanging pull")
        st = wait_status(
            cluster,
            "hangs",
            lambda s: (
                container_status(s).get("state", {}).get("waiting", {}).get("reason")
                in ("ErrImagePull", "ImagePullBackOff")
            ),
            30,
            "the pull cancelled",
        )
        waiting = container_status(st)["state"]["waiting"]
        if waiting["reason"] == "ErrImagePull":
            assert waiting["message"] == "pull cancelled: no progress for 3s"
        assert st["phase"] == "Pending"
    finally:
        running.stop()
