"""Run `kubelet-sim` as a user would: a separate process, JSON logs read line by line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from kubelet_sim import cri
from kubelet_sim.runtime.local_images import PAUSE_IMAGE
from tests.cluster import ApiUnderTest, deadline_scale, wait_for
from tests.docker_env import DockerEnv
from tests.mounts import remove_root


def run_command(
    *args: str, timeout: float = 30, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`kubelet-sim ARGS` run to its end, its output captured as text (`env`: the whole
    environment, this process's when None)."""
    return subprocess.run(
        [sys.executable, "-m", "kubelet_sim", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )


class AgentProcess:
    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kubelet_sim", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def records(self) -> list[dict[str, Any]]:
        """Every log line, parsed: each one must be a JSON object."""
        with self._lock:
            lines = list(self.lines)
        return [json.loads(line) for line in lines if line.strip()]

    def wait_for_log(
        self, match: Callable[[dict[str, Any]], bool], timeout: float, what: str
    ) -> dict[str, Any]:
        return wait_for(lambda: next((r for r in self.records() if match(r)), None), timeout, what)

    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM, then the exit code; fails the test if it does not stop in time."""
        timeout *= deadline_scale()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"kubelet-sim did not stop within {timeout}s of SIGTERM")
        self._reader.join(2)
        return code


@contextmanager
def running_agent(
    cluster: ApiUnderTest,
    *extra: str,
    env: dict[str, str] | None = None,
    kubeconfig: str | None = None,
) -> Iterator[AgentProcess]:
    """The agent as a process, with a kubelet's credentials unless `kubeconfig` says other.

    Its sandbox image is the local pause image: a test never makes the engine pull from a
    registry (the default, registry.k8s.io/pause, is not on this machine).
    """
    # No warm sandbox pool unless a test asks (--sandbox-pool-size): tests that count or
    # select the node's containers by label predate it;
    # tests/pod_lifecycle/test_sandbox_pool.py has its own.
    # Its client CA lets the API server in (a cluster's kubelet-client signer the kubeconfig
    # does not name: KUBELET_SIM_TEST_KUBELET_CLIENT_CA), as a kubelet's --client-ca-file.
    trust = cluster.session.kubelet_client_trust()
    env = {
        "KUBELET_SIM_POD_INFRA_IMAGE": PAUSE_IMAGE,
        "KUBELET_SIM_SANDBOX_POOL_SIZE": "0",
        **({"KUBELET_SIM_CLIENT_CA_FILE": trust} if trust else {}),
        **(env or {}),
    }
    # A root of its own, not the machine's /var/lib/kubelet-sim, removed afterwards.
    root = Path(tempfile.mkdtemp(prefix="kubelet-sim-test-root-"))
    agent = AgentProcess(
        [
            "--node-name",
            cluster.node_name,
            "--kubeconfig",
            kubeconfig or cluster.node_kubeconfig,
            "--log-format",
            "json",
            "--root-dir",
            str(root),
            *extra,
        ],
        env=env,
    )
    try:
        yield agent
    finally:
        if agent.proc.poll() is None:
            agent.terminate()
        remove_containers_of(cluster.node_name)
        remove_root(root)


def remove_containers_of(node_name: str) -> None:
    """What the process left running (a kubelet leaves its containers when it stops): gone with
    the test, whether or not the test asked for the docker_env fixture."""
    import docker

    client = docker.from_env()
    try:
        DockerEnv(client=client).remove_labelled(f"{cri.LABEL_NODE}={node_name}")
    finally:
        client.close()
