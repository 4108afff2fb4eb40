"""The running agent: wires the API edge, the Docker runtime and the controllers together."""

from __future__ import annotations

import threading

from kubelet_sim.config import AgentConfig
from kubelet_sim.kube.client import KubeConnection, wait_for_api_server
from kubelet_sim.logs import get_logger
from kubelet_sim.runtime.docker_runtime import DockerRuntime


class Agent:
    """Owns every long-running part of the node; `run` returns once `stop` is set."""

    def __init__(self, config: AgentConfig, kube: KubeConnection, runtime: DockerRuntime) -> None:
        self.config = config
        self.kube = kube
        self.runtime = runtime
        self.log = get_logger("kubelet_sim.agent", node=config.node_name)

    def run(self, stop: threading.Event) -> None:
        self.log.info(
            "starting",
            api_server=self.kube.host,
            config_source=self.kube.source,
            docker_version=self.runtime.version(),
        )
        if wait_for_api_server(self.kube, stop) is None:
            self.log.info("stopped before the API server answered")
            return
        self.log.info("running")
        stop.wait()
        self.log.info("stopping")
