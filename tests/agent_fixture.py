"""A node running in this process against the test's cluster and the real Docker engine, built
and run as the command runs its nodes (a one-node `NodeSet`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim.assembly.node import Node
from kubelet_sim.assembly.nodeset import NodeIdentity, NodeSet, NodeSetSettings
from kubelet_sim.assembly.process import engine_for
from kubelet_sim.node.settings import NodeSettings
from kubelet_sim.podworkers.settings import PodSettings
from kubelet_sim.runtime.engine import DockerEngine
from kubelet_sim.server.settings import ServerSettings
from tests.cluster import ApiUnderTest, wait_for
from tests.docker_env import DockerEnv

__all__ = ["RunningAgent", "agent", "privileged_agent", "start_agent"]


@dataclass
class RunningAgent:
    agent: Node
    stop_event: threading.Event
    thread: threading.Thread
    nodes: NodeSet
    failures: list[tuple[str, str]]
    engine: DockerEngine  # the process's, the set's: closed after it

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(15)
        assert not self.thread.is_alive(), "the agent did not stop"
        self.nodes.close()
        self.engine.close()
        # A pool sandbox still being made when the node's stop deadline passed is removed by
        # the pool's thread once made: waited for, so that none outlives the test.
        wait_for(lambda: not self.agent.pool.running(), 60, "the sandbox pool's thread to end")


def start_agent(
    cluster: ApiUnderTest,
    docker_env: DockerEnv,
    root: Path,
    *,
    node: dict[str, Any] | None = None,
    pull_progress_deadline: float | None = None,
    prepare: Callable[[Node], None] | None = None,
    server: ServerSettings | None = None,
    service_proxy: bool = False,
    proxy_own_credentials: bool = False,  # the proxy with the node's credentials, not admin
    docker_network: str = "bridge",
    **pod: Any,
) -> RunningAgent:
    """An agent on its thread. `node` holds NodeSettings fields (cpu, memory, ...), `pod`
    PodSettings fields; `prepare` may swap parts of the agent before it runs (fault tests)."""
    settings = NodeSettings(node_name=cluster.node_name, node_ip="127.0.0.1", **(node or {}))
    engine = engine_for(docker_network, pull_progress_deadline=pull_progress_deadline or 60.0)
    nodes = NodeSet(
        NodeSetSettings(
            nodes=(NodeIdentity(settings, cluster.node_kubeconfig, root_dir=root),),
            root_dir=root.parent,
            pods=PodSettings(pause_image=docker_env.pause_image, **pod),
            server=server,
            image_pull_progress_deadline=pull_progress_deadline or 60.0,
            # kube-proxy's rights: the test's own (admin) credentials, as the proxy's own
            service_proxy=service_proxy,
            docker_network=docker_network,
            proxy_kubeconfig=cluster.kubeconfig
            if service_proxy and not proxy_own_credentials
            else None,
        ),
        engine,
    )
    (agent,) = nodes.nodes
    if prepare is not None:
        prepare(agent)
    stop = threading.Event()
    failures: list[tuple[str, str]] = []
    thread = threading.Thread(
        target=lambda: failures.extend(nodes.run(stop)), name="agent", daemon=True
    )
    thread.start()
    running = RunningAgent(agent, stop, thread, nodes, failures, engine)
    wait_for(agent.workers.started.is_set, 20, "the agent's pod workers to start")
    return running


@pytest.fixture
def agent(cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path) -> Iterator[RunningAgent]:
    running = start_agent(cluster, docker_env, tmp_path / "root")
    yield running
    if running.thread.is_alive():
        running.stop()


@pytest.fixture
def privileged_agent(
    cluster: ApiUnderTest, docker_env: DockerEnv, tmp_path: Path
) -> Iterator[RunningAgent]:
    """`agent` run with --allow-privileged: hostPath volumes, hostNetwork pods (their address
    is the node's, 127.0.0.1), privileged containers and added capabilities are admitted."""
    running = start_agent(cluster, docker_env, tmp_path / "root", allow_privileged=True)
    yield running
    if running.thread.is_alive():
        running.stop()
